"""Every registered loss works after ``.double()`` (issue 26, item 3): the module's parameters in
float64, float64 (or float32) embeddings, both calls (2 and 4 arguments), a float64 value equal to
the float32 module's up to float32 rounding, and a finite gradient (the float64 gradchecks of the
families rely on it). The CSL loss used to fail here with a dtype error."""

from __future__ import annotations

import copy

import pytest
import torch

from rank_lab.losses import build_loss, list_losses, loss_info

N_CLASSES, DIM = 8, 16
#: constructor arguments beyond the registry's ``needs`` (CSL: the number of label levels; Σ: its
#: base)
EXTRA = {"csl": {"n_levels": 3}, "sigma": {"base": "sup_ap", "n_levels": 3}}


def _batch(hierarchical: bool) -> tuple[torch.Tensor, torch.Tensor]:
    fine = torch.arange(N_CLASSES).repeat_interleave(4)
    labels = torch.stack([fine, fine // 2, fine // 4], 1) if hierarchical else fine
    return torch.randn(len(fine), DIM, generator=torch.Generator().manual_seed(0)), labels


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("name", list_losses())
def test_every_registered_loss_works_after_double(name: str) -> None:
    info = loss_info(name)
    facts = {"n_classes": N_CLASSES, "dim": DIM}
    torch.manual_seed(0)
    loss32 = build_loss(name, **{k: facts[k] for k in info.needs}, **EXTRA.get(name, {}))
    loss64 = copy.deepcopy(loss32).double()
    assert all(p.dtype == torch.float64 for p in loss64.parameters())
    emb, labels = _batch(info.hierarchical)
    refs, ref_labels = emb.flip(0)[:16] * 0.5, labels.flip(0)[:16]
    for args32 in ((emb, labels), (emb, labels, refs, ref_labels)):
        expected = loss32(*args32)
        x = emb.double().requires_grad_(True)
        args64 = (x, labels) if len(args32) == 2 else (x, labels, refs.double(), ref_labels)
        value = loss64(*args64)
        assert value.dtype == torch.float64, f"{name}: a float64 module returns {value.dtype}"
        torch.testing.assert_close(
            value,
            expected.double(),
            rtol=1e-5,
            atol=1e-6,
            msg=f"{name} with {len(args32)} arguments",
        )
        value.backward()
        assert (
            x.grad is not None and bool(torch.isfinite(x.grad).all()) and x.grad.abs().sum() > 0
        ), name
        for p in loss64.parameters():
            assert p.grad is None or bool(torch.isfinite(p.grad).all()), name
        # float32 embeddings into the float64 module: accepted, the same value up to float32
        # rounding
        torch.testing.assert_close(
            loss64(emb, labels).detach(),
            loss64(emb.double(), labels).detach(),
            check_dtype=False,
            rtol=1e-5,
            atol=1e-6,
        )
