"""Validate once (issues 27 and 29): a loss call checks each input once and blocks the host at most
3 times.

Public entry points check their inputs; the kernels they call trust them. Two counts per registered
loss and per form of the common call (in-batch, against references, against a memory holding the
queries' own copies):

* finite checks (``torch.isfinite``): at most one per input tensor, and never the same tensor twice;
* host synchronisations on a CUDA device (``bool()``, ``int()``, ``.item()`` ... of device tensors,
  counted by the fake-CUDA harness): at most :data:`CEILING`, the backward pass none.

:data:`OVER_CEILING` lists the losses still above the ceiling with the reason (shrink-only: a
count below its entry fails until the entry is lowered or removed).
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from rank_lab.losses import SupAP

from .fake_cuda import fake_cuda
from .registered_losses import NAMES, batch, build

CEILING = 3
#: losses above the ceiling: (host syncs per call, reason); none since the hierarchical losses call
#: the trusted kernels of rank_lab.metrics.hierarchy.relevance and the Σ-loss checks every level's
#: no-positive rule in one sync
OVER_CEILING: dict[str, tuple[int, str]] = {}


#: losses that check a computed table on top of their inputs (shrink-only, as OVER_CEILING); none
EXTRA_FINITE_CHECKS: dict[str, tuple[int, str]] = {}


def _calls(name: str, device: str) -> list[tuple[str, tuple, dict]]:
    emb, labels, refs, ref_labels = batch(name, device=device)
    own = torch.cat([emb.detach(), refs])
    return [
        ("in-batch", (emb, labels), {}),
        ("references", (emb, labels, refs, ref_labels), {}),
        (
            "memory",
            (emb, labels, own, torch.cat([labels, ref_labels])),
            {"ref_self_index": torch.arange(emb.shape[0], device=device)},
        ),
    ]


@pytest.mark.parametrize("name", NAMES)
def test_host_syncs_per_loss_call(name: str) -> None:
    allowed, reason = OVER_CEILING.get(name, (CEILING, ""))
    counts = {}
    with warnings.catch_warnings(), fake_cuda() as fc:
        warnings.simplefilter("ignore")
        loss = build(name).to("cuda")
        for form, args, kwargs in _calls(name, "cuda"):
            fc.reset()
            value = loss(*args, **kwargs)
            counts[form] = (fc.n_syncs, dict(fc.where))
            fc.reset()
            value.backward()
            assert fc.n_syncs == 0, f"{name} ({form}): the backward pass syncs: {fc.where}"
    worst = max(n for n, _ in counts.values())
    detail = {form: where for form, (n, where) in counts.items() if n == worst}
    assert worst <= allowed, f"{name}: {worst} host syncs in one call (ceiling {allowed}): {detail}"
    if name in OVER_CEILING:
        assert worst == allowed, (
            f"{name} now syncs {worst} times: lower OVER_CEILING[{name!r}] ({reason})"
        )


class _FiniteChecks(TorchFunctionMode):
    """Records the tensors given to ``torch.isfinite``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, tuple[int, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func is torch.isfinite and args and isinstance(args[0], torch.Tensor):
            self.seen.append((args[0].data_ptr(), tuple(args[0].shape)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", NAMES)
def test_finite_checks_per_loss_call(name: str) -> None:
    loss = build(name)
    extra, reason = EXTRA_FINITE_CHECKS.get(name, (0, ""))
    most = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for form, args, kwargs in _calls(name, "cpu"):
            n_inputs = sum(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args)
            with _FiniteChecks() as spy:
                loss(*args, **kwargs)
            repeated = [k for k, c in Counter(spy.seen).items() if c > 1]
            assert not repeated, (
                f"{name} ({form}): a tensor is checked for finite values "
                f"{max(Counter(spy.seen).values())} times"
            )
            assert len(spy.seen) <= n_inputs + extra, (
                f"{name} ({form}): {len(spy.seen)} finite checks for {n_inputs} input tensors"
            )
            most = max(most, len(spy.seen) - n_inputs)
    if extra:
        assert most == extra, (
            f"{name}: fewer finite checks now, lower EXTRA_FINITE_CHECKS[{name!r}] ({reason})"
        )


def test_one_sup_ap_call_checks_finite_values_once() -> None:
    """The issue's case: SupAP checked the same tensor three times; now one check covers the call
    (on the scores, which are finite exactly when the embeddings are and their products do not
    overflow)."""
    emb, labels = torch.randn(24, 8), torch.arange(24) % 6
    with _FiniteChecks() as spy:
        SupAP()(emb, labels)
    assert spy.seen == [(spy.seen[0][0], (24, 24))]
    bad = emb.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"^embeddings contains 1 NaN"):
        SupAP()(bad, labels)
    with pytest.raises(ValueError, match=r"^ref_embeddings contains 1 NaN"):
        SupAP()(emb, labels, bad, labels)
    with pytest.raises(ValueError, match="overflow"):
        SupAP(normalize=False)(emb * 1e20, labels)  # finite embeddings whose products are not
    with pytest.raises(
        ValueError, match=r"ref_self_index must hold -1 or column indices in \[0, 24\)"
    ):
        SupAP()(emb, labels, emb, labels, ref_self_index=torch.full((24,), 24))


def test_sigma_checks_every_level_no_positive_rule_in_one_sync() -> None:
    """Σ-loss: each level's no-positive rule keeps its own message (level order), fetched in one
    host sync."""
    from rank_lab.losses import build_loss

    emb = torch.randn(8, 16)
    # level 1: no positive at all
    lab = torch.stack([torch.arange(8) // 2, torch.arange(8), torch.arange(8) // 4], 1)
    with pytest.raises(ValueError, match="^no query has a positive in its retrieval set"):
        build_loss("sigma", base="sup_ap", n_levels=3, dim=16)(emb, lab)
    lab[0, 0] = 100  # level 0: queries 0 and 1 lose their positive, before level 1's failure
    with pytest.raises(ValueError, match=r"^2 query\(ies\) have no positive .*no_positive='raise'"):
        build_loss("sigma", base="sup_ap", n_levels=3, dim=16, no_positive="raise")(emb, lab)
    ok = torch.stack([torch.arange(8) // 2, torch.arange(8) // 2, torch.arange(8) // 4], 1)
    loss = build_loss("sigma", base="sup_ap", n_levels=3, dim=16)
    parts = sum(build_loss("sup_ap", hierarchy_level=lev)(emb, ok) for lev in range(3))
    torch.testing.assert_close(loss(emb, ok), parts, rtol=0, atol=0)
    with fake_cuda() as fc:
        loss.to("cuda")(emb.to("cuda"), ok.to("cuda"))
        assert fc.n_syncs == 2, fc.where  # the finite check of level 0 and the three levels' rules
