"""Exact and smooth ranks, the rank+ / rank- split, and the retrieval-set mask.

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

**Memory.** The reference implementations build ``D[q, k, j] = s_j - s_k`` of shape ``(Q, N, N)``
(:func:`pairwise_differences`, kept for reference implementations and tests). The rank sums go
through the row kernel of :mod:`rank_lab.ranking.row_kernel` (:func:`row_step_sums` over
``R = sum_q |P_q|`` rows, ``O(chunk * N)`` peak memory).
"""

from __future__ import annotations

import torch

from rank_lab._validation import check_positive_int, check_scores_targets
from rank_lab.ranking.row_kernel import (
    Relation,
    check_row_indices,
    check_score_matrix,
    row_step_sums,
    row_step_sums_trusted,
    valid_or_all,
)
from rank_lab.ranking.steps import Heaviside, StepFunction

__all__ = [
    "retrieval_mask",
    "pairwise_differences",
    "exact_rank",
    "rank_split",
    "smooth_rank",
    "exact_rank_plus_rows",
]


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
    n_queries, n_items = (
        check_positive_int(n_queries, "n_queries"),
        check_positive_int(n_items, "n_items"),
    )
    if self_index is not None:
        self_index = check_self_index(self_index, n_queries, n_items, "self_index", device)
    return retrieval_mask_trusted(
        n_queries, n_items, self_index, exclude_self=exclude_self, device=device
    )


def check_self_index(
    self_index: object,
    n_queries: int,
    n_items: int,
    name: str,
    device: torch.device | str | None = None,
    *,
    in_range: bool = True,
) -> torch.Tensor:
    """A ``(Q,)`` integer position of each query among ``N`` items, ``-1`` when absent (one host
    sync; the shape and dtype checks alone with ``in_range=False``, the caller then checks
    :func:`self_index_in_range` with its other value checks).

    Returns:
        The positions as a long tensor on ``device``.

    Raises:
        ValueError, TypeError: naming ``name`` (shape, dtype, a position outside ``[-1, N)``).
    """
    t = torch.as_tensor(self_index, device=device)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer positions, got dtype {t.dtype}")
    if t.shape != (n_queries,):
        raise ValueError(f"{name} must have shape ({n_queries},), got {tuple(t.shape)}")
    t = t.long()
    if in_range and not bool(self_index_in_range(t, n_items)):
        raise ValueError(self_index_message(name, n_items))
    return t


def self_index_in_range(self_index: torch.Tensor, n_items: int) -> torch.Tensor:
    """0-dim bool tensor (on the index' device, no host sync): every position lies in
    ``[-1, N)``."""
    return ((self_index >= -1) & (self_index < n_items)).all()


def self_index_message(name: str, n_items: int) -> str:
    """The error of a position outside ``[-1, N)`` (:func:`check_self_index`)."""
    return f"{name} must hold -1 or column indices in [0, {n_items})"


def retrieval_mask_trusted(
    n_queries: int,
    n_items: int,
    self_index: torch.Tensor | None,
    *,
    exclude_self: bool,
    device: torch.device | str | None,
) -> torch.Tensor:
    """:func:`retrieval_mask` of checked arguments (``self_index`` a long tensor on ``device`` in
    ``[-1, N)``): the losses' kernel, no host sync."""
    mask = torch.ones(n_queries, n_items, dtype=torch.bool, device=device)
    if self_index is None or not exclude_self:
        return mask
    rows = torch.arange(n_queries, device=mask.device)
    present = self_index >= 0
    # absent queries (-1) write True into their last column, which is True already: no selection, no
    # sync
    mask[rows, torch.where(present, self_index, n_items - 1)] = ~present
    return mask


def pairwise_differences(scores: torch.Tensor) -> torch.Tensor:
    """Direct difference tensor ``D[q, k, j] = s_qj - s_qk``, shape ``(Q, N, N)`` (thesis Sec. 2.1).

    Row k is the item being ranked, column j the competitor. ``O(Q N^2)`` memory: reference only.
    """
    scores = check_score_matrix(scores)
    return scores.unsqueeze(1) - scores.unsqueeze(2)


def exact_rank(scores: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Exact rank ``1 + #{j != k valid: s_j >= s_k}`` of every item (Eq. 2.5, ``H(0) = 1``).

    ``O(Q N log N)`` by sorting. Entries where ``valid`` is False are set to 0.

    Args:
        scores: ``(Q, N)`` scores.
        valid: ``(Q, N)`` bool retrieval-set mask or None.

    Returns:
        ``(Q, N)`` float ranks (no gradient).
    """
    scores = check_score_matrix(scores)
    valid = valid_or_all(scores, valid)
    s = scores.detach().masked_fill(~valid, float("-inf"))
    srt = torch.sort(s, dim=1).values  # ascending; invalid at the front
    n_ge = scores.shape[1] - torch.searchsorted(srt, s.contiguous(), right=False)
    return torch.where(valid, n_ge.to(scores.dtype), torch.zeros_like(scores))


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
    scores = check_score_matrix(scores).detach()
    check_row_indices(scores, q_idx, k_idx)
    rel = torch.as_tensor(relevance, device=scores.device)
    if rel.shape != scores.shape:
        raise ValueError(
            f"relevance has shape {tuple(rel.shape)} but scores has shape {tuple(scores.shape)}"
        )
    q_idx, k_idx = q_idx.to(scores.device).long(), k_idx.to(scores.device).long()
    binary = bool(((rel == 0) | (rel == 1)).all()) and bool((rel[q_idx, k_idx] == 1).all())
    return exact_rank_plus_rows_trusted(
        scores,
        rel.to(scores.dtype),
        q_idx,
        k_idx,
        valid=valid_or_all(scores, valid),
        max_elements=max_elements,
        binary=binary,
    )


def exact_rank_plus_rows_trusted(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    *,
    valid: torch.Tensor,
    max_elements: int | None,
    binary: bool,
) -> torch.Tensor:
    """:func:`exact_rank_plus_rows` of checked inputs: the losses' kernel (no check, no host sync).

    ``binary``: the caller knows that the relevance holds 0 / 1 only and every row k is a positive
    (the sort route); otherwise the graded route of :func:`row_step_sums`.
    """
    scores = scores.detach()
    if not binary:
        out = row_step_sums_trusted(
            scores,
            q_idx,
            k_idx,
            Heaviside(),
            ("geq",),
            valid=valid,
            relevance=relevance,
            max_elements=max_elements,
        )
        return 1.0 + out[:, 0]
    member = (relevance == 1) & valid
    s = scores.masked_fill(~member, float("-inf"))
    srt = torch.sort(s, dim=1).values
    # positives j (k included) with s_j >= s_k: N - #{values < s_k}
    n_ge = scores.shape[1] - torch.searchsorted(srt, scores.contiguous(), right=False)
    return n_ge[q_idx, k_idx].to(scores.dtype)


def split_rank_rows_trusted(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    step: StepFunction,
    *,
    valid: torch.Tensor,
    max_elements: int | None,
    binary: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rank+, rank-)`` of the rows ``(q_idx, k_idx)``, the split of every SupRank loss (Ramzi
    thesis Eq. 3.3; SupRank Eq. 3): ``rank+`` exact (Heaviside over the items at least as relevant,
    no gradient), ``rank-`` the sum of ``step`` over the less relevant ones (the smoothed part).
    Checked inputs (the losses' kernel, no host sync).

    Args:
        scores: ``(Q, N)`` finite floating scores.
        relevance: ``(Q, N)`` relevance in the scores' dtype.
        q_idx, k_idx: ``(R,)`` long rows (query, positive), on the scores' device.
        step: the step of ``rank-`` (:class:`~rank_lab.ranking.steps.SupRankStep` for SupRank).
        valid: ``(Q, N)`` bool retrieval-set mask.
        max_elements: size of one ``(chunk, N)`` block (None: the device's default).
        binary: the relevance holds 0 / 1 only and every row is a positive (the fast routes).

    Returns:
        ``(R,)`` ``rank+`` and ``(R,)`` ``rank-``.
    """
    rank_pos = exact_rank_plus_rows_trusted(
        scores, relevance, q_idx, k_idx, valid=valid, max_elements=max_elements, binary=binary
    )
    rank_neg = row_step_sums_trusted(
        scores,
        q_idx,
        k_idx,
        step,
        ("lower",),
        valid=valid,
        relevance=relevance,
        max_elements=max_elements,
        rows_are_top=binary,
    )[:, 0]
    return rank_pos, rank_neg


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
        ``(rank_pos, rank_neg)``, each ``(Q, N)``; ``rank_pos + rank_neg`` equals
        :func:`exact_rank`.
        Entries of items outside the retrieval set are 0.
    """
    scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    valid_t = valid_or_all(scores, valid)
    q_idx, k_idx = torch.nonzero(valid_t, as_tuple=True)
    sums = row_step_sums(
        scores.detach(),
        q_idx,
        k_idx,
        Heaviside(),
        ("geq", "lower"),
        valid=valid_t,
        relevance=relevance,
        max_elements=max_elements,
    )
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
        scores = check_score_matrix(scores)
    else:
        scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    valid_t = valid_or_all(scores, valid)
    q_idx, k_idx = torch.nonzero(valid_t, as_tuple=True)
    sums = row_step_sums(
        scores,
        q_idx,
        k_idx,
        step,
        (relation,),
        valid=valid_t,
        relevance=relevance,
        max_elements=max_elements,
    )
    lead = 0.0 if relation == "lower" else 1.0
    flat = torch.zeros(scores.numel(), dtype=scores.dtype, device=scores.device)
    flat = flat.index_put((q_idx * scores.shape[1] + k_idx,), sums[:, 0] + lead)
    return flat.view_as(scores)
