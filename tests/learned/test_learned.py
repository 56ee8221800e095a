"""Tests of rank_lab.learned: LS surrogates (eq. 3.3-3.6, Algorithm 1), FEDS (eq. 4.5-4.7,
Algorithm 2), the CTC recogniser helpers, the word renderer and the box task."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

from rank_lab.engine import EngineConfig
from rank_lab.learned.box_images import make_box_dataset
from rank_lab.learned.boxes import (
    BoxIoUTask,
    BoxRegressor,
    RotatedBoxPairBank,
    evaluate_box_regressor,
    fit_box_regressor,
    metric_tracking,
    perturb_boxes,
    predict_boxes,
)
from rank_lab.learned.edit_task import CTCEditPairGenerator, EditDistanceTask, random_ctc_path
from rank_lab.learned.embeddings import BoxMLP, CharCNN
from rank_lab.learned.feds import FEDSConfig, FEDSTrainer, feds_filter, feds_loss, feds_mask
from rank_lab.learned.recognizer import (
    CRNN,
    Alphabet,
    ctc_best_path,
    ctc_collapse,
    fit_ctc,
    greedy_decode,
)
from rank_lab.learned.render import WordRenderer, make_word_dataset, random_words
from rank_lab.learned.surrogate_model import EmbeddingSurrogate, LSConfig, surrogate_loss
from rank_lab.learned.surrogate_trainer import SurrogateTrainer, evaluate_surrogate
from rank_lab.metrics.detection import decode_box6, encode_box6, icdar15_evaluate
from rank_lab.metrics.rotated_iou import rotated_iou
from rank_lab.metrics.text import levenshtein_reference


def smooth_surrogate(in_dim: int = 4, seed: int = 0) -> EmbeddingSurrogate:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(in_dim, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    return EmbeddingSurrogate(net)


# --- the surrogate and its loss (eq. 3.3, 3.6) ----------------------------------------------------


def test_embedding_surrogate_is_a_distance() -> None:
    s = smooth_surrogate()
    z = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 4, dtype=torch.float64)
    d = s(z, y)
    assert d.shape == (5,) and bool((d >= 0).all())
    assert torch.allclose(s(y, z), d)
    assert torch.allclose(s(y, y), torch.zeros(5, dtype=torch.float64), atol=1e-5)
    # finite gradient at z = y (the eps under the square root)
    zz = y.clone().requires_grad_(True)
    s(zz, y).sum().backward()
    assert torch.isfinite(zz.grad).all()
    with pytest.raises(ValueError, match="shape"):
        s(z, y[:, :3])


def test_surrogate_loss_matches_formula_and_finite_differences() -> None:
    s = smooth_surrogate()
    z = torch.randn(6, 4, dtype=torch.float64)
    y = torch.randn(6, 4, dtype=torch.float64)
    e = torch.rand(6, dtype=torch.float64) * 3
    loss, stats = surrogate_loss(s, z, y, e, grad_penalty=0.3, fit_weight=2.0)
    # gradient norms by central finite differences, one sample and coordinate at a time
    h = 1e-6
    gn = []
    for b in range(6):
        g = []
        for k in range(4):
            dz = torch.zeros(1, 4, dtype=torch.float64)
            dz[0, k] = h
            g.append(
                (s(z[b : b + 1] + dz, y[b : b + 1]) - s(z[b : b + 1] - dz, y[b : b + 1])).item()
                / (2 * h)
            )
        gn.append(math.sqrt(sum(v * v for v in g)))
    gn = torch.tensor(gn, dtype=torch.float64)
    e_hat = s(z, y).detach()
    expected = 2.0 * ((e_hat - e) ** 2).mean() + 0.3 * ((gn - 1) ** 2).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert stats["grad_norm"] == pytest.approx(gn.mean().item(), rel=1e-6)
    assert stats["l1"] == pytest.approx((e_hat - e).abs().mean().item(), rel=1e-9)


def test_surrogate_loss_gradcheck_wrt_parameters() -> None:
    s = smooth_surrogate(in_dim=3, seed=1)
    z = torch.randn(4, 3, dtype=torch.float64)
    y = torch.randn(4, 3, dtype=torch.float64)
    e = torch.rand(4, dtype=torch.float64)
    names = [n for n, _ in s.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in s.parameters())

    def f(*ps: torch.Tensor) -> torch.Tensor:
        def fn(zz: torch.Tensor, yy: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(s, dict(zip(names, ps, strict=True)), (zz, yy))

        class Wrapped(nn.Module):
            def forward(self, zz: torch.Tensor, yy: torch.Tensor) -> torch.Tensor:
                return fn(zz, yy)

        return surrogate_loss(Wrapped(), z, y, e, grad_penalty=0.5)[0]

    assert torch.autograd.gradcheck(f, params, eps=1e-6, atol=1e-5)


def test_surrogate_loss_input_checks() -> None:
    s = smooth_surrogate()
    z = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="e_true"):
        surrogate_loss(s, z, z, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="NaN"):
        surrogate_loss(s, z, z, torch.tensor([0.0, float("nan"), 1.0], dtype=torch.float64))
    loss, _ = surrogate_loss(s, z, z.flip(0), torch.ones(3, dtype=torch.float64), grad_penalty=0.0)
    loss.backward()  # no double-backward graph needed without the penalty


def test_embedding_architectures() -> None:
    cnn = CharCNN(11, 16, channels=8, hidden=16, out_dim=5)
    assert cnn(torch.rand(2, 16, 11).softmax(-1)).shape == (2, 5)
    with pytest.raises(ValueError, match="shape"):
        cnn(torch.rand(2, 11, 16))
    sharp = CharCNN(11, 16, channels=8, hidden=16, out_dim=5, input_temperature=0.25)
    sharp.load_state_dict(cnn.state_dict())
    onehot = nn.functional.one_hot(torch.randint(11, (2, 16)), 11).float()
    assert torch.allclose(sharp(onehot), cnn(onehot), atol=1e-5)  # one-hot inputs unchanged
    mlp = BoxMLP()
    assert mlp(torch.rand(3, 6)).shape == (3, 16)
    assert sum(isinstance(m, nn.Linear) for m in mlp.modules()) == 5


# --- FEDS (eq. 4.7) -------------------------------------------------------------------------------


def test_feds_filter_values_and_gradients() -> None:
    e = torch.tensor([0.0, 1.0, 2.0, 3.0])
    e_hat = torch.tensor([0.1, 0.8, 2.6, 2.9], requires_grad=True)
    assert torch.allclose(feds_filter(e_hat, e, 0.25), torch.tensor([0.1, 0.2, 0.25, 0.1]))
    assert feds_mask(e_hat, e, 0.25).tolist() == [True, True, False, True]
    loss, stats = feds_loss(e_hat, e, 0.25, "literal")
    (g,) = torch.autograd.grad(loss, e_hat)
    # sign(e_hat - e) in band, 0 outside
    assert torch.allclose(g, torch.tensor([1.0, -1.0, 0.0, -1.0]) / 4)
    assert stats["in_band"] == 0.75
    loss, _ = feds_loss(e_hat, e, 0.25, "masked")
    (g,) = torch.autograd.grad(loss, e_hat)
    assert torch.allclose(g, torch.tensor([1.0, 1.0, 0.0, 1.0]) / 4)  # descend e_hat in band only
    assert loss.item() == pytest.approx((0.1 + 0.8 + 2.9) / 4)
    loss_inf, stats_inf = feds_loss(e_hat, e, math.inf, "masked")
    assert loss_inf.item() == pytest.approx(e_hat.mean().item()) and stats_inf["in_band"] == 1.0
    with pytest.raises(ValueError, match="mode"):
        feds_loss(e_hat, e, 0.25, "soft")
    with pytest.raises(ValueError, match="lam"):
        feds_filter(e_hat, e, 0.0)
    with pytest.raises(ValueError, match="shape"):
        feds_filter(e_hat, e[:2])


# --- CTC helpers ----------------------------------------------------------------------------------


def test_ctc_collapse_and_greedy_decode() -> None:
    paths = torch.tensor([[0, 1, 1, 0, 1, 2, 2, 0], [3, 3, 3, 0, 0, 0, 0, 0], [0] * 8])
    codes, lengths = ctc_collapse(paths)
    assert lengths.tolist() == [3, 1, 0]
    assert (
        codes[0, :3].tolist() == [1, 1, 2]
        and codes[1, :1].tolist() == [3]
        and bool((codes[2] == -1).all())
    )
    a = Alphabet("abc")
    assert greedy_decode(nn.functional.one_hot(paths, 4).float(), a) == ["aab", "c", ""]
    assert a.decode(*a.encode(["cab", "", "a"])) == ["cab", "", "a"]
    with pytest.raises(ValueError, match="outside"):
        a.encode(["abz"])
    with pytest.raises(ValueError, match="repeat"):
        Alphabet("aa")


def test_ctc_best_path_is_the_viterbi_path() -> None:
    torch.manual_seed(0)
    t, c = 5, 3
    logp = torch.randn(4, t, c, dtype=torch.float64).log_softmax(-1)
    targets = torch.tensor([[1, 2], [1, 1], [2, -1], [-1, -1]])
    lengths = torch.tensor([2, 2, 1, 0])
    path = ctc_best_path(logp, targets, lengths)
    codes, lens = ctc_collapse(path)
    for b in range(4):
        tgt = targets[b, : lengths[b]].tolist()
        assert codes[b, : lens[b]].tolist() == tgt
        # brute force over every path of length T that collapses to the target
        best = max(
            (
                p
                for p in itertools.product(range(c), repeat=t)
                if ctc_collapse(torch.tensor([p]))[0][0, : len(tgt)].tolist() == tgt
                and int(ctc_collapse(torch.tensor([p]))[1]) == len(tgt)
            ),
            key=lambda p: sum(logp[b, k, p[k]].item() for k in range(t)),
        )
        score = sum(logp[b, k, best[k]].item() for k in range(t))
        assert sum(logp[b, k, path[b, k]].item() for k in range(t)) == pytest.approx(
            score, abs=1e-12
        )
    with pytest.raises(ValueError, match="frames"):
        ctc_best_path(logp[:, :2], torch.tensor([[1, 1, 1]] * 4), torch.tensor([3] * 4))


def test_crnn_shapes_and_ctc_training_reduces_the_loss() -> None:
    a = Alphabet("ab")
    images, words = make_word_dataset(
        48, alphabet="ab", min_len=1, max_len=3, height=16, width=32, seed=0
    )
    model = CRNN(a.n_classes, channels=(4, 8, 8), hidden=8)
    assert model(images[:2]).shape == (2, 8, 3)
    losses = fit_ctc(
        model,
        images,
        words,
        a,
        steps=40,
        batch_size=16,
        lr=1e-2,
        seed=0,
        device="cpu",
        engine=EngineConfig(grad_clip=5.0),
    )
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


# --- rendering ------------------------------------------------------------------------------------


def test_word_rendering_is_deterministic() -> None:
    x1, w1 = make_word_dataset(6, height=20, width=60, seed=3)
    x2, w2 = make_word_dataset(6, height=20, width=60, seed=3)
    x3, w3 = make_word_dataset(6, height=20, width=60, seed=4)
    assert w1 == w2 and torch.equal(x1, x2)
    assert w1 != w3 and not torch.equal(x1, x3)
    assert x1.shape == (6, 1, 20, 60) and float(x1.min()) >= 0 and float(x1.max()) <= 1
    assert all(3 <= len(w) <= 8 for w in random_words(50, seed=0))
    img = WordRenderer(16, 48, noise=0, blur=0, perspective=0).render(
        "ab", np.random.default_rng(0)
    )
    assert img.std() > 0.05  # the word is visible
    with pytest.raises(ValueError):
        random_words(3, "", 1, 2)


# --- the edit-distance task -----------------------------------------------------------------------


def test_random_ctc_paths_collapse_to_their_words() -> None:
    g = torch.Generator().manual_seed(0)
    words = torch.tensor([[1, 1, 2, 2], [3, 0, 0, 0], [1, 2, 1, 2]])
    lengths = torch.tensor([4, 1, 0])
    paths = random_ctc_path(words, lengths, 10, g)
    codes, lens = ctc_collapse(paths)
    assert lens.tolist() == [4, 1, 0]
    assert codes[0, :4].tolist() == [1, 1, 2, 2] and codes[1, :1].tolist() == [3]
    with pytest.raises(ValueError, match="frames"):
        random_ctc_path(words, torch.tensor([4, 1, 4]), 7, g)


def test_edit_pair_generator_true_distances_and_spread() -> None:
    gen = CTCEditPairGenerator(n_chars=6, frames=16, min_len=2, max_len=6)
    g = torch.Generator().manual_seed(1)
    z, y, e = gen.sample_paths(300, g)
    zc, zl = ctc_collapse(z)
    yc, yl = ctc_collapse(y)
    for i in range(300):
        a = "".join(map(chr, zc[i, : zl[i]].tolist()))
        b = "".join(map(chr, yc[i, : yl[i]].tolist()))
        assert levenshtein_reference(a, b) == int(e[i])
    counts = torch.bincount(e.long(), minlength=7)
    assert bool((counts[:6] > 20).all())  # every distance 0..5 is well represented
    zo, yo, eo = gen.sample(4, g)
    assert zo.shape == (4, 16, 7) and torch.allclose(zo.sum(-1), torch.ones(4, 16))


def test_edit_distance_task_metric_and_target() -> None:
    a = Alphabet("abc")
    images, words = make_word_dataset(
        20, alphabet="abc", min_len=1, max_len=4, height=16, width=40, seed=0
    )
    task = EditDistanceTask(images, words, a, batch_size=8, device="cpu")
    model = CRNN(a.n_classes, channels=(4, 8, 8), hidden=8)
    batch = task.sample_batch(torch.Generator().manual_seed(0))
    z = task.predict(model, batch)
    assert z.shape == (8, 10, 4) and torch.allclose(z.sum(-1), torch.ones(8, 10), atol=1e-5)
    e = task.metric(z, batch)
    decoded = greedy_decode(z, a)
    truth = [words[i] for i in batch["index"].tolist()]
    assert e.tolist() == [levenshtein_reference(p, t) for p, t in zip(decoded, truth, strict=True)]
    y = task.encode_target(z, batch)
    assert greedy_decode(y, a) == truth  # the one-hot alignment collapses to the ground truth
    with pytest.raises(ValueError, match="generator"):
        task.sample_global(2, torch.Generator())


# --- fitting the surrogate, Algorithm 1, FEDS, checkpoints ----------------------------------------


@pytest.fixture(scope="module")
def box_setup() -> tuple:
    images, boxes = make_box_dataset(300, size=16, seed=0)
    bank = RotatedBoxPairBank(boxes, size=3000, seed=0)
    return images, boxes, bank


def test_box_bank_holds_true_errors_and_samples_uniformly(box_setup: tuple) -> None:
    _, boxes, bank = box_setup
    iou = rotated_iou(decode_box6(bank.z[:200].double()), decode_box6(bank.y[:200].double()))
    assert torch.allclose(bank.e[:200].double(), 1 - iou, atol=1e-5)
    _, _, e = bank.sample(2000, torch.Generator().manual_seed(0))
    hist = torch.histc(e, bins=10, min=0, max=1)
    assert hist.min() > 100  # all IoU bins represented (200 expected each)
    assert torch.allclose(encode_box6(decode_box6(bank.y[:5])), bank.y[:5], atol=1e-5)


def test_surrogate_fit_improves_during_training(box_setup: tuple) -> None:
    images, boxes, bank = box_setup
    task = BoxIoUTask(images, boxes, batch_size=64, bank=bank, device="cpu")
    torch.manual_seed(0)
    sur = EmbeddingSurrogate(BoxMLP())
    model = BoxRegressor(16, channels=(4, 8, 8), hidden=16)
    before = evaluate_surrogate(None, sur, task, source="global", n_batches=8, seed=123)
    cfg = LSConfig(
        epochs=1,
        surrogate_steps=300,
        model_steps=0,
        surrogate_lr=3e-3,
        source="global",
        grad_penalty=0.0,
    )
    hist = SurrogateTrainer(model, sur, task, cfg, device="cpu").fit()
    after = evaluate_surrogate(None, sur, task, source="global", n_batches=8, seed=123)
    assert after["l1"] < 0.5 * before["l1"]
    assert after["pearson"] > 0.8 and after["pearson"] > before["pearson"] + 0.15
    l1 = [h["l1_global"] for h in hist["surrogate"]]
    assert np.mean(l1[-25:]) < 0.5 * np.mean(l1[:25])
    assert all(np.isfinite(h["l1_local"]) for h in hist["surrogate"])  # monitored, not trained on


def test_edit_surrogate_fit_improves_during_training() -> None:
    gen = CTCEditPairGenerator(n_chars=5, frames=12, min_len=1, max_len=5)
    a = Alphabet("abcde")
    images, words = make_word_dataset(
        8, alphabet="abcde", min_len=1, max_len=5, height=16, width=48, seed=0
    )
    task = EditDistanceTask(images, words, a, batch_size=64, generator=gen, device="cpu")
    torch.manual_seed(0)
    sur = EmbeddingSurrogate(CharCNN(6, 12, channels=32, hidden=64, out_dim=32))
    before = evaluate_surrogate(None, sur, task, source="global", n_batches=4, seed=9)
    cfg = LSConfig(epochs=1, surrogate_steps=120, model_steps=0, surrogate_lr=3e-3, source="global")
    SurrogateTrainer(CRNN(6, channels=(4, 8, 8), hidden=8), sur, task, cfg, device="cpu").fit()
    after = evaluate_surrogate(None, sur, task, source="global", n_batches=4, seed=9)
    assert after["l1"] < 0.6 * before["l1"]
    assert after["pearson"] > 0.6


def test_alternating_phases_update_only_their_own_parameters(box_setup: tuple) -> None:
    images, boxes, bank = box_setup
    task = BoxIoUTask(images, boxes, batch_size=16, bank=bank, device="cpu")
    torch.manual_seed(0)
    model = BoxRegressor(16, channels=(4, 8, 8), hidden=16)
    sur = EmbeddingSurrogate(BoxMLP())
    tr = SurrogateTrainer(model, sur, task, LSConfig(source="local_global"), device="cpu")
    m0 = [p.detach().clone() for p in model.parameters()]
    s0 = [p.detach().clone() for p in sur.parameters()]
    stats = tr.surrogate_step()
    assert {"l1_local", "l1_global", "gp", "grad_norm"} <= set(stats)
    assert all(torch.equal(a, b) for a, b in zip(m0, model.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(s0, sur.parameters(), strict=True))
    s1 = [p.detach().clone() for p in sur.parameters()]
    tr.model_step()
    assert all(torch.equal(a, b) for a, b in zip(s1, sur.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(m0, model.parameters(), strict=True))
    assert all(p.requires_grad for p in sur.parameters())


def test_feds_trainer_checkpoint_resume_is_exact(box_setup: tuple, tmp_path) -> None:
    images, boxes, _ = box_setup
    task = BoxIoUTask(images, boxes, batch_size=16, device="cpu")  # FEDS needs no generator

    def run(epochs: int, ckpt) -> FEDSTrainer:
        torch.manual_seed(0)
        model = BoxRegressor(16, channels=(4, 8, 8), hidden=16)
        sur = EmbeddingSurrogate(BoxMLP())
        cfg = FEDSConfig(epochs=epochs, surrogate_steps=3, model_steps=2, lam=0.1)
        tr = FEDSTrainer(
            model, sur, task, cfg, device="cpu", seed=5, engine=EngineConfig(checkpoint=ckpt)
        )
        tr.fit()
        return tr

    full = run(3, None)
    run(2, tmp_path / "c.pt")  # interrupted after two epochs
    resumed = run(3, tmp_path / "c.pt")
    assert resumed.epoch == 3 and len(resumed.history["model"]) == 6
    assert all("in_band" in h for h in resumed.history["model"])
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.allclose(a, b)
    with pytest.raises(TypeError):
        FEDSTrainer(full.model, full.surrogate, task, LSConfig())


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="source"):
        LSConfig(source="both")
    with pytest.raises(ValueError, match="epochs"):
        LSConfig(epochs=-1)
    with pytest.raises(ValueError, match="lam"):
        FEDSConfig(lam=0)
    with pytest.raises(ValueError, match="mode"):
        FEDSConfig(mode="soft")
    assert FEDSConfig().source == "local" and FEDSConfig().grad_penalty == 0.1


def test_box_regressor_and_evaluation(box_setup: tuple) -> None:
    images, boxes, _ = box_setup
    model = BoxRegressor(16, channels=(4, 8, 8), hidden=16)
    z = model(images[:4])
    assert z.shape == (4, 6) and torch.allclose(z[:, 4:].norm(dim=1), torch.ones(4), atol=1e-5)
    losses = fit_box_regressor(model, images, boxes, steps=30, batch_size=32, lr=3e-3, device="cpu")
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    r = evaluate_box_regressor(model, images[:50], boxes[:50])
    assert 0 <= r["mean_iou"] <= 1
    assert r["precision@0.5"] == r["recall@0.5"] == pytest.approx(r["f1@0.5"], abs=1e-12)
    # the vectorised protocol equals the per-image ICDAR'15 protocol (one box per image)
    pred = predict_boxes(model, images[:50])
    for thr in (0.5, 0.7):
        ref = icdar15_evaluate(
            [b[None] for b in boxes[:50].double()], [p[None] for p in pred], iou_threshold=thr
        )
        assert r[f"f1@{thr}"] == pytest.approx(ref["f1"], abs=1e-12)
        assert ref["precision"] == pytest.approx(ref["recall"], abs=1e-12)
    # the matching rule on pairs whose IoU covers [0, 1]: matched iff IoU > threshold
    moved = perturb_boxes(boxes[:60], torch.Generator().manual_seed(1)).double()
    iou = rotated_iou(moved, boxes[:60].double())
    assert iou.min() < 0.5 < iou.max()
    for thr in (0.5, 0.7):
        ref = icdar15_evaluate(
            [b[None] for b in boxes[:60].double()], [p[None] for p in moved], iou_threshold=thr
        )
        assert float((iou > thr).double().mean()) == pytest.approx(ref["f1"], abs=1e-12)
    task = BoxIoUTask(images, boxes, batch_size=8, device="cpu")
    batch = task.sample_batch(torch.Generator().manual_seed(0))
    zz = task.predict(model, batch)
    assert torch.allclose(
        task.metric(zz, batch).double(),
        1 - rotated_iou(decode_box6(zz.detach().double()), batch["boxes"].double()),
        atol=1e-6,
    )
    assert torch.allclose(
        task.metric(task.encode_target(zz, batch), batch), torch.zeros(8), atol=1e-5
    )


class _ExactIoUSurrogate(nn.Module):
    """A 'surrogate' that is the metric itself: ``1 - IoU`` of the decoded codes."""

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (1 - rotated_iou(decode_box6(z.double()), decode_box6(y.double()))).to(z.dtype)


def test_metric_tracking_against_a_brute_force_correlation(box_setup: tuple) -> None:
    images, boxes, _ = box_setup
    torch.manual_seed(3)
    model = BoxRegressor(16, channels=(4, 8, 8), hidden=16)
    fit_box_regressor(model, images, boxes, steps=20, batch_size=32, lr=3e-3, device="cpu")
    out = metric_tracking(model, _ExactIoUSurrogate(), images[:80], boxes[:80])
    assert out["n"] == 80 and out["surrogate"] == pytest.approx(1.0, abs=1e-6) and out["l1"] < 1e-5
    with torch.no_grad():  # brute force: numpy's correlation of the per-box smooth-L1 with 1 - IoU
        z = model.eval()(images[:80]).double()
        y = encode_box6(boxes[:80].double())
        d = (z - y).abs()
        sl1 = torch.where(d < 0.1, 0.5 * d**2 / 0.1, d - 0.05).mean(1)
        e = 1 - rotated_iou(decode_box6(z), boxes[:80].double())
    assert out["proxy"] == pytest.approx(float(np.corrcoef(sl1.numpy(), e.numpy())[0, 1]), abs=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        metric_tracking(model, _ExactIoUSurrogate(), images[:1], boxes[:1])


#: where the proxy-training test interrupts its run: a module global, not a value the loss function
#: captures, since a checkpoint resumes only the run whose data (the loss function's captured values
#: included) wrote it
_PROXY_INTERRUPT: dict[str, int | None] = {"at": None, "n": 0}


def test_proxy_training_resumes_exactly_from_a_checkpoint(box_setup: tuple, tmp_path) -> None:
    from rank_lab.learned.proxy_training import fit_proxy

    images, boxes, _ = box_setup
    target = encode_box6(boxes).float()

    def run(ckpt, fail_at: int | None = None) -> tuple[nn.Module, list[float]]:
        torch.manual_seed(0)
        model = BoxRegressor(16, channels=(4, 8, 8), hidden=16)
        _PROXY_INTERRUPT.update(at=fail_at, n=0)

        def batch_loss(idx: torch.Tensor, dev: torch.device) -> torch.Tensor:
            _PROXY_INTERRUPT["n"] += 1
            if (
                _PROXY_INTERRUPT["at"] is not None
                and _PROXY_INTERRUPT["n"] == _PROXY_INTERRUPT["at"]
            ):
                raise KeyboardInterrupt  # an interrupted run
            return nn.functional.smooth_l1_loss(model(images[idx]), target[idx])

        losses = fit_proxy(
            model,
            len(images),
            batch_loss,
            steps=20,
            batch_size=16,
            lr=1e-3,
            seed=3,
            device="cpu",
            engine=EngineConfig(checkpoint=ckpt, checkpoint_every=10),
        )
        return model, losses

    full_model, full_losses = run(None)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "p.pt", fail_at=15)
    model, losses = run(tmp_path / "p.pt")
    assert losses == pytest.approx(full_losses, rel=1e-6)
    for a, b in zip(full_model.parameters(), model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
