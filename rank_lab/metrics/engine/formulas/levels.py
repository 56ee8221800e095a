"""The hierarchical metrics of the engine, from the sorted positives and their positions (Ramzi
thesis ch. 4).

Each function takes :class:`~rank_lab.metrics.engine.formulas.positions.LevelPositions` of a block
of queries (the positives sorted by canonical score desc, level asc -- tied positives by increasing
level, the worst case -- and the negatives ranked before each) and the cut-offs ``ks``, and
returns ``{name: (c,) float64}``: H-AP (Eq. 4.3, relevance Eq. 4.7), AP^(l) (Eq. 4.8), ASI
(Eq. 4.16), NDCG-h (gains ``2^l - 1``), H-R@k (Eq. 4.4) and the top-k mistakes (Eq. 2.10). The
definitions on score matrices are those of :mod:`rank_lab.metrics.hierarchy.metrics`.

**Packed sums.** The level-1 positives are the bulk (a whole coarse class): every sum over them is
a sum over *all* positives of a function of ``(rank i, position)`` minus the same sum over the few
positives of level >= 2, packed into ``(c, P2)`` arrays (:attr:`LevelPositions.high`). In the
monotone case a level-1 positive has ``H-rank(i) = rel_1 i``; ASI's top level needs only
``sum_{n >= pos} 1/n``. Rows whose relevance is not increasing with the level (possible with
Eq. 4.7 when a coarse set is much smaller than a finer one) get H-AP from their own worst-case
order (ties by increasing relevance); levels strictly between 1 and L (ASI, L >= 3) use the dense
formula. Every sum along a row is sequential
(:func:`~rank_lab.metrics.engine.formulas.positions.row_sums`); on the CPU the dense ones (the
sums over every positive: precisions, NDCG discounts, ASI's level-1 intersections) take the
compiled one-pass forms of :mod:`~rank_lab.metrics.engine.formulas._sums`, the same operations in
the same order (the same bits, without ``(c, P)`` temporaries).
Registered in :mod:`rank_lab.metrics.engine.formulas.registry`.
"""

from __future__ import annotations

import numpy as np
import torch

from rank_lab.metrics.engine.formulas._sums import asi_bulk, table_sum
from rank_lab.metrics.engine.formulas.positions import LevelPositions, as_np, compiled, row_sums
from rank_lab.metrics.hierarchy.relevance import relevance_table

__all__: list[str] = []  # registered in formulas.registry; called through it

_F64 = torch.float64


def _relevance(p: LevelPositions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rel_table (c, L + 1), monotone (c,), total (c,))`` of Eq. 4.7 with ``p.alpha``."""
    rt = relevance_table(p.counts, p.n_levels, "hap", alpha=p.alpha).to(p.lv.device)
    nonempty = torch.where(p.counts[:, 1:] > 0, rt[:, 1:], torch.full_like(rt[:, 1:], -torch.inf))
    mono = ((nonempty == -torch.inf) | (nonempty >= torch.cummax(nonempty, dim=1).values)).all(1)
    total = (rt * p.counts.to(_F64)).sum(1)
    return rt, mono, total


def _resort(
    keys: torch.Tensor, lv: torch.Tensor, valid: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positives already sorted by decreasing score: re-order ties by increasing ``key``."""
    big = torch.finfo(key.dtype).max if key.is_floating_point() else 1 << 30
    k = torch.where(valid, key, torch.full_like(key, big))
    by_key = torch.sort(k, dim=1, stable=True).indices
    v2 = torch.where(valid, keys, torch.full_like(keys, -torch.inf)).gather(1, by_key)
    order = by_key.gather(1, torch.sort(v2, dim=1, descending=True, stable=True).indices)
    return lv.gather(1, order), valid.gather(1, order)


def _hap_dense(
    lv: torch.Tensor,
    valid: torch.Tensor,
    rel_table: torch.Tensor,
    inv_pos: torch.Tensor,
    n_levels: int,
) -> torch.Tensor:
    r = rel_table.gather(1, lv) * valid
    hrank = torch.zeros_like(r)
    for lev in range(1, n_levels + 1):
        cnt = ((lv == lev) & valid).cumsum(1).to(r.dtype)
        hrank += torch.minimum(rel_table[:, lev : lev + 1], r) * cnt
    total = row_sums(r)
    return row_sums(hrank * inv_pos) / torch.where(total > 0, total, torch.ones_like(total))


def h_ap(p: LevelPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """H-AP (Eq. 4.3): ``(1 / sum rel) sum_i H-rank(i) / pos_i``,
    ``H-rank(i) = sum_l min(rel_l, rel_i) #{level-l up to i}``."""
    rt, mono, total = _relevance(p)
    hlv, hrank, _, _ = p.high
    cnt_hi = {lev: torch.cumsum((hlv == lev).long(), 1) for lev in range(2, p.n_levels + 1)}
    r_i = rt.gather(1, hlv)
    hr = torch.minimum(rt[:, 1:2], r_i) * (
        hrank - sum(cnt_hi.values(), torch.zeros_like(hrank))
    ).to(_F64)
    for lev, cnt in cnt_hi.items():
        hr = hr + torch.minimum(rt[:, lev : lev + 1], r_i) * cnt.to(_F64)
    num = rt[:, 1] * (p.s_all - p.s_high) + row_sums(hr * p.hinv)
    hap = num / torch.where(total > 0, total, torch.ones_like(total))
    if not bool(mono.all()):
        bad = torch.nonzero(~mono).flatten()
        lv_r, valid_r = _resort(p.keys[bad], p.lv[bad], p.valid[bad], rt[bad].gather(1, p.lv[bad]))
        hap[bad] = _hap_dense(lv_r, valid_r, rt[bad], p.inv[bad], p.n_levels)
    return {"H-AP": hap}


def h_recall(p: LevelPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """H-R@k (Eq. 4.4): the relevance retrieved in the first k over the total relevance."""
    rt, _, total = _relevance(p)
    hlv, _, hpos, hval = p.high
    out = {}
    for k in ks:
        top = (p.valid & (p.pos <= k)).sum(1).to(_F64)
        extra = row_sums((rt.gather(1, hlv) - rt[:, 1:2]) * (hval & (hpos <= k)))
        out[f"H-R@{k}"] = (rt[:, 1] * top + extra) / total.clamp(min=torch.finfo(_F64).tiny)
    return out


def ap_per_level(p: LevelPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """AP^(l) (Eq. 4.8) for l = 1..L, reported as ``"AP@level{l}"`` (l = L the fine AP)."""
    hlv, _, _, _ = p.high
    out = {"AP@level1": p.s_all / p.n_pos.clamp(min=1)}
    for lev in range(2, p.n_levels + 1):
        m = hlv >= lev
        cnt = torch.cumsum(m.long(), 1).to(_F64)
        out[f"AP@level{lev}"] = row_sums(cnt * m * p.hinv) / m.sum(1).clamp(min=1)
    return out


def ndcg_h(p: LevelPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Hierarchical NDCG (thesis §4.2.4): gains ``2^l - 1``, the ideal list from the level
    counts."""
    dev = p.lv.device
    hlv, _, hpos, hval = p.high
    gains = 2.0 ** torch.arange(p.n_levels + 1, dtype=_F64, device=dev) - 1.0
    disc_t = torch.cat([torch.zeros(1, dtype=_F64, device=dev), 1.0 / torch.log2(1.0 + p.grid[1:])])
    zero = torch.zeros(1, dtype=_F64, device=dev)
    if compiled(p.lv):
        disc_sum = torch.from_numpy(np.empty(p.lv.shape[0]))
        table_sum(as_np(p.ge), as_np(p.valid), as_np(disc_t), disc_sum.numpy())
    else:
        disc_sum = row_sums(torch.where(p.valid, disc_t[p.pos], zero))
    hdisc = torch.where(hval, disc_t[hpos], zero)
    dcg = gains[1] * disc_sum + row_sums((gains[hlv] - gains[1]) * hdisc)
    prefix = torch.cumsum(disc_t, 0)
    ends = p.counts[:, 1:].flip(1).cumsum(1)
    begins = ends - p.counts[:, 1:].flip(1)
    idcg = ((prefix[ends] - prefix[begins]) * gains[1:].flip(0)[None, :]).sum(1)
    return {"NDCG-h": dcg / idcg.clamp(min=torch.finfo(_F64).tiny)}


def asi(p: LevelPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """ASI (Eq. 4.16): the mean over n = 1..|Omega+| of the level-set intersection of the top n."""
    c, width = p.lv.shape
    dev = p.lv.device
    hlv, _, hpos, hval = p.high
    ranks = torch.arange(1, width + 1, device=dev)
    inv_t = p.inv_table
    npos_c = p.n_pos[:, None]
    in_range = ranks[None, :] <= npos_c if p.n_levels > 2 or not compiled(p.lv) else None
    n_high = p.counts[:, 2:].sum(1, keepdim=True)
    if compiled(p.lv):  # the same sum, one pass per row
        out = torch.from_numpy(np.empty(c))
        asi_bulk(
            as_np(p.lv),
            as_np(p.ge),
            as_np(p.valid),
            as_np(p.n_pos),
            as_np(n_high[:, 0]),
            as_np(p.counts[:, 1]),
            as_np(inv_t),
            out.numpy(),
        )
    else:
        hit = torch.zeros(c, width + 2, dtype=torch.long, device=dev)
        hit.scatter_add_(1, p.pos.clamp(max=width + 1), p.valid.long())
        a_all = hit.cumsum(1)[:, 1 : width + 1]  # positives with position <= n
        hhit = torch.zeros(c, width + 2, dtype=torch.long, device=dev)
        hhit.scatter_add_(1, hpos.clamp(max=width + 1), hval.long())
        a_hi = hhit.cumsum(1)[:, 1 : width + 1]
        b_1 = (ranks[None, :] - n_high).clamp(min=0).minimum(p.counts[:, 1:2])
        term = torch.minimum(a_all - a_hi, b_1).to(_F64) * inv_t[ranks][None, :] * in_range
        out = row_sums(term)
    harm = torch.cumsum(inv_t, 0)  # H(m) = sum_{n <= m} 1/n (sequential)
    # top level: min(a_L(n), b_L(n)) = a_L(n)
    top_items = hval & (hlv == p.n_levels) & (hpos <= npos_c)
    out = out + row_sums(
        torch.where(
            top_items,
            harm[p.n_pos][:, None] - harm[hpos - 1],
            torch.zeros(1, dtype=_F64, device=dev),
        )
    )
    above = p.counts[:, p.n_levels].clone()
    for lev in range(p.n_levels - 1, 1, -1):  # intermediate levels (L >= 3): dense
        lh = torch.zeros(c, width + 2, dtype=torch.long, device=dev)
        lh.scatter_add_(1, hpos.clamp(max=width + 1), (hval & (hlv == lev)).long())
        a_l = lh.cumsum(1)[:, 1 : width + 1]
        b_l = (ranks[None, :] - above[:, None]).clamp(min=0).minimum(p.counts[:, lev : lev + 1])
        out = out + row_sums(torch.minimum(a_l, b_l).to(_F64) * inv_t[ranks][None, :] * in_range)
        above += p.counts[:, lev]
    return {"ASI": out / p.n_pos.clamp(min=1)}


def mistakes(p: LevelPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Top-k mistakes (Eq. 2.10): per query the sum ``"MS_sum@k"`` of the LCA heights ``L - level``
    of the mistakes among the first k (negatives: height L) and their number ``"MS_n@k"``."""
    hlv, _, hpos, hval = p.high
    out = {}
    for k in ks:
        top = (p.valid & (p.pos <= k)).sum(1)
        top_hi = hval & (hpos <= k)
        height_hi = row_sums((p.n_levels - hlv).to(_F64) * (top_hi & (hlv < p.n_levels)))
        n_top_l1 = top - top_hi.sum(1)
        n_neg_top = k - top
        if p.n_levels == 1:
            mist = n_neg_top
            height = p.n_levels * n_neg_top.to(_F64)
        else:
            mist = n_top_l1 + (top_hi & (hlv < p.n_levels)).sum(1) + n_neg_top
            height = (
                (p.n_levels - 1) * n_top_l1.to(_F64) + height_hi + p.n_levels * n_neg_top.to(_F64)
            )
        out[f"MS_sum@{k}"] = height
        out[f"MS_n@{k}"] = mist.to(_F64)
    return out


def reduce_mistakes(
    per_query: dict[str, torch.Tensor], keep: torch.Tensor, ks: tuple[int, ...]
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """``MS@k`` pools the mistakes of all queries (Eq. 2.10): ``sum heights / sum mistakes``; also
    ``"mistakes@k"``, the mean number of mistakes in the first k. Per query: the mean height (0
    without mistakes) and the number of mistakes."""
    means: dict[str, float] = {}
    per_q: dict[str, torch.Tensor] = {}
    for k in ks:
        total, count = per_query[f"MS_sum@{k}"], per_query[f"MS_n@{k}"]
        sev, cnt = total[keep], count[keep]
        means[f"MS@{k}"] = float(sev.sum() / cnt.sum()) if float(cnt.sum()) > 0 else 0.0
        means[f"mistakes@{k}"] = float(cnt.mean())
        per_q[f"MS@{k}"] = total / count.clamp(min=1)
        per_q[f"mistakes@{k}"] = count
    return means, per_q
