"""Small deterministic inputs for the bad-input matrix (fresh tensors on every call)."""

from __future__ import annotations

import torch


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def emb(n: int = 12, d: int = 4, seed: int = 0) -> torch.Tensor:
    """``(n, d)`` float32 embeddings."""
    return torch.randn(n, d, generator=gen(seed))


def labels(n: int = 12, c: int = 3) -> torch.Tensor:
    """``(n,)`` labels ``0..c-1`` (each class ``n / c`` times: every item has a positive)."""
    return torch.arange(n) % c


def hier_labels(n: int = 12) -> torch.Tensor:
    """``(n, 2)`` labels, fine first: 4 fine classes in 2 coarse ones."""
    fine = torch.arange(n) % 4
    return torch.stack([fine, fine // 2], 1)


def scores(q: int = 3, n: int = 8, seed: int = 1) -> torch.Tensor:
    """``(q, n)`` float32 scores."""
    return torch.randn(q, n, generator=gen(seed))


def targets(q: int = 3, n: int = 8) -> torch.Tensor:
    """``(q, n)`` binary relevance, every row with positives and negatives."""
    t = torch.zeros(q, n)
    for i in range(q):
        t[i, i] = t[i, (i + 3) % n] = 1.0
    return t


def levels(q: int = 3, n: int = 8, n_levels: int = 2) -> torch.Tensor:
    """``(q, n)`` integer shared levels in ``0..n_levels`` (every row reaches the top level)."""
    lv = torch.arange(q * n).reshape(q, n) % (n_levels + 1)
    lv[:, 0] = n_levels
    return lv


def no_positive_targets(q: int = 3, n: int = 8) -> torch.Tensor:
    """Relevance whose first row has no positive."""
    t = targets(q, n)
    t[0] = 0.0
    return t


def images(n: int = 4, c: int = 3, size: int = 16, seed: int = 0) -> torch.Tensor:
    """``(n, c, size, size)`` images in ``[0, 1]``."""
    return torch.rand(n, c, size, size, generator=gen(seed))
