"""The memory-efficient rank kernel: smooth or exact rank sums over a list of (query, item) rows.

Notation as in :mod:`rank_lab.ranking.ranks` (Ramzi thesis Sec. 2.1 and 3.2; SupRank Eq. 3): for
a row ``r = (q, k)``, the kernel sums ``step(s_qj - s_qk)`` over the competitors ``j != k`` of the
retrieval set, all of them (``"all"``: the rank of Eq. 2.5 / 2.8), those with ``rel(j) >= rel(k)``
(``"geq"``: rank+ of Eq. 3.3) or those with ``rel(j) < rel(k)`` (``"lower"``: rank- of Eq. 3.3,
``rank_s^-`` of Eq. 3.5).

**Memory.** The reference implementations build ``D[q, k, j] = s_j - s_k`` of shape ``(Q, N, N)``.
Rank losses only need the rows k that are positives of q, so :func:`row_step_sums` works on a flat
list of ``R = sum_q |P_q|`` (query, positive) rows, ``O(R * N) = O(Q * P * N)`` values, processed in
chunks of rows with a custom autograd function that recomputes each chunk in the backward pass:
peak memory is ``O(chunk * N)`` whatever Q, P and N.
:func:`rank_lab.ranking.ranks.pairwise_differences` is the direct ``(Q, N, N)`` tensor, kept for
reference implementations and tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from rank_lab._validation import as_tensor, check_finite
from rank_lab.ranking.steps import StepFunction, make_step

__all__ = ["Relation", "default_max_elements", "positive_rows", "row_step_sums"]

Relation = Literal["all", "geq", "lower"]
_RELATIONS = ("all", "geq", "lower")


def default_max_elements(device: torch.device | str | None = None) -> int:
    """Elements of one ``(chunk, N)`` block: 2**20 on CPU (4 MB per fp32 temporary, cache friendly),
    2**25 on CUDA."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    return 2**25 if dev.type == "cuda" else 2**20


def check_score_matrix(scores: object, name: str = "scores") -> torch.Tensor:
    """A finite, non-empty ``(Q, N)`` floating score matrix (integer scores are cast to float32).

    Args:
        scores: ``(Q, N)`` scores ``s_q(j)`` of Q queries over N items (Sec. 2.1 of the Ramzi
            thesis).
        name: the name of ``scores`` in the messages.

    Raises:
        ValueError / TypeError: naming ``name`` (shape, emptiness, NaN/inf).
    """
    scores = as_tensor(scores, name)
    if scores.ndim != 2:
        raise ValueError(f"{name} must have shape (Q, N), got {tuple(scores.shape)}")
    if scores.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(scores.shape)})")
    if not scores.is_floating_point():
        scores = scores.float()
    check_finite(scores, name)
    return scores


def valid_or_all(scores: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """The ``(Q, N)`` bool retrieval-set mask of ``scores (Q, N)``: ``valid`` checked, or every
    item.

    Raises:
        ValueError: ``valid`` does not have the shape of ``scores``.
    """
    if valid is None:
        return torch.ones_like(scores, dtype=torch.bool)
    valid = torch.as_tensor(valid, device=scores.device)
    if valid.shape != scores.shape:
        raise ValueError(
            f"valid has shape {tuple(valid.shape)} but scores has shape {tuple(scores.shape)}"
        )
    return valid.bool()


def _relation_mask(
    rel: Relation, rel_cols: torch.Tensor, rel_rows: torch.Tensor
) -> torch.Tensor | None:
    if rel == "all":
        return None
    if rel == "geq":
        return rel_cols >= rel_rows[:, None]
    return rel_cols < rel_rows[:, None]


def _check_relations(relations: Sequence[str]) -> tuple[Relation, ...]:
    rels = tuple(relations)
    if not rels or any(r not in _RELATIONS for r in rels):
        raise ValueError(
            f"relations (relation) must be a non-empty sequence of {_RELATIONS}, got {relations!r}"
        )
    return rels  # type: ignore[return-value]


def chunk_rows(n_cols: int, max_elements: int | None, device: torch.device) -> int:
    """Rows of one ``(chunk, n_cols)`` block of at most ``max_elements`` values (at least 1 row).

    Args:
        n_cols: N, the columns of a block.
        max_elements: the block budget (None = :func:`default_max_elements` of ``device``).
        device: the device the blocks live on.
    """
    budget = default_max_elements(device) if max_elements is None else int(max_elements)
    return max(1, budget // max(1, n_cols))


def _relation_masks(
    valid: torch.Tensor,
    relevance: torch.Tensor | None,
    relations: tuple[Relation, ...],
    rows_are_top: bool,
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
    """``out[r, i] = sum_j mask_i[r, j] f(s[q_r, j] - s[q_r, k_r])``, chunked; backward
    recomputes."""

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
        ctx.save_for_backward(
            scores, valid, relevance if relevance is not None else scores.new_empty(0), q_idx, k_idx
        )
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
            # no atomics: the same bits on every run and device
            if torch.are_deterministic_algorithms_enabled():
                index_add_in_order(grad, qi, w)
                index_add_in_order(grad.view(-1), qi * grad.shape[1] + ki, -w.sum(1))
            else:
                grad.index_add_(0, qi, w)
                grad.index_put_((qi, ki), -w.sum(1), accumulate=True)
        return grad, None, None, None, None, None, None, None, None


def index_add_in_order(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``out[index[i]] += src[i]`` for ``i = 0, 1, ...`` in that order, in place, without atomic
    adds.

    The deterministic scatter-add of the rank kernels' backward under
    ``torch.use_deterministic_algorithms(True)``: the rows are grouped by target (a stable sort),
    and pass ``p`` adds the ``p``-th row of every group with one ``index_add_`` whose targets are
    all distinct, so no two threads ever add to one element and each element receives its rows in
    row order -- the order of the serial CPU ``index_add_``, hence the same bits as the CPU on any
    device. One host sync (the largest group) per call.

    Args:
        out: ``(M, ...)`` tensor, updated in place.
        index: ``(n,)`` long targets in ``[0, M)``, on ``out``'s device.
        src: ``(n, ...)`` rows, ``out``'s dtype and device.

    Returns:
        ``out``.
    """
    n = index.numel()
    if n == 0:
        return out
    order = torch.argsort(index, stable=True)
    grouped = index[order]
    ar = torch.arange(n, device=index.device)
    starts = torch.ones(n, dtype=torch.bool, device=index.device)
    starts[1:] = grouped[1:] != grouped[:-1]
    pos = torch.empty_like(ar)
    # rank in its group
    pos[order] = ar - torch.cummax(torch.where(starts, ar, torch.zeros_like(ar)), 0).values
    for p in range(int(pos.max()) + 1):
        rows = torch.nonzero(pos == p).squeeze(1)
        out.index_add_(0, index[rows], src[rows])
    return out


def positive_rows(
    relevance: torch.Tensor, valid: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """All (query, positive item) pairs: the rows k that rank losses need.

    Args:
        relevance: ``(Q, N)`` relevance (> 0 = positive).
        valid: ``(Q, N)`` retrieval-set mask or None.

    Returns:
        ``(q_idx, k_idx)``, two ``(R,)`` long tensors in row-major order (query by query).
    """
    rel = check_score_matrix(relevance, "relevance")
    valid_t = None if valid is None else torch.as_tensor(valid, device=rel.device).bool()
    return positive_rows_trusted(rel, valid_t)


def positive_rows_trusted(
    relevance: torch.Tensor, valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`positive_rows` of a checked relevance and bool mask (the losses' kernels; no
    check)."""
    pos = relevance > 0
    if valid is not None:
        pos = pos & valid
    q_idx, k_idx = torch.nonzero(pos, as_tuple=True)
    return q_idx, k_idx


def check_row_indices(scores: torch.Tensor, q_idx: torch.Tensor, k_idx: torch.Tensor) -> None:
    """Check the rows of :func:`row_step_sums`: ``q_idx``, ``k_idx`` are ``(R,)`` integer tensors of
    equal shape whose entries index the queries and items of ``scores (Q, N)``.

    Raises:
        ValueError: naming ``q_idx`` or ``k_idx``.
    """
    for name, idx, bound in (("q_idx", q_idx, scores.shape[0]), ("k_idx", k_idx, scores.shape[1])):
        if not isinstance(idx, torch.Tensor) or idx.ndim != 1 or idx.is_floating_point():
            raise ValueError(
                f"{name} must be a (R,) integer tensor, got "
                f"{getattr(idx, 'shape', type(idx).__name__)}"
            )
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= bound):
            raise ValueError(
                f"{name} holds indices outside [0, {bound}) of scores {tuple(scores.shape)}"
            )
    if q_idx.shape != k_idx.shape:
        raise ValueError(
            f"q_idx and k_idx must have equal shapes, got {tuple(q_idx.shape)}, "
            f"{tuple(k_idx.shape)}"
        )


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
    scores = check_score_matrix(scores)
    check_row_indices(scores, q_idx, k_idx)
    if any(r != "all" for r in rels) and relevance is None:
        raise ValueError("relevance is required for the 'geq' and 'lower' relations")
    valid_t = valid_or_all(scores, valid)
    rel_t = (
        None
        if relevance is None
        else torch.as_tensor(relevance, device=scores.device).to(scores.dtype)
    )
    q_idx, k_idx = q_idx.to(scores.device).long(), k_idx.to(scores.device).long()
    top = (
        rel_t is not None
        and q_idx.numel() > 0
        and bool(((rel_t == 0) | (rel_t == 1)).all())
        and bool((rel_t[q_idx, k_idx] == 1).all())
    )
    return row_step_sums_trusted(
        scores,
        q_idx,
        k_idx,
        step,
        rels,
        valid=valid_t,
        relevance=rel_t,
        max_elements=max_elements,
        rows_are_top=top,
    )


def row_step_sums_trusted(
    scores: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    step: StepFunction,
    relations: tuple[Relation, ...],
    *,
    valid: torch.Tensor,
    relevance: torch.Tensor | None,
    max_elements: int | None = None,
    rows_are_top: bool = False,
) -> torch.Tensor:
    """:func:`row_step_sums` of checked inputs: the kernel of the rank losses (no check, no host
    sync).

    Args:
        scores: ``(Q, N)`` finite floating scores.
        q_idx, k_idx: ``(R,)`` long row indices on the scores' device, in range.
        step: a :class:`~rank_lab.ranking.steps.StepFunction`.
        relations: a non-empty tuple of ``"all"``, ``"geq"``, ``"lower"``.
        valid: ``(Q, N)`` bool retrieval-set mask.
        relevance: ``(Q, N)`` relevance in the scores' dtype (needed for ``"geq"`` / ``"lower"``).
        max_elements: size of one ``(chunk, N)`` block (default :func:`default_max_elements`).
        rows_are_top: the caller knows that the relevance is binary and every row k a positive
            (then ``"geq"`` = positives, ``"lower"`` = negatives, masks built once).

    Returns:
        ``(R, len(relations))`` tensor.
    """
    if q_idx.numel() == 0:
        return scores.new_zeros(0, len(relations)) + 0 * scores.sum()
    chunk = chunk_rows(scores.shape[1], max_elements, scores.device)
    if not step.differentiable or not (scores.requires_grad and torch.is_grad_enabled()):
        with torch.no_grad():
            return _RowStepSum.forward(
                _Ctx(),
                scores.detach(),
                valid,
                relevance,
                q_idx,
                k_idx,
                step,
                relations,
                chunk,
                rows_are_top,
            )
    return _RowStepSum.apply(
        scores, valid, relevance, q_idx, k_idx, step, relations, chunk, rows_are_top
    )


class _Ctx:
    """Stand-in autograd context for the no-grad path of :class:`_RowStepSum`."""

    def save_for_backward(self, *args: torch.Tensor) -> None:
        pass
