"""Exact hierarchical retrieval metrics (Ramzi thesis ch. 4; SupRank §V and App. B).

Per-query functions on explicit ``(Q, N)`` score matrices, like :mod:`rank_lab.metrics.retrieval`,
returning ``(Q,)`` tensors. Relevance is either a graded ``(Q, N)`` relevance (H-AP, H-R@k, H-P@k:
build it with :mod:`rank_lab.metrics.hierarchy.relevance`) or the ``(Q, N)`` shared levels in
``[0, L]`` (per-level AP, NDCG, ASI, mistake severity).

**Ties.** The worst-case rule of every metric of the package (``docs/decisions.md``): among tied
scores, less relevant items are ranked first. H-AP, AP^(l), NDCG and ASI are all monotone under
moving a more relevant item ahead of a less relevant one (for H-AP: swapping adjacent items
a < b changes the sum by ``(C_b + r_b - C_a - r_a)(1/p - 1/(p+1)) >= 0``), so this ordering is the
minimum over all orderings of the ties; the tests check it by brute force.

Definitions (positions ``j, k`` are 1-based in the worst-case order, ``r_j`` the relevance of the
item at position j, ``Omega^+`` the items with ``r > 0``):

* H-rank (Eq. 4.2): ``H-rank(k) = sum_{j <= k} min(r_j, r_k)`` (the ``j = k`` term is ``r_k``).
* H-AP (Eq. 4.3): ``(1 / sum_k r_k) sum_{k in Omega^+} H-rank(k) / k``.
* H-R@k, H-P@k (Eqs. 4.4-4.5): ``sum_{j<=k} r_j / sum r`` and ``H-rank(k) / (k r_k)`` (0 where
  ``r_k = 0``: its recall increment is 0, so the area (Eq. 4.6) is unaffected).
* AP^(l) (Eq. 4.8; Eq. 4.17 misses the normaliser): binary AP with positives ``level >= l``.
* sum w AP (Property 1): ``sum_l w_l AP^(l)``.
* NDCG (Eq. 4.12): gains ``2^l - 1``, full list.
* ASI (Eq. 4.16; Fagin et al.): ``(1/N+) sum_{n<=N+} |a_1..a_n cap b_1..b_n| / n`` with ``b`` the
  ideal list; items are compared through their level (multiset intersection of levels, as the
  official HAPPIER code), ``N+`` the number of items with level >= 1.
* Mistake severity (Eq. 2.10 adapted to retrieval): over the top-k items that are mistakes
  (level < L), the height of the lowest common ancestor with the query, ``L - level``
  (1 = a sibling fine class, L = nothing shared).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rank_lab._validation import check_positive_int, check_scores_targets
from rank_lab.metrics.hierarchy.relevance import check_levels, level_weights
from rank_lab.metrics.retrieval import average_precision, ndcg, worst_case_order
from rank_lab.vocabulary import NoPositive

__all__ = [
    "h_rank",
    "h_average_precision",
    "h_ap_from_pr_curve",
    "hierarchical_pr_curve",
    "h_recall_at_k",
    "h_precision_at_k",
    "ap_per_level",
    "weighted_sum_ap",
    "hierarchical_ndcg",
    "average_set_intersection",
    "mistake_levels",
    "mistake_severity",
]


def _no_positive(
    values: torch.Tensor, n_pos: torch.Tensor, no_positive: NoPositive, metric: str, name: str
) -> torch.Tensor:
    """Queries without a relevant item: raise (``"raise"``) or score them 0 (``"zero"``)."""
    if no_positive not in ("raise", "zero"):
        raise ValueError(f"no_positive must be 'raise' or 'zero', got {no_positive!r}")
    empty = n_pos == 0
    if bool(empty.any()):
        if no_positive == "raise":
            first = int(torch.nonzero(empty).flatten()[0])
            raise ValueError(
                f"{metric}: {int(empty.sum())} query(ies) have no relevant item in {name} (first: "
                f"row {first}); pass no_positive='zero' to score them 0"
            )
        values = torch.where(empty, torch.zeros_like(values), values)
    return values


def _graded_sorted(
    scores: object, relevance: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(scores, order, r_sorted float64)`` with the worst-case order by relevance."""
    scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    rel = relevance.to(torch.float64)
    order = worst_case_order(scores, rel)
    return scores, order, rel.gather(1, order)


def _prefix_min_sums(r: torch.Tensor) -> torch.Tensor:
    """``out[q, k] = sum_{j <= k} min(r[q, j], r[q, k])`` for rows of non-negative values,
    ``(Q, N)``.

    Uses ``min(a, b) = sum_t (v_t - v_{t-1}) 1[a >= v_t] 1[b >= v_t]`` over the distinct values
    ``v_t`` of each row: ``O(Q N D)`` time for D distinct values per row, ``O(Q N)`` memory.
    """
    vals = torch.sort(r, dim=1).values
    new = torch.ones_like(vals, dtype=torch.bool)
    new[:, 1:] = vals[:, 1:] != vals[:, :-1]
    ids = new.long().cumsum(1) - 1
    d = int(ids.max()) + 1 if ids.numel() else 0
    table = torch.full((r.shape[0], d), float("inf"), dtype=r.dtype, device=r.device)
    table.scatter_(1, ids, vals)
    out = torch.zeros_like(r)
    prev = torch.zeros(r.shape[0], dtype=r.dtype, device=r.device)
    for t in range(d):
        v = table[:, t]
        present = torch.isfinite(v)
        step = torch.where(present, v - prev, torch.zeros_like(v))
        above = r >= torch.where(present, v, torch.full_like(v, float("inf")))[:, None]
        out += step[:, None] * above * above.cumsum(1)
        prev = torch.where(present, v, prev)
    return out


def h_rank(scores: torch.Tensor, relevance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hierarchical rank of every item (Eq. 4.2 of the Ramzi thesis; SupRank Eq. 18), worst-case
    ties.

    Args:
        scores: ``(Q, N)``.
        relevance: ``(Q, N)`` non-negative graded relevance (e.g.
            :func:`~rank_lab.metrics.hierarchy.relevance.hap_relevance`).

    Returns:
        ``(h_rank, rank)``, each ``(Q, N)`` float64 in the original column order: the H-rank
        ``sum_{j ranked <= k} min(r_j, r_k)`` and the 1-based position ``rank(k)``. Items with
        ``r = 0`` have H-rank 0.
    """
    scores, order, r = _graded_sorted(scores, relevance)
    hr_sorted = _prefix_min_sums(r) * (r > 0)
    pos = torch.arange(1, r.shape[1] + 1, dtype=torch.float64, device=r.device).expand_as(r)
    hr = torch.zeros_like(r).scatter(1, order, hr_sorted)
    rank = torch.zeros_like(r).scatter(1, order, pos)
    return hr, rank


def h_average_precision(
    scores: torch.Tensor, relevance: torch.Tensor, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """H-AP per query (Eq. 4.3 of the Ramzi thesis; SupRank Eq. 19), worst-case ties.

    ``H-AP = (1 / sum_k r_k) sum_{k in Omega^+} H-rank(k) / rank(k)``. Equals AP for binary
    relevance, 1 for a ranking by decreasing relevance, and is invariant to a global rescaling
    of ``relevance``.

    Args:
        scores: ``(Q, N)`` (a ``(N,)`` vector is one query).
        relevance: ``(Q, N)`` non-negative relevance.
        no_positive: ``"raise"`` or ``"zero"`` for queries whose relevance is all 0.

    Returns:
        ``(Q,)`` float64 in ``[0, 1]``.

    Example (the Lada example of Figs. 4.3-4.5 / SupRank Fig. 14, toy relevances):
        >>> s = torch.tensor([[5.0, 4, 3, 2, 1]])
        >>> round(float(h_average_precision(s, torch.tensor([[2 / 3, 1, 0, 1 / 3, 1]]))), 4)
        0.7833
    """
    _, _, r = _graded_sorted(scores, relevance)
    pos = torch.arange(1, r.shape[1] + 1, dtype=torch.float64, device=r.device)
    total = r.sum(1)
    val = (_prefix_min_sums(r) * (r > 0) / pos).sum(1) / torch.where(
        total > 0, total, torch.ones_like(total)
    )
    return _no_positive(val, (r > 0).sum(1), no_positive, "h_average_precision", "relevance")


def hierarchical_pr_curve(
    scores: torch.Tensor, relevance: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hierarchical precision and recall after each position (Eqs. 4.4-4.5 of the Ramzi thesis).

    Returns:
        ``(h_precision (Q, N), h_recall (Q, N))`` float64; column k-1 is the value at position k.
        ``H-P@k`` is set to 0 where the item at position k has relevance 0 (0/0 in Eq. 4.5).
    """
    _, _, r = _graded_sorted(scores, relevance)
    total = r.sum(1, keepdim=True)
    _no_positive(total[:, 0], (r > 0).sum(1), "raise", "hierarchical_pr_curve", "relevance")
    pos = torch.arange(1, r.shape[1] + 1, dtype=torch.float64, device=r.device)
    hp = torch.where(
        r > 0,
        _prefix_min_sums(r) / (pos * torch.where(r > 0, r, torch.ones_like(r))),
        torch.zeros_like(r),
    )
    return hp, r.cumsum(1) / total


def h_ap_from_pr_curve(scores: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """H-AP as the area under the hierarchical PR curve (Eq. 4.6):
    ``sum_k (H-R@k - H-R@(k-1)) H-P@k``."""
    hp, hr = hierarchical_pr_curve(scores, relevance)
    inc = torch.diff(hr, dim=1, prepend=torch.zeros_like(hr[:, :1]))
    return (inc * hp).sum(1)


def h_recall_at_k(scores: torch.Tensor, relevance: torch.Tensor, k: int) -> torch.Tensor:
    """Hierarchical recall H-R@k (Eq. 4.4): relevance mass in the top k over the total, ``(Q,)``."""
    _, hr = hierarchical_pr_curve(scores, relevance)
    k = check_positive_int(k, "k")
    if k > hr.shape[1]:
        raise ValueError(f"k={k} is larger than the retrieval set (N={hr.shape[1]})")
    return hr[:, k - 1]


def h_precision_at_k(scores: torch.Tensor, relevance: torch.Tensor, k: int) -> torch.Tensor:
    """Hierarchical precision H-P@k (Eq. 4.5) at position k, ``(Q,)`` (0 if that item has r = 0)."""
    hp, _ = hierarchical_pr_curve(scores, relevance)
    k = check_positive_int(k, "k")
    if k > hp.shape[1]:
        raise ValueError(f"k={k} is larger than the retrieval set (N={hp.shape[1]})")
    return hp[:, k - 1]


def _levels_for(scores: object, levels: object, n_levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    scores, lv = check_scores_targets(scores, levels, "scores", "levels")
    lv, _ = check_levels(lv, n_levels)
    return scores, lv


def ap_per_level(
    scores: torch.Tensor, levels: torch.Tensor, n_levels: int, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """``AP^(l)`` for l = 1..L (Eq. 4.8 of the Ramzi thesis; SupRank Eq. 34), ``(Q, L)`` float64.

    Column ``l - 1`` is the binary AP whose positives are the items of level ``>= l``: the last
    column (l = L) is the fine-grained AP, the first the coarsest ("Coarse AP", Tab. 4.3).
    """
    scores, lv = _levels_for(scores, levels, n_levels)
    cols = [
        average_precision(scores, lv >= lev, no_positive=no_positive).to(torch.float64)
        for lev in range(1, n_levels + 1)
    ]
    return torch.stack(cols, dim=1)


def weighted_sum_ap(
    scores: torch.Tensor,
    levels: torch.Tensor,
    n_levels: int,
    weights: Sequence[float] | torch.Tensor,
    *,
    no_positive: NoPositive = "raise",
) -> torch.Tensor:
    """``sum w AP = sum_l w_l AP^(l)`` (Property 1 of the Ramzi thesis, Eq. 4.9), ``(Q,)``."""
    w = level_weights(weights, n_levels)
    apl = ap_per_level(scores, levels, n_levels, no_positive=no_positive)
    return apl @ w.to(apl.device)


def hierarchical_ndcg(
    scores: torch.Tensor,
    levels: torch.Tensor,
    k: int | None = None,
    *,
    no_positive: NoPositive = "raise",
) -> torch.Tensor:
    """NDCG with hierarchical gains ``2^l - 1`` (Eq. 4.12 of the Ramzi thesis), ``(Q,)`` float64.

    Args:
        scores: ``(Q, N)`` (a ``(N,)`` vector is one query).
        levels: ``(Q, N)`` integer shared levels ``>= 0`` (bool: binary relevance).
        k: cut-off (``None``: the full list).
        no_positive: for queries with no item of level ``>= 1``.

    Raises:
        TypeError: non-integer ``levels``. ValueError: negative ``levels``, or levels so high that
            the gains ``2^l - 1`` summed over the row overflow float32 (both naming ``levels``).
    """
    scores, lv = check_scores_targets(scores, levels, "scores", "levels")
    if lv.is_floating_point():
        raise TypeError(f"levels must hold integers (shared levels), got dtype {lv.dtype}")
    lv = lv.long()
    low, high = int(lv.min()), int(lv.max())
    if low < 0:
        raise ValueError(f"levels must be >= 0, got {low}")
    limit = 126 - lv.shape[1].bit_length()  # N gains of 2^l summed stay below float32's 2^128
    if high > limit:
        raise ValueError(
            f"levels reach {high}: the gains 2^l - 1 of {lv.shape[1]} items overflow float32 "
            f"(levels must stay <= {limit})"
        )
    val = ndcg(scores, (2.0 ** lv.to(torch.float64) - 1.0), k, no_positive="zero").to(torch.float64)
    return _no_positive(val, (lv >= 1).sum(1), no_positive, "hierarchical_ndcg", "levels")


def _level_sorted(scores: torch.Tensor, lv: torch.Tensor) -> torch.Tensor:
    return lv.gather(1, worst_case_order(scores, lv))


def average_set_intersection(
    scores: torch.Tensor, levels: torch.Tensor, n_levels: int, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """Average set intersection (Eq. 4.16 of the Ramzi thesis; SupRank App. C-A1), ``(Q,)`` float64.

    ``ASI = (1/N+) sum_{n=1}^{N+} SI(n)``, ``SI(n) = sum_{l>=1} min(#a_l(n), #b_l(n)) / n``, with
    ``#a_l(n)`` the number of level-l items among the first n retrieved and ``#b_l(n)`` that in
    the ideal list (decreasing level). 1 iff the first ``N+`` items are in decreasing level order.
    """
    scores, lv = _levels_for(scores, levels, n_levels)
    a = _level_sorted(scores, lv)
    b = torch.sort(lv, dim=1, descending=True).values
    n_pos = (lv >= 1).sum(1)
    inter = torch.zeros_like(a, dtype=torch.float64)
    for lev in range(1, n_levels + 1):
        inter += torch.minimum((a == lev).cumsum(1), (b == lev).cumsum(1)).to(torch.float64)
    n = torch.arange(1, a.shape[1] + 1, device=a.device)
    si = inter / n
    val = (si * (n[None, :] <= n_pos[:, None])).sum(1) / n_pos.clamp(min=1)
    return _no_positive(val, n_pos, no_positive, "average_set_intersection", "levels")


def mistake_levels(
    scores: torch.Tensor, levels: torch.Tensor, n_levels: int, k: int
) -> torch.Tensor:
    """Shared levels of the top-k retrieved items, counted: ``(Q, L + 1)`` long (worst-case ties).

    Column l counts the top-k items of level l; columns ``0..L-1`` are the mistakes, column 0 the
    most severe ones (nothing in common with the query).
    """
    scores, lv = _levels_for(scores, levels, n_levels)
    k = check_positive_int(k, "k")
    if k > lv.shape[1]:
        raise ValueError(f"k={k} is larger than the retrieval set (N={lv.shape[1]})")
    top = _level_sorted(scores, lv)[:, :k]
    return torch.stack([(top == lev).sum(1) for lev in range(n_levels + 1)], dim=1)


def mistake_severity(
    scores: torch.Tensor, levels: torch.Tensor, n_levels: int, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Severity of the top-k mistakes: height of the lowest common ancestor (Eq. 2.10 for
    retrieval).

    A mistake is a top-k item of level ``l < L``; its severity is ``L - l`` (1: a sibling fine
    class; L: nothing shared). The expected severity over mistakes (Eq. 2.10) pooled over queries is
    ``severity_sum.sum() / n_mistakes.sum()`` (what the engine reports as ``"MS@k"``).

    Returns:
        ``(severity_sum (Q,) float64, n_mistakes (Q,) long)``.
    """
    counts = mistake_levels(scores, levels, n_levels, k)
    # L - l, l = 0..L-1
    heights = torch.arange(n_levels, 0, -1, dtype=torch.float64, device=counts.device)
    return (counts[:, :n_levels].to(torch.float64) * heights).sum(1), counts[:, :n_levels].sum(1)
