"""Hierarchical metrics of the evaluation engine, in bounded memory (SOP / iNaturalist scale).

:func:`rank_lab.metrics.retrieval_metrics` calls :func:`hierarchical_route` when a hierarchical
metric is asked for (``"H-AP"``, ``"ASI"``, ``"NDCG-h"``, ``"AP@level"``, ``"H-R@k"``, ``"MS@k"``).

Every metric here depends on the ranking only through the order of the *positives* (shared level
>= 1) and, for each of them, the number of negatives (level 0) ranked before it. With the
worst-case tie rule (``docs/decisions.md``: tied negatives come first; tied positives by
increasing level), the position of the i-th positive is ``i + #{negatives with score >= its
score}``. The route computes exactly these numbers, with no per-item level matrix:

1. The gallery is permuted by its coarsest label and the queries are processed in that order, so
   that a query's positives are **one contiguous column range** (level >= 1 means "same coarsest
   label", :func:`~rank_lab.metrics.hierarchical_relevance.shared_level` in ``"lca"`` mode); the level sets'
   sizes come from label counts alone (no scores).
2. For a chunk of c queries, the scores ``(c, N)`` come from one float32 (float64) matmul
   (:func:`~rank_lab.metrics.score_bounds.exact_matmul`: no TF32). The positives' scores are copied
   out with their levels (computed on their range only), the range is set to ``+inf`` and every
   row is sorted (numpy's vectorised sort, rows split over threads): the negatives come first,
   ascending. The positives are sorted by decreasing score, ties by increasing level, and a
   ``searchsorted`` of them into the row's sorted negatives gives ``#{negatives >= score}``.
3. From the sorted positive levels ``(c, P)`` and their positions: H-rank through per-level
   cumulative counts (``H-rank(i) = sum_l min(rel_l, rel_i) #{level-l positives up to i}``), AP^(l)
   through cumulative counts of ``level >= l``, NDCG from the gains ``2^l - 1``, ASI from per-level
   counts of positions ``<= n``, H-R@k and the top-k mistakes from the positions ``<= k``; every
   sum along a row is sequential (:func:`~rank_lab.metrics.counting.row_sums`), so a query's values
   do not depend on its chunk.

Cost per chunk: ``O(c N d)`` for the matmul, ``O(c N log N)`` for the vectorised sort (no per-item
passes besides it), ``O(c P log N)`` for the search and ``O(c P L)`` for the metrics; memory
``O(c N)``, never ``N x N``. The ranking is that of the matmul's scores, as in the counting route
(:mod:`rank_lab.metrics.engine`). When a query's relevance is not increasing with the level
(possible with Eq. 4.7 if a coarse set is much smaller than a finer one), its H-AP uses its own
worst-case order (ties by increasing relevance).

:func:`hierarchical_chunk_metrics` computes the same metrics from an explicit ``(c, N)`` score and
level block (the previous route, kept as a public helper and as an independent check).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_float,
    check_positive_int,
)
from rank_lab.metrics.chunking import chunk_rows, torch_threads
from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.counting import positive_positions, row_sums
from rank_lab.metrics.hierarchical_relevance import as_hierarchical_labels, relevance_table
from rank_lab.metrics.score_bounds import exact_matmul

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


def _resort(vals: torch.Tensor, lv: torch.Tensor, valid: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positives already sorted by decreasing score: re-order ties by increasing ``key``."""
    big = torch.finfo(key.dtype).max if key.is_floating_point() else 1 << 30
    k = torch.where(valid, key, torch.full_like(key, big))
    by_key = torch.sort(k, dim=1, stable=True).indices
    v2 = torch.where(valid, vals, torch.full_like(vals, -torch.inf)).gather(1, by_key)
    order = by_key.gather(1, torch.sort(v2, dim=1, descending=True, stable=True).indices)
    return lv.gather(1, order), valid.gather(1, order)


def _hap(lv: torch.Tensor, valid: torch.Tensor, rel_table: torch.Tensor, inv_pos: torch.Tensor, n_levels: int) -> torch.Tensor:
    r = rel_table.gather(1, lv) * valid
    hrank = torch.zeros_like(r)
    for lev in range(1, n_levels + 1):
        cnt = ((lv == lev) & valid).cumsum(1).to(r.dtype)
        hrank += torch.minimum(rel_table[:, lev : lev + 1], r) * cnt
    total = row_sums(r)
    return row_sums(hrank * inv_pos) / torch.where(total > 0, total, torch.ones_like(total))


def _metrics_core(lv: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor, vals: torch.Tensor, counts: torch.Tensor,
                  n_levels: int, ks: Sequence[int], wanted: set[str], alpha: float) -> dict[str, torch.Tensor]:
    """Per-query metrics from the positives sorted by (score desc, level asc).

    Args:
        lv: ``(c, P)`` long levels (0 for padding), valid ``(c, P)`` bool, pos ``(c, P)`` float64
            worst-case positions, vals ``(c, P)`` their scores (for the relevance-tie re-order),
            counts ``(c, L + 1)`` level-set sizes.
    """
    dev = lv.device
    f64 = torch.float64
    c, p = lv.shape
    n_pos = counts[:, 1:].sum(1)
    ranks = torch.arange(1, p + 1, device=dev)
    inv_pos = torch.where(valid, 1.0 / pos, torch.zeros_like(pos))
    out: dict[str, torch.Tensor] = {}
    if "H-AP" in wanted or "H-R@k" in wanted:
        rt = relevance_table(counts, n_levels, "hap", alpha=alpha).to(dev)
        nonempty = torch.where(counts[:, 1:] > 0, rt[:, 1:], torch.full_like(rt[:, 1:], -torch.inf))
        mono = ((nonempty == -torch.inf) | (nonempty >= torch.cummax(nonempty, dim=1).values)).all(1)
        if "H-AP" in wanted:
            out["H-AP"] = _hap(lv, valid, rt, inv_pos, n_levels)
            if not bool(mono.all()):  # ties must then be broken by relevance, not level
                bad = torch.nonzero(~mono).flatten()
                lv_r, valid_r = _resort(vals[bad], lv[bad], valid[bad], rt[bad].gather(1, lv[bad]))
                out["H-AP"][bad] = _hap(lv_r, valid_r, rt[bad], inv_pos[bad], n_levels)
        if "H-R@k" in wanted:
            r = rt.gather(1, lv) * valid
            total = row_sums(r).clamp(min=torch.finfo(f64).tiny)
            for k in ks:
                out[f"H-R@{k}"] = row_sums(r * (pos <= k)) / total
    if "AP@level" in wanted:
        for lev in range(1, n_levels + 1):
            if lev == 1:  # every positive counts: the count up to i is i
                out["AP@level1"] = row_sums(ranks.to(f64) * inv_pos) / n_pos.clamp(min=1)
                continue
            m = lv >= lev
            cnt = m.cumsum(1).to(f64)
            out[f"AP@level{lev}"] = row_sums(cnt * m * inv_pos) / m.sum(1).clamp(min=1)
    if "NDCG-h" in wanted:
        gains = 2.0 ** torch.arange(n_levels + 1, dtype=f64, device=dev) - 1.0
        dcg = row_sums(gains[lv] / torch.log2(1.0 + pos))
        disc = torch.cat([torch.zeros(1, dtype=f64, device=dev), (1.0 / torch.log2(1.0 + ranks.to(f64))).cumsum(0)])
        ends = counts[:, 1:].flip(1).cumsum(1)  # ideal list: level L first, then L-1, ...
        begins = ends - counts[:, 1:].flip(1)
        idcg = ((disc[ends] - disc[begins]) * gains[1:].flip(0)[None, :]).sum(1)
        out["NDCG-h"] = dcg / idcg.clamp(min=torch.finfo(f64).tiny)
    if "ASI" in wanted:
        n = ranks.to(f64)
        inter = torch.zeros(c, p, dtype=f64, device=dev)
        above = torch.zeros(c, dtype=torch.long, device=dev)
        bins = pos.long().clamp(max=p + 1)
        for lev in range(n_levels, 0, -1):
            hit = torch.zeros(c, p + 2, dtype=f64, device=dev)
            hit.scatter_add_(1, bins, ((lv == lev) & valid).to(f64))
            a_cnt = hit.cumsum(1)[:, 1 : p + 1]
            b_cnt = (ranks[None, :] - above[:, None]).clamp(min=0).minimum(counts[:, lev : lev + 1]).to(f64)
            inter += torch.minimum(a_cnt, b_cnt)
            above += counts[:, lev]
        out["ASI"] = row_sums((inter / n) * (ranks[None, :] <= n_pos[:, None])) / n_pos.clamp(min=1)
    if "MS@k" in wanted:
        height = (n_levels - lv).to(f64)
        for k in ks:
            top = valid & (pos <= k)
            mist_pos = top & (lv < n_levels)
            n_neg_top = k - top.sum(1)
            out[f"MS_sum@{k}"] = row_sums(height * mist_pos) + n_levels * n_neg_top.to(f64)
            out[f"MS_n@{k}"] = (mist_pos.sum(1) + n_neg_top).to(f64)
    return out


def _compact_high(lv: torch.Tensor, rank: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The positives of level >= 2 of every row, packed to the left: ``(level, rank, pos, valid)`` ``(c, P2)``."""
    hi = lv >= 2
    n_hi = hi.sum(1)
    p2 = max(int(n_hi.max()) if n_hi.numel() else 0, 1)
    rr, cc = torch.nonzero(hi, as_tuple=True)
    slot = torch.cumsum(hi.long(), 1)[rr, cc] - 1
    out_lv = torch.zeros(lv.shape[0], p2, dtype=torch.long)
    out_rank = torch.ones(lv.shape[0], p2, dtype=torch.long)
    out_pos = torch.ones(lv.shape[0], p2, dtype=torch.long)
    out_lv[rr, slot], out_rank[rr, slot], out_pos[rr, slot] = lv[rr, cc], rank[rr, cc], pos[rr, cc]
    return out_lv, out_rank, out_pos, out_lv >= 2


def _metrics_sparse(lv: torch.Tensor, valid: torch.Tensor, ge: torch.Tensor, vals: torch.Tensor, counts: torch.Tensor,
                    n_levels: int, ks: Sequence[int], wanted: set[str], alpha: float) -> dict[str, torch.Tensor]:
    """:func:`_metrics_core` with ~15 passes over the ``(c, P)`` positives instead of ~45.

    The level-1 positives are the bulk (a whole coarse class): every sum over them is a sum over
    *all* positives of a function of ``(rank i, position)`` minus the same sum over the few
    positives of level >= 2, which are packed into ``(c, P2)`` arrays (:func:`_compact_high`). In
    the monotone case a level-1 positive has ``H-rank(i) = rel_1 i``; ASI's top level needs only
    ``sum_{n >= pos} 1/n``. Rows with non-monotone relevance (H-AP) and levels strictly between 1 and
    L (ASI, L >= 3) use the dense formulas.
    """
    f64 = torch.float64
    c, p = lv.shape
    ranks = torch.arange(1, p + 1)
    rank = ranks.expand(c, p)
    pos = ranks[None, :] + ge
    n_max = int(pos.max()) + 2 if pos.numel() else 2
    grid = torch.arange(n_max, dtype=f64)
    inv_t = torch.cat([torch.zeros(1, dtype=f64), 1.0 / grid[1:]])  # 1/m, exact same division as 1/pos
    harm = torch.cumsum(inv_t, 0)  # H(m) = sum_{n <= m} 1/n (sequential)
    inv = torch.where(valid, inv_t[pos], torch.zeros(1, dtype=f64))
    n_pos = counts[:, 1:].sum(1)
    hlv, hrank, hpos, hval = _compact_high(lv, rank, pos)
    hinv = torch.where(hval, inv_t[hpos], torch.zeros(1, dtype=f64))
    s_all = row_sums(rank * inv)  # sum over all positives of i / pos_i
    s_hi = row_sums(hrank * hinv)
    out: dict[str, torch.Tensor] = {}
    cnt_hi = {lev: torch.cumsum((hlv == lev).long(), 1) for lev in range(2, n_levels + 1)}
    if "H-AP" in wanted or "H-R@k" in wanted:
        rt = relevance_table(counts, n_levels, "hap", alpha=alpha)
        nonempty = torch.where(counts[:, 1:] > 0, rt[:, 1:], torch.full_like(rt[:, 1:], -torch.inf))
        mono = ((nonempty == -torch.inf) | (nonempty >= torch.cummax(nonempty, dim=1).values)).all(1)
        total = (rt * counts.to(f64)).sum(1)
        if "H-AP" in wanted:
            r_i = rt.gather(1, hlv)
            hr = torch.minimum(rt[:, 1:2], r_i) * (hrank - sum(cnt_hi.values(), torch.zeros_like(hrank))).to(f64)
            for lev, cnt in cnt_hi.items():
                hr = hr + torch.minimum(rt[:, lev : lev + 1], r_i) * cnt.to(f64)
            num = rt[:, 1] * (s_all - s_hi) + row_sums(hr * hinv)
            hap = num / torch.where(total > 0, total, torch.ones_like(total))
            if not bool(mono.all()):
                bad = torch.nonzero(~mono).flatten()
                lv_r, valid_r = _resort(vals[bad], lv[bad], valid[bad], rt[bad].gather(1, lv[bad]))
                hap[bad] = _hap(lv_r, valid_r, rt[bad], inv[bad], n_levels)
            out["H-AP"] = hap
        if "H-R@k" in wanted:
            for k in ks:
                top = (valid & (pos <= k)).sum(1).to(f64)
                extra = row_sums((rt.gather(1, hlv) - rt[:, 1:2]) * (hval & (hpos <= k)))
                out[f"H-R@{k}"] = (rt[:, 1] * top + extra) / total.clamp(min=torch.finfo(f64).tiny)
    if "AP@level" in wanted:
        out["AP@level1"] = s_all / n_pos.clamp(min=1)
        for lev in range(2, n_levels + 1):
            m = hlv >= lev
            cnt = torch.cumsum(m.long(), 1).to(f64)
            out[f"AP@level{lev}"] = row_sums(cnt * m * hinv) / m.sum(1).clamp(min=1)
    if "NDCG-h" in wanted:
        gains = 2.0 ** torch.arange(n_levels + 1, dtype=f64) - 1.0
        disc_t = torch.cat([torch.zeros(1, dtype=f64), 1.0 / torch.log2(1.0 + grid[1:])])
        disc = torch.where(valid, disc_t[pos], torch.zeros(1, dtype=f64))
        hdisc = torch.where(hval, disc_t[hpos], torch.zeros(1, dtype=f64))
        dcg = gains[1] * row_sums(disc) + row_sums((gains[hlv] - gains[1]) * hdisc)
        prefix = torch.cumsum(disc_t, 0)
        ends = counts[:, 1:].flip(1).cumsum(1)
        begins = ends - counts[:, 1:].flip(1)
        idcg = ((prefix[ends] - prefix[begins]) * gains[1:].flip(0)[None, :]).sum(1)
        out["NDCG-h"] = dcg / idcg.clamp(min=torch.finfo(f64).tiny)
    if "ASI" in wanted:
        npos_c = n_pos[:, None]
        in_range = ranks[None, :] <= npos_c  # n = 1..N+
        hit = torch.zeros(c, p + 2, dtype=torch.long)
        hit.scatter_add_(1, pos.clamp(max=p + 1), valid.long())
        a_all = hit.cumsum(1)[:, 1 : p + 1]  # positives with position <= n
        hhit = torch.zeros(c, p + 2, dtype=torch.long)
        hhit.scatter_add_(1, hpos.clamp(max=p + 1), hval.long())
        a_hi = hhit.cumsum(1)[:, 1 : p + 1]
        n_high = counts[:, 2:].sum(1, keepdim=True)
        b_1 = (ranks[None, :] - n_high).clamp(min=0).minimum(counts[:, 1:2])
        term = torch.minimum(a_all - a_hi, b_1).to(f64) * inv_t[ranks][None, :] * in_range
        asi = row_sums(term)
        top_items = hval & (hlv == n_levels) & (hpos <= npos_c)  # top level: min(a_L(n), b_L(n)) = a_L(n)
        asi = asi + row_sums(torch.where(top_items, harm[n_pos][:, None] - harm[hpos - 1], torch.zeros(1, dtype=f64)))
        above = counts[:, n_levels].clone()
        for lev in range(n_levels - 1, 1, -1):  # intermediate levels (L >= 3): dense
            lh = torch.zeros(c, p + 2, dtype=torch.long)
            lh.scatter_add_(1, hpos.clamp(max=p + 1), (hval & (hlv == lev)).long())
            a_l = lh.cumsum(1)[:, 1 : p + 1]
            b_l = (ranks[None, :] - above[:, None]).clamp(min=0).minimum(counts[:, lev : lev + 1])
            asi = asi + row_sums(torch.minimum(a_l, b_l).to(f64) * inv_t[ranks][None, :] * in_range)
            above += counts[:, lev]
        out["ASI"] = asi / n_pos.clamp(min=1)
    if "MS@k" in wanted:
        for k in ks:
            top = (valid & (pos <= k)).sum(1)
            top_hi = hval & (hpos <= k)
            n_top_fine = (top_hi & (hlv == n_levels)).sum(1)
            # mistakes: level-1 .. L-1 positives in the top k (height L - l) and the negatives (height L)
            height_hi = row_sums((n_levels - hlv).to(f64) * (top_hi & (hlv < n_levels)))
            n_top_l1 = top - top_hi.sum(1)
            n_neg_top = k - top
            mist = n_top_l1 + (top_hi & (hlv < n_levels)).sum(1) + n_neg_top
            if n_levels == 1:
                mist = n_neg_top
                height = n_levels * n_neg_top.to(f64)
            else:
                height = (n_levels - 1) * n_top_l1.to(f64) + height_hi + n_levels * n_neg_top.to(f64)
            del n_top_fine
            out[f"MS_sum@{k}"] = height
            out[f"MS_n@{k}"] = mist.to(f64)
    return out


def _check_ks_wanted(ks: object, wanted: object, n_items: int) -> tuple[list[int], set[str]]:
    """``ks`` (positive ints <= ``n_items``) and ``wanted`` (names of :data:`HIERARCHICAL_METRICS`)."""
    if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
        raise TypeError(f"ks must be a sequence of positive ints, got {type(ks).__name__}")
    ks = sorted({check_positive_int(k, "ks") for k in ks})  # type: ignore[union-attr]
    if ks and ks[-1] > n_items:
        raise ValueError(f"ks holds k={[k for k in ks if k > n_items]}, larger than the {n_items} items of a row")
    if isinstance(wanted, (str, bytes)) or not hasattr(wanted, "__iter__"):
        raise TypeError(f"wanted must be a set of metric names, got {type(wanted).__name__}")
    wanted = set(wanted)  # type: ignore[arg-type]
    unknown = wanted - set(HIERARCHICAL_METRICS)
    if unknown or not wanted:
        raise ValueError(f"wanted must be a non-empty set of names among {HIERARCHICAL_METRICS}, got {sorted(wanted)}")
    return ks, wanted


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
    ks, wanted = _check_ks_wanted(ks, wanted, scores.shape[1])
    alpha = check_float(alpha, "alpha", low=0.0, low_open=True)
    dev = scores.device
    counts = torch.zeros(scores.shape[0], n_levels + 2, dtype=torch.long, device=dev)
    counts = counts.scatter_add_(1, levels + 1, torch.ones_like(levels))[:, 1:]  # one pass; column 0 = excluded
    n_pos = counts[:, 1:].sum(1)
    p = max(int(n_pos.max()) if n_pos.numel() else 1, 1)
    positions, _ = positive_positions(scores, levels >= 1, levels == 0, max_pos=p)
    vals, lv, valid = _sorted_positives(scores, levels, levels, p)
    return _metrics_core(lv, valid, positions.to(torch.float64), vals, counts, n_levels, ks, wanted, alpha)


def _level_counts(lab: torch.Tensor, ref_lab: torch.Tensor, exclude_self: bool) -> torch.Tensor:
    """``|Omega^(l)|`` of every query, ``(Q, L + 1)`` long, from label counts (no scores)."""
    n_levels = lab.shape[1]
    n_ge = torch.zeros(lab.shape[0], n_levels + 2, dtype=torch.long)
    n_ge[:, 0] = ref_lab.shape[0]
    for lev in range(1, n_levels + 1):  # level >= lev: the lev coarsest columns match
        both = torch.cat([ref_lab[:, n_levels - lev :], lab[:, n_levels - lev :]])
        _, inv = torch.unique(both, dim=0, return_inverse=True)
        sizes = torch.bincount(inv[: ref_lab.shape[0]], minlength=int(inv.max()) + 1)
        n_ge[:, lev] = sizes[inv[ref_lab.shape[0] :]]
    if exclude_self:
        n_ge[:, : n_levels + 1] -= 1
    return n_ge[:, :-1] - n_ge[:, 1:]


def _sorted_positive_block(ps: np.ndarray, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of positive scores sorted by (score desc, level asc): one int64 sort per row.

    The key of a float32 score is its order-preserving integer image (``-0.0`` first made ``+0.0``),
    negated, shifted left by 8 bits, with the level (0 marks an excluded entry) in the low byte.
    Returns ``(scores, levels)``, excluded entries last with level 0 and score ``-inf``.
    """
    bits = (ps + np.float32(0.0)).view(np.int32)
    mono = bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))
    key = (-(mono.astype(np.int64)) << 8) | level
    key[level == 0] = np.iinfo(np.int64).max
    key.sort(axis=1)
    excluded = key == np.iinfo(np.int64).max
    lv = np.where(excluded, 0, key & 0xFF)
    m = (-(key >> 8)).astype(np.int32)
    vals = (m ^ ((m >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)
    return np.where(excluded, np.float32(-np.inf), vals), lv


def _positions_block(s: np.ndarray, groups: list[tuple[int, int, int, int]], lab_q: torch.Tensor, ref_lab: torch.Tensor,
                     self_col: torch.Tensor | None, n_levels: int) -> tuple[torch.Tensor, ...]:
    """Sorted positives of one chunk: ``(vals, levels, valid, negatives before)`` ``(c, P)`` (module docstring).

    ``s`` ``(c, N)`` float32 scores (modified: sorted in place); ``groups``: ``(r0, r1, a, b)``,
    rows ``r0:r1`` have their positives in columns ``a:b``.
    """
    c, n = s.shape
    p = max([b - a for _, _, a, b in groups] + [1])
    vals = np.full((c, p), -np.inf, dtype=s.dtype)
    lv = np.zeros((c, p), dtype=np.int64)
    for r0, r1, a, b in groups:
        if b <= a:
            continue
        level = torch.ones(r1 - r0, b - a, dtype=torch.long)
        match = torch.ones(r1 - r0, b - a, dtype=torch.bool)
        for col in range(n_levels - 2, -1, -1):
            match &= lab_q[r0:r1, col, None] == ref_lab[a:b, col][None, :]
            level += match
        if self_col is not None:
            own = self_col[r0:r1] - a
            hit = torch.nonzero((own >= 0) & (own < b - a)).flatten()
            level[hit, own[hit]] = 0
        if s.dtype == np.float32:
            vals[r0:r1, : b - a], lv[r0:r1, : b - a] = _sorted_positive_block(s[r0:r1, a:b], level.numpy())
        else:  # float64 scores: two stable sorts
            ps = torch.from_numpy(s[r0:r1, a:b].copy()).masked_fill(level == 0, -torch.inf)
            order = torch.argsort(level, dim=1, stable=True)
            order = order.gather(1, torch.argsort(ps.gather(1, order), dim=1, descending=True, stable=True))
            vals[r0:r1, : b - a] = ps.gather(1, order).numpy()
            lv[r0:r1, : b - a] = level.gather(1, order).numpy()
        s[r0:r1, a:b] = np.inf
    valid = np.isfinite(vals)
    n_valid = valid.sum(1)
    n_neg = np.array([n - (b - a) for r0, r1, a, b in groups for _ in range(r0, r1)], dtype=np.int64)
    ge = np.zeros((c, p), dtype=np.int64)

    s.sort(axis=1)  # negatives first, ascending; the positives' range is +inf
    for r in range(c):
        m = int(n_valid[r])
        if m:
            below = np.searchsorted(s[r, : n_neg[r]], vals[r, m - 1 :: -1], side="left")
            ge[r, :m] = n_neg[r] - below[::-1]
    return torch.from_numpy(vals).to(torch.float64), torch.from_numpy(lv), torch.from_numpy(valid), torch.from_numpy(ge)


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

    Raises:
        ValueError / TypeError: naming the argument (embeddings not ``(N, d)``, finite and
        non-empty; labels not integer ``(N,)`` / ``(N, L)`` with one row per embedding; different
        ``d`` or ``L``; ``ks`` outside ``[1, N]``; unknown ``wanted`` names; ``exclude_self`` with
        another reference set; a bad ``chunk_size``, ``max_memory_mb`` or ``alpha``).
    """
    emb = check_embeddings(emb, "emb")
    ref = check_embeddings(ref, "ref")
    lab = as_hierarchical_labels(lab, emb.shape[0], "lab")
    ref_lab = as_hierarchical_labels(ref_lab, ref.shape[0], "ref_lab")
    if ref.shape[1] != emb.shape[1]:
        raise ValueError(f"emb has d={emb.shape[1]} but ref has d={ref.shape[1]}")
    if ref_lab.shape[1] != lab.shape[1]:
        raise ValueError(f"lab has {lab.shape[1]} levels but ref_lab has {ref_lab.shape[1]}")
    if not isinstance(exclude_self, bool):
        raise TypeError(f"exclude_self must be a bool, got {type(exclude_self).__name__}")
    if exclude_self and ref.shape[0] != emb.shape[0]:
        raise ValueError("exclude_self=True needs the queries emb to be the reference set ref (same length)")
    ks, wanted = _check_ks_wanted(ks, wanted, ref.shape[0] - int(exclude_self))
    if chunk_size is not None:
        chunk_size = check_positive_int(chunk_size, "chunk_size")
    max_memory_mb = check_float(max_memory_mb, "max_memory_mb", low=0.0, low_open=True)
    alpha = check_float(alpha, "alpha", low=0.0, low_open=True)
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool or None, got {type(progress).__name__}")
    if not isinstance(dev, torch.device):
        raise TypeError(f"dev must be a torch.device, got {type(dev).__name__}")
    work = torch.float64 if torch.float64 in (emb.dtype, ref.dtype) else torch.float32  # one working precision
    emb, ref = emb.to(work), ref.to(work)
    n_levels = lab.shape[1]
    if dev.type != "cpu" or n_levels > 60:  # pragma: no cover - GPU: the chunked counting route
        return _route_by_counting(emb, lab, ref, ref_lab, ks, wanted, exclude_self, dev, chunk_size, max_memory_mb,
                                  progress, alpha)
    lab, ref_lab = lab.cpu(), ref_lab.cpu()
    g_order = torch.argsort(ref_lab[:, -1], stable=True)
    ref_p, ref_lab_p = ref[g_order].to(dev), ref_lab[g_order]
    coarse, first = torch.unique_consecutive(ref_lab_p[:, -1], return_counts=True)
    starts = torch.cumsum(first, 0) - first
    q_order = torch.argsort(lab[:, -1], stable=True)
    lab_q = lab[q_order]
    k = torch.searchsorted(coarse, lab_q[:, -1].contiguous()).clamp(max=max(coarse.numel() - 1, 0))
    present = coarse[k] == lab_q[:, -1]
    range_a = torch.where(present, starts[k], torch.zeros_like(k))
    range_b = torch.where(present, starts[k] + first[k], torch.zeros_like(k))
    self_col = None
    if exclude_self:
        inv = torch.empty_like(g_order)
        inv[g_order] = torch.arange(g_order.numel())
        self_col = inv[q_order]
    counts = _level_counts(lab_q, ref_lab_p, exclude_self)
    # rows per task: its scores (rows, N) and positives (rows, P) stay small; tasks run in Python
    # threads with single-threaded torch (each computes its own matmul rows): no OpenMP barriers
    sub = chunk_rows(ref.shape[0], max_memory_mb / 8, chunk_size, bytes_per_item=4, max_rows=128)
    starts = list(range(0, emb.shape[0], sub))
    show = len(starts) > 64 if progress is None else progress
    threads = max(1, torch.get_num_threads())
    results: dict[int, dict[str, torch.Tensor]] = {}

    def block(r0: int) -> None:
        """Queries ``r0 : r0 + sub`` (sorted order): scores, positions, metrics."""
        r1 = min(r0 + sub, emb.shape[0])
        s = (emb[q_order[r0:r1]].to(dev) @ ref_p.T).numpy()
        ra, rb = range_a[r0:r1], range_b[r0:r1]
        cut = [0, *(torch.nonzero((ra[1:] != ra[:-1]) | (rb[1:] != rb[:-1])).flatten() + 1).tolist(), r1 - r0]
        groups = [(i0, i1, int(ra[i0]), int(rb[i0])) for i0, i1 in zip(cut[:-1], cut[1:], strict=True)]
        own = None if self_col is None else self_col[r0:r1]
        vals, lv, valid, ge = _positions_block(s, groups, lab_q[r0:r1], ref_lab_p, own, n_levels)
        width = max(int(valid.sum(1).max()), 1)
        results[r0] = _metrics_sparse(lv[:, :width], valid[:, :width], ge[:, :width], vals[:, :width],
                                      counts[r0:r1], n_levels, ks, wanted, alpha)

    with exact_matmul(), torch_threads(1), ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in progress_bar(pool.map(block, starts), len(starts), show, "hierarchical metrics"):
            pass
    parts: dict[str, list[torch.Tensor]] = {}
    for key in sorted(results):
        for name, v in results[key].items():
            parts.setdefault(name, []).append(v)
    out = {}
    for name, v in parts.items():
        val = torch.empty_like(torch.cat(v))
        val[q_order] = torch.cat(v)
        out[name] = val
    return out


def _route_by_counting(emb, lab, ref, ref_lab, ks, wanted, exclude_self, dev, chunk_size, max_memory_mb, progress, alpha):
    """The chunked route on explicit ``(c, N)`` level blocks (:func:`hierarchical_chunk_metrics`): for GPUs."""
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
