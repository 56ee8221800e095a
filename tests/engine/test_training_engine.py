"""The one training engine (issue 17): every training loop of the package resumes bit-exactly
through it, stops on a NaN with the one error type, and shares the one schedule, optimiser builder
and resume rule.

The loop cases below are tiny (a fraction of a second each). Each is run three times: straight;
interrupted (``KeyboardInterrupt`` raised inside the engine after some steps, past at least one
checkpoint); resumed in a fresh model from that checkpoint after the global RNGs were disturbed. The
resumed weights (and losses) must equal the straight run's bit for bit (``torch.equal``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from rank_lab.engine import (
    Batch,
    Engine,
    EngineConfig,
    NonFiniteTrainingError,
    Schedule,
    build_optimizer,
    fit,
    lr_at,
)
from rank_lab.engine.guard import check_resume
from rank_lab.engine.options import StepResult


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------------------------- the loops
# Each case: run(ckpt) trains fresh models (fixed seeds) with the checkpoint file ``ckpt`` (or None)
# and returns (modules, losses); ``steps`` is the run's number of engine steps.
def _trainer(ckpt: Path | None, distributed: bool = False):
    from rank_lab.data import make_open_set
    from rank_lab.losses import SmoothAP
    from rank_lab.train import TrainConfig, Trainer
    from rank_lab.train.distributed import DistributedTrainer

    s = make_open_set(n_classes=8, per_class=8, dim=8, input_dim=12, seed=0)
    cfg = TrainConfig.from_dict(
        dict(
            backbone="mlp",
            hidden_dims=(16,),
            embed_dim=8,
            batch_size=8,
            m_per_class=4,
            epochs=3,
            lr=3e-3,
            eval_ks=(1, 4),
            progress=False,
            batches_per_epoch=3,
            warmup_epochs=1,
            grad_clip=1.0,
            device="cpu",
            checkpoint_dir=None if ckpt is None else str(ckpt.parent / ckpt.stem),
        )
    )
    tr = (DistributedTrainer if distributed else Trainer)(
        None, SmoothAP(), (s.x_train, s.y_train), None, cfg
    )
    hist = tr.fit()
    return tr.model, [r["loss"] for r in hist]


def _multistage(ckpt):
    from rank_lab.losses import SmoothAP
    from rank_lab.train.multistage import fit_multistage

    torch.manual_seed(7)
    y = torch.arange(6).repeat_interleave(6)
    x = torch.randn(6, 10)[y] + 0.3 * torch.randn(36, 10)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 8))
    losses = fit_multistage(
        model,
        SmoothAP(),
        x,
        y,
        batch_size=12,
        m_per_class=3,
        steps=6,
        chunk_size=5,
        lr=1e-2,
        engine=EngineConfig(checkpoint=ckpt, checkpoint_every=2),
    )
    return model, losses


def _classifier(ckpt):
    from rank_lab.train.classification import ContrastiveClassifier, fit_classifier

    torch.manual_seed(0)
    x, y = torch.randn(24, 1, 5, 5), torch.arange(4).repeat_interleave(6)
    model = ContrastiveClassifier(
        nn.Sequential(nn.Flatten(), nn.Linear(25, 12)), n_classes=4, dim=12, method="supcon+ce"
    )
    hist = fit_classifier(
        model,
        x,
        y,
        epochs=2,
        stage2_epochs=2,
        batch_size=8,
        lr=3e-3,
        seed=1,
        device="cpu",
        engine=EngineConfig(checkpoint=ckpt),
    )
    return model, [h["loss"] for h in hist]


def _multi_dataset(ckpt):
    from rank_lab.fewshot import fit_multi_dataset
    from rank_lab.fewshot.synthetic import make_multi_dataset
    from rank_lab.models import build_model

    data = make_multi_dataset(n_datasets=2, classes_per_dataset=4, per_class=8, seed=0)
    torch.manual_seed(0)
    model = build_model(
        {
            "backbone": "mlp",
            "input_dim": data.x.shape[1],
            "hidden_dims": (16,),
            "embed_dim": 8,
            "layer_norm": False,
        }
    )
    noisy = lambda x: x + 0.01 * torch.randn_like(x)  # noqa: E731 - a random augmentation: the global RNG is checkpointed
    hist = fit_multi_dataset(
        model,
        data.x,
        data.dataset_ids,
        data.labels,
        n_classes=4,
        k=3,
        epochs=3,
        batches_per_epoch=2,
        niter=1,
        niter_decay=2,
        lr=3e-3,
        seed=0,
        engine=EngineConfig(checkpoint=ckpt),
        transform=noisy,
        device="cpu",
    )
    return model, hist


def _rcnaps(ckpt):
    from rank_lab.data.procedural import make_multi_source_images
    from rank_lab.fewshot import build_rcnaps, fit_rcnaps

    data = make_multi_source_images(
        n_classes=6, per_source=3, sources=("colour",), image_size=16, seed=0
    )
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8,), encoder_width=8, encoder_depth=2)
    losses = fit_rcnaps(
        model,
        data.images,
        data.labels,
        episodes=5,
        k=1,
        m=2,
        n_classes=3,
        lr=1e-3,
        seed=1,
        engine=EngineConfig(checkpoint=ckpt, checkpoint_every=2),
        device="cpu",
    )
    return model, losses


def _surrogate(ckpt, feds: bool = False):
    from rank_lab.learned import (
        BoxIoUTask,
        BoxRegressor,
        EmbeddingSurrogate,
        FEDSConfig,
        FEDSTrainer,
        LSConfig,
        SurrogateTrainer,
    )
    from rank_lab.learned.box_images import make_box_dataset
    from rank_lab.learned.embeddings import BoxMLP

    images, boxes = make_box_dataset(32, size=16, seed=0)
    torch.manual_seed(0)
    model, sur = (
        BoxRegressor(16, channels=(4, 4, 4), hidden=8),
        EmbeddingSurrogate(BoxMLP(hidden=(8, 8, 8, 8), out_dim=4)),
    )
    task = BoxIoUTask(images, boxes, batch_size=8, device="cpu")
    kw = dict(epochs=3, surrogate_steps=2, model_steps=2, first_surrogate_steps=3)
    if feds:
        tr = FEDSTrainer(
            model,
            sur,
            task,
            FEDSConfig(lam=0.2, **kw),
            device="cpu",
            seed=5,
            engine=EngineConfig(checkpoint=ckpt),
        )
    else:
        tr = SurrogateTrainer(
            model,
            sur,
            task,
            LSConfig(source="local", grad_clip=1.0, **kw),
            device="cpu",
            seed=5,
            engine=EngineConfig(checkpoint=ckpt),
        )
    hist = tr.fit()
    return nn.ModuleDict({"model": model, "surrogate": sur}), [
        h["loss"] for h in hist["surrogate"] + hist["model"]
    ]


def _ctc(ckpt):
    from rank_lab.learned import make_word_dataset
    from rank_lab.learned.recognizer import CRNN, Alphabet, fit_ctc

    alphabet = Alphabet("abc")
    x, w = make_word_dataset(16, "abc", 2, 3, 16, 32, seed=0)
    torch.manual_seed(0)
    model = CRNN(alphabet.n_classes, channels=(4, 4, 4), hidden=4)
    return model, fit_ctc(
        model,
        x,
        w,
        alphabet,
        steps=6,
        batch_size=4,
        lr=1e-2,
        device="cpu",
        engine=EngineConfig(checkpoint=ckpt, checkpoint_every=2, grad_clip=5.0),
    )


def _box_regressor(ckpt):
    from rank_lab.learned.box_images import make_box_dataset
    from rank_lab.learned.boxes import BoxRegressor, fit_box_regressor

    images, boxes = make_box_dataset(24, size=16, seed=0)
    torch.manual_seed(0)
    model = BoxRegressor(16, channels=(4, 4, 4), hidden=8)
    return model, fit_box_regressor(
        model,
        images,
        boxes,
        steps=6,
        batch_size=8,
        lr=3e-3,
        device="cpu",
        seed=2,
        engine=EngineConfig(checkpoint=ckpt, checkpoint_every=2),
    )


def _toy(ckpt):
    from rank_lab.ood.toy import SmallConvNet, train_classifier

    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(18, 1, 6, 6, generator=g), torch.arange(3).repeat_interleave(6)
    model = train_classifier(
        SmallConvNet(3, width=4),
        x,
        y,
        epochs=3,
        batch_size=8,
        seed=1,
        device="cpu",
        engine=EngineConfig(checkpoint=ckpt),
    )
    return model, []


def _heat(ckpt):
    from rank_lab.ood import ClassGaussianEnergy, HEATConfig, HybridEnergy

    g = torch.Generator().manual_seed(0)
    y = torch.arange(3).repeat_interleave(10)
    z = torch.randn(30, 4, generator=g) + y[:, None].float()
    cfg = HEATConfig(hidden_dim=8, n_layers=3, epochs=3, batch_size=12, lr=1e-3, sgld_steps=2)
    h = HybridEnergy(ClassGaussianEnergy(1.0), 4, cfg).fit(
        z, y, seed=0, engine=EngineConfig(checkpoint=ckpt), device="cpu"
    )
    return h.residual, [r["loss"] for r in h.history]


def _resflow(ckpt):
    from rank_lab.ood.resflow import ResFlow

    g = torch.Generator().manual_seed(0)
    y = torch.arange(2).repeat_interleave(20)
    z = torch.randn(40, 3, generator=g) + 2 * y[:, None].float()
    r = ResFlow(
        n_blocks=1,
        hidden_dim=8,
        epochs=3,
        batch_size=16,
        seed=3,
        device="cpu",
        engine=EngineConfig(checkpoint=ckpt),
    )
    r.fit({"features": z, "labels": y})
    return r.flow, r.history


#: name -> (run, engine steps of the run, the step at which the interrupted run stops)
LOOPS: dict[str, tuple[Callable[[Path | None], tuple[nn.Module, list[float]]], int]] = {
    "Trainer": (_trainer, 9, 5),
    "DistributedTrainer": (lambda c: _trainer(c, distributed=True), 9, 5),
    "fit_multistage": (_multistage, 6, 5),
    "fit_classifier": (_classifier, 12, 10),  # inside stage 2
    "fit_multi_dataset": (_multi_dataset, 6, 5),
    "fit_rcnaps": (_rcnaps, 5, 4),
    "SurrogateTrainer": (_surrogate, 13, 10),
    "FEDSTrainer": (lambda c: _surrogate(c, feds=True), 13, 10),
    "fit_ctc": (_ctc, 6, 5),
    "fit_box_regressor": (_box_regressor, 6, 5),
    "ood.toy.train_classifier": (_toy, 9, 7),
    "HybridEnergy.fit": (_heat, 9, 7),
    "ResFlow.fit": (_resflow, 9, 7),
}


class _Stop(KeyboardInterrupt):
    pass


def _counting(
    monkeypatch: pytest.MonkeyPatch, at: int | None, poison: bool = False
) -> dict[str, Any]:
    """Patch Engine.train_step: count the steps; at step ``at`` (1-based) raise _Stop (or poison the
    loss with NaN)."""
    seen: dict[str, Any] = {"n": 0, "before": None}
    orig = Engine.train_step

    def train_step(self: Engine, step_fn, batch) -> StepResult:
        seen["n"] += 1
        if at is not None and seen["n"] == at:
            if not poison:
                raise _Stop
            seen["before"] = [
                {k: v.detach().clone() for k, v in m.state_dict().items()}
                for m in self.modules.values()
            ]

            def nan_fn(data):
                out = step_fn(data)
                return (out[0] * math.nan, out[1]) if isinstance(out, tuple) else out * math.nan

            return orig(self, nan_fn, batch)
        return orig(self, step_fn, batch)

    monkeypatch.setattr(Engine, "train_step", train_step)
    return seen


def _disturb_rngs() -> None:
    torch.manual_seed(12345)
    random.seed(12345)
    np.random.seed(12345)


def _state(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("name", list(LOOPS))
def test_every_loop_resumes_bit_exactly_through_the_engine(name, tmp_path, monkeypatch):
    run, steps, stop_at = LOOPS[name]
    counter = _counting(monkeypatch, None)
    straight, losses = run(None)
    assert counter["n"] == steps  # every step of the loop went through the engine
    ckpt = tmp_path / "run.pt"
    _counting(monkeypatch, stop_at)
    with pytest.raises(_Stop):
        run(ckpt)
    assert list(tmp_path.rglob("*.pt"))  # a checkpoint was written before the interruption
    monkeypatch.undo()
    _disturb_rngs()
    counter = _counting(monkeypatch, None)
    resumed, resumed_losses = run(ckpt)
    assert 0 < counter["n"] < steps  # it resumed (fewer steps than a new run) ...
    a, b = _state(straight), _state(resumed)
    assert a.keys() == b.keys()
    for k in a:
        # ... and ends with the straight run's weights, bit for bit
        assert torch.equal(a[k], b[k]), k
    assert resumed_losses == losses


@pytest.mark.parametrize("name", list(LOOPS))
def test_every_loop_stops_on_a_nan_loss_with_the_one_error(name, tmp_path, monkeypatch):
    run, steps, stop_at = LOOPS[name]
    ckpt = tmp_path / "run.pt"
    _counting(monkeypatch, stop_at, poison=True)
    with pytest.raises(
        NonFiniteTrainingError,
        match=r"the loss is nan.*training stopped before applying it and nothing was saved",
    ) as info:
        run(ckpt)
    err = info.value
    assert isinstance(err, FloatingPointError) and err.step == stop_at - 1
    # the last good checkpoint, named
    assert err.checkpoint is not None and Path(err.checkpoint).is_file()
    assert "last good checkpoint is" in str(err)
    saved = torch.load(err.checkpoint, map_location="cpu", weights_only=True)
    assert saved["step"] < stop_at  # written before the NaN step ...
    # ... and finite
    assert all(
        bool(torch.isfinite(v).all()) for v in saved["model"].values() if v.is_floating_point()
    )


def test_the_nan_step_is_not_applied(monkeypatch):
    seen = _counting(monkeypatch, 4, poison=True)
    with pytest.raises(NonFiniteTrainingError) as info:
        _toy(None)
    assert (
        info.value.batch_indices is not None
        and len(info.value.batch_indices) == 8
        and info.value.checkpoint is None
    )
    assert "no checkpoint was written yet" in str(info.value)
    assert seen["before"] is not None


# ---------------------------------------------------------------------------------- the engine's
# parts
def _legacy_tail_cosine(t: int, steps: int) -> float:
    start = int(0.7 * steps)
    tail = max(steps - start, 1)
    return 1.0 if t < start else 0.5 * (1 + math.cos(math.pi * min(t - start, tail) / tail))


def test_the_one_schedule_reproduces_the_former_ones_exactly():
    # learned.recognizer's tail cosine (a LambdaLR): lr = base * factor, bit for bit
    for steps in (1, 7, 500):
        for t in range(steps):
            assert lr_at(
                t, 3e-3, total_steps=steps, schedule="tail_cosine"
            ) == 3e-3 * _legacy_tail_cosine(t, steps)
    # the Gominski author code's per-epoch linear decay (niter=10, niter_decay=5; 7 steps per epoch)
    for t in range(15 * 7):
        e = t // 7
        assert lr_at(
            t, 1e-4, total_steps=105, schedule="linear", hold_steps=10, decay_steps=5, step_unit=7
        ) == 1e-4 * (1.0 - max(0, e + 1 - 10) / float(5 + 1))
    # cosine with warm-up equals torch's cosine annealing after the warm-up
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=16)
    for t in range(16):
        assert lr_at(t + 4, 0.1, total_steps=20, warmup_steps=4) == pytest.approx(
            opt.param_groups[0]["lr"], rel=1e-12
        )
        opt.step()
        sched.step()
    # torch's MultiStepLR (the RS@k recipes), bit for bit, in units of 3 steps
    opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=3e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 5, 5], gamma=0.3)
    for e in range(8):
        assert all(
            lr_at(
                3 * e + j,
                3e-4,
                total_steps=24,
                schedule="step",
                milestones=(2, 5, 5),
                gamma=0.3,
                step_unit=3,
            )
            == opt.param_groups[0]["lr"]
            for j in range(3)
        )
        opt.step()
        sched.step()
    assert (
        Schedule("constant", 5).length_free
        and Schedule("linear", 5, hold_steps=1, decay_steps=1).length_free
    )
    assert Schedule("step", 5, milestones=[2]).length_free and Schedule(
        "step", 5, milestones=[2]
    ).milestones == (2,)
    assert not Schedule("cosine", 5).length_free and not Schedule("tail_cosine", 5).length_free
    # the floor keeps the ratio
    assert Schedule("cosine", 10, min_lr=1e-3, ref_lr=1e-2).lr(10, 2e-2) == pytest.approx(2e-3)
    with pytest.raises(ValueError, match="hold_steps and decay_steps"):
        lr_at(0, 0.1, total_steps=3, schedule="linear")
    with pytest.raises(ValueError, match="kind"):
        Schedule("exponential", 3)


def test_build_optimizer_and_the_engine_step():
    torch.manual_seed(0)
    a, b = nn.Linear(3, 1), nn.Linear(3, 1)
    opt = build_optimizer(a.parameters(), lr=0.1, betas=(0.5, 0.9))
    assert isinstance(opt, torch.optim.Adam) and opt.param_groups[0]["betas"] == (0.5, 0.9)
    assert isinstance(build_optimizer(a.parameters(), "sgd", lr=0.1, momentum=0.0), torch.optim.SGD)
    with pytest.raises(ValueError, match="kind"):
        build_optimizer(a.parameters(), "lamb")
    x = torch.randn(4, 3)
    eng = Engine(
        {"a": a, "b": b},
        {
            "opt_a": build_optimizer(a.parameters(), "sgd", lr=1.0, momentum=0.0),
            "opt_b": build_optimizer(b.parameters(), "sgd", lr=1.0, momentum=0.0),
        },
        EngineConfig(grad_clip={"opt_a": 1e-3}),
        device="cpu",
    )
    wa, wb = a.weight.detach().clone(), b.weight.detach().clone()
    r = eng.train_step(
        lambda i: 100 * (a(x[i]) + b(x[i])).pow(2).mean(), Batch(torch.arange(4), optimizer="opt_a")
    )
    assert r.grad_norm is not None and r.grad_norm > 1e-3
    # only opt_a stepped, clipped
    assert float((a.weight - wa).norm()) <= 1e-3 * (1 + 1e-5) and torch.equal(b.weight, wb)
    r = eng.train_step(lambda i: (b(x[i])).pow(2).mean(), Batch(torch.arange(4), optimizer="opt_b"))
    assert r.grad_norm is None and not torch.equal(b.weight, wb) and eng.step == 2
    with pytest.raises(ValueError, match="reserved"):
        Engine({"history": a}, opt, device="cpu")


def test_fit_core_checkpoints_generators_and_refuses_another_run(tmp_path):
    def run(epochs: int, lr: float = 0.1, kind: str = "constant"):
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        x, g = torch.randn(12, 3), torch.Generator().manual_seed(1)

        def data(e: int):
            perm = torch.randperm(12, generator=g)
            return [Batch(perm[i : i + 4], indices=perm[i : i + 4]) for i in range(0, 12, 4)]

        eng = fit(
            model,
            lambda i: model(x[i]).pow(2).mean(),
            data,
            EngineConfig(epochs=epochs, checkpoint=tmp_path / "c.pt"),
            lr=lr,
            device="cpu",
            generators={"batches": g},
            run_key={"lr": lr},
            schedule=Schedule(kind, epochs * 3),
            steps_per_epoch=3,
            on_epoch_end=lambda e, res: eng_hist.append([r.loss for r in res]),
        )
        return model, eng

    eng_hist: list = []
    (tmp_path / "c.pt").unlink(missing_ok=True)
    run(2)
    longer, eng = run(4)  # a constant schedule may be made longer: it continues the run
    assert eng.epoch == 4 and eng.step == 12
    (tmp_path / "c.pt").rename(tmp_path / "keep.pt")
    straight, _ = run(4)
    assert torch.equal(longer.weight, straight.weight) and torch.equal(longer.bias, straight.bias)
    with pytest.raises(
        ValueError,
        match=r"different config \(lr: 0.1 -> 0.2\); to start a new run set resume=False",
    ):
        run(4, lr=0.2)
    (tmp_path / "c.pt").unlink()
    run(2, kind="cosine")
    with pytest.raises(
        ValueError, match=r"epochs: 2 -> 4.*cosine learning rate of every completed step"
    ):
        run(4, kind="cosine")


def test_the_resume_rule_in_steps():
    state = {
        "config": {"lr": 0.1},
        "epoch": 5,
        "step": 5,
        "schedule": {"epochs": 5, "total_steps": 5, "scheduler": "constant"},
    }
    check_resume(
        state,
        {"lr": 0.1},
        {"epochs": 8, "total_steps": 8, "scheduler": "constant"},
        unit="step",
        length_free=True,
    )
    with pytest.raises(ValueError, match="already done 5 steps"):
        check_resume(
            state,
            {"lr": 0.1},
            {"epochs": 3, "total_steps": 3, "scheduler": "constant"},
            unit="step",
            length_free=True,
        )
    with pytest.raises(ValueError, match="the batches and learning rates would change mid-run"):
        check_resume(
            state, {"lr": 0.1}, {"epochs": 5, "total_steps": 5, "scheduler": "cosine"}, unit="step"
        )


def test_a_longer_tail_cosine_proxy_run_is_refused(tmp_path):
    from rank_lab.learned.proxy_training import fit_proxy

    model, x = nn.Linear(2, 1), torch.randn(6, 2)
    kw = dict(
        batch_size=3, lr=1e-2, device="cpu", engine=EngineConfig(checkpoint=tmp_path / "p.pt")
    )
    fit_proxy(model, 6, lambda i, d: model(x[i]).pow(2).mean(), steps=3, **kw)
    with pytest.raises(
        ValueError,
        match=(
            r"epochs: 3 -> 5.*tail_cosine learning rate.*set resume=False or use another "
            r"checkpoint file"
        ),
    ):
        fit_proxy(model, 6, lambda i, d: model(x[i]).pow(2).mean(), steps=5, **kw)
    kw["engine"] = EngineConfig(checkpoint=tmp_path / "p.pt", resume=False)
    assert len(fit_proxy(model, 6, lambda i, d: model(x[i]).pow(2).mean(), steps=5, **kw)) == 5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("amp_dtype", ["float16", "bfloat16"])
def test_amp_on_cuda_through_the_engine(amp_dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
    x = torch.randn(32, 8, device="cuda")
    dtypes = []

    def step(i):
        out = model(x[i])
        dtypes.append(out.dtype)
        return out.float().pow(2).mean()

    eng = fit(
        model,
        step,
        lambda e: [torch.arange(16), torch.arange(16, 32)],
        EngineConfig(epochs=2, amp=True, amp_dtype=amp_dtype),
        device="cuda",
        lr=1e-2,
    )
    assert eng.amp and eng.scaler.is_enabled() == (amp_dtype == "float16")
    assert set(dtypes) == {torch.float16 if amp_dtype == "float16" else torch.bfloat16}
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


# ---------------------------------------------------------------------------------- validate once:
# trusted inputs
def test_trusted_modules_skip_only_their_finite_check_and_nest():
    from rank_lab._validation import (
        check_finite_input,
        check_input,
        shape_only,
        trusted_inputs,
        trusts_inputs,
    )
    from rank_lab.models import EmbeddingHead

    nan = torch.tensor([[1.0, float("nan")]])
    head, other = EmbeddingHead(2, 2), EmbeddingHead(2, 2)
    model = nn.Sequential(nn.Linear(2, 2), head)
    with trusted_inputs([model]):
        assert trusts_inputs(head) and not trusts_inputs(other)
        head(nan)  # a sub-module of a trusted module: the NaN flows on, to the caller's guard
        with pytest.raises(ValueError, match="x contains 1 NaN"):
            other(nan)  # another module still checks
        with trusted_inputs([head]):
            pass
        assert trusts_inputs(head)  # restored after the inner block
        with pytest.raises(ValueError, match="x must have shape"):
            head(nan[0, :, None, None])  # shapes are still checked
        check_finite_input(nan, "x", trusted=True)
    assert not trusts_inputs(head)
    with pytest.raises(ValueError, match="x contains 1 NaN"):
        head(nan)
    with pytest.raises(ValueError, match="x contains 1 NaN"):
        check_input(nan, "x", 2, owner=head)
    with shape_only():
        check_finite_input(torch.empty(2, device="meta"), "x")  # shape-only runs (FLOP counting)
    with pytest.raises(ValueError, match="x is a meta tensor"):
        # elsewhere refused (issue 26)
        check_finite_input(torch.empty(2, device="meta"), "x", trusted=True)


def test_a_nan_produced_inside_a_model_reaches_the_engine_guard():
    """No thread-local switch: the engine's step trusts its modules' inputs, so a NaN that appears
    inside the model (here: between two layers, on the third step) reaches the guard, which names
    the step and its batch."""
    from rank_lab.models import EmbeddingHead

    class Overflow(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return x * float("nan") if self.calls == 3 else x

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Overflow(), EmbeddingHead(4, 2))
    x = torch.randn(8, 4)
    with pytest.raises(NonFiniteTrainingError, match=r"the loss is nan at epoch 3, step 3") as info:
        fit(
            model,
            lambda i: model(x[i]).pow(2).mean(),
            lambda e: [Batch(torch.arange(8), indices=list(range(8)))],
            EngineConfig(epochs=4),
            device="cpu",
        )
    assert info.value.batch_indices == list(range(8))
    model[1].calls = 2
    with pytest.raises(ValueError, match="x contains 32 NaN"):
        model(x)  # outside the engine, the head checks its input again
