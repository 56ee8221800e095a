"""Hierarchical metrics from the sorted positives and their worst-case positions (Ramzi thesis ch. 4).

The hierarchical metrics of the engine (:data:`HIERARCHICAL_METRICS`: ``"H-AP"``, ``"ASI"``,
``"NDCG-h"``, ``"AP@level"``, ``"H-R@k"``, ``"MS@k"``) depend on the ranking only through the order
of the *positives* (shared level >= 1) and, for each of them, the number of negatives (level 0)
ranked before it. With the worst-case tie rule (``docs/decisions.md``: tied negatives come first;
tied positives by increasing level), the position of the i-th positive is ``i + #{negatives with
score >= its score}``. From the sorted positive levels ``(c, P)`` and their positions:
H-rank through per-level cumulative counts (``H-rank(i) = sum_l min(rel_l, rel_i) #{level-l
positives up to i}``), AP^(l) through cumulative counts of ``level >= l``, NDCG from the gains
``2^l - 1``, ASI from per-level counts of positions ``<= n``, H-R@k and the top-k mistakes from the
positions ``<= k``; every sum along a row is sequential (:func:`~rank_lab.metrics.counting.row_sums`),
so a query's values do not depend on its chunk. When a query's relevance is not increasing with the
level (possible with Eq. 4.7 if a coarse set is much smaller than a finer one), its H-AP uses its
own worst-case order (ties by increasing relevance).

:func:`sorted_positive_metrics` is the dense form, :func:`sorted_positive_metrics_packed` the form
of the route at scale (:mod:`rank_lab.metrics.hierarchical_route`); both, and
:func:`check_ks_wanted`, are internal helpers of the routes (unchecked, not in ``__all__``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rank_lab._validation import check_positive_int
from rank_lab.metrics.counting import row_sums
from rank_lab.metrics.hierarchical_relevance import relevance_table

__all__ = ["HIERARCHICAL_METRICS"]

#: Hierarchical metric names accepted by :func:`rank_lab.metrics.retrieval_metrics`.
HIERARCHICAL_METRICS = ("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k")


def check_ks_wanted(ks: object, wanted: object, n_items: int) -> tuple[list[int], set[str]]:
    """Check the cut-offs and metric names of the hierarchical routes, naming the argument.

    Args:
        ks: positive ints ``<= n_items`` (the cut-offs of ``"H-R@k"`` and ``"MS@k"``, Eqs. 4.4 and 2.10).
        wanted: a non-empty set of names of :data:`HIERARCHICAL_METRICS`.
        n_items: the items of a ranking (``N``, or ``N - 1`` with self-exclusion).

    Returns:
        ``(sorted distinct ks, set of names)``.

    Raises:
        ValueError / TypeError: naming ``ks`` or ``wanted``.
    """
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


def sorted_positive_metrics(lv: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor, vals: torch.Tensor,
                            counts: torch.Tensor, n_levels: int, ks: Sequence[int], wanted: set[str],
                            alpha: float) -> dict[str, torch.Tensor]:
    """Per-query hierarchical metrics from the positives sorted by (score desc, level asc) (module docstring).

    H-AP (Eq. 4.3, relevance Eq. 4.7), AP^(l) (Eq. 4.8), ASI (Eq. 4.16), NDCG-h, H-R@k (Eq. 4.4) and
    the top-k mistakes (Eq. 2.10) of the Ramzi thesis, dense formulas (every level on the
    ``(c, P)`` arrays); inputs are unchecked (the callers check them).

    Args:
        lv: ``(c, P)`` long levels (0 for padding).
        valid: ``(c, P)`` bool, the real positives.
        pos: ``(c, P)`` float64 worst-case positions.
        vals: ``(c, P)`` their scores (for the relevance-tie re-order).
        counts: ``(c, L + 1)`` level-set sizes.
        n_levels: L; ks: cut-offs; wanted: names among :data:`HIERARCHICAL_METRICS`; alpha: of Eq. 4.7.

    Returns:
        ``{name: (c,) float64}`` as :func:`~rank_lab.metrics.hierarchical_counting.hierarchical_chunk_metrics`.
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


def sorted_positive_metrics_packed(lv: torch.Tensor, valid: torch.Tensor, ge: torch.Tensor, vals: torch.Tensor,
                                   counts: torch.Tensor, n_levels: int, ks: Sequence[int], wanted: set[str],
                                   alpha: float) -> dict[str, torch.Tensor]:
    """:func:`sorted_positive_metrics` with ~15 passes over the ``(c, P)`` positives instead of ~45.

    The level-1 positives are the bulk (a whole coarse class): every sum over them is a sum over
    *all* positives of a function of ``(rank i, position)`` minus the same sum over the few
    positives of level >= 2, which are packed into ``(c, P2)`` arrays (:func:`_compact_high`). In
    the monotone case a level-1 positive has ``H-rank(i) = rel_1 i``; ASI's top level needs only
    ``sum_{n >= pos} 1/n``. Rows with non-monotone relevance (H-AP) and levels strictly between 1 and
    L (ASI, L >= 3) use the dense formulas. Inputs are unchecked (the route checks them).

    Args:
        lv: ``(c, P)`` long levels sorted by (score desc, level asc), 0 for padding.
        valid: ``(c, P)`` bool, the real positives.
        ge: ``(c, P)`` long number of negatives ranked before each positive (scores ``>=`` its own),
            so that the i-th positive's worst-case position is ``i + ge``.
        vals, counts, n_levels, ks, wanted, alpha: as :func:`sorted_positive_metrics`.

    Returns:
        ``{name: (c,) float64}``, equal to :func:`sorted_positive_metrics` up to float64 rounding.
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
