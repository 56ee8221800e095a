"""Bad inputs of rank_lab.learned (issue 16): one direct test per rule the matrix cannot spell out.

The generated matrix (tests/bad_inputs) checks that every bad variant raises a ValueError /
TypeError naming the argument; these tests pin the subtle rules: float64 accepted and cast to the
weights' dtype with the same result, integer metric values legal, non-finite losses stopping
training before the step, the tasks' shared base class.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rank_lab._validation import check_input_batch
from rank_lab.engine import EngineConfig
from rank_lab.learned import (
    CRNN,
    Alphabet,
    BoxIoUTask,
    BoxMLP,
    BoxRegressor,
    CharCNN,
    EditDistanceTask,
    EmbeddingSurrogate,
    LSConfig,
    SurrogateTrainer,
    ctc_best_path,
    evaluate_surrogate,
    make_box_dataset,
    surrogate_loss,
)
from rank_lab.learned.proxy_training import fit_proxy
from rank_lab.learned.surrogate_model import SurrogateTask, ls_model_loss

NAN = float("nan")


def _poke(x: torch.Tensor, v: float) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[0] = v
    return x


def test_check_input_batch_rules() -> None:
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = check_input_batch(x, "x", ("B", 4), dtype=torch.float32)
    assert y.dtype == torch.float32 and y.requires_grad  # cast, autograd kept
    y.sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float64
    with pytest.raises(ValueError, match=r"x must have shape \(B, 5\), got \(3, 4\)"):
        check_input_batch(x, "x", ("B", 5))
    with pytest.raises(ValueError, match=r"x is empty"):
        check_input_batch(torch.zeros(0, 4), "x", ("B", 4))
    with pytest.raises(TypeError, match="x must be a floating tensor, got dtype torch.int64"):
        check_input_batch(torch.zeros(3, 4, dtype=torch.long), "x", ("B", 4))
    with pytest.raises(ValueError, match="x contains 1 NaN or inf"):
        check_input_batch(_poke(torch.zeros(3, 4), math.inf), "x", ("B", 4))
    with pytest.raises(TypeError, match="x must be a tensor"):
        check_input_batch([[1.0]], "x", ("B", 1))


@pytest.mark.parametrize(
    ("make", "x"),
    [
        (
            lambda: CharCNN(4, 8, channels=4, hidden=8, out_dim=4, kernel_sizes=(3,) * 5),
            torch.rand(2, 8, 4),
        ),
        (lambda: BoxMLP(hidden=(8, 8, 8, 8), out_dim=4), torch.rand(3, 6)),
        (lambda: CRNN(4, channels=(4, 8, 8), hidden=8), torch.rand(2, 1, 16, 24)),
        (lambda: BoxRegressor(16, (4, 4, 4), 8), torch.rand(2, 1, 16, 16)),
    ],
    ids=["CharCNN", "BoxMLP", "CRNN", "BoxRegressor"],
)
def test_module_forward_checks_its_input(make, x: torch.Tensor) -> None:
    torch.manual_seed(0)
    net = make().eval()
    ref = net(x)
    assert torch.equal(net(x.double()), ref)  # float64 cast to the float32 weights: the same result
    with pytest.raises(ValueError, match=r"\bx contains 1 NaN"):
        net(_poke(x, NAN))
    with pytest.raises(ValueError, match=r"\bx must have shape"):
        net(x[None])
    with pytest.raises(ValueError, match=r"\bx is empty"):
        net(x[:0])
    with pytest.raises(TypeError, match=r"\bx must be a floating tensor"):
        net((x * 10).long())


def test_module_hyper_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match="channels must be >= 1"):
        CharCNN(4, 8, channels=0)
    with pytest.raises(TypeError, match="length must be a positive int"):
        CharCNN(4, 8.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out_dim must be >= 1"):
        BoxMLP(out_dim=0)
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        CRNN(4, hidden=0)
    with pytest.raises(ValueError, match="size must be >= 1"):
        BoxRegressor(0)  # 0 % 8 == 0 passed before
    with pytest.raises(ValueError, match="eps must be > 0"):
        EmbeddingSurrogate(BoxMLP(), eps=0.0)
    with pytest.raises(TypeError, match="embedding must be an nn.Module"):
        EmbeddingSurrogate(lambda t: t)  # type: ignore[arg-type]


def test_surrogate_inputs_and_integer_metric_values() -> None:
    torch.manual_seed(0)
    s = EmbeddingSurrogate(BoxMLP(hidden=(8, 8, 8, 8), out_dim=4))
    z, y = torch.rand(3, 6), torch.rand(3, 6)
    # integer metric values (edit distances) are legal: the same loss as their float copy
    loss_int, _ = surrogate_loss(s, z, y, torch.tensor([0, 1, 2]))
    loss_float, _ = surrogate_loss(s, z, y, torch.tensor([0.0, 1.0, 2.0]))
    assert loss_int.item() == loss_float.item()
    # float64 predictions into a float32 surrogate: cast, same values
    assert torch.equal(s(z.double(), y.double()), s(z, y))
    with pytest.raises(ValueError, match=r"\bz has shape \(1, 3, 6\) but y has shape \(3, 6\)"):
        surrogate_loss(s, z[None], y, torch.zeros(3))  # was "e_true must have shape (1,)"
    with pytest.raises(ValueError, match=r"\by contains 1 NaN"):
        s(z, _poke(y, NAN))
    with pytest.raises(ValueError, match="grad_penalty must be >= 0"):
        surrogate_loss(s, z, y, torch.zeros(3), grad_penalty=-1.0)
    with pytest.raises(ValueError, match=r"e_hat has shape \(3,\) but e_true has shape \(2,\)"):
        ls_model_loss(torch.rand(3), torch.rand(2))


def test_configs_refuse_zero_epochs_and_infinite_rates() -> None:
    with pytest.raises(ValueError, match="epochs must be >= 1"):
        LSConfig(epochs=0)
    with pytest.raises(ValueError, match="surrogate_lr must be finite"):
        LSConfig(surrogate_lr=math.inf)
    with pytest.raises(ValueError, match="grad_penalty must be finite"):
        LSConfig(grad_penalty=NAN)
    assert LSConfig(model_steps=0).model_steps == 0  # a surrogate-only run stays legal


def test_tasks_share_the_surrogate_task_base() -> None:
    base = SurrogateTask(batch_size=4, device="cpu")
    with pytest.raises(NotImplementedError):
        base.sample_batch(torch.Generator())
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        SurrogateTask(batch_size=0)
    images, boxes = make_box_dataset(4, size=16, seed=0)
    assert isinstance(BoxIoUTask(images, boxes, batch_size=2, device="cpu"), SurrogateTask)
    with pytest.raises(ValueError, match=r"\bboxes contains 1 NaN"):
        BoxIoUTask(images, _poke(boxes, NAN), batch_size=2)
    with pytest.raises(TypeError, match=r"\bimages must be a floating tensor"):
        EditDistanceTask((images * 255).to(torch.uint8), ["a"] * 4, Alphabet("abc"))
    assert isinstance(
        EditDistanceTask(images, ["a", "b", "c", "ab"], Alphabet("abc"), device="cpu"),
        SurrogateTask,
    )


def test_ctc_best_path_refuses_non_finite_log_probs() -> None:
    logp = torch.randn(1, 4, 3).log_softmax(-1)
    with pytest.raises(ValueError, match="log_probs contains 1 NaN or inf"):
        ctc_best_path(_poke(logp, -math.inf), torch.tensor([[1]]), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"targets must have shape \(1, U\)"):
        ctc_best_path(logp, torch.tensor([[1], [2]]), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="targets must hold classes in 0..2 other than the blank"):
        ctc_best_path(logp, torch.tensor([[3]]), torch.tensor([1]))


#: whether the proxy-training test's loss turns NaN: a module global, not a value the loss function
#: captures (a captured value that changes makes the checkpoint another run's: the data fingerprint)
_POISON = {"on": False}


def test_fit_proxy_stops_on_a_non_finite_loss_and_keeps_the_checkpoint(tmp_path) -> None:
    model = nn.Linear(2, 1)
    x = torch.randn(6, 2)
    state = _POISON
    state["on"] = False

    def batch_loss(idx: torch.Tensor, dev: torch.device) -> torch.Tensor:
        out = model(x[idx]).pow(2).mean()
        return out * NAN if _POISON["on"] else out

    ckpt = tmp_path / "p.pt"
    kw = dict(
        batch_size=3,
        lr=1e-2,
        device="cpu",
        schedule="constant",
        engine=EngineConfig(checkpoint=ckpt),
    )
    fit_proxy(model, 6, batch_loss, steps=2, **kw)
    good = ckpt.read_bytes()
    weights = [p.detach().clone() for p in model.parameters()]
    state["on"] = True  # resume for two more steps: the third one is NaN
    with pytest.raises(
        FloatingPointError,
        match=r"the loss is nan at proxy step 3, batch indices \[.*\] \(3 items\); training "
        r"stopped before applying it and nothing was saved; the last good checkpoint is '.*p.pt' "
        r"\(step 2\)",
    ) as info:
        # the engine's NonFiniteTrainingError, a FloatingPointError
        fit_proxy(model, 6, batch_loss, steps=4, **kw)
    assert (info.value.step, len(info.value.batch_indices), info.value.checkpoint) == (2, 3, ckpt)
    # no update applied
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert ckpt.read_bytes() == good
    with pytest.raises(ValueError, match="lr must be finite"):
        fit_proxy(model, 6, batch_loss, steps=2, batch_size=3, lr=math.inf)
    with pytest.raises(TypeError, match="batch_size must be a positive int"):
        fit_proxy(model, 6, batch_loss, steps=2, batch_size=1.5, lr=1e-2)  # type: ignore[arg-type]


def test_surrogate_trainer_stops_before_a_non_finite_update() -> None:
    torch.manual_seed(0)
    images, boxes = make_box_dataset(8, size=16, seed=0)
    task = BoxIoUTask(images, boxes, batch_size=4, device="cpu")
    model = BoxRegressor(16, (4, 4, 4), 8)
    sur = EmbeddingSurrogate(BoxMLP(hidden=(8, 8, 8, 8), out_dim=4))
    trainer = SurrogateTrainer(
        model,
        sur,
        task,
        LSConfig(epochs=1, surrogate_steps=1, model_steps=1, source="local"),
        model_loss=lambda e_hat, e: e_hat.mean() * NAN,
        device="cpu",
    )
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(
        FloatingPointError,
        match=r"the loss is nan in the model phase at epoch 1, step 2; training stopped "
        # the engine's NonFiniteTrainingError
        r"before applying it and nothing was saved",
    ):
        trainer.fit()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(TypeError, match="config must be an LSConfig"):
        SurrogateTrainer(model, sur, task, {"epochs": 1})  # type: ignore[arg-type]


def test_evaluate_surrogate_warns_on_an_undefined_correlation() -> None:
    torch.manual_seed(0)
    images, boxes = make_box_dataset(4, size=16, seed=0)
    task = BoxIoUTask(images, boxes, batch_size=1, device="cpu")
    sur = EmbeddingSurrogate(BoxMLP(hidden=(8, 8, 8, 8), out_dim=4))
    with pytest.warns(UserWarning, match="Pearson correlation is undefined"):
        # one pair: no correlation
        out = evaluate_surrogate(BoxRegressor(16, (4, 4, 4), 8), sur, task, n_batches=1)
    assert math.isnan(out["pearson"]) and math.isfinite(out["l1"])
    with pytest.raises(ValueError, match="n_batches must be >= 1"):
        evaluate_surrogate(None, sur, task, source="global", n_batches=0)
