"""Exact per-query retrieval metrics from a score matrix.

Every function takes ``scores`` of shape ``(Q, N)`` (higher = more similar; Q queries, N
retrieval-set items) and a relevance matrix of the same shape, and returns a ``(Q,)`` tensor, one
value per query. They are exact (no surrogate) and carry no gradient.

**Ties.** One rule everywhere (``docs/decisions.md``): the *worst case*. Among items with equal
scores, less relevant items are ranked first. Every metric here is monotone under swapping a more
relevant item ahead of a less relevant one, so this ordering gives the minimum of the metric over
all orderings of the ties. It matches the convention ``H(0) = 1`` of the rank definition
(Eq. 2.5 of the Ramzi thesis: a tied competitor counts as ranked before), and it gives a
degenerate constant embedding the worst score rather than a lucky one.

**Queries with no relevant item.** AP, mAP@R, TR@k, AP@k, MRR and NDCG are undefined for such a
query. ``no_positive="raise"`` (default) raises a ``ValueError``; ``"zero"`` returns 0 for them.

Definitions (ranks are 1-based positions in the worst-case order):

* AP: Eq. 2.4 / 3.9 of the Ramzi thesis, ``(1/|P|) sum_{k in P} rank+(k) / rank(k)``, the area
  under the precision-recall curve.
* R@k (recall rate, the "Recall@K" of the metric-learning tables): Eq. 2.3 / 3.13 of the Ramzi
  thesis, 1 if at least one relevant item is among the first k.
* TR@k (true recall): Eq. 3.14 of the Ramzi thesis, ``#relevant in top k / min(k, |P|)``.
* P@k: Eq. 2.2 of the Ramzi thesis, ``#relevant in top k / k``.
* mAP@R: Eq. 3.20 of the Ramzi thesis (Musgrave et al. 2020), ``(1/R) sum_{j<=R} P(j) rel(j)``
  with ``R = |P|``.
* AP@k: mAP@100 of Weyand et al. (GLDv2), ``(1/min(k, |P|)) sum_{j<=k} P(j) rel(j)``.
* MRR: the reciprocal rank of the first relevant item.
* NDCG: Eq. 2.11 / 4.12 of the Ramzi thesis, ``DCG/IDCG`` with ``DCG = sum_j g_j / log2(1 + j)``
  over graded gains ``g`` (the thesis uses ``g = 2^l - 1`` for hierarchy level l).

**Positions by counting.** :func:`positive_positions` gives the worst-case position of every
relevant item of a row without sorting it: ``i + #{irrelevant items with score >= its score}``
for the i-th best relevant item (the tie rule above).
"""

from __future__ import annotations

import torch

from rank_lab._validation import as_tensor, check_finite, check_positive_int, check_scores_targets
from rank_lab.vocabulary import NoPositive

__all__ = [
    "worst_case_order",
    "sorted_relevance",
    "average_precision",
    "ap_at_k",
    "precision_at_k",
    "recall_at_k",
    "true_recall_at_k",
    "map_at_r",
    "reciprocal_rank",
    "ndcg",
    "dcg",
    "precision_recall_curve",
    "positive_positions",
]


def worst_case_order(scores: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """Indices that sort each row by decreasing score, ties broken against relevance.

    Args:
        scores: ``(Q, N)`` scores.
        relevance: ``(Q, N)`` relevance (bool or numeric); among tied scores, items with lower
            relevance come first (the worst case).

    Returns:
        ``(Q, N)`` long tensor of column indices.
    """
    scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    rel = relevance.to(torch.float64) if relevance.dtype == torch.bool else relevance
    by_rel = torch.sort(rel, dim=1, stable=True).indices  # ascending relevance
    s = scores.gather(1, by_rel)
    by_score = torch.sort(s, dim=1, descending=True, stable=True).indices
    return by_rel.gather(1, by_score)


def sorted_relevance(scores: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """Relevance ``(Q, N)`` re-ordered by :func:`worst_case_order` (row j = j-th retrieved)."""
    order = worst_case_order(scores, relevance)
    return relevance.to(scores.device).gather(1, order)


def _binary_sorted(scores: object, targets: object) -> tuple[torch.Tensor, torch.Tensor]:
    scores, targets = check_scores_targets(scores, targets)
    if targets.dtype != torch.bool:
        if targets.is_floating_point() and not bool(((targets == 0) | (targets == 1)).all()):
            raise ValueError(
                "targets must be binary (0/1 or bool) for this metric; use ndcg for graded gains"
            )
        targets = targets != 0
    rel = sorted_relevance(scores, targets).to(
        scores.dtype if scores.dtype == torch.float64 else torch.float32
    )
    n_pos = rel.sum(1)
    return rel, n_pos


def _handle_empty(
    values: torch.Tensor,
    n_pos: torch.Tensor,
    no_positive: NoPositive,
    metric: str,
    name: str = "targets",
) -> torch.Tensor:
    if no_positive not in ("raise", "zero"):
        raise ValueError(f"no_positive must be 'raise' or 'zero', got {no_positive!r}")
    empty = n_pos == 0
    if bool(empty.any()):
        if no_positive == "raise":
            idx = torch.nonzero(empty).flatten()
            raise ValueError(
                f"{metric}: {int(empty.sum())} query(ies) have no relevant item in {name} (first: "
                f"row {int(idx[0])}); pass no_positive='zero' to score them 0"
            )
        values = torch.where(empty, torch.zeros_like(values), values)
    return values


def _precisions(rel: torch.Tensor) -> torch.Tensor:
    """``P(j) * rel(j)`` for every position j (1-based), shape ``(Q, N)``."""
    positions = torch.arange(1, rel.shape[1] + 1, device=rel.device, dtype=rel.dtype)
    return rel.cumsum(1) / positions * rel


def _check_k(k: object, n: int, name: str = "k") -> int:
    k = check_positive_int(k, name)
    if k > n:
        raise ValueError(f"{name}={k} is larger than the retrieval set (N={n})")
    return k


def average_precision(
    scores: torch.Tensor, targets: torch.Tensor, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """Average precision per query (Eq. 2.4 / 3.9 of the Ramzi thesis), worst-case ties.

    Args:
        scores: ``(Q, N)`` (a ``(N,)`` vector is one query).
        targets: ``(Q, N)`` binary relevance.
        no_positive: ``"raise"`` or ``"zero"`` for queries without a relevant item.

    Returns:
        ``(Q,)`` AP in ``[0, 1]``.

    Example:
        >>> average_precision(torch.tensor([[0.9, 0.8, 0.7, 0.6]]), torch.tensor([[1, 0, 1, 0]]))
        tensor([0.8333])
    """
    rel, n_pos = _binary_sorted(scores, targets)
    ap = _precisions(rel).sum(1) / n_pos.clamp(min=1)
    return _handle_empty(ap, n_pos, no_positive, "average_precision")


def ap_at_k(
    scores: torch.Tensor, targets: torch.Tensor, k: int, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """AP truncated at k with the ``min(k, |P|)`` normaliser (mAP@k of Weyand et al., GLDv2).

    Returns:
        ``(Q,)`` values in ``[0, 1]``; equals AP when ``k = N``.
    """
    rel, n_pos = _binary_sorted(scores, targets)
    k = _check_k(k, rel.shape[1])
    val = _precisions(rel)[:, :k].sum(1) / n_pos.clamp(min=1).clamp(max=k)
    return _handle_empty(val, n_pos, no_positive, "ap_at_k")


def precision_at_k(scores: torch.Tensor, targets: torch.Tensor, k: int) -> torch.Tensor:
    """Precision at k (Eq. 2.2 of the Ramzi thesis): ``#relevant in top k / k``. Shape ``(Q,)``."""
    rel, _ = _binary_sorted(scores, targets)
    k = _check_k(k, rel.shape[1])
    return rel[:, :k].sum(1) / k


def recall_at_k(
    scores: torch.Tensor, targets: torch.Tensor, k: int, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """Recall rate R@k (Eq. 2.3 / 3.13 of the Ramzi thesis): 1 if a relevant item is in the top k.

    This is the "Recall@K" of the metric-learning tables, not the true recall (see
    :func:`true_recall_at_k`). Shape ``(Q,)`` with values in ``{0, 1}``.
    """
    rel, n_pos = _binary_sorted(scores, targets)
    k = _check_k(k, rel.shape[1])
    val = (rel[:, :k].sum(1) > 0).to(rel.dtype)
    return _handle_empty(val, n_pos, no_positive, "recall_at_k")


def true_recall_at_k(
    scores: torch.Tensor, targets: torch.Tensor, k: int, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """True recall TR@k (Eq. 3.14 of the Ramzi thesis): ``#relevant in top k / min(k, |P|)``."""
    rel, n_pos = _binary_sorted(scores, targets)
    k = _check_k(k, rel.shape[1])
    val = rel[:, :k].sum(1) / n_pos.clamp(min=1).clamp(max=k)
    return _handle_empty(val, n_pos, no_positive, "true_recall_at_k")


def map_at_r(
    scores: torch.Tensor, targets: torch.Tensor, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """mAP@R per query (Eq. 3.20 of the Ramzi thesis; Musgrave et al. 2020).

    ``(1/R) sum_{j=1}^{R} P(j) rel(j)`` with R the number of relevant items of the query. Always
    ``<= AP``, and 1 iff the ranking is perfect. Shape ``(Q,)``.
    """
    rel, n_pos = _binary_sorted(scores, targets)
    positions = torch.arange(1, rel.shape[1] + 1, device=rel.device)
    within_r = positions[None, :] <= n_pos[:, None]
    val = (_precisions(rel) * within_r).sum(1) / n_pos.clamp(min=1)
    return _handle_empty(val, n_pos, no_positive, "map_at_r")


def reciprocal_rank(
    scores: torch.Tensor, targets: torch.Tensor, *, no_positive: NoPositive = "raise"
) -> torch.Tensor:
    """Reciprocal rank of the first relevant item (its mean over queries is the MRR). Shape
    ``(Q,)``."""
    rel, n_pos = _binary_sorted(scores, targets)
    first = torch.argmax(rel, dim=1).to(rel.dtype) + 1  # first position with rel = 1
    return _handle_empty(1.0 / first, n_pos, no_positive, "reciprocal_rank")


def _discounts(n: int, like: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(1, n + 1, device=like.device, dtype=like.dtype)
    return 1.0 / torch.log2(positions + 1.0)


def dcg(scores: torch.Tensor, gains: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """Discounted cumulative gain ``sum_{j<=k} g_j / log2(1 + j)`` in the worst-case order.
    ``(Q,)``."""
    scores, gains = check_scores_targets(scores, gains, "scores", "gains")
    g = gains.to(scores.dtype if scores.dtype == torch.float64 else torch.float32)
    n = g.shape[1]
    k = n if k is None else _check_k(k, n)
    g_sorted = g.gather(1, worst_case_order(scores, g))[:, :k]
    return (g_sorted * _discounts(k, g_sorted)).sum(1)


def ndcg(
    scores: torch.Tensor,
    gains: torch.Tensor,
    k: int | None = None,
    *,
    no_positive: NoPositive = "raise",
) -> torch.Tensor:
    """Normalised DCG (Eq. 2.11 / 4.12 of the Ramzi thesis; Jarvelin & Kekalainen 2002).

    Args:
        scores: ``(Q, N)``.
        gains: ``(Q, N)`` non-negative graded gains (binary relevance is the special case
            ``{0, 1}``; the thesis' hierarchical gain is ``2^l - 1`` for shared level l).
        k: cut-off (``None``: the full list, as in the official code).
        no_positive: for queries whose gains are all zero (IDCG = 0).

    Returns:
        ``(Q,)`` NDCG in ``[0, 1]``.
    """
    scores, gains = check_scores_targets(scores, gains, "scores", "gains")
    g = gains.to(scores.dtype if scores.dtype == torch.float64 else torch.float32)
    n = g.shape[1]
    k = n if k is None else _check_k(k, n)
    disc = _discounts(k, g)
    ideal = torch.sort(g, dim=1, descending=True).values[:, :k]
    idcg = (ideal * disc).sum(1)
    val = dcg(scores, g, k) / torch.where(idcg > 0, idcg, torch.ones_like(idcg))
    return _handle_empty(val, (g > 0).sum(1), no_positive, "ndcg", "gains")


def precision_recall_curve(
    scores: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Precision and recall after each retrieved item, in the worst-case order (Eqs. 2.1-2.2 of
    the Ramzi thesis).

    AP is the area under this curve taken as a step function: ``AP = sum_j (R(j) - R(j-1)) P(j)``
    (Eq. 2.4), which is what :func:`average_precision` returns.

    Args:
        scores: ``(Q, N)``.
        targets: ``(Q, N)`` binary relevance; every query needs a relevant item.

    Returns:
        ``(precision (Q, N), recall (Q, N))``; column j is the value after the first j+1 items.
    """
    rel, n_pos = _binary_sorted(scores, targets)
    _handle_empty(n_pos, n_pos, "raise", "precision_recall_curve")
    hits = rel.cumsum(1)
    positions = torch.arange(1, rel.shape[1] + 1, device=rel.device, dtype=rel.dtype)
    return hits / positions, hits / n_pos[:, None]


def positive_positions(
    scores: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    max_pos: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Worst-case 1-based positions of the relevant items of each row, by counting.

    Args:
        scores: ``(c, N)``.
        positives: ``(c, N)`` bool, relevant items.
        negatives: ``(c, N)`` bool, irrelevant items (items in neither mask, e.g. the query
            itself, are ignored).
        max_pos: width of the output (default: the largest number of positives in a row).

    Returns:
        ``positions (c, P)`` long, the position of the i-th best relevant item (``i + 1 +
        #{negatives with score >= its score}``), and ``valid (c, P)`` bool (``i < R``).

    Raises:
        ValueError / TypeError: naming the argument (shapes, dtypes, NaN/inf scores).
    """
    scores = as_tensor(scores, "scores").detach()
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"scores must have shape (c, N) with c, N >= 1, got {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be floating, got dtype {scores.dtype}")
    check_finite(scores, "scores")
    for name, m in (("positives", positives), ("negatives", negatives)):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            raise TypeError(
                f"{name} must be a bool tensor, got {getattr(m, 'dtype', type(m).__name__)}"
            )
        if m.shape != scores.shape:
            raise ValueError(
                f"{name} has shape {tuple(m.shape)} but scores has shape {tuple(scores.shape)}"
            )
    n_pos = positives.sum(1)
    p = int(n_pos.max()) if max_pos is None else max_pos
    p = max(p, 1)
    neg_inf = torch.tensor(-torch.inf, dtype=scores.dtype, device=scores.device)
    pos_sorted = torch.topk(torch.where(positives, scores, neg_inf), p, dim=1).values  # (c, p) desc
    u = (-pos_sorted).contiguous()  # ascending; padding (-inf scores) becomes +inf at the end
    v = torch.where(negatives, -scores, -neg_inf).contiguous()  # non-negatives -> +inf
    a = torch.searchsorted(u, v, right=False)  # #thresholds t with -t < -v, i.e. t > v
    hist = torch.zeros(scores.shape[0], p + 1, dtype=torch.long, device=scores.device)
    hist.scatter_add_(1, a, negatives.long())
    n_neg_ge = hist.cumsum(1)[:, :p]  # negatives with score >= t_i
    ranks = torch.arange(1, p + 1, device=scores.device)
    valid = ranks[None, :] <= n_pos[:, None]
    return ranks[None, :] + n_neg_ge, valid
