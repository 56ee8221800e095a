"""Hierarchical rank losses: Sup-H-AP / HAPPIER, Smooth-H-AP, Sup-NDCG / ROD-NDCG (Ramzi thesis ch.
4).

Same call as every loss (:mod:`rank_lab.losses.base`): ``loss(embeddings (B, d), labels (B, L))``
or ``loss(embeddings, labels, ref_embeddings (N, d), ref_labels (N, L))``, labels fine first. The
shared level of every (query, item) pair (:func:`rank_lab.metrics.hierarchy.relevance.shared_level`)
gives a graded relevance per query, computed over the query's retrieval set (the batch, or the
memory):

* :class:`SupHAP` -- ``L_Sup-H-AP`` (Eq. 4.10; SupRank Eq. 21)::

      1 - (1 / sum_k rel(k)) sum_{k in Omega+} H-rank(k) / (rank+(k) + rank_s^-(k))

  ``H-rank`` and ``rank+ = 1 + #{j != k: rel(j) >= rel(k), s_j >= s_k}`` are exact (Heaviside, no
  gradient); ``rank_s^-(k) = sum_{rel(j) < rel(k)} H^-(s_j - s_k)`` runs over *every* strictly less
  relevant item, partially relevant ones included (thesis §4.2.3), with the SupRank ``H^-``.
  Relevance Eq. 4.7 (``alpha``) or the Property-1 relevance (``relevance="weighted_ap"``).
* :class:`SmoothHAP` -- the sigmoid ablation of Tab. 4.7 (Smooth-AP style): every Heaviside of
  H-rank and rank replaced by ``sigma(t / tau)``.
* :class:`SupNDCG` -- ``L_Sup-NDCG`` (Eqs. 4.13-4.14; SupRank Eq. 24): gains ``2^l - 1``,
  ``DCG_s = sum_k g_k / log2(1 + rank+(k) + rank_s^-(k))``, exact iDCG.
* The presets HAPPIER, HAPPIER_F and ROD-NDCG (the ROD combination ``(1 - lambda) L + lambda L*_DG``
  of Eqs. 4.11 and 4.15 with the fine-level NormSoftmax proxies) are in
  :mod:`rank_lab.losses.presets`.

Upper bounds (thesis §4.2.3-4.2.4): numerators exact, ``rank_s^- >= rank^-`` since ``H^- >= H``,
so ``L_Sup-H-AP >= 1 - H-AP`` and ``L_Sup-NDCG >= 1 - NDCG`` (tested on tie-free scores). With
tied scores the exact terms follow ``H(0) = 1`` (a tied item counts as ranked before, as in the
rank losses), which is not the worst-case order of the metrics, so the bound is only guaranteed
for distinct scores (ties have probability zero with continuous embeddings).

**Memory.** Only rows k that are positives (rel > 0) are built, in chunks: ``O(chunk * N)`` peak
memory, the ``O(B * P * N)`` discipline of the rank losses (:func:`rank_lab.ranking.row_step_sums`
for the rank+/rank- sums; a checkpointed chunk loop for the relevance-weighted sums).
``impl="direct"`` is the literal ``(Q, N, N)`` formulation of the official code (tests, benchmark).

Paper vs code: the official HAPPIER code keeps the query in its own retrieval set as a positive
(``query_role="positive"`` here) and counts ``|Omega^(l)|`` with it; it uses ``delta=0.05``
and ``offset=1.44`` (``SupRankStep`` options); λ = 0.5 in its HAPPIER_F SOP config (paper: silent).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch.utils.checkpoint import checkpoint

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_float,
    check_index,
    check_positive_int,
    check_scores_targets,
)
from rank_lab.losses._direct import direct_rank_terms
from rank_lab.losses.base import RankLoss, reduce_kept
from rank_lab.losses.prepared_batch import PreparedBatch, full_precision
from rank_lab.losses.registry import register_loss
from rank_lab.metrics.hierarchy.relevance import (
    as_hierarchical_labels,
    level_counts_trusted,
    level_weights,
    relevance_table_trusted,
    shared_level,
)
from rank_lab.ranking.ranks import pairwise_differences, split_rank_rows_trusted
from rank_lab.ranking.row_kernel import chunk_rows, positive_rows_trusted, row_step_sums_trusted
from rank_lab.ranking.steps import Heaviside, SigmoidStep, StepFunction, SupRankStep

__all__ = [
    "HierarchicalRankLoss",
    "SupHAP",
    "SmoothHAP",
    "SupNDCG",
    "weighted_lower_sums",
]


def _weighted_chunk(scores, rel, valid, qi, ki, step, weight):  # type: ignore[no-untyped-def]
    rows = scores[qi]  # (c, N)
    sk = rows.gather(1, ki[:, None])
    rr = rel[qi]
    rk = rr.gather(1, ki[:, None])
    if weight == "lower":  # rel(j) * step(D) over 0 < rel(j) < rel(k)
        mask = valid[qi] & (rr < rk) & (rr > 0)
        w = rr
    else:  # "min": min(rel(k), rel(j)) * step(D) over j != k
        mask = valid[qi]  # advanced indexing: a copy
        mask[torch.arange(qi.numel(), device=qi.device), ki] = False
        w = torch.minimum(rr, rk)
    if isinstance(step, Heaviside):  # exact: no float step tensor
        hit = rows >= sk if step.zero_value == 1.0 else rows > sk
        return (w * (mask & hit)).sum(1)
    return (torch.where(mask, w, torch.zeros_like(w)) * step(rows - sk)).sum(1)


def weighted_lower_sums(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    step: StepFunction,
    *,
    weight: Literal["lower", "min"] = "lower",
    max_elements: int | None = None,
) -> torch.Tensor:
    """Relevance-weighted step sums for a list of rows ``(q, k)``, in ``O(chunk * N)`` memory.

    ``weight="lower"``: ``sum_{j: 0 < rel(j) < rel(k)} rel(j) step(s_j - s_k)`` (the partial credit
    of less relevant positives in H-rank, Eq. 4.2). ``weight="min"``: ``sum_{j != k}
    min(rel(k), rel(j)) step(s_j - s_k)``. Differentiable steps are chunked with activation
    checkpointing (each chunk is recomputed in the backward pass).

    Args:
        scores: ``(Q, N)`` finite scores (a ``(N,)`` vector is one query).
        relevance: ``(Q, N)`` graded relevance ``>= 0``.
        valid: ``(Q, N)`` bool retrieval-set mask.
        q_idx, k_idx: ``(R,)`` query and item of each row (e.g.
            :func:`rank_lab.ranking.positive_rows`).
        step: the step function (:mod:`rank_lab.ranking.steps`).
        weight: ``"lower"`` or ``"min"``.
        max_elements: block size (None = device default).

    Returns:
        ``(R,)`` tensor (R = number of rows).
    """
    scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    valid = as_tensor(valid, "valid").to(scores.device)
    if valid.dtype != torch.bool or valid.shape != scores.shape:
        raise ValueError(
            f"valid must be a bool tensor of the scores' shape {tuple(scores.shape)}, got "
            f"{valid.dtype} {tuple(valid.shape)}"
        )
    q_idx = as_tensor(q_idx, "q_idx")
    if q_idx.ndim != 1:
        raise ValueError(
            f"q_idx must be a (R,) vector of query indices, got shape {tuple(q_idx.shape)}"
        )
    q_idx = check_index(q_idx, q_idx.shape[0], scores.shape[0], "q_idx", "the rows").to(
        scores.device
    )
    k_idx = check_index(k_idx, q_idx.shape[0], scores.shape[1], "k_idx", "q_idx").to(scores.device)
    if not isinstance(step, StepFunction):
        raise TypeError(f"step must be a rank_lab.ranking StepFunction, got {type(step).__name__}")
    check_choice(weight, "weight", ("lower", "min"))
    if max_elements is not None:
        check_positive_int(max_elements, "max_elements")
    return _weighted_lower_sums(
        scores,
        relevance.to(scores.dtype),
        valid,
        q_idx,
        k_idx,
        step,
        weight=weight,
        max_elements=max_elements,
    )


def _weighted_lower_sums(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    step: StepFunction,
    *,
    weight: str = "lower",
    max_elements: int | None = None,
) -> torch.Tensor:
    """:func:`weighted_lower_sums` without the checks (the losses' inner call)."""
    out = []
    chunk = chunk_rows(scores.shape[1], max_elements, scores.device)
    grad = step.differentiable and scores.requires_grad and torch.is_grad_enabled()
    for a in range(0, q_idx.numel(), chunk):
        qi, ki = q_idx[a : a + chunk], k_idx[a : a + chunk]
        if grad:
            out.append(
                checkpoint(
                    _weighted_chunk,
                    scores,
                    relevance,
                    valid,
                    qi,
                    ki,
                    step,
                    weight,
                    use_reentrant=False,
                )
            )
        else:
            with torch.no_grad():
                out.append(_weighted_chunk(scores.detach(), relevance, valid, qi, ki, step, weight))
    return torch.cat(out) if out else scores.new_zeros(0)


class HierarchicalRankLoss(RankLoss):
    """Base of the hierarchical rank losses: graded relevance from ``(B, L)`` labels.

    Args:
        relevance: ``"hap"`` (Eq. 4.7), ``"weighted_ap"`` (Property 1; needs ``weights``) or
            ``"ndcg"`` (``2^l - 1``).
        alpha: alpha of Eq. 4.7 (1: HAPPIER; 5 / 3: HAPPIER_F on SOP / iNat).
        weights: ``w_1..w_L`` of Property 1.
        level_mode: ``"lca"`` or ``"count"`` (see
            :func:`rank_lab.metrics.hierarchy.relevance.shared_level`).
        **kwargs: ``impl``, ``max_elements`` (:class:`~rank_lab.losses.base.RankLoss`),
            ``no_positive``, ``normalize``, ``reduction``, ``query_role``.

    Calls: ``loss(embeddings, labels[, ref_embeddings, ref_labels])``;
    ``forward_levels(scores (Q, N), levels (Q, N) ints in [0, L], valid, n_levels)``;
    ``forward_relevance(scores (Q, N), relevance (Q, N) >= 0, valid)`` (e.g. Algorithm 1's
    multi-label relevance).
    """

    default_relevance = "hap"

    def __init__(
        self,
        *,
        relevance: str | None = None,
        alpha: float = 1.0,
        weights: torch.Tensor | list[float] | None = None,
        level_mode: Literal["lca", "count"] = "lca",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.relevance_kind = check_choice(
            relevance or self.default_relevance, "relevance", ("hap", "weighted_ap", "ndcg")
        )
        alpha = check_float(alpha, "alpha", low=0.0, low_open=True)
        if self.relevance_kind == "weighted_ap" and weights is None:
            raise ValueError("relevance='weighted_ap' needs weights w_1..w_L")
        if isinstance(weights, torch.Tensor):
            # checked per call against L on the host (no device sync)
            weights = weights.detach().cpu()
        self.alpha, self.weights = float(alpha), weights
        self.level_mode = check_choice(level_mode, "level_mode", ("lca", "count"))

    def relevance_from_levels(
        self, levels: torch.Tensor, n_levels: int, valid: torch.Tensor, dtype: torch.dtype
    ) -> torch.Tensor:
        """``(Q, N)`` relevance, level sets counted over the valid items (the retrieval set).

        Trusted kernels (validate once): ``levels`` ``(Q, N)`` long in ``[0, n_levels]`` (from
        :func:`~rank_lab.metrics.hierarchy.relevance.shared_level` or checked by
        :meth:`forward_levels`) and ``valid`` ``(Q, N)`` bool; the counts they give are level-set
        sizes by construction."""
        # CPU: no device sync
        weights = (
            level_weights(self.weights, n_levels) if self.relevance_kind == "weighted_ap" else None
        )
        table = relevance_table_trusted(
            level_counts_trusted(levels, n_levels, valid),
            n_levels,
            self.relevance_kind,  # type: ignore[arg-type]
            alpha=self.alpha,
            weights=weights,
        )
        return torch.where(
            valid, table.gather(1, levels), torch.zeros_like(table.gather(1, levels))
        ).to(dtype)

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:
        lab = as_hierarchical_labels(batch.labels)
        ref = as_hierarchical_labels(batch.ref_labels, name="ref_labels")
        levels = shared_level(lab, ref, mode=self.level_mode)
        rel = self.relevance_from_levels(levels, lab.shape[1], batch.valid, batch.scores.dtype)
        return self.loss_from_relevance(batch.scores, rel, batch.valid)

    @full_precision
    def forward_levels(
        self,
        scores: torch.Tensor,
        levels: torch.Tensor,
        valid: torch.Tensor | None = None,
        n_levels: int | None = None,
    ) -> torch.Tensor:
        """Loss from ``scores (Q, N)`` and shared ``levels (Q, N)`` in ``[0, n_levels]``."""
        scores, levels = check_scores_targets(scores, levels, "scores", "levels")
        if levels.is_floating_point() or levels.dtype == torch.bool:
            raise TypeError(f"levels must hold integers, got dtype {levels.dtype}")
        levels = levels.long()
        low, high = torch.stack([levels.min(), levels.max()]).tolist()  # one host sync
        n_levels = high if n_levels is None else int(n_levels)
        if n_levels < 1 or high > n_levels:
            raise ValueError(f"levels must lie in [0, n_levels={n_levels}] with n_levels >= 1")
        if low < 0:
            raise ValueError(f"levels must be >= 0, got {low}")
        valid_t = (
            torch.ones_like(levels, dtype=torch.bool)
            if valid is None
            else as_tensor(valid, "valid").bool().to(levels.device)
        )
        if valid_t.shape != levels.shape:
            raise ValueError(
                f"valid has shape {tuple(valid_t.shape)} but levels has {tuple(levels.shape)}"
            )
        return self.loss_from_relevance(
            scores, self.relevance_from_levels(levels, n_levels, valid_t, scores.dtype), valid_t
        )

    @full_precision
    def forward_scores(
        self, scores: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``targets`` are integer shared levels (:meth:`forward_levels`) or a float relevance."""
        t = as_tensor(targets, "targets")
        if t.is_floating_point():
            return self.forward_relevance(scores, t, valid)
        return self.forward_levels(scores, t, valid)

    @full_precision
    def forward_relevance(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Loss from ``scores (Q, N)`` and a graded ``relevance (Q, N) >= 0`` (> 0 = positive)."""
        scores, rel = check_scores_targets(scores, relevance, "scores", "relevance")
        rel = rel.to(scores.dtype)
        valid_t = (
            torch.ones_like(scores, dtype=torch.bool)
            if valid is None
            else as_tensor(valid, "valid").bool().to(scores.device)
        )
        if valid_t.shape != scores.shape:
            raise ValueError(
                f"valid has shape {tuple(valid_t.shape)} but scores has shape {tuple(scores.shape)}"
            )
        return self.loss_from_relevance(scores, rel, valid_t)

    def loss_from_relevance(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`forward_relevance` of checked inputs (relevance in the scores' dtype, ``valid``
        bool): the no-positive rule (one host sync), :meth:`per_query` and the reduction."""
        valid_t = valid
        rel = torch.where(valid_t, relevance, torch.zeros_like(relevance))
        has_pos = (rel > 0).any(1)
        if not bool(has_pos.all()):
            if self.no_positive == "raise":
                raise ValueError(
                    f"{int((~has_pos).sum())} query(ies) have no relevant item (labels / "
                    "ref_labels / relevance; no_positive='raise')"
                )
            if not bool(has_pos.any()):
                raise ValueError(
                    "no query has a relevant item in its retrieval set (labels / ref_labels / "
                    "relevance): use a class-balanced or hierarchical sampler"
                )
        return reduce_kept(self.per_query(scores, rel, valid_t), has_pos, self.reduction)  # type: ignore[arg-type]

    def extra_repr(self) -> str:
        return (
            f"relevance={self.relevance_kind!r}, alpha={self.alpha}, impl={self.impl!r}, "
            f"reduction={self.reduction!r}"
        )


def _per_query_sum(values: torch.Tensor, q_idx: torch.Tensor, n: int) -> torch.Tensor:
    return values.new_zeros(n).index_add(0, q_idx, values)


@register_loss("sup_hap", hierarchical=True)
class SupHAP(HierarchicalRankLoss):
    """``L_Sup-H-AP`` (Eq. 4.10 of the Ramzi thesis; SupRank Eq. 21): the SupRank surrogate of H-AP.

    Args:
        tau, rho, delta, eps, start, offset, linear_origin, zero_branch: the SupRank step
            (:class:`rank_lab.ranking.SupRankStep`; thesis defaults, code variants as options).
        **kwargs: see :class:`HierarchicalRankLoss` (``relevance``, ``alpha``, ``weights``,
            ``impl`` ...).

    Shapes:
    ``forward(embeddings (B, d), labels (B, L)[, ref_embeddings (N, d), ref_labels (N, L)])``
    -> scalar (``(B,)`` with ``reduction="none"``).
    """

    def __init__(
        self,
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
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.step = SupRankStep(tau, rho, delta, eps, start, offset, linear_origin, zero_branch)  # type: ignore[arg-type]

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        total = relevance.sum(1)
        if self.impl == "direct":
            return _direct_hap(scores, relevance, valid, Heaviside(), Heaviside(), self.step, total)
        q_idx, k_idx = positive_rows_trusted(relevance, valid)
        rank_pos, rank_neg = split_rank_rows_trusted(
            scores,
            relevance,
            q_idx,
            k_idx,
            self.step,
            valid=valid,
            max_elements=self.max_elements,
            binary=False,
        )
        lower = _weighted_lower_sums(
            scores, relevance, valid, q_idx, k_idx, Heaviside(), max_elements=self.max_elements
        )
        rel_k = relevance[q_idx, k_idx]
        h_rank = rel_k * rank_pos + lower  # Eq. 4.2 split at rel(k)
        ratio = h_rank / (rank_pos + rank_neg)
        return 1 - _per_query_sum(ratio, q_idx, scores.shape[0]) / total.clamp(
            min=torch.finfo(total.dtype).tiny
        )


@register_loss("smooth_hap", hierarchical=True)
class SmoothHAP(HierarchicalRankLoss):
    """Smooth-H-AP: H-AP with every Heaviside replaced by ``sigma(t / tau)`` (the ablation of Tab.
    4.7).

    ``1 - (1/sum rel) sum_k (rel(k) + sum_{j != k} min(rel(k), rel(j)) sig(D)) / (1 + sum_{j != k}
    sig(D))``.
    Not an upper bound of ``1 - H-AP``; gradients flow through numerator and denominator.

    Args:
        tau: sigmoid temperature (0.01, as Smooth-AP).
        **kwargs: see :class:`HierarchicalRankLoss`.
    """

    def __init__(self, tau: float = 0.01, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.step = SigmoidStep(tau)

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        total = relevance.sum(1)
        if self.impl == "direct":
            return _direct_hap(scores, relevance, valid, self.step, self.step, self.step, total)
        q_idx, k_idx = positive_rows_trusted(relevance, valid)
        rel_k = relevance[q_idx, k_idx]
        h_rank = rel_k + _weighted_lower_sums(
            scores,
            relevance,
            valid,
            q_idx,
            k_idx,
            self.step,
            weight="min",
            max_elements=self.max_elements,
        )
        rank = (
            1
            + row_step_sums_trusted(
                scores,
                q_idx,
                k_idx,
                self.step,
                ("all",),
                valid=valid,
                relevance=None,
                max_elements=self.max_elements,
            )[:, 0]
        )
        return 1 - _per_query_sum(h_rank / rank, q_idx, scores.shape[0]) / total.clamp(
            min=torch.finfo(total.dtype).tiny
        )


@register_loss("sup_ndcg", hierarchical=True)
class SupNDCG(HierarchicalRankLoss):
    """``L_Sup-NDCG`` (Eqs. 4.13-4.14 of the Ramzi thesis; SupRank Eq. 24), gains ``2^l - 1``.

    ``1 - DCG_s / iDCG`` with ``DCG_s = sum_{k: g_k > 0} g_k / log2(1 + rank+(k) + rank_s^-(k))``
    (rank+ over items of gain >= g_k, exact; rank_s^- over smaller gains, SupRank ``H^-``) and the
    exact ideal DCG of the query's retrieval set. Args as :class:`SupHAP`.
    """

    default_relevance = "ndcg"

    def __init__(
        self,
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
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.step = SupRankStep(tau, rho, delta, eps, start, offset, linear_origin, zero_branch)  # type: ignore[arg-type]

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        ideal = torch.sort(relevance, dim=1, descending=True).values
        r = torch.arange(1, scores.shape[1] + 1, device=scores.device, dtype=scores.dtype)
        idcg = (ideal / torch.log2(1 + r)).sum(1).clamp(min=torch.finfo(scores.dtype).tiny)
        if self.impl == "direct":
            rank_pos, rank_neg, rows = direct_rank_terms(
                scores, relevance, valid, Heaviside(), self.step
            )
            dcg = torch.where(
                rows, relevance / torch.log2(1 + rank_pos + rank_neg), torch.zeros_like(scores)
            ).sum(1)
            return 1 - dcg / idcg
        q_idx, k_idx = positive_rows_trusted(relevance, valid)
        rank_pos, rank_neg = split_rank_rows_trusted(
            scores,
            relevance,
            q_idx,
            k_idx,
            self.step,
            valid=valid,
            max_elements=self.max_elements,
            binary=False,
        )
        dcg = _per_query_sum(
            relevance[q_idx, k_idx] / torch.log2(1 + rank_pos + rank_neg), q_idx, scores.shape[0]
        )
        return 1 - dcg / idcg


def _direct_hap(scores, relevance, valid, hrank_step, pos_step, neg_step, total):  # type: ignore[no-untyped-def]
    """The official code's quick forward: ``(Q, N, N)`` H-rank, rank+ and rank- (Eq. 4.10)."""
    rank_pos, rank_neg, rows = direct_rank_terms(scores, relevance, valid, pos_step, neg_step)
    diff = pairwise_differences(scores)
    n = scores.shape[1]
    base = valid[:, None, :] & ~torch.eye(n, dtype=torch.bool, device=scores.device)
    minrel = torch.minimum(relevance[:, None, :], relevance[:, :, None])
    h_rank = relevance + torch.where(
        base, minrel * hrank_step(diff), torch.zeros((), dtype=scores.dtype, device=scores.device)
    ).sum(-1)
    ratio = torch.where(rows, h_rank / (rank_pos + rank_neg), torch.zeros_like(scores))
    return 1 - ratio.sum(1) / total.clamp(min=torch.finfo(total.dtype).tiny)
