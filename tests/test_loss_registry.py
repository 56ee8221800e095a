"""Every name of ``rank_lab.losses.build_loss`` builds a loss that runs the common call."""

from __future__ import annotations

import pytest
import torch

from rank_lab.losses import LOSSES, build_loss

N_CLASSES, DIM = 8, 16
#: losses whose constructor needs more than (n_classes, dim)
EXTRA = {"csl": {"n_classes": N_CLASSES, "dim": DIM, "n_levels": 3}, "sigma": {"base": "sup_ap", "n_levels": 3}}


def _build(name: str) -> torch.nn.Module:
    if name in EXTRA:
        return build_loss(name, **EXTRA[name])
    try:
        return build_loss(name)
    except ValueError:
        return build_loss(name, n_classes=N_CLASSES, dim=DIM)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_registered_loss_runs_and_backpropagates(name: str) -> None:
    torch.manual_seed(0)
    fine = torch.arange(N_CLASSES).repeat_interleave(4)
    hierarchical = torch.stack([fine, fine // 2, fine // 4], 1)
    emb = torch.randn(len(fine), DIM, requires_grad=True)
    loss = _build(name)
    try:
        value = loss(emb, fine)
    except ValueError:
        value = loss(emb, hierarchical)  # hierarchical losses need (N, L) labels
    assert value.ndim == 0 and torch.isfinite(value)
    value.backward()
    assert emb.grad is not None and torch.isfinite(emb.grad).all()


def test_unknown_loss_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known"):
        build_loss("no_such_loss")
