"""Losses normalise with ``unit_rows`` (issue 26 item 2): the same value and gradient as
``F.normalize`` on ordinary rows, bit for bit, and the value of the unscaled rows where
``F.normalize`` under- or overflowed (rows x 1e-30, x 1e20).

The "before" of every comparison is the loss with ``unit_rows`` swapped back to ``F.normalize`` in
its module.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import rank_lab.losses.prepared_batch
import rank_lab.losses.proxies
from rank_lab.losses import build_loss

#: loss name -> (constructor arguments, the modules whose unit_rows it calls)
CASES = {
    "sup_ap": ({}, (rank_lab.losses.prepared_batch,)),
    "smooth_ap": ({}, (rank_lab.losses.prepared_batch,)),
    "norm_softmax": ({"n_classes": 6, "dim": 8}, (rank_lab.losses.proxies,)),
    "supcon": ({}, (rank_lab.losses.prepared_batch,)),
}


def _f_normalize(x: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    return F.normalize(x, dim=dim, eps=eps)


def _batch(scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    emb = torch.randn(24, 8, generator=g) * scale
    return emb.requires_grad_(True), torch.arange(24) % 6


def _value_grad(name: str, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    kwargs, _ = CASES[name]
    torch.manual_seed(0)  # the proxies' initialisation
    loss = build_loss(name, **kwargs)
    emb, labels = _batch(scale)
    value = loss(emb, labels)
    value.backward()
    return value.detach(), emb.grad


@pytest.mark.parametrize("name", sorted(CASES))
def test_unit_rows_is_f_normalize_on_ordinary_rows(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    value, grad = _value_grad(name)
    for module in CASES[name][1]:
        monkeypatch.setattr(module, "unit_rows", _f_normalize)
    before_value, before_grad = _value_grad(name)
    assert torch.equal(value, before_value)
    assert torch.equal(grad, before_grad)


@pytest.mark.parametrize("scale", [1e-30, 1e20])
@pytest.mark.parametrize("name", sorted(CASES))
def test_scaled_rows_give_the_unscaled_value(
    name: str, scale: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref, _ = _value_grad(name)
    value, grad = _value_grad(name, scale)
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    torch.testing.assert_close(value, ref, rtol=1e-5, atol=1e-6)
    # what F.normalize gave: zero (x 1e20: infinite norm) or tiny (x 1e-30) rows
    for module in CASES[name][1]:
        monkeypatch.setattr(module, "unit_rows", _f_normalize)
    before, _ = _value_grad(name, scale)
    assert not torch.isfinite(before) or abs(float(before) - float(ref)) > 1e-3
