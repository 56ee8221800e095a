"""Autocast cannot change a rank loss (issue 27): every registered loss gives the same value and
gradient inside ``torch.autocast`` as outside, to float32 rounding, because the losses compute their
scores and ranks in float32 with autocast off
(:func:`rank_lab.losses.prepared_batch.full_precision`)."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

from rank_lab.losses import SmoothAP
from rank_lab.losses.prepared_batch import prepare_batch

from .registered_losses import NAMES, batch, build


def _value_and_grad(
    loss: torch.nn.Module, args: tuple, autocast: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    emb = args[0]
    emb.grad = None
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        value = loss(*args)
    value.backward()
    return value.detach(), emb.grad.clone()


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_loss_ignores_autocast(name: str) -> None:
    emb, labels, refs, ref_labels = batch(name)
    loss = build(name)
    for args in ((emb, labels), (emb, labels, refs, ref_labels)):
        plain, grad = _value_and_grad(loss, args, autocast=False)
        inside, grad_inside = _value_and_grad(loss, args, autocast=True)
        assert inside.dtype == torch.float32, name
        torch.testing.assert_close(
            inside, plain, msg=f"{name}: the loss changes under bf16 autocast"
        )
        torch.testing.assert_close(
            grad_inside, grad, msg=f"{name}: the gradient changes under bf16 autocast"
        )


def test_half_precision_embeddings_are_scored_in_float32() -> None:
    """A model's bf16 output (under autocast) is scored in float32, as its float32 copy would be."""
    torch.manual_seed(3)
    emb = torch.randn(24, 8).bfloat16()
    labels = torch.arange(24) % 4
    pb = prepare_batch(emb, labels)
    assert pb.scores.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = SmoothAP(tau=0.01)(emb, labels)
    torch.testing.assert_close(inside, SmoothAP(tau=0.01)(emb.float(), labels))
    half = SmoothAP(tau=0.01).forward_scores(pb.scores.bfloat16(), pb.relevance)
    assert half.dtype == torch.float32


def test_autocast_would_change_smooth_ap_without_the_guard() -> None:
    """The guard is needed: the same scores computed by a bf16 matmul move Smooth-AP (the issue's
    0.84375 vs
    0.84267 kind of change), so the invariance above is not vacuous."""
    torch.manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    labels = torch.arange(32) % 8
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half_scores = (emb @ emb.T).float()
    full_scores = emb @ emb.T
    rel = labels[:, None] == labels[None, :]
    valid = ~torch.eye(32, dtype=torch.bool)
    loss = SmoothAP(tau=0.01)
    assert not torch.equal(
        loss.forward_scores(half_scores, rel, valid), loss.forward_scores(full_scores, rel, valid)
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        guarded = loss(emb, labels)
    torch.testing.assert_close(guarded, loss.forward_scores(full_scores, rel, valid))


class _LossMatmuls(torch.overrides.TorchFunctionMode):
    """Records every matrix product the losses run: whether CPU autocast was on, and the dtypes."""

    PRODUCTS = {"matmul", "mm", "bmm", "__matmul__", "linear", "einsum", "addmm"}

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, bool, tuple]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if getattr(func, "__name__", "") in self.PRODUCTS:
            frame = sys._getframe(1)
            while frame is not None and "/rank_lab/" not in frame.f_code.co_filename:
                frame = frame.f_back
            if frame is not None and "/rank_lab/losses/" in frame.f_code.co_filename:
                dtypes = tuple(a.dtype for a in args if isinstance(a, torch.Tensor))
                self.seen.append(
                    (
                        f"{frame.f_code.co_filename.rsplit('/', 1)[1]}:{frame.f_lineno}",
                        torch.is_autocast_enabled("cpu"),
                        dtypes,
                    )
                )
        return func(*args, **(kwargs or {}))


#: the engine loops that compute a rank loss (their registry entries' valid calls, a few steps each)
LOOPS = [
    "rank_lab.train.trainer.Trainer",
    "rank_lab.train.distributed.trainer.DistributedTrainer",
    "rank_lab.train.multistage.fit_multistage",
    "rank_lab.fewshot.rcnaps_train.fit_rcnaps",
    "rank_lab.train.classification.fit_classifier",
    "rank_lab.fewshot.multi_dataset.fit_multi_dataset",
]


@pytest.mark.parametrize("loop", LOOPS)
def test_engine_loops_with_amp_compute_the_rank_loss_on_float32_scores(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``amp=True`` on CUDA puts every step (or the model's forward) under autocast; emulated here
    with CPU bfloat16 autocast in the engine's :meth:`~rank_lab.engine.Engine.autocast`: every
    product the losses run must run with autocast off, on float32 (or float64) operands."""
    from bad_inputs.framework import run
    from bad_inputs.registry import ENTRIES

    from rank_lab.engine import Engine

    monkeypatch.setattr(
        Engine, "autocast", lambda self: torch.autocast("cpu", dtype=torch.bfloat16)
    )
    entry = next(e for e in ENTRIES if e.name == loop)
    with warnings.catch_warnings(), _LossMatmuls() as spy:
        warnings.simplefilter("ignore")
        run(entry)
    assert spy.seen, f"{loop}: no loss product seen (is the spy still looking at the right place?)"
    half = [s for s in spy.seen if s[1] or any(d in (torch.float16, torch.bfloat16) for d in s[2])]
    assert not half, f"{loop}: loss products under autocast or in half precision: {half[:5]}"
