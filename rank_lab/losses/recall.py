"""Recall@k surrogates: Smooth-R@k (RS@k, Patel et al. 2022) and Sup-R@k (SupRank, Ramzi et al.).

True recall of a query (Eq. 3.15 of the Ramzi thesis; Eq. 15 of SupRank; Eqs. 5.1-5.3 of the
Patel thesis)::

    TR@k = (1 / min(|P|, k)) sum_{p in P} H(k - rank(p))

Both surrogates replace the outer Heaviside by ``sigma((k - rank) / tau*)`` and average over a set
``K`` of k values (SupRank Eqs. 16-17; Patel thesis Eqs. 5.4-5.7); they differ in the inner rank:

* **Smooth-R@k / RS@k** (Patel, Tolias, Matas, CVPR 2022 "Recall@k Surrogate Loss with Large
  Batches and Similarity Mixup"; :class:`SmoothRecallAtK`): ``rank(p) = 1 + sum_{j != p}
  sigma((s_j - s_p) / tau)`` over *every* other item j (Eq. 5.5), ``tau = 0.01`` (the thesis'
  tau_2), ``tau* = 1`` (its tau_1), ``K = {1, 2, 4, 8, 16}`` (``{1, 2, 4, 8, 12, ..., 32}`` with
  SiMix, :data:`DEFAULT_KS_SIMIX`), and the training modification of Section 5.2: the numerator
  clipped at k and divided by ``min(k, |P|)`` (``normalization="min"``, default), so that the loss
  can reach 0 when a query has more than k positives; ``normalization="positives"`` is the plain
  Eq. 5.5 (divided by ``|P|``, not clipped). Optional SiMix (Eqs. 5.8-5.10,
  :mod:`rank_lab.losses.simix`).
* **Sup-R@k** (Eq. 3.16 of the Ramzi thesis; SupRank Eq. 16; :class:`SupRecallAtK`): ``rank =
  rank+ + rank_s^-`` with the exact rank+ and the SupRank ``H^-`` for rank-. SupRank follows
  Patel et al. for ``K`` and ``tau*``; its official code uses ``K = {1, 2, 4, 8, 16}``,
  ``tau* = 1`` and no clipping (``clip=False`` default, ``clip=True`` as an option).

**What is bounded.** The rank substitution of Sup-R@k is an upper bound (``rank_s >= rank``), and
``sigma((k - r)/tau*)`` decreases in r, so ``L_Sup-R@k >=`` the same loss with the exact rank inside
the same outer sigmoid. It is *not* an upper bound of ``1 - TR@k``: for a positive ranked beyond
k, ``sigma(.) > 0 = H(.)`` (Sec. 3.3.2 of the Ramzi thesis claims more; tested). As ``tau, tau* ->
0`` Smooth-R@k tends to Eq. 5.1 except that a positive at rank exactly k counts 1/2 (``sigma(0)``);
with ``tau* = 1`` it is a soft window of a few ranks around k.

**The query's own item** (``query_role``): the theses rank against ``B \\ q`` (``"excluded"``,
default); the official RS@k code keeps the query among the ranked items, so ``sigma(s_qq - s_qp) ~
1`` adds about one to every rank (``"competitor"``; with a memory that does not hold the query, its
self-similarity is added as one more item); the ROADMAP code keeps it as a positive
(``"positive"``).

The score-level functions (:func:`~rank_lab.losses.recall_at_k.recall_at_k_surrogate`,
:func:`~rank_lab.losses.recall_at_k.smooth_positive_ranks`) are in
:mod:`rank_lab.losses.recall_at_k`.

Per-k outer temperatures: ``tau_star`` may be a float or one value per k (an early commit of the
RS@k code used ``tau1_k = k``). A k larger than the retrieval set (whose term would be constant,
without gradient) is clipped to the set size with a ``UserWarning``, as the official RS@k code's
``min(k, batch - 1)`` (:func:`rank_lab.losses.base.reachable_ks`).

**Memory.** Only the ranks of the positives are built, in ``O(max_elements)`` blocks with a
recomputing backward (:func:`rank_lab.ranking.row_step_sums`): ``O(B P N)`` work, never the
``O(B^3)`` tensor of every pairwise comparison. ``impl="direct"`` is the literal ``(Q, N, N)`` form.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

import torch

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_float,
    check_index,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.losses._direct import direct_recall_loss
from rank_lab.losses.base import RankLoss, reachable_ks
from rank_lab.losses.prepared_batch import PreparedBatch, full_precision
from rank_lab.losses.registry import register_loss
from rank_lab.losses.simix import simix
from rank_lab.ranking.ranks import split_rank_rows_trusted
from rank_lab.ranking.row_kernel import positive_rows_trusted, row_step_sums_trusted
from rank_lab.ranking.steps import Heaviside, SigmoidStep, StepFunction, SupRankStep

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_KS_SIMIX",
    "SmoothRecallAtK",
    "SupRecallAtK",
    "recall_surrogate_from_ranks",
]

#: The k set without SiMix (Section 5.3.2 of the Patel thesis; SupRank's official code).
DEFAULT_KS: tuple[int, ...] = (1, 2, 4, 8, 16)
#: The k set with SiMix (Section 5.3.2 of the Patel thesis).
DEFAULT_KS_SIMIX: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)

Normalization = Literal["min", "positives"]


def _check_ks(
    ks: int | Sequence[int], tau_star: float | Sequence[float]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """``ks`` as a non-empty tuple of positive ints and one outer temperature per k."""
    if isinstance(ks, int) and not isinstance(ks, bool):
        ks = (ks,)
    if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
        raise TypeError(f"ks must be a non-empty sequence of positive ints, got {ks!r}")
    ks_t = tuple(
        check_positive_int(k.item() if isinstance(k, torch.Tensor) else k, "ks") for k in ks
    )
    if not ks_t:
        raise ValueError(f"ks must be a non-empty sequence of positive ints, got {ks!r}")
    taus = (tau_star,) * len(ks_t) if isinstance(tau_star, (int, float)) else tuple(tau_star)
    if len(taus) != len(ks_t):
        raise ValueError(
            f"tau_star must be a number or one value per k ({len(ks_t)}), got {len(taus)} values"
        )
    return ks_t, tuple(check_float(t, "tau_star", low=0.0, low_open=True) for t in taus)


def recall_surrogate_from_ranks(
    rank: torch.Tensor,
    q_idx: torch.Tensor,
    n_queries: int,
    ks: Sequence[int] = DEFAULT_KS,
    tau_star: float | Sequence[float] = 1.0,
    clip: bool = False,
    normalization: Normalization = "min",
) -> torch.Tensor:
    """Per-query ``1 - mean_k min(k?, sum_p sigma((k - rank(p))/tau*_k)) / norm_k`` (Eq. 3.16; Patel
    Eq. 5.5).

    Args:
        rank: ``(R,)`` (smooth or exact) ranks of the positive rows.
        q_idx: ``(R,)`` query of each row.
        n_queries: Q.
        ks, tau_star, clip: see :class:`SupRecallAtK` (``clip``: the numerator clipped at k).
        normalization: ``"min"`` (``norm_k = min(k, |P|)``) or ``"positives"`` (``|P|``).

    Returns:
        ``(Q,)`` per-query losses (1 for queries without rows).
    """
    ks_t, taus = _check_ks(ks, tau_star)
    check_choice(normalization, "normalization", ("min", "positives"))
    rank = as_tensor(rank, "rank")
    if rank.ndim != 1:
        raise ValueError(f"rank must be a (R,) vector of ranks, got shape {tuple(rank.shape)}")
    if not rank.is_floating_point():
        rank = rank.float()
    check_finite(rank, "rank")
    q_idx = check_index(
        q_idx, rank.shape[0], check_positive_int(n_queries, "n_queries"), "q_idx", "rank"
    ).to(rank.device)
    return _recall_from_ranks(rank, q_idx, n_queries, ks_t, taus, bool(clip), normalization)


def _recall_from_ranks(
    rank: torch.Tensor,
    q_idx: torch.Tensor,
    n_queries: int,
    ks_t: tuple[int, ...],
    taus: tuple[float, ...],
    clip: bool,
    normalization: str = "min",
) -> torch.Tensor:
    n_pos = torch.bincount(q_idx, minlength=n_queries).to(rank.dtype)
    total = rank.new_zeros(n_queries)
    for k, t in zip(ks_t, taus, strict=True):
        num = rank.new_zeros(n_queries).index_add(0, q_idx, torch.sigmoid((k - rank) / t))
        if clip:
            num = num.clamp(max=float(k))
        norm = n_pos.clamp(max=float(k)) if normalization == "min" else n_pos
        total = total + num / norm.clamp(min=1)
    return 1 - total / len(ks_t)


class _RecallLoss(RankLoss):
    """Base of the R@k surrogates: ``ks``, ``tau_star``, the count normalisation and the query
    roles."""

    pos_step: StepFunction
    neg_step: StepFunction
    query_roles = ("excluded", "positive", "competitor")

    def __init__(
        self,
        ks: Sequence[int],
        tau_star: float | Sequence[float],
        clip: bool | None,
        normalization: Normalization = "min",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.ks, self.tau_star = _check_ks(ks, tau_star)
        self.normalization = check_choice(normalization, "normalization", ("min", "positives"))
        self.clip = normalization == "min" if clip is None else bool(clip)

    def _ranks(
        self,
        scores: torch.Tensor,
        relevance: torch.Tensor,
        valid: torch.Tensor,
        q_idx: torch.Tensor,
        k_idx: torch.Tensor,
    ) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        return self.per_query_at(scores, relevance, valid, reachable_ks(self.ks, valid))

    def per_query_at(
        self,
        scores: torch.Tensor,
        relevance: torch.Tensor,
        valid: torch.Tensor,
        ks: tuple[int, ...],
    ) -> torch.Tensor:
        """:meth:`per_query` with the values of k already made reachable (:func:`reachable_ks`)."""
        if self.impl == "direct":
            return direct_recall_loss(
                scores,
                relevance,
                valid,
                self.pos_step,
                self.neg_step,
                ks,
                self.tau_star,
                self.clip,
                self.normalization,
            )
        q_idx, k_idx = positive_rows_trusted(relevance, valid)
        rank = self._ranks(scores, relevance, valid, q_idx, k_idx)
        return _recall_from_ranks(
            rank, q_idx, scores.shape[0], ks, self.tau_star, self.clip, self.normalization
        )

    def similarity_problem(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        ref_self_index: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``(scores, positives, database)`` triple the loss is computed on (all ``(Q, N)``;
        bool masks).

        Exposed for inspection (the book plots it) and for tests.
        """
        pb = self.prepare(embeddings, labels, ref_embeddings, ref_labels, ref_self_index)
        if self.query_role != "competitor":
            return pb.scores, (pb.relevance > 0) & pb.valid, pb.valid
        return _competitor_problem(pb, ref_self_index)

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
        """Loss of ``embeddings (B, d)``, ``labels (B,)|(B, L)`` against the batch or the refs
        (scalar, or ``(Q,)``)."""
        scores, positives, database = self.similarity_problem(
            embeddings, labels, ref_embeddings, ref_labels, ref_self_index
        )
        if getattr(self, "simix", False) or max(self.ks) >= database.shape[1]:
            return self.loss_from_scores(scores, positives.to(scores.dtype), database)
        # the common call leaves at most the query's own item out of its retrieval set: every query
        # ranks >= N - 1 items, so no k <= N - 1 needs clipping (no host sync to count them)
        return self.loss_from_scores(
            scores,
            positives.to(scores.dtype),
            database,
            per_query=functools.partial(self.per_query_at, ks=self.ks),
        )

    def extra_repr(self) -> str:
        taus = self.tau_star if len(set(self.tau_star)) > 1 else self.tau_star[0]
        return (
            f"ks={self.ks}, tau_star={taus}, clip={self.clip}, "
            f"normalization={self.normalization!r}, query_role={self.query_role!r}, "
            f"impl={self.impl!r}"
        )


def _competitor_problem(
    pb: PreparedBatch, ref_self_index: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The query's own item ranked as a non-positive (official RS@k code); ``pb`` keeps the query's
    item."""
    q = pb.scores.shape[0]
    if pb.in_batch:
        self_index = torch.arange(q, device=pb.scores.device)
    elif ref_self_index is not None:
        self_index = torch.as_tensor(ref_self_index, device=pb.scores.device).long()
    else:
        self_index = torch.full((q,), -1, dtype=torch.long, device=pb.scores.device)
    positives = (pb.relevance > 0) & pb.valid
    rows = torch.nonzero(self_index >= 0).squeeze(1)
    positives[rows, self_index[rows]] = False  # ranked as a competitor, never a positive
    absent = self_index < 0
    if not bool(absent.any()):
        return pb.scores, positives, pb.valid
    # the query is not among the refs: its self-similarity is one more item of its database
    s_qq = (pb.embeddings * pb.embeddings).sum(1, keepdim=True).to(pb.scores.dtype)
    return (
        torch.cat([pb.scores, s_qq], dim=1),
        torch.cat([positives, positives.new_zeros(q, 1)], dim=1),
        torch.cat([pb.valid, absent[:, None]], dim=1),
    )


@register_loss("smooth_recall")
class SmoothRecallAtK(_RecallLoss):
    """Smooth-R@k / RS@k, the Recall@k Surrogate loss (Patel thesis Eqs. 5.4-5.7; Patel et al.
    2022).

    ``1 - mean_{k in K} min(k, sum_p sigma_{tau*}(k - r~(p))) / min(k, |P|)`` with the sigmoid rank
    ``r~(p) = 1 + sum_{j != p} sigma_tau(s_j - s_p)`` (Eq. 5.5 and the training modification of
    Section 5.2), averaged over the queries; with ``simix=True`` the batch is first expanded with
    the SiMix virtual examples of every same-class pair (Eqs. 5.8-5.10, Algorithm 3), which are
    queries and database items alike.

    Args:
        ks: the set K (:data:`DEFAULT_KS`; :data:`DEFAULT_KS_SIMIX` with SiMix, Section 5.3.2).
        tau: temperature of the sigmoid step on score differences (0.01; Patel's tau_2).
        tau_star: temperature of the sigmoid on ``k - rank`` (1.0; Patel's tau_1), a float or one
            value per k.
        clip: clip the numerator at k (default: with ``normalization="min"``).
        normalization: ``"min"`` (divide by ``min(k, |P|)``, Section 5.2, default) or
            ``"positives"`` (plain Eq. 5.5: divide by ``|P|``).
        simix: expand the batch with SiMix virtual examples (in-batch call only).
        exclude_self_mixtures: with SiMix, remove from a query's positives and database the virtual
            examples made from the query itself (default False, like the thesis and the code).
        max_virtual: cap on the number of SiMix virtual examples (random subset); None = all.
        seed: seed of the generator of the SiMix mixing coefficients (None: the global RNG).
        **kwargs: ``query_role`` (``"excluded"``, ``"positive"`` or ``"competitor"``: the official
            code), ``impl``, ``max_elements``, ``no_positive``, ``normalize``, ``reduction``,
            ``hierarchy_level`` (see :class:`~rank_lab.losses.base.RankLoss`).

    Shapes:
        ``forward(embeddings (B, d), labels (B,)|(B, L)[, ref_embeddings (N, d), ref_labels])``;
        ``forward_scores(scores (Q, N), targets (Q, N))``. Output: scalar or ``(Q,)``.
    """

    def __init__(
        self,
        ks: Sequence[int] = DEFAULT_KS,
        tau: float = 0.01,
        tau_star: float | Sequence[float] = 1.0,
        clip: bool | None = None,
        *,
        normalization: Normalization = "min",
        simix: bool = False,
        exclude_self_mixtures: bool = False,
        max_virtual: int | None = None,
        seed: int | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(ks, tau_star, clip, normalization, **kwargs)
        self.pos_step = self.neg_step = SigmoidStep(tau)  # type: ignore[arg-type]
        self.tau = self.pos_step.tau
        self.simix, self.exclude_self_mixtures = bool(simix), bool(exclude_self_mixtures)
        if self.simix and self.query_role == "positive":
            raise ValueError(
                "query_role='positive' cannot be combined with simix: use 'excluded' or "
                "'competitor'"
            )
        self.max_virtual = (
            None if max_virtual is None else check_nonneg_int(max_virtual, "max_virtual")
        )
        self.seed = None if seed is None else check_nonneg_int(seed, "seed")
        self._generator: torch.Generator | None = None

    def _ranks(self, scores, relevance, valid, q_idx, k_idx):  # type: ignore[no-untyped-def]
        sums = row_step_sums_trusted(
            scores,
            q_idx,
            k_idx,
            self.pos_step,
            ("all",),
            valid=valid,
            relevance=relevance,
            max_elements=self.max_elements,
            rows_are_top=True,
        )
        return 1 + sums[:, 0]

    def _gen(self, device: torch.device) -> torch.Generator | None:
        if self.seed is None:
            return None
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(int(self.seed))
        return self._generator

    def similarity_problem(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        ref_self_index: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``(scores, positives, database)`` triple the loss is computed on (with SiMix:
        ``B u B^``)."""
        if not self.simix:
            return super().similarity_problem(
                embeddings, labels, ref_embeddings, ref_labels, ref_self_index
            )
        if ref_embeddings is not None or ref_labels is not None:
            raise ValueError(
                "SiMix mixes in-batch similarities: it cannot be used with ref_embeddings"
            )
        pb = self.prepare(embeddings, labels)
        lab = pb.labels[:, self.hierarchy_level] if pb.labels.ndim == 2 else pb.labels
        batch = simix(
            pb.embeddings,
            lab,
            generator=self._gen(pb.embeddings.device),
            max_virtual=self.max_virtual,
            scores=pb.scores,
        )
        return batch.ranking_problem(
            exclude_self_mixtures=self.exclude_self_mixtures,
            query_is_competitor=self.query_role == "competitor",
        )

    def extra_repr(self) -> str:
        return f"tau={self.tau}, {super().extra_repr()}, simix={self.simix}"


@register_loss("sup_recall")
class SupRecallAtK(_RecallLoss):
    """Sup-R@K loss (Eq. 3.16-3.17 of the Ramzi thesis; SupRank Eq. 16-17).

    ``1 - mean_{k in K} (1/min(|P|, k)) sum_p sigma((k - rank+(p) - rank_s^-(p)) / tau*)``.

    Args:
        ks: the set K (``{1, 2, 4, 8, 16}``: SupRank follows Patel et al.; official code).
        tau_star: outer temperature (1.0; official code).
        clip: clip the numerator at k (False: SupRank Eq. 16 and code; True: Patel's variant).
        tau, rho, delta, eps, start, offset, linear_origin, zero_branch: the SupRank ``H^-``.
        **kwargs: ``normalization``, ``query_role`` and the options of
            :class:`~rank_lab.losses.base.RankLoss`.
    """

    def __init__(
        self,
        ks: Sequence[int] = DEFAULT_KS,
        tau_star: float | Sequence[float] = 1.0,
        clip: bool = False,
        tau: float = 0.01,
        rho: float = 100.0,
        delta: float | None = None,
        eps: float = 1e-2,
        start: float = 0.5,
        offset: float | None = None,
        linear_origin: str = "delta",
        zero_branch: str = "upper",
        **kwargs: object,
    ) -> None:
        super().__init__(ks, tau_star, clip, **kwargs)  # type: ignore[arg-type]
        self.pos_step = Heaviside()
        self.neg_step = SupRankStep(tau, rho, delta, eps, start, offset, linear_origin, zero_branch)  # type: ignore[arg-type]

    def _ranks(self, scores, relevance, valid, q_idx, k_idx):  # type: ignore[no-untyped-def]
        rank_pos, rank_neg = split_rank_rows_trusted(
            scores,
            relevance,
            q_idx,
            k_idx,
            self.neg_step,
            valid=valid,
            max_elements=self.max_elements,
            binary=True,
        )
        return rank_pos + rank_neg
