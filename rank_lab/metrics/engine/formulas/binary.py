"""The binary metrics of the engine, from worst-case positions (Eqs. 2.1-2.6, 3.13-3.20 of the Ramzi
thesis).

Each function takes :class:`~rank_lab.metrics.engine.formulas.positions.BinaryPositions` of a block
of queries and the cut-offs ``ks``, and returns ``{name: (c,) float64}``; the definitions are those
of :mod:`rank_lab.metrics.retrieval` (which computes them from score matrices). Every sum along a
row is sequential, so a query's value depends on its own positions only. Registered in
:mod:`rank_lab.metrics.engine.formulas.registry`.
"""

from __future__ import annotations

import torch

from rank_lab.metrics.engine.formulas.positions import BinaryPositions, row_sums

__all__: list[str] = []  # registered in formulas.registry; called through it


def recall_rate(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``R@k`` (recall rate, Eq. 2.3): 1 if a relevant item is among the first k."""
    return {f"R@{k}": (p.hits(k)[1] > 0).to(torch.float64) for k in ks}


def precision_at(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``P@k`` (Eq. 2.2): relevant items among the first k, over k."""
    return {f"P@{k}": p.hits(k)[1] / k for k in ks}


def true_recall(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``TR@k`` (true recall, Eq. 3.14): relevant items among the first k over ``min(k, R)``."""
    return {f"TR@{k}": p.hits(k)[1] / p.r.clamp(max=k) for k in ks}


def ap_at(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``mAP@k`` per query (AP@k of Weyand et al., GLDv2):
    ``(1/min(k, R)) sum_{j<=k} P(j) rel(j)``."""
    return {f"mAP@{k}": row_sums(p.precision * p.hits(k)[0]) / p.r.clamp(max=k) for k in ks}


def map_at_r(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``mAP@R`` (Eq. 3.20, Musgrave et al. 2020): ``(1/R) sum_{j<=R} P(j) rel(j)``."""
    return {"mAP@R": row_sums(p.precision * (p.pos <= p.n_pos[:, None])) / p.r}


def mean_ap(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``mAP`` per query: the full average precision (Eq. 2.4)."""
    return {"mAP": row_sums(p.precision) / p.r}


def reciprocal_rank(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``MRR`` per query: ``1 / position`` of the first relevant item (0 without one)."""
    first = p.posf[:, 0]
    return {"MRR": torch.where(p.valid[:, 0], 1.0 / first, torch.zeros_like(first))}


def ndcg(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``NDCG`` with binary gains (Eq. 2.11): ``DCG / IDCG``,
    ``DCG = sum_j rel_j / log2(1 + j)``."""
    zero = torch.zeros_like(p.posf)
    dcg = row_sums(torch.where(p.valid, 1.0 / torch.log2(p.posf + 1.0), zero))
    idcg = row_sums(torch.where(p.valid, 1.0 / torch.log2(p.ranks + 1.0), zero))
    return {"NDCG": dcg / idcg.clamp(min=1e-12)}
