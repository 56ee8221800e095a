"""Every registered loss, built with the training-set facts it needs, and a batch for it (shared by
the device tests)."""

from __future__ import annotations

import torch
from torch import nn

from rank_lab.losses import build_loss, list_losses, loss_info

N_CLASSES, DIM = 8, 16
#: constructor arguments beyond the registry's ``needs`` (CSL: the number of label levels; Σ: its
#: base)
EXTRA = {"csl": {"n_levels": 3}, "sigma": {"base": "sup_ap", "n_levels": 3}}
NAMES = list_losses()


def build(name: str) -> nn.Module:
    """The registered loss ``name`` (n_classes / dim filled in)."""
    info = loss_info(name)
    facts = {"n_classes": N_CLASSES, "dim": DIM}
    return build_loss(name, **{k: facts[k] for k in info.needs}, **EXTRA.get(name, {}))


def batch(
    name: str, seed: int = 0, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(embeddings (32, 16) requires grad, labels, refs (64, 16), ref_labels)``: 8 classes of 4,
    hierarchical ``(B, 3)`` labels for the hierarchical losses."""
    g = torch.Generator().manual_seed(seed)
    fine = torch.arange(N_CLASSES).repeat_interleave(4)

    def lab(f: torch.Tensor) -> torch.Tensor:
        return torch.stack([f, f // 2, f // 4], 1) if loss_info(name).hierarchical else f

    emb = torch.randn(len(fine), DIM, generator=g).to(device).requires_grad_(True)
    refs = torch.randn(2 * len(fine), DIM, generator=g).to(device)
    return emb, lab(fine).to(device), refs, lab(fine.repeat(2)).to(device)
