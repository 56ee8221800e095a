"""Worst-case positions by counting, and the binary metrics read from them.

Shared by the routes of the evaluation engine (:mod:`rank_lab.metrics.engine`) and the
hierarchical route (:mod:`rank_lab.metrics.hierarchical_route`); a module of its own so that
neither imports the other (issue 17).

**Tie rule** (``docs/decisions.md``): among tied scores the less relevant items come first, so
the position of the i-th best relevant item is ``i + #{irrelevant items with score >= its
score}`` (:func:`positive_positions`).

**Reproducible sums.** :func:`metrics_from_positions` sums along a row with :func:`row_sums`, a
sequential (left-to-right) accumulation, so a query's value depends on its own positions only,
never on how many columns of padding its chunk has or which other queries share the chunk:
every route that finds the same positions returns bit-identical per-query values.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rank_lab._validation import as_tensor, check_finite

__all__ = ["positive_positions", "metrics_from_positions", "row_sums"]


def row_sums(x: torch.Tensor) -> torch.Tensor:
    """Sums of the rows of ``x (c, P)`` accumulated left to right (``((x0 + x1) + x2) + ...``).

    A ``cumsum`` along the row (a sequential scan on the CPU): trailing zeros do not change a
    row's value, unlike a vectorised ``sum`` whose association depends on the row length.

    Returns:
        ``(c,)`` in the dtype of ``x``.
    """
    if x.shape[1] == 0:
        return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    return x.cumsum(1)[:, -1]


def positive_positions(
    scores: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor, max_pos: int | None = None
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
    scores = as_tensor(scores, "scores")
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"scores must have shape (c, N) with c, N >= 1, got {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be floating, got dtype {scores.dtype}")
    check_finite(scores, "scores")
    for name, m in (("positives", positives), ("negatives", negatives)):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            raise TypeError(f"{name} must be a bool tensor, got {getattr(m, 'dtype', type(m).__name__)}")
        if m.shape != scores.shape:
            raise ValueError(f"{name} has shape {tuple(m.shape)} but scores has shape {tuple(scores.shape)}")
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


def metrics_from_positions(
    pos: torch.Tensor, valid: torch.Tensor, n_pos: torch.Tensor, ks: Sequence[int], wanted: set[str]
) -> dict[str, torch.Tensor]:
    """Per-query binary metrics from the worst-case positions of the relevant items.

    Args:
        pos: ``(c, P)`` long, 1-based position of the i-th best relevant item (entries past a
            row's known relevant items are ignored through ``valid``).
        valid: ``(c, P)`` bool, which entries of ``pos`` are real.
        n_pos: ``(c,)`` number of relevant items of each query (R).
        ks: cut-offs of the ``@k`` metrics.
        wanted: names among ``"R@k"``, ``"P@k"``, ``"TR@k"``, ``"AP@k"`` (reported as
            ``"mAP@{k}"``), ``"mAP@R"``, ``"mAP"``, ``"MRR"``, ``"NDCG"``.

    Returns:
        ``{name: (c,) float64}``; every sum along a row is sequential (:func:`row_sums`).
    """
    posf = pos.to(torch.float64)
    ranks = torch.arange(1, pos.shape[1] + 1, device=pos.device, dtype=torch.float64)[None, :]
    prec = torch.where(valid, ranks / posf, torch.zeros_like(posf))  # precision at each relevant item
    r = n_pos.to(torch.float64).clamp(min=1)
    out: dict[str, torch.Tensor] = {}
    for k in ks:
        in_k = valid & (pos <= k)
        hits = in_k.sum(1).to(torch.float64)  # integer-valued: exact in any order
        if "R@k" in wanted:
            out[f"R@{k}"] = (hits > 0).to(torch.float64)
        if "P@k" in wanted:
            out[f"P@{k}"] = hits / k
        if "TR@k" in wanted:
            out[f"TR@{k}"] = hits / r.clamp(max=k)
        if "AP@k" in wanted:
            out[f"mAP@{k}"] = row_sums(prec * in_k) / r.clamp(max=k)
    if "mAP@R" in wanted:
        out["mAP@R"] = row_sums(prec * (pos <= n_pos[:, None])) / r
    if "mAP" in wanted:
        out["mAP"] = row_sums(prec) / r
    if "MRR" in wanted:
        out["MRR"] = 1.0 / posf[:, 0]
    if "NDCG" in wanted:
        dcg = row_sums(torch.where(valid, 1.0 / torch.log2(posf + 1.0), torch.zeros_like(posf)))
        idcg = row_sums(torch.where(valid, 1.0 / torch.log2(ranks + 1.0), torch.zeros_like(posf)))
        out["NDCG"] = dcg / idcg.clamp(min=1e-12)
    return out
