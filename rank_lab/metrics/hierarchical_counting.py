"""Hierarchical metrics by counting on explicit ``(c, N)`` score and level blocks (Ramzi thesis ch. 4).

:func:`hierarchical_chunk_metrics` computes the metrics of
:data:`~rank_lab.metrics.hierarchical_positions.HIERARCHICAL_METRICS` from a chunk's scores and
shared levels: the worst-case position of every positive by *counting* the negatives with a score
at least its own (:func:`~rank_lab.metrics.counting.positive_positions`), then the formulas of
:mod:`rank_lab.metrics.hierarchical_positions`. :func:`hierarchical_counting_route` runs it chunk by
chunk over a gallery (memory ``O(c N)`` with ``(c, N)`` levels): the route of the engine on GPUs,
and an independent check of the sorted route at scale (:mod:`rank_lab.metrics.hierarchical_route`,
where both names are still importable).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rank_lab._validation import (
    as_tensor,
    check_finite,
    check_float,
    check_positive_int,
)
from rank_lab.metrics.chunking import chunk_rows
from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.counting import positive_positions
from rank_lab.metrics.exact_scores import exact_matmul
from rank_lab.metrics.hierarchical_positions import check_ks_wanted, sorted_positive_metrics

__all__ = ["hierarchical_chunk_metrics"]


def _sorted_positives(scores: torch.Tensor, levels: torch.Tensor, key: torch.Tensor, p: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Positives (level >= 1) sorted by decreasing score, ties by increasing ``key``.

    Returns ``(scores (c, p), levels (c, p), valid (c, p))``; padding has level 0 and valid False.
    """
    pos = levels >= 1
    neg_inf = torch.tensor(-torch.inf, dtype=scores.dtype, device=scores.device)
    vals, idx = torch.topk(torch.where(pos, scores, neg_inf), p, dim=1)
    k = key.gather(1, idx)
    valid = torch.isfinite(vals)
    k = torch.where(valid, k, torch.full_like(k, torch.finfo(k.dtype).max if k.is_floating_point() else 1 << 30))
    by_key = torch.sort(k, dim=1, stable=True).indices
    v2 = torch.where(valid, vals, torch.full_like(vals, -torch.finfo(vals.dtype).max)).gather(1, by_key)
    by_score = torch.sort(v2, dim=1, descending=True, stable=True).indices
    order = by_key.gather(1, by_score)
    return vals.gather(1, order), levels.gather(1, idx).gather(1, order) * valid.gather(1, order), valid.gather(1, order)


def hierarchical_chunk_metrics(
    scores: torch.Tensor,
    levels: torch.Tensor,
    n_levels: int,
    ks: Sequence[int],
    wanted: set[str],
    *,
    alpha: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Per-query hierarchical metrics of a chunk, from its scores and shared levels.

    Args:
        scores: ``(c, N)`` scores.
        levels: ``(c, N)`` long shared levels in ``[0, L]``; -1 for items outside the retrieval set
            (the query itself).
        n_levels: L.
        ks: cut-offs of ``"H-R@k"`` and ``"MS@k"``.
        wanted: names among :data:`~rank_lab.metrics.hierarchical_positions.HIERARCHICAL_METRICS`.
        alpha: alpha of the H-AP relevance (Eq. 4.7; 1 for the metric).

    Returns:
        ``{name: (c,) float64}``: ``"H-AP"``, ``"ASI"``, ``"NDCG-h"``, ``"AP@level{l}"`` (l = 1..L,
        l = L fine), ``"H-R@{k}"``, and for ``"MS@k"`` the per-query sums ``"MS_sum@{k}"`` and
        counts ``"MS_n@{k}"`` of the top-k mistakes' LCA heights.

    Raises:
        ValueError / TypeError: naming the argument (shapes, NaN scores, float levels, levels
        outside ``[-1, L]``, ``ks`` outside ``[1, N]``, unknown ``wanted`` names, ``alpha <= 0``).
    """
    scores = as_tensor(scores, "scores")
    if scores.ndim != 2 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty (c, N) matrix, got shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        scores = scores.float()
    check_finite(scores, "scores")
    levels = as_tensor(levels, "levels")
    if levels.is_floating_point() or levels.is_complex() or levels.dtype == torch.bool:
        raise TypeError(f"levels must hold integers, got dtype {levels.dtype}")
    if levels.shape != scores.shape:
        raise ValueError(f"levels has shape {tuple(levels.shape)} but scores has shape {tuple(scores.shape)}")
    n_levels = check_positive_int(n_levels, "n_levels")
    levels = levels.long().to(scores.device)
    if int(levels.min()) < -1 or int(levels.max()) > n_levels:
        raise ValueError(f"levels must lie in [-1, n_levels={n_levels}], got range [{int(levels.min())}, {int(levels.max())}]")
    ks, wanted = check_ks_wanted(ks, wanted, scores.shape[1])
    alpha = check_float(alpha, "alpha", low=0.0, low_open=True)
    dev = scores.device
    counts = torch.zeros(scores.shape[0], n_levels + 2, dtype=torch.long, device=dev)
    counts = counts.scatter_add_(1, levels + 1, torch.ones_like(levels))[:, 1:]  # one pass; column 0 = excluded
    n_pos = counts[:, 1:].sum(1)
    p = max(int(n_pos.max()) if n_pos.numel() else 1, 1)
    positions, _ = positive_positions(scores, levels >= 1, levels == 0, max_pos=p)
    vals, lv, valid = _sorted_positives(scores, levels, levels, p)
    return sorted_positive_metrics(lv, valid, positions.to(torch.float64), vals, counts, n_levels, ks, wanted, alpha)


def hierarchical_counting_route(emb: torch.Tensor, lab: torch.Tensor, ref: torch.Tensor, ref_lab: torch.Tensor,
                                ks: Sequence[int], wanted: set[str], exclude_self: bool, dev: torch.device,
                                chunk_size: int | None, max_memory_mb: float, progress: bool | None,
                                alpha: float) -> dict[str, torch.Tensor]:
    """The chunked route on explicit ``(c, N)`` level blocks (:func:`hierarchical_chunk_metrics`): for GPUs.

    Inputs are checked by :func:`~rank_lab.metrics.hierarchical_route.hierarchical_route`, the only
    caller (and its independent check in the tests).

    Args:
        emb: ``(Q, d)`` queries in the working precision; ``lab`` ``(Q, L)`` labels, fine first.
        ref: ``(N, d)`` gallery; ``ref_lab`` ``(N, L)``.
        ks, wanted, exclude_self, dev, chunk_size, max_memory_mb, progress, alpha: as
            :func:`~rank_lab.metrics.hierarchical_route.hierarchical_route`.

    Returns:
        ``{name: (Q,) tensor}`` on ``dev`` (see :func:`hierarchical_chunk_metrics`).
    """
    n_levels = lab.shape[1]
    ref_d, ref_lab_d = ref.to(dev), ref_lab.to(dev)
    c = chunk_rows(ref.shape[0], max_memory_mb, chunk_size, bytes_per_item=48)
    n_chunks = math.ceil(emb.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    parts: dict[str, list[torch.Tensor]] = {}
    for start in progress_bar(range(0, emb.shape[0], c), n_chunks, show, "hierarchical metrics"):
        qc = emb[start : start + c].to(dev)
        with exact_matmul():
            s = qc @ ref_d.T
        lq = lab[start : start + c].to(dev)
        levels = torch.zeros(s.shape, dtype=torch.long, device=dev)
        match = torch.ones(s.shape, dtype=torch.bool, device=dev)
        for col in range(n_levels - 1, -1, -1):
            match &= lq[:, col, None] == ref_lab_d[None, :, col]
            levels += match
        if exclude_self:
            rows = torch.arange(qc.shape[0], device=dev)
            levels[rows, rows + start] = -1
        for name, v in hierarchical_chunk_metrics(s, levels, n_levels, ks, wanted, alpha=alpha).items():
            parts.setdefault(name, []).append(v)
    return {name: torch.cat(v) for name, v in parts.items()}
