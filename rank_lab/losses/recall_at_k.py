"""RS@k on score matrices (Eqs. 5.4-5.7 of the Patel thesis), and the module's former class name.

* :func:`recall_at_k_surrogate` -- the per-query RS@k loss of a ``(Q, N)`` similarity matrix with
  its positives and database: the score-level form of :class:`rank_lab.losses.recall.SmoothRecallAtK`
  (the one implementation of RS@k; same computation, same defaults).
* :func:`smooth_positive_ranks` -- the sigmoid ranks of Eq. 5.5 of every query's positives, padded
  to ``(Q, P)`` (the inner sum of RS@k, for plots and tests).
* :class:`RecallAtKSurrogate` -- deprecated name of :class:`~rank_lab.losses.recall.SmoothRecallAtK`
  (``tau1`` -> ``tau_star``, ``tau2`` -> ``tau``, ``include_query_in_rank=True`` ->
  ``query_role="competitor"``; ``chunk_size`` is no longer needed). Building one emits a
  ``DeprecationWarning``; the registry names ``rs_at_k`` and ``recall_at_k_surrogate`` build a
  :class:`~rank_lab.losses.recall.SmoothRecallAtK`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from rank_lab._deprecation import warn_deprecated
from rank_lab._validation import as_tensor, check_choice, check_float, check_scores_targets
from rank_lab.losses.recall import (
    DEFAULT_KS,
    DEFAULT_KS_SIMIX,  # noqa: F401 - re-exported (listed in its defining module's __all__ only)
    Normalization,
    SmoothRecallAtK,
    legacy_rs_kwargs,
)
from rank_lab.ranking.row_kernel import row_step_sums
from rank_lab.ranking.steps import SigmoidStep

__all__ = ["smooth_positive_ranks", "recall_at_k_surrogate", "RecallAtKSurrogate"]


def _check_database(database: object, positives: torch.Tensor) -> torch.Tensor:
    if database is None:
        return torch.ones_like(positives, dtype=torch.bool)
    database = as_tensor(database, "database")
    if database.shape != positives.shape:
        raise ValueError(f"database has shape {tuple(database.shape)} but positives has shape {tuple(positives.shape)}")
    database = database.to(positives.device).bool()
    if bool((positives & ~database).any()):
        raise ValueError("every positive must belong to the database (positives & ~database is not empty)")
    return database


def smooth_positive_ranks(
    scores: torch.Tensor,
    positives: torch.Tensor,
    database: torch.Tensor | None = None,
    *,
    tau: float = 0.01,
    **deprecated: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Smooth ranks of every query's positives, ``r~(q, x) = 1 + sum_{z != x} sigma_tau(s_qz - s_qx)`` (Eq. 5.5).

    The sigmoid rank of the Patel thesis, the inner sum of RS@k (:class:`SmoothRecallAtK`).

    Args:
        scores: ``(Q, N)`` similarities of ``Q`` queries to ``N`` items.
        positives: ``(Q, N)`` bool, the positives ``P_q`` of each query (must lie in the database).
        database: ``(Q, N)`` bool, the items each query is ranked against (default: all ``N``);
            use it to remove the query itself (``B \\ q``).
        tau: temperature of the sigmoid on similarity differences (0.01; Patel's tau_2, the old
            keyword ``tau2`` is accepted with a ``DeprecationWarning``).

    Returns:
        ``(ranks (Q, P), valid (Q, P), index (Q, P))``: the smooth rank of the ``p``-th positive of
        each query, whether that slot holds a positive (rows are padded to the largest ``|P_q|``
        with the first non-positive columns) and its column in ``scores``. A query without
        positives is legal here: its row has no valid slot.
    """
    tau = legacy_rs_kwargs(_only(deprecated, ("tau2",), "smooth_positive_ranks"), "smooth_positive_ranks").get("tau", tau)  # type: ignore[assignment]
    scores, positives = check_scores_targets(scores, positives, "scores", "positives")
    positives = positives.bool()
    database = _check_database(database, positives)
    step = SigmoidStep(check_float(tau, "tau", low=0.0, low_open=True))
    n_pos = positives.sum(1)
    p_max = max(int(n_pos.max()), 1)
    # a stable descending sort of the 0/1 mask puts each row's positives first, in column order
    idx = torch.sort(positives.to(torch.int8), dim=1, descending=True, stable=True).indices[:, :p_max]
    valid = torch.arange(p_max, device=positives.device)[None, :] < n_pos[:, None]
    q_idx = torch.arange(scores.shape[0], device=scores.device).repeat_interleave(p_max)
    sums = row_step_sums(scores, q_idx, idx.reshape(-1), step, ("all",), valid=database)
    return (1 + sums[:, 0]).view(scores.shape[0], p_max), valid, idx


def _only(kwargs: dict[str, object], allowed: tuple[str, ...], owner: str) -> dict[str, object]:
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"{owner}() got unexpected keyword argument(s) {unknown}")
    return kwargs


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
    no_positive: Literal["raise", "zero"] = "raise",
    **deprecated: object,
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
        no_positive: a query without positives has no recall: ``"raise"`` a ``ValueError`` or
            ``"zero"`` (its loss is 0; exclude it from any mean yourself).
        **deprecated: the old keywords ``tau1``, ``tau2``, ``chunk_size`` and
            ``no_positive="ignore"`` (``DeprecationWarning``).

    Returns:
        ``(Q,)`` loss per query, in ``[0, 1]``.

    Raises:
        ValueError: mismatched shapes, non-finite scores, a positive outside the database, a query
            without positives (unless ``no_positive="zero"``), bad temperatures or ks.
    """
    deprecated = _only(dict(deprecated), ("tau1", "tau2", "chunk_size"), "recall_at_k_surrogate")
    deprecated["no_positive"] = no_positive
    new = legacy_rs_kwargs(deprecated, "recall_at_k_surrogate")
    tau, tau_star = new.get("tau", tau), new.get("tau_star", tau_star)  # type: ignore[assignment]
    no_positive = check_choice(deprecated["no_positive"], "no_positive", ("raise", "zero"))  # type: ignore[assignment]
    scores, positives = check_scores_targets(scores, positives, "scores", "positives")
    positives = positives.bool()
    database = _check_database(database, positives)
    loss = SmoothRecallAtK(ks, tau, tau_star, clip, normalization=normalization)
    has_pos = positives.any(1)
    if not bool(has_pos.all()) and no_positive == "raise":
        raise ValueError(f"{int((~has_pos).sum())} query(ies) have no positive (a row of positives is all False): "
                         "recall@k is undefined (use no_positive='zero')")
    out = loss.per_query(scores, positives.to(scores.dtype), database)
    return torch.where(has_pos, out, torch.zeros_like(out))


class RecallAtKSurrogate(SmoothRecallAtK):
    """Deprecated name of :class:`~rank_lab.losses.recall.SmoothRecallAtK` (RS@k, Patel thesis Eqs. 5.1-5.7).

    Same positional order as before (``ks, tau1, tau2``); building one emits a
    ``DeprecationWarning``. ``include_query_as_positive=True`` is refused as before (use
    ``SmoothRecallAtK(query_role="positive")`` for that variant).
    """

    def __init__(self, ks: Sequence[int] = DEFAULT_KS, tau1: float | Sequence[float] = 1.0, tau2: float = 0.01,
                 **kwargs: object) -> None:
        warn_deprecated("RecallAtKSurrogate is deprecated: use rank_lab.losses.SmoothRecallAtK (tau1 -> tau_star, "
                        "tau2 -> tau, include_query_in_rank=True -> query_role='competitor')")
        if kwargs.get("include_query_as_positive") or kwargs.get("query_role") == "positive":
            raise ValueError("RS@k never counts the query as its own positive; the official code ranks it as a "
                             "competitor: use include_query_in_rank=True (query_role='competitor')")
        check_float(tau2, "tau2", low=0.0, low_open=True)  # errors name this class' own arguments
        for t in (tau1,) if isinstance(tau1, (int, float)) else tuple(tau1):
            check_float(t, "tau1", low=0.0, low_open=True)
        super().__init__(ks, tau2, tau1, **kwargs)  # type: ignore[arg-type]

    @property
    def taus1(self) -> tuple[float, ...]:
        """Deprecated: :attr:`tau_star`."""
        return self.tau_star

    @property
    def tau2(self) -> float:
        """Deprecated: :attr:`tau`."""
        return self.tau

    @property
    def include_query_in_rank(self) -> bool:
        """Deprecated: ``query_role == "competitor"``."""
        return self.query_role == "competitor"
