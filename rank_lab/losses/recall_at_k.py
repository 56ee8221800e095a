"""RS@k on score matrices (Eqs. 5.4-5.7 of the Patel thesis).

* :func:`recall_at_k_surrogate` -- the per-query RS@k loss of a ``(Q, N)`` similarity matrix with
  its positives and database: the score-level form of
  :class:`rank_lab.losses.recall.SmoothRecallAtK` (the one implementation of RS@k; same computation,
  same defaults).
* :func:`smooth_positive_ranks` -- the sigmoid ranks of Eq. 5.5 of every query's positives, padded
  to ``(Q, P)`` (the inner sum of RS@k, for plots and tests).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rank_lab._validation import as_tensor, check_choice, check_float, check_scores_targets
from rank_lab.losses.recall import DEFAULT_KS, Normalization, SmoothRecallAtK
from rank_lab.ranking.row_kernel import row_step_sums
from rank_lab.ranking.steps import SigmoidStep
from rank_lab.vocabulary import NoPositive

__all__ = ["smooth_positive_ranks", "recall_at_k_surrogate"]


def _check_database(database: object, positives: torch.Tensor) -> torch.Tensor:
    if database is None:
        return torch.ones_like(positives, dtype=torch.bool)
    database = as_tensor(database, "database")
    if database.shape != positives.shape:
        raise ValueError(
            f"database has shape {tuple(database.shape)} but positives has shape "
            f"{tuple(positives.shape)}"
        )
    database = database.to(positives.device).bool()
    if bool((positives & ~database).any()):
        raise ValueError(
            "every positive must belong to the database (positives & ~database is not empty)"
        )
    return database


def smooth_positive_ranks(
    scores: torch.Tensor,
    positives: torch.Tensor,
    database: torch.Tensor | None = None,
    *,
    tau: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Smooth ranks of every query's positives,
    ``r~(q, x) = 1 + sum_{z != x} sigma_tau(s_qz - s_qx)`` (Eq. 5.5).

    The sigmoid rank of the Patel thesis, the inner sum of RS@k (:class:`SmoothRecallAtK`).

    Args:
        scores: ``(Q, N)`` similarities of ``Q`` queries to ``N`` items.
        positives: ``(Q, N)`` bool, the positives ``P_q`` of each query (must lie in the database).
        database: ``(Q, N)`` bool, the items each query is ranked against (default: all ``N``);
            use it to remove the query itself (``B \\ q``).
        tau: temperature of the sigmoid on similarity differences (0.01; Patel's tau_2).

    Returns:
        ``(ranks (Q, P), valid (Q, P), index (Q, P))``: the smooth rank of the ``p``-th positive of
        each query, whether that slot holds a positive (rows are padded to the largest ``|P_q|``
        with the first non-positive columns) and its column in ``scores``. A query without
        positives is legal here: its row has no valid slot.
    """
    scores, positives = check_scores_targets(scores, positives, "scores", "positives")
    positives = positives.bool()
    database = _check_database(database, positives)
    step = SigmoidStep(check_float(tau, "tau", low=0.0, low_open=True))
    n_pos = positives.sum(1)
    p_max = max(int(n_pos.max()), 1)
    # a stable descending sort of the 0/1 mask puts each row's positives first, in column order
    idx = torch.sort(positives.to(torch.int8), dim=1, descending=True, stable=True).indices[
        :, :p_max
    ]
    valid = torch.arange(p_max, device=positives.device)[None, :] < n_pos[:, None]
    q_idx = torch.arange(scores.shape[0], device=scores.device).repeat_interleave(p_max)
    sums = row_step_sums(scores, q_idx, idx.reshape(-1), step, ("all",), valid=database)
    return (1 + sums[:, 0]).view(scores.shape[0], p_max), valid, idx


def recall_at_k_surrogate(
    scores: torch.Tensor,
    positives: torch.Tensor,
    database: torch.Tensor | None = None,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    tau_star: float | Sequence[float] = 1.0,
    tau: float = 0.01,
    clip: bool | None = None,
    normalization: Normalization = "min",
    no_positive: NoPositive = "raise",
) -> torch.Tensor:
    """Per-query RS@k loss ``L^K(q)`` from a similarity matrix (Eqs. 5.4-5.7 of the Patel thesis).

    The score-level form of :class:`SmoothRecallAtK` (same computation).

    Args:
        scores: ``(Q, N)`` similarities ``s_qz`` (dot products of L2-normalised embeddings).
        positives: ``(Q, N)`` bool, ``P_q``.
        database: ``(Q, N)`` bool, the database each query is ranked against (``B \\ q`` in the
            thesis: pass ``~eye``); default all ``N`` items. A ``True`` entry outside ``positives``
            is a negative (or the query itself, ranked as a competitor).
        ks, tau_star, tau, clip, normalization: see :class:`SmoothRecallAtK`.
        no_positive: a query without positives has no recall
            (:data:`~rank_lab.vocabulary.NoPositive`): ``"raise"`` a ``ValueError`` or ``"zero"``
            (its loss is 0; exclude it from any mean yourself).

    Returns:
        ``(Q,)`` loss per query, in ``[0, 1]``.

    Raises:
        ValueError: mismatched shapes, non-finite scores, a positive outside the database, a query
            without positives (unless ``no_positive="zero"``), bad temperatures or ks.
    """
    no_positive = check_choice(no_positive, "no_positive", ("raise", "zero"))
    scores, positives = check_scores_targets(scores, positives, "scores", "positives")
    positives = positives.bool()
    database = _check_database(database, positives)
    loss = SmoothRecallAtK(ks, tau, tau_star, clip, normalization=normalization)
    has_pos = positives.any(1)
    if not bool(has_pos.all()) and no_positive == "raise":
        raise ValueError(
            f"{int((~has_pos).sum())} query(ies) have no positive (a row of positives is all "
            "False): recall@k is undefined (use no_positive='zero')"
        )
    out = loss.per_query(scores, positives.to(scores.dtype), database)
    return torch.where(has_pos, out, torch.zeros_like(out))
