"""Common calling convention of every loss of :mod:`rank_lab.losses`.

Every loss is a :class:`torch.nn.Module` called as::

    loss(embeddings, labels)                                   # in-batch: each item queries the batch
    loss(embeddings, labels, ref_embeddings, ref_labels)       # queries = batch, retrieval set = refs
    loss(..., ref_self_index=slots)                            # where each query sits inside the refs

* ``embeddings (B, d)`` float; ``labels (B,)`` int, or ``(B, L)`` hierarchical with the fine level
  in column 0; binary losses use column ``hierarchy_level`` (default 0).
* Embeddings are L2-normalised inside the loss (``normalize=True``) so that scores are cosine
  similarities ``s = v_q^T v_j`` (Sec. 2.0 of the Ramzi thesis); pass ``normalize=False`` when the
  model already normalises.
* The query itself: in-batch, the query is also an item of the retrieval set. ``query_role`` says
  what it is there: ``"excluded"`` (default; the thesis/papers' ``B \\ q``: its column is removed),
  ``"positive"`` (kept as a positive with ``s = 1``: official ROADMAP/HAPPIER/SupRank code) or
  ``"competitor"`` (kept and ranked, never a positive: official RS@k code; only the R@k
  surrogates, :mod:`rank_lab.losses.recall`). With a memory, pass ``ref_self_index`` (the memory
  slot of each query, ``-1`` if absent) to get the same choice; without it, nothing is removed.
* ``reduction``: ``"mean"`` (over queries that have a positive), ``"sum"`` or ``"none"`` (``(B,)``).
* Scores are computed in float32 even under autocast (half precision is too coarse for
  temperatures of 0.01).

The call is checked and turned into scores, relevance and the retrieval mask by
:func:`rank_lab.losses.prepared_batch.prepare_batch`; this module holds the base classes
(:class:`MetricLoss`, :class:`ListwiseLoss`, :class:`RankLoss`) and the reductions over queries.
"""  # noqa: E501

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

import torch
from torch import nn

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_index,
    check_positive_int,
    check_scores_targets,
    trusts_inputs,
)
from rank_lab.losses.prepared_batch import (
    PreparedBatch,
    QueryRole,
    check_query_role,
    full_precision,
    prepare_batch,
)
from rank_lab.vocabulary import NoPositive

__all__ = [
    "Reduction",
    "reduce_per_query",
    "MetricLoss",
    "ListwiseLoss",
    "RankLoss",
    "per_query_mean",
]

Reduction = Literal["mean", "sum", "none"]


def reduce_per_query(
    values: torch.Tensor, keep: torch.Tensor, reduction: Reduction
) -> torch.Tensor:
    """Reduce per-query losses ``(Q,)`` over the queries where ``keep`` is True.

    ``"none"`` returns ``(Q,)`` with 0 for the dropped queries (they get no gradient); ``"mean"``
    divides by the number of kept queries (0 when none is kept).

    Args:
        values: ``(Q,)`` floating per-query losses; finite where ``keep`` (a dropped query may hold
            any value, e.g. a 0/0 of a query without positives).
        keep: ``(Q,)`` bool.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Raises:
        ValueError / TypeError: naming ``values``, ``keep`` or ``reduction``.
    """
    check_choice(reduction, "reduction", ("mean", "sum", "none"))
    values = _row_values(values, "values")
    keep = as_tensor(keep, "keep")
    if keep.dtype != torch.bool:
        raise TypeError(f"keep must be a bool tensor, got dtype {keep.dtype}")
    if keep.shape != values.shape:
        raise ValueError(
            f"keep has shape {tuple(keep.shape)} but values has shape {tuple(values.shape)}"
        )
    check_finite(values[keep.to(values.device)], "values")
    return reduce_kept(values, keep.to(values.device), reduction)


def _row_values(values: object, name: str) -> torch.Tensor:
    """A non-empty 1-D floating tensor, or raise naming ``name``."""
    values = as_tensor(values, name)
    if values.ndim != 1 or values.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 1-D tensor, got shape {tuple(values.shape)}")
    if not values.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got dtype {values.dtype}")
    return values


def reduce_kept(values: torch.Tensor, keep: torch.Tensor, reduction: str) -> torch.Tensor:
    """:func:`reduce_per_query` without the checks (the losses' inner call)."""
    values = torch.where(keep, values, torch.zeros_like(values))
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    if reduction == "mean":
        return values.sum() / keep.sum().clamp(min=1)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


class MetricLoss(nn.Module):
    """Base class: the common call of every loss (see the module docstring).

    Args:
        normalize: L2-normalise embeddings inside the loss.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        query_role: the role of the query's own item in its retrieval set: ``"excluded"``
            (default, the papers' ``B \\ q``), ``"positive"`` (official code) or, for the losses
            whose
            :attr:`query_roles` hold it, ``"competitor"`` (see the module docstring).
        hierarchy_level: label column used for binary relevance with ``(N, L)`` labels.
    """

    #: False for losses that ignore ``ref_embeddings`` (proxy losses); a memory wrapper uses it.
    uses_references: bool = True
    #: The values of ``query_role`` this loss supports.
    query_roles: tuple[str, ...] = ("excluded", "positive")

    def __init__(
        self,
        *,
        normalize: bool = True,
        reduction: Reduction = "mean",
        query_role: QueryRole = "excluded",
        hierarchy_level: int = 0,
    ) -> None:
        super().__init__()
        self.normalize = bool(normalize)
        self.reduction = check_choice(reduction, "reduction", ("mean", "sum", "none"))
        self.query_role = check_query_role(query_role, type(self).__name__, type(self).query_roles)
        if (
            isinstance(hierarchy_level, bool)
            or not isinstance(hierarchy_level, int)
            or hierarchy_level < 0
        ):
            raise ValueError(f"hierarchy_level must be an int >= 0, got {hierarchy_level!r}")
        self.hierarchy_level = hierarchy_level

    def prepare(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        ref_self_index: torch.Tensor | None = None,
    ) -> PreparedBatch:
        """:func:`prepare_batch` with this loss' options (a ``"competitor"`` query role gets the
        ``"positive"`` batch: the loss then keeps the query's own item as a non-positive)."""
        return prepare_batch(
            embeddings,
            labels,
            ref_embeddings,
            ref_labels,
            ref_self_index=ref_self_index,
            normalize=self.normalize,
            hierarchy_level=self.hierarchy_level,
            query_role="excluded" if self.query_role == "excluded" else "positive",
            trusted=trusts_inputs(self),
        )

    @full_precision
    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        *,
        ref_self_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Loss of ``embeddings (B, d)`` with ``labels (B,)|(B, L)`` against the batch or the
        refs."""
        return self.loss_from_batch(
            self.prepare(embeddings, labels, ref_embeddings, ref_labels, ref_self_index)
        )

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


_DEFERRED = "_rank_lab_deferred_no_positive"


@contextlib.contextmanager
def deferred_no_positive(modules: Iterable[nn.Module]) -> Iterator[None]:
    """Inside the block, the :class:`ListwiseLoss` parts of ``modules`` defer their no-positive
    rule; on leaving it (without an exception) every deferred rule is checked in one host sync, in
    call order, with each part's own message (:meth:`ListwiseLoss.no_positive_rule`).

    For a combination of losses that calls several parts on one batch
    (:class:`rank_lab.losses.SigmaLoss`, one part per label level): a part without positives still
    computes its (discarded) values, as its skipped queries do, and the first failing part raises as
    it would have alone.
    """
    parts = [m for mod in modules for m in mod.modules() if isinstance(m, ListwiseLoss)]
    parts = list({id(m): m for m in parts}.values())
    before = [m.__dict__.get(_DEFERRED) for m in parts]
    pending: list[tuple[ListwiseLoss, torch.Tensor]] = []
    for m in parts:
        m.__dict__[_DEFERRED] = pending
    try:
        yield
    finally:
        for m, b in zip(parts, before, strict=True):
            if b is None:
                m.__dict__.pop(_DEFERRED, None)
            else:
                m.__dict__[_DEFERRED] = b
    if pending:
        stats = torch.stack([torch.stack([(~h).sum(), h.any().long()]) for _, h in pending])
        # the one host sync
        for (loss, _), (n_bad, any_positive) in zip(pending, stats.tolist(), strict=True):
            loss.no_positive_rule(n_bad, bool(any_positive))


class ListwiseLoss(MetricLoss):
    """Base of the listwise losses ``1 - mean_q metric_q`` (AP, R@k surrogates and baselines).

    Subclasses implement :meth:`per_query` on scores. Besides the embedding call, the score-level
    call :meth:`forward_scores` takes ``scores (Q, N)`` and ``targets (Q, N)`` directly (the toy
    examples of the papers are given as scores).

    Args:
        no_positive: queries without a positive (:data:`~rank_lab.vocabulary.NoPositive`) are
            ``"skip"``-ped (default; a ``ValueError`` if no query has one) or ``"raise"`` a
            ``ValueError``.
        **kwargs: see :class:`MetricLoss`.
    """

    def __init__(self, *, no_positive: NoPositive = "skip", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.no_positive = check_choice(no_positive, "no_positive", ("skip", "raise"))

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:  # pragma: no cover
        """Per-query loss ``(Q,)`` (any value for queries without positives)."""
        raise NotImplementedError

    @full_precision
    def forward_scores(
        self, scores: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Loss from ``scores (Q, N)`` and relevance ``targets (Q, N)`` (> 0 = positive).

        Args:
            scores: ``(Q, N)`` float scores (gradients flow to them).
            targets: ``(Q, N)`` bool/0-1 relevance.
            valid: ``(Q, N)`` bool retrieval-set mask (None = every item).

        Returns:
            Scalar, or ``(Q,)`` with ``reduction="none"``.
        """
        scores, targets = check_scores_targets(scores, targets, "scores", "targets")
        rel = (targets > 0).to(scores.dtype)
        if valid is None:
            valid = torch.ones_like(scores, dtype=torch.bool)
        elif valid.shape != scores.shape:
            raise ValueError(
                f"valid has shape {tuple(valid.shape)} but scores has shape {tuple(scores.shape)}"
            )
        return self.loss_from_scores(
            scores, rel, torch.as_tensor(valid, device=scores.device).bool()
        )

    def loss_from_scores(
        self,
        scores: torch.Tensor,
        relevance: torch.Tensor,
        valid: torch.Tensor,
        per_query: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """:meth:`forward_scores` of checked inputs (``relevance`` 0 / 1 in the scores' dtype,
        ``valid`` bool): the no-positive rule (one host sync), :meth:`per_query` (or ``per_query``)
        and the reduction."""
        rel = relevance
        has_pos = ((rel > 0) & valid).any(1)
        pending = self.__dict__.get(_DEFERRED)
        # a combination checks every part's rule in one sync (deferred_no_positive)
        if pending is not None:
            pending.append((self, has_pos))
        elif not bool(has_pos.all()):
            self.no_positive_rule(int((~has_pos).sum()), bool(has_pos.any()))
        values = (per_query or self.per_query)(scores, rel, valid)
        return reduce_kept(values, has_pos, self.reduction)

    def no_positive_rule(self, n_bad: int, any_positive: bool) -> None:
        """Raise for ``n_bad > 0`` queries without a positive: with ``no_positive="raise"``, or when
        no query has one (``any_positive`` False); return otherwise (the queries are skipped)."""
        if n_bad == 0:
            return
        if self.no_positive == "raise":
            raise ValueError(
                f"{n_bad} query(ies) have no positive in their retrieval set (labels / ref_labels "
                "/ targets; no_positive='raise')"
            )
        if not any_positive:
            raise ValueError(
                "no query has a positive in its retrieval set (no label of labels is shared by "
                "another item of the batch or of ref_labels; no row of targets has a positive): "
                "use an m-per-class sampler (rank_lab.data.MPerClassSampler) or a memory"
            )

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:
        return self.loss_from_scores(batch.scores, batch.relevance, batch.valid)


class RankLoss(ListwiseLoss):
    """Base of the rank-surrogate losses with two implementations (SmoothAP, SupAP, R@k surrogates).

    Args:
        impl: ``"efficient"`` (``O(Q * P * N)`` memory, chunked; default) or ``"direct"`` (the
            ``(Q, N, N)`` reference formulation of the papers' code).
        max_elements: block size of the efficient kernel (None = device default).
        **kwargs: see :class:`ListwiseLoss`.
    """

    def __init__(
        self,
        *,
        impl: Literal["efficient", "direct"] = "efficient",
        max_elements: int | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.impl = check_choice(impl, "impl", ("efficient", "direct"))
        self.max_elements = max_elements


def reachable_ks(ks: tuple[int, ...], database: torch.Tensor, name: str = "ks") -> tuple[int, ...]:
    """Clip each k to the retrieval-set size, with a warning (the rule of the R@k surrogates).

    A query ranked against ``n`` items has ranks ``1..n``: for ``k > n`` every positive is inside
    the top k whatever the scores, so that k's term of the surrogate is constant (RS@k with
    ``ks=(50,)`` on a batch of 12 was a loss of 0 with no gradient). Such a k is replaced by ``n``,
    the smallest retrieval set of the batch, as the official RS@k code does (``min(k, batch - 1)``),
    and a ``UserWarning`` names the clipped values.

    Args:
        ks: the surrogate's values of k.
        database: ``(Q, N)`` bool, the items each query is ranked against.

    Returns:
        The values of k to use (same length and order as ``ks``).
    """
    if database.numel() == 0:
        return ks
    n_items = int(database.sum(1).min())
    if n_items < 1 or max(ks) <= n_items:
        return ks
    warnings.warn(
        f"{name} holds k={sorted({k for k in ks if k > n_items})} but a query is ranked against "
        f"only {n_items} item(s): such k are clipped to {n_items} (their term would be constant, "
        f"without gradient). Pass {name} <= {n_items}, a larger batch or a cross-batch memory to "
        "silence this.",
        stacklevel=3,
    )
    return tuple(min(k, n_items) for k in ks)


def per_query_mean(values: torch.Tensor, q_idx: torch.Tensor, n_queries: int) -> torch.Tensor:
    """Mean of row values ``(R,)`` per query, ``(Q,)`` (0 for queries without rows).

    Args:
        values: ``(R,)`` finite floating values of the rows.
        q_idx: ``(R,)`` query of each row, in ``[0, n_queries)``.
        n_queries: Q.
    """
    values = _row_values(values, "values")
    check_finite(values, "values")
    q_idx = check_index(
        q_idx, values.shape[0], check_positive_int(n_queries, "n_queries"), "q_idx", "values"
    ).to(values.device)
    return per_query_mean_trusted(values, q_idx, n_queries)


def per_query_mean_trusted(
    values: torch.Tensor, q_idx: torch.Tensor, n_queries: int
) -> torch.Tensor:
    """:func:`per_query_mean` of checked inputs (the losses' kernel: no check, no host sync)."""
    sums = values.new_zeros(n_queries).index_add(0, q_idx, values)
    counts = torch.bincount(q_idx, minlength=n_queries).to(values.dtype)
    return sums / counts.clamp(min=1)
