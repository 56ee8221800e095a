"""Exact and smooth ranks, the rank+ / rank- split, and a memory-efficient rank kernel.

Notation (Ramzi thesis Sec. 2.1 and 3.2; SupRank Eq. 3): for a query with scores ``s`` over a
retrieval set and an item k,

* ``rank(k) = 1 + sum_{j != k} H(s_j - s_k)``                               (Eq. 2.5)
* ``rank+(k) = 1 + sum_{j != k, rel(j) >= rel(k)} H(s_j - s_k)``            (Eq. 3.3)
* ``rank-(k) = sum_{rel(j) < rel(k)} H(s_j - s_k)``, ``rank = rank+ + rank-``
* smooth ranks replace H by a step of :mod:`rank_lab.ranking.steps` (sigmoid: Eq. 2.8; SupRank
  ``H^-`` in rank-: Eq. 3.5).

In the binary case ``rel in {0, 1}`` and k a positive, ``rel(j) >= rel(k)`` are the positives and
``rel(j) < rel(k)`` the negatives. Ties follow ``H(0) = 1``: a tied competitor is ranked before.

**Which items are in the retrieval set.** Every function takes ``valid (Q, N)`` (bool, None = all):
items with ``valid = False`` are neither ranked nor counted. :func:`retrieval_mask` builds it from
the position of each query inside the retrieval set (``self_index``) with an explicit choice:
``exclude_self=True`` removes the query from its own retrieval set (the papers' ``B \\ q``; thesis
and Patel et al.), ``exclude_self=False`` keeps it, where it is a positive with ``s = 1`` ranked
first (official ROADMAP/HAPPIER code). The losses expose this as ``query_role``
(``"excluded"`` = ``exclude_self=True``, ``"positive"`` = ``exclude_self=False``).

**Memory.** The reference implementations build ``D[q, k, j] = s_j - s_k`` of shape ``(Q, N, N)``.
Rank losses only need the rows k that are positives of q, so :func:`row_step_sums` works on a flat
list of ``R = sum_q |P_q|`` (query, positive) rows, ``O(R * N) = O(Q * P * N)`` values, processed in
chunks of rows with a custom autograd function that recomputes each chunk in the backward pass:
peak memory is ``O(chunk * N)`` whatever Q, P and N. :func:`pairwise_differences` is the direct
``(Q, N, N)`` tensor, kept for reference implementations and tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from rank_lab._validation import check_positive_int, check_scores_targets
from rank_lab.ranking.steps import Heaviside, StepFunction, make_step

__all__ = [
    "Relation",
    "default_max_elements",
    "retrieval_mask",
    "pairwise_differences",
    "exact_rank",
    "rank_split",
    "smooth_rank",
    "positive_rows",
    "row_step_sums",
    "exact_rank_plus_rows",
]

Relation = Literal["all", "geq", "lower"]
_RELATIONS = ("all", "geq", "lower")


def default_max_elements(device: torch.device | str | None = None) -> int:
    """Elements of one ``(chunk, N)`` block: 2**20 on CPU (4 MB per fp32 temporary, cache friendly), 2**25 on CUDA."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    return 2**25 if dev.type == "cuda" else 2**20


def retrieval_mask(
    n_queries: int,
    n_items: int,
    self_index: torch.Tensor | None = None,
    *,
    exclude_self: bool = True,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Which items are in each query's retrieval set, shape ``(Q, N)`` bool.

    Args:
        n_queries: Q.
        n_items: N.
        self_index: ``(Q,)`` long, the column of each query inside the retrieval set, ``-1`` when
            the query is not in it. ``None``: no query is in the retrieval set.
        exclude_self: remove the query's own column (True) or keep it (False, official code).
        device: device of the mask.

    Returns:
        ``(Q, N)`` bool, False where an item is not in the retrieval set.
    """
    n_queries, n_items = check_positive_int(n_queries, "n_queries"), check_positive_int(n_items, "n_items")
    mask = torch.ones(n_queries, n_items, dtype=torch.bool, device=device)
    if self_index is None or not exclude_self:
        return mask
    self_index = torch.as_tensor(self_index, device=mask.device).long()
    if self_index.shape != (n_queries,):
        raise ValueError(f"self_index must have shape ({n_queries},), got {tuple(self_index.shape)}")
    if bool((self_index >= n_items).any()) or bool((self_index < -1).any()):
        raise ValueError(f"self_index must hold -1 or column indices in [0, {n_items})")
    rows = torch.nonzero(self_index >= 0).squeeze(1)
    mask[rows, self_index[rows]] = False
    return mask


def pairwise_differences(scores: torch.Tensor) -> torch.Tensor:
    """Direct difference tensor ``D[q, k, j] = s_qj - s_qk``, shape ``(Q, N, N)`` (thesis Sec. 2.1).

    Row k is the item being ranked, column j the competitor. ``O(Q N^2)`` memory: reference only.
    """
    scores = _check_scores(scores)
    return scores.unsqueeze(1) - scores.unsqueeze(2)


def _check_scores(scores: object, name: str = "scores") -> torch.Tensor:
    from rank_lab._validation import as_tensor, check_finite

    scores = as_tensor(scores, name)
    if scores.ndim != 2:
        raise ValueError(f"{name} must have shape (Q, N), got {tuple(scores.shape)}")
    if scores.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(scores.shape)})")
    if not scores.is_floating_point():
        scores = scores.float()
    check_finite(scores, name)
    return scores


def _valid_or_all(scores: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    if valid is None:
        return torch.ones_like(scores, dtype=torch.bool)
    valid = torch.as_tensor(valid, device=scores.device)
    if valid.shape != scores.shape:
        raise ValueError(f"valid has shape {tuple(valid.shape)} but scores has shape {tuple(scores.shape)}")
    return valid.bool()


def exact_rank(scores: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Exact rank ``1 + #{j != k valid: s_j >= s_k}`` of every item (Eq. 2.5, ``H(0) = 1``).

    ``O(Q N log N)`` by sorting. Entries where ``valid`` is False are set to 0.

    Args:
        scores: ``(Q, N)`` scores.
        valid: ``(Q, N)`` bool retrieval-set mask or None.

    Returns:
        ``(Q, N)`` float ranks (no gradient).
    """
    scores = _check_scores(scores)
    valid = _valid_or_all(scores, valid)
    s = scores.detach().masked_fill(~valid, float("-inf"))
    srt = torch.sort(s, dim=1).values  # ascending; invalid at the front
    n_ge = scores.shape[1] - torch.searchsorted(srt, s.contiguous(), right=False)
    return torch.where(valid, n_ge.to(scores.dtype), torch.zeros_like(scores))


def _relation_mask(rel: Relation, rel_cols: torch.Tensor, rel_rows: torch.Tensor) -> torch.Tensor | None:
    if rel == "all":
        return None
    if rel == "geq":
        return rel_cols >= rel_rows[:, None]
    return rel_cols < rel_rows[:, None]


def _check_relations(relations: Sequence[str]) -> tuple[Relation, ...]:
    rels = tuple(relations)
    if not rels or any(r not in _RELATIONS for r in rels):
        raise ValueError(f"relations (relation) must be a non-empty sequence of {_RELATIONS}, got {relations!r}")
    return rels  # type: ignore[return-value]


def _chunk_rows(n_cols: int, max_elements: int | None, device: torch.device) -> int:
    budget = default_max_elements(device) if max_elements is None else int(max_elements)
    return max(1, budget // max(1, n_cols))


def _relation_masks(
    valid: torch.Tensor, relevance: torch.Tensor | None, relations: tuple[Relation, ...], rows_are_top: bool
) -> list[torch.Tensor | None]:
    """Per-relation ``(Q, N)`` column masks when they do not depend on the row k.

    That is the case for ``"all"``, and for every relation when the relevance is binary and every
    row k is a positive (``rel(k) = 1``): then ``"geq"`` = positives and ``"lower"`` = negatives.
    Otherwise (graded relevance) the entry is None and the mask is built per chunk.
    """
    out: list[torch.Tensor | None] = []
    for rel in relations:
        if rel == "all":
            out.append(valid)
        elif rows_are_top and relevance is not None:
            out.append(valid & (relevance >= 1) if rel == "geq" else valid & (relevance < 1))
        else:
            out.append(None)
    return out


def _block(
    scores: torch.Tensor,
    valid: torch.Tensor,
    relevance: torch.Tensor | None,
    pre: list[torch.Tensor | None],
    qi: torch.Tensor,
    ki: torch.Tensor,
    relations: tuple[Relation, ...],
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Differences ``(c, N)`` of a chunk of rows and one mask per relation (self column removed)."""
    diff = scores[qi]  # a fresh (c, N) copy: safe to modify in place
    diff.sub_(diff.gather(1, ki[:, None]))
    ar = torch.arange(qi.numel(), device=qi.device)
    masks = []
    for rel, m in zip(relations, pre, strict=True):
        if m is None:
            assert relevance is not None
            rc = relevance[qi]
            m = valid[qi] & _relation_mask(rel, rc, rc.gather(1, ki[:, None]).squeeze(1))  # type: ignore[operator]
        else:
            m = m[qi]
        m[ar, ki] = False
        masks.append(m)
    return diff, masks


class _RowStepSum(torch.autograd.Function):
    """``out[r, i] = sum_j mask_i[r, j] f(s[q_r, j] - s[q_r, k_r])``, chunked; backward recomputes."""

    @staticmethod
    def forward(ctx, scores, valid, relevance, q_idx, k_idx, step, relations, chunk, rows_are_top):  # type: ignore[override]
        out = scores.new_zeros(q_idx.numel(), len(relations))
        pre = _relation_masks(valid, relevance, relations, rows_are_top)
        for a in range(0, q_idx.numel(), chunk):
            qi, ki = q_idx[a : a + chunk], k_idx[a : a + chunk]
            diff, masks = _block(scores, valid, relevance, pre, qi, ki, relations)
            val = step.value_(diff)
            if len(masks) == 1:
                out[a : a + chunk, 0] = val.mul_(masks[0]).sum(1)
            else:
                for i, m in enumerate(masks):
                    out[a : a + chunk, i] = (val * m).sum(1)
        ctx.save_for_backward(scores, valid, relevance if relevance is not None else scores.new_empty(0), q_idx, k_idx)
        ctx.has_rel, ctx.rows_are_top = relevance is not None, rows_are_top
        ctx.step, ctx.relations, ctx.chunk = step, relations, chunk
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        scores, valid, relevance, q_idx, k_idx = ctx.saved_tensors
        relevance = relevance if ctx.has_rel else None
        grad = torch.zeros_like(scores)
        pre = _relation_masks(valid, relevance, ctx.relations, ctx.rows_are_top)
        chunk = ctx.chunk
        for a in range(0, q_idx.numel(), chunk):
            qi, ki = q_idx[a : a + chunk], k_idx[a : a + chunk]
            diff, masks = _block(scores, valid, relevance, pre, qi, ki, ctx.relations)
            w = ctx.step.derivative_(diff)
            g = grad_out[a : a + chunk]
            if len(masks) == 1:
                w.mul_(masks[0]).mul_(g[:, 0:1])
            else:
                coef = torch.where(masks[0], g[:, 0:1], 0.0)
                for i, m in enumerate(masks[1:], start=1):
                    coef.add_(torch.where(m, g[:, i : i + 1], 0.0))
                w.mul_(coef)
            # w[r, j] = d out_r / d s_{q_r j}; d out_r / d s_{q_r k_r} = -sum_j w[r, j]
            grad.index_add_(0, qi, w)
            grad.index_put_((qi, ki), -w.sum(1), accumulate=True)
        return grad, None, None, None, None, None, None, None, None


def positive_rows(relevance: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """All (query, positive item) pairs: the rows k that rank losses need.

    Args:
        relevance: ``(Q, N)`` relevance (> 0 = positive).
        valid: ``(Q, N)`` retrieval-set mask or None.

    Returns:
        ``(q_idx, k_idx)``, two ``(R,)`` long tensors in row-major order (query by query).
    """
    rel = _check_scores(relevance, "relevance")
    pos = rel > 0
    if valid is not None:
        pos = pos & torch.as_tensor(valid, device=pos.device).bool()
    q_idx, k_idx = torch.nonzero(pos, as_tuple=True)
    return q_idx, k_idx


def _check_row_indices(scores: torch.Tensor, q_idx: torch.Tensor, k_idx: torch.Tensor) -> None:
    """``q_idx``, ``k_idx``: ``(R,)`` integer tensors of equal shape, inside ``scores (Q, N)``."""
    for name, idx, bound in (("q_idx", q_idx, scores.shape[0]), ("k_idx", k_idx, scores.shape[1])):
        if not isinstance(idx, torch.Tensor) or idx.ndim != 1 or idx.is_floating_point():
            raise ValueError(f"{name} must be a (R,) integer tensor, got {getattr(idx, 'shape', type(idx).__name__)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= bound):
            raise ValueError(f"{name} holds indices outside [0, {bound}) of scores {tuple(scores.shape)}")
    if q_idx.shape != k_idx.shape:
        raise ValueError(f"q_idx and k_idx must have equal shapes, got {tuple(q_idx.shape)}, {tuple(k_idx.shape)}")


def row_step_sums(
    scores: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    step: StepFunction | str = "sigmoid",
    relations: Sequence[Relation] = ("all",),
    *,
    valid: torch.Tensor | None = None,
    relevance: torch.Tensor | None = None,
    max_elements: int | None = None,
) -> torch.Tensor:
    """Smooth or exact rank sums for a list of rows, in ``O(chunk * N)`` memory.

    For every row ``r = (q, k)`` and relation ``i``::

        out[r, i] = sum_{j != k, valid[q, j], rel_i(j, k)} step(s[q, j] - s[q, k])

    with ``rel_i`` one of ``"all"`` (every j), ``"geq"`` (``rel(j) >= rel(k)``: the rank+ sum of
    Eq. 3.3) and ``"lower"`` (``rel(j) < rel(k)``: rank- of Eq. 3.3, rank_s^- of Eq. 3.5 of the
    Ramzi thesis). Gradients (for a differentiable step) flow to ``scores`` through a custom
    backward that recomputes each chunk, so no ``(Q, N, N)`` or ``(R, N)`` tensor is stored.

    Args:
        scores: ``(Q, N)`` float scores.
        q_idx, k_idx: ``(R,)`` long row indices (see :func:`positive_rows`).
        step: a :class:`~rank_lab.ranking.steps.StepFunction` or a name.
        relations: which competitor sets to sum over (one output column each).
        valid: ``(Q, N)`` retrieval-set mask or None.
        relevance: ``(Q, N)`` relevance, needed for ``"geq"`` / ``"lower"``.
        max_elements: size of one ``(chunk, N)`` block (default :func:`default_max_elements`).

    Returns:
        ``(R, len(relations))`` tensor.
    """
    step = make_step(step)
    rels = _check_relations(relations)
    scores = _check_scores(scores)
    _check_row_indices(scores, q_idx, k_idx)
    if any(r != "all" for r in rels) and relevance is None:
        raise ValueError("relevance is required for the 'geq' and 'lower' relations")
    valid_t = _valid_or_all(scores, valid)
    rel_t = None if relevance is None else torch.as_tensor(relevance, device=scores.device).to(scores.dtype)
    chunk = _chunk_rows(scores.shape[1], max_elements, scores.device)
    q_idx, k_idx = q_idx.to(scores.device).long(), k_idx.to(scores.device).long()
    if q_idx.numel() == 0:
        return scores.new_zeros(0, len(rels)) + 0 * scores.sum()
    top = rel_t is not None and bool(((rel_t == 0) | (rel_t == 1)).all()) and bool((rel_t[q_idx, k_idx] == 1).all())
    if not step.differentiable or not (scores.requires_grad and torch.is_grad_enabled()):
        with torch.no_grad():
            return _RowStepSum.forward(_Ctx(), scores.detach(), valid_t, rel_t, q_idx, k_idx, step, rels, chunk, top)
    return _RowStepSum.apply(scores, valid_t, rel_t, q_idx, k_idx, step, rels, chunk, top)


class _Ctx:
    """Stand-in autograd context for the no-grad path of :class:`_RowStepSum`."""

    def save_for_backward(self, *args: torch.Tensor) -> None:
        pass


def exact_rank_plus_rows(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    *,
    valid: torch.Tensor | None = None,
    max_elements: int | None = None,
) -> torch.Tensor:
    """Exact ``rank+(k) = 1 + sum_{j != k, rel(j) >= rel(k)} H(s_j - s_k)`` for each row (Eq. 3.3).

    No gradient (``H^+ = H``, thesis Sec. 3.2.2.1). Binary relevance (values in {0, 1}, rows k
    positive): ``O(Q N log N)`` by sorting each query's positive scores. Graded relevance:
    :func:`row_step_sums` with the Heaviside (``O(chunk * N)`` memory).

    Returns:
        ``(R,)`` tensor.
    """
    scores = _check_scores(scores).detach()
    _check_row_indices(scores, q_idx, k_idx)
    rel = torch.as_tensor(relevance, device=scores.device)
    if rel.shape != scores.shape:
        raise ValueError(f"relevance has shape {tuple(rel.shape)} but scores has shape {tuple(scores.shape)}")
    q_idx, k_idx = q_idx.to(scores.device).long(), k_idx.to(scores.device).long()
    binary = bool(((rel == 0) | (rel == 1)).all()) and bool((rel[q_idx, k_idx] == 1).all())
    if not binary:
        out = row_step_sums(scores, q_idx, k_idx, Heaviside(), ("geq",), valid=valid, relevance=rel, max_elements=max_elements)
        return 1.0 + out[:, 0]
    member = (rel == 1) & _valid_or_all(scores, valid)
    s = scores.masked_fill(~member, float("-inf"))
    srt = torch.sort(s, dim=1).values
    # positives j (k included) with s_j >= s_k: N - #{values < s_k}
    n_ge = scores.shape[1] - torch.searchsorted(srt, scores.contiguous(), right=False)
    return n_ge[q_idx, k_idx].to(scores.dtype)


def rank_split(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    max_elements: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ``rank+`` and ``rank-`` of every item (Eq. 3.3 of the Ramzi thesis), ``H(0) = 1``.

    Args:
        scores: ``(Q, N)``.
        relevance: ``(Q, N)`` relevance (binary or graded).
        valid: ``(Q, N)`` retrieval-set mask or None.

    Returns:
        ``(rank_pos, rank_neg)``, each ``(Q, N)``; ``rank_pos + rank_neg`` equals :func:`exact_rank`.
        Entries of items outside the retrieval set are 0.
    """
    scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    valid_t = _valid_or_all(scores, valid)
    q_idx, k_idx = torch.nonzero(valid_t, as_tuple=True)
    sums = row_step_sums(scores.detach(), q_idx, k_idx, Heaviside(), ("geq", "lower"), valid=valid_t, relevance=relevance, max_elements=max_elements)
    rank_pos = torch.zeros_like(scores)
    rank_neg = torch.zeros_like(scores)
    rank_pos[q_idx, k_idx] = 1.0 + sums[:, 0]
    rank_neg[q_idx, k_idx] = sums[:, 1]
    return rank_pos, rank_neg


def smooth_rank(
    scores: torch.Tensor,
    step: StepFunction | str = "sigmoid",
    valid: torch.Tensor | None = None,
    *,
    relevance: torch.Tensor | None = None,
    relation: Relation = "all",
    max_elements: int | None = None,
) -> torch.Tensor:
    """Smooth rank ``1 + sum_{j != k} step(s_j - s_k)`` of every item (Eq. 2.8 of the Ramzi thesis).

    With ``relation="geq"`` this is the smooth rank+ of Smooth-AP; with ``"lower"`` and the
    SupRank step it is ``rank_s^-`` (Eq. 3.5) *without* the leading 1 (rank- has none).

    Args:
        scores: ``(Q, N)``; gradients flow to it for a differentiable step.
        step: step function or name (default sigmoid, tau = 0.01).
        valid: ``(Q, N)`` retrieval-set mask or None.
        relevance: ``(Q, N)``, needed for ``relation != "all"``.
        relation: competitor set (see :func:`row_step_sums`).

    Returns:
        ``(Q, N)`` smooth ranks; 0 outside the retrieval set.
    """
    if relevance is None:
        scores = _check_scores(scores)
    else:
        scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    valid_t = _valid_or_all(scores, valid)
    q_idx, k_idx = torch.nonzero(valid_t, as_tuple=True)
    sums = row_step_sums(scores, q_idx, k_idx, step, (relation,), valid=valid_t, relevance=relevance, max_elements=max_elements)
    lead = 0.0 if relation == "lower" else 1.0
    flat = torch.zeros(scores.numel(), dtype=scores.dtype, device=scores.device)
    flat = flat.index_put((q_idx * scores.shape[1] + k_idx,), sums[:, 0] + lead)
    return flat.view_as(scores)
