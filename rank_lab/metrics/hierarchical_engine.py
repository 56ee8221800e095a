"""Hierarchical metrics of the evaluation engine, in bounded memory (SOP / iNaturalist scale).

:func:`rank_lab.metrics.retrieval_metrics` calls :func:`hierarchical_route` when a hierarchical
metric is asked for (``"H-AP"``, ``"ASI"``, ``"NDCG-h"``, ``"AP@level"``, ``"H-R@k"``, ``"MS@k"``).
Queries are processed in chunks of rows; for a chunk of c queries:

1. scores ``(c, N)`` from one matmul and shared levels ``(c, N)`` from the label matrices
   (:func:`~rank_lab.metrics.hierarchy.shared_level`, coarsest column first); the query's own
   column gets level -1 (excluded by index).
2. The relevance of every level per query from the level counts
   (:func:`~rank_lab.metrics.hierarchy.relevance_table`, Eq. 4.7 with ``alpha``).
3. Every metric here depends on the ranking only through the order of the *positives* (level
   >= 1) and, for each of them, the number of negatives (level 0) ranked before it. With the
   worst-case tie rule (``docs/decisions.md``: tied negatives come first; tied positives by
   increasing level), the position of the i-th positive is ``i + #{negatives with score >= its
   score}``, counted by :func:`rank_lab.metrics.engine.positive_positions` (a search of every item
   among the sorted positive scores, no sort of the row). Only the positives are sorted.
4. From the sorted positive levels ``(c, P)`` and their positions: H-rank through per-level
   cumulative counts (``H-rank(i) = sum_l min(rel_l, rel_i) #{level-l positives up to i}``), AP^(l)
   through cumulative counts of ``level >= l``, NDCG from the gains ``2^l - 1``, ASI from per-level
   counts of positions ``<= n``, H-R@k and the top-k mistakes from the positions ``<= k``.

Cost per chunk: ``O(c N d)`` for the matmul, ``O(c N log P)`` for the counting, ``O(c P L)`` for the
metrics; memory ``O(c N)``, never ``N x N``. When a query's relevance is not increasing with the
level (possible with Eq. 4.7 if a coarse set is much smaller than a finer one), its H-AP uses its
own worst-case order (ties by increasing relevance), computed separately.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.counting import positive_positions
from rank_lab.metrics.hierarchy import relevance_table

__all__ = ["HIERARCHICAL_METRICS", "hierarchical_chunk_metrics", "hierarchical_route"]

#: Hierarchical metric names accepted by :func:`rank_lab.metrics.retrieval_metrics`.
HIERARCHICAL_METRICS = ("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k")


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


def _hap(lv: torch.Tensor, valid: torch.Tensor, rel_table: torch.Tensor, pos: torch.Tensor, n_levels: int) -> torch.Tensor:
    r = rel_table.gather(1, lv) * valid
    hrank = torch.zeros_like(r)
    for lev in range(1, n_levels + 1):
        cnt = ((lv == lev) & valid).cumsum(1).to(r.dtype)
        hrank += torch.minimum(rel_table[:, lev : lev + 1], r) * cnt
    total = r.sum(1)
    return (hrank * valid / pos).sum(1) / torch.where(total > 0, total, torch.ones_like(total))


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
        wanted: names among :data:`HIERARCHICAL_METRICS`.
        alpha: alpha of the H-AP relevance (Eq. 4.7; 1 for the metric).

    Returns:
        ``{name: (c,) float64}``: ``"H-AP"``, ``"ASI"``, ``"NDCG-h"``, ``"AP@level{l}"`` (l = 1..L,
        l = L fine), ``"H-R@{k}"``, and for ``"MS@k"`` the per-query sums ``"MS_sum@{k}"`` and
        counts ``"MS_n@{k}"`` of the top-k mistakes' LCA heights.
    """
    dev = scores.device
    in_set = levels >= 0
    counts = torch.zeros(scores.shape[0], n_levels + 2, dtype=torch.long, device=dev)
    counts = counts.scatter_add_(1, levels + 1, torch.ones_like(levels))[:, 1:]  # one pass; column 0 = excluded
    n_pos = counts[:, 1:].sum(1)
    p = max(int(n_pos.max()) if n_pos.numel() else 1, 1)
    positions, _ = positive_positions(scores, levels >= 1, levels == 0, max_pos=p)
    ranks = torch.arange(1, p + 1, device=dev)
    n_neg_before = positions - ranks  # equal for tied positives: aligned with any tie order
    _, lv, valid = _sorted_positives(scores, levels, levels, p)
    pos = (ranks + n_neg_before).to(torch.float64)
    out: dict[str, torch.Tensor] = {}
    f64 = torch.float64
    if "H-AP" in wanted or "H-R@k" in wanted:
        rt = relevance_table(counts, n_levels, "hap", alpha=alpha).to(dev)
        nonempty = torch.where(counts[:, 1:] > 0, rt[:, 1:], torch.full_like(rt[:, 1:], -torch.inf))
        monotone = bool(((nonempty == -torch.inf) | (nonempty >= torch.cummax(nonempty, dim=1).values)).all())
        if monotone:
            out["H-AP"] = _hap(lv, valid, rt, pos, n_levels)
        else:  # ties must then be broken by relevance, not level
            rel = torch.where(in_set, rt.gather(1, levels.clamp(min=0)), torch.zeros_like(scores, dtype=f64))
            _, lv_r, valid_r = _sorted_positives(scores, levels, rel, p)
            out["H-AP"] = _hap(lv_r, valid_r, rt, pos, n_levels)
        if "H-R@k" in wanted:
            r = rt.gather(1, lv) * valid
            total = r.sum(1).clamp(min=torch.finfo(f64).tiny)
            for k in ks:
                out[f"H-R@{k}"] = (r * (pos <= k)).sum(1) / total
        if "H-AP" not in wanted:
            del out["H-AP"]
    if "AP@level" in wanted:
        for lev in range(1, n_levels + 1):
            m = (lv >= lev) & valid
            cnt = m.cumsum(1).to(f64)
            out[f"AP@level{lev}"] = (cnt * m / pos).sum(1) / m.sum(1).clamp(min=1)
    if "NDCG-h" in wanted:
        g = (2.0 ** lv.to(f64) - 1.0) * valid
        dcg = (g / torch.log2(1.0 + pos)).sum(1)
        ideal = torch.sort(g, dim=1, descending=True).values
        idcg = (ideal / torch.log2(1.0 + ranks.to(f64))).sum(1)
        out["NDCG-h"] = dcg / idcg.clamp(min=torch.finfo(f64).tiny)
    if "ASI" in wanted:
        n = ranks.to(f64)
        inter = torch.zeros(scores.shape[0], p, dtype=f64, device=dev)
        above = torch.zeros(scores.shape[0], dtype=torch.long, device=dev)
        for lev in range(n_levels, 0, -1):
            hit = torch.zeros(scores.shape[0], p + 2, dtype=f64, device=dev)
            hit.scatter_add_(1, pos.long().clamp(max=p + 1), ((lv == lev) & valid).to(f64))
            a_cnt = hit.cumsum(1)[:, 1 : p + 1]
            b_cnt = (ranks[None, :] - above[:, None]).clamp(min=0).minimum(counts[:, lev : lev + 1]).to(f64)
            inter += torch.minimum(a_cnt, b_cnt)
            above += counts[:, lev]
        out["ASI"] = ((inter / n) * (ranks[None, :] <= n_pos[:, None])).sum(1) / n_pos.clamp(min=1)
    if "MS@k" in wanted:
        height = (n_levels - lv).to(f64)
        for k in ks:
            top = valid & (pos <= k)
            mist_pos = top & (lv < n_levels)
            n_neg_top = k - top.sum(1)
            out[f"MS_sum@{k}"] = (height * mist_pos).sum(1) + n_levels * n_neg_top.to(f64)
            out[f"MS_n@{k}"] = (mist_pos.sum(1) + n_neg_top).to(f64)
    return out


def hierarchical_route(
    emb: torch.Tensor,
    lab: torch.Tensor,
    ref: torch.Tensor,
    ref_lab: torch.Tensor,
    ks: Sequence[int],
    wanted: set[str],
    exclude_self: bool,
    dev: torch.device,
    chunk_size: int | None,
    max_memory_mb: float,
    progress: bool | None,
    alpha: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Per-query hierarchical metrics of every query, chunk by chunk (see the module docstring).

    Args:
        emb: ``(Q, d)`` (normalised as wanted) queries; ``lab`` ``(Q, L)`` labels, fine first.
        ref: ``(N, d)`` gallery; ``ref_lab`` ``(N, L)``.
        Others: as :func:`rank_lab.metrics.retrieval_metrics`.

    Returns:
        ``{name: (Q,) tensor}`` (see :func:`hierarchical_chunk_metrics`).
    """
    n_levels = lab.shape[1]
    ref_d, ref_lab_d = ref.to(dev), ref_lab.to(dev)
    if chunk_size is None:
        bytes_per_row = 48 * ref.shape[0]  # scores, levels, masks, search counts
        c = max(1, min(4096, int(max_memory_mb * 2**20 // bytes_per_row)))
    else:
        c = chunk_size
    n_chunks = math.ceil(emb.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    parts: dict[str, list[torch.Tensor]] = {}
    for start in progress_bar(range(0, emb.shape[0], c), n_chunks, show, "hierarchical metrics"):
        qc = emb[start : start + c].to(dev)
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
        vals = hierarchical_chunk_metrics(s, levels, n_levels, ks, wanted, alpha=alpha)
        for name, v in vals.items():
            parts.setdefault(name, []).append(v)
    return {name: torch.cat(v) for name, v in parts.items()}
