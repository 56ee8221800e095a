"""Pair and triplet losses: contrastive (XBM form), the pair decomposability loss, triplet margin.

* :func:`pair_margin_loss` -- ``[pos_margin - s]_+`` on positive pairs, ``[s - neg_margin]_+`` on
  negative pairs: the contrastive loss of Hadsell, Chopra, LeCun (CVPR 2006) in its cosine-score
  form. It is used by

  * :class:`ContrastiveLoss` -- the loss of the XBM paper (Wang, Zhang, Huang, Scott, "Cross-Batch
    Memory for Embedding Learning", CVPR 2020): ``sum_pos (1 - s) + sum_neg [s - 0.5]_+``, margin
    0.5, summed per query and averaged over queries (``pair_reduction="per_query_sum"``, the XBM
    code's normalisation); with :class:`rank_lab.memory.MemoryLoss` it is the XBM baseline
    (Tab. 3.2 of the Ramzi thesis / Tab. III of SupRank).
  * :class:`rank_lab.losses.decomposability.PairDGLoss` (``L_DG``, Eq. 3.7 of the thesis).

* :class:`TripletMarginLoss` -- ``[d(a, p) - d(a, n) + m]_+`` (FaceNet, Schroff, Kalenichenko,
  Philbin, CVPR 2015), squared Euclidean distance, margin 0.2 (FaceNet), with all / semi-hard /
  hard negatives. (Eq. 2.7 of the thesis prints ``- m``, a typo: implemented ``+ m``.)

Every loss works against a memory (``ref_embeddings``) in ``O(B * N)`` (pairs) or
``O(B * P * N)`` (triplets: one row per anchor-positive pair) memory.
"""

from __future__ import annotations

from typing import Literal

import torch

from rank_lab._validation import check_choice, check_float, check_scores_targets
from rank_lab.losses.base import MetricLoss, reduce_kept
from rank_lab.losses.prepared_batch import PreparedBatch
from rank_lab.losses.registry import register_loss

__all__ = ["pair_margin_loss", "ContrastiveLoss", "TripletMarginLoss"]

PairReduction = Literal["per_query_mean", "per_query_sum", "avg_nonzero"]


def pair_margin_loss(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor,
    pos_margin: float,
    neg_margin: float,
    pair_reduction: PairReduction = "per_query_mean",
    reduction: str = "mean",
) -> torch.Tensor:
    """Contrastive pair loss on scores (Hadsell et al. 2006, cosine form; Eq. 3.7 of the Ramzi
    thesis).

    ``l+ = [pos_margin - s]_+`` for positive pairs, ``l- = [s - neg_margin]_+`` for negative pairs.

    Args:
        scores: ``(Q, N)`` cosine scores.
        relevance: ``(Q, N)`` (> 0 = positive pair).
        valid: ``(Q, N)`` bool, pairs that exist (the query's own column removed).
        pos_margin, neg_margin: alpha and beta of Eq. 3.7 (``beta < alpha``).
        pair_reduction:
            * ``"per_query_mean"``: per query ``mean_pos l+ + mean_neg l-`` (Eq. 3.7; ROADMAP Eq. 7;
              a query without positives (negatives) gets 0 for that term);
            * ``"per_query_sum"``: per query ``sum_pos l+ + sum_neg l-`` (XBM code);
            * ``"avg_nonzero"``: ``sum l+ / #(l+ > 0) + sum l- / #(l- > 0)`` over all pairs
              (pytorch-metric-learning ``ContrastiveLoss`` default reducer, ROADMAP official code).
        reduction: over queries for the per-query modes (``"mean"``, ``"sum"``, ``"none"``);
            ``"avg_nonzero"`` only allows ``"mean"``.

    Returns:
        Scalar, or ``(Q,)`` with ``reduction="none"``.
    """
    scores, relevance = check_scores_targets(scores, relevance, "scores", "relevance")
    valid = torch.as_tensor(valid, device=scores.device)
    if valid.shape != scores.shape:
        raise ValueError(
            f"valid has shape {tuple(valid.shape)} but scores has shape {tuple(scores.shape)}"
        )
    pos_margin, neg_margin = (
        check_float(pos_margin, "pos_margin"),
        check_float(neg_margin, "neg_margin"),
    )
    return pair_margin_loss_trusted(
        scores, relevance, valid.bool(), pos_margin, neg_margin, pair_reduction, reduction
    )


def pair_margin_loss_trusted(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor,
    pos_margin: float,
    neg_margin: float,
    pair_reduction: str,
    reduction: str,
) -> torch.Tensor:
    """:func:`pair_margin_loss` of checked arguments (the pair losses' kernel: no check, no host
    sync)."""
    pos = (relevance > 0) & valid
    neg = (relevance <= 0) & valid
    zero = torch.zeros_like(scores)
    lp = torch.where(pos, torch.relu(pos_margin - scores), zero)
    ln = torch.where(neg, torch.relu(scores - neg_margin), zero)
    if pair_reduction == "avg_nonzero":
        if reduction != "mean":
            raise ValueError(
                "pair_reduction='avg_nonzero' is a global average: use reduction='mean'"
            )
        return lp.sum() / (lp > 0).sum().clamp(min=1) + ln.sum() / (ln > 0).sum().clamp(min=1)
    if pair_reduction == "per_query_mean":
        per_q = lp.sum(1) / pos.sum(1).clamp(min=1) + ln.sum(1) / neg.sum(1).clamp(min=1)
    elif pair_reduction == "per_query_sum":
        per_q = lp.sum(1) + ln.sum(1)
    else:
        raise ValueError(
            "pair_reduction must be 'per_query_mean', 'per_query_sum' or 'avg_nonzero', got "
            f"{pair_reduction!r}"
        )
    return reduce_kept(per_q, valid.any(1), reduction)  # type: ignore[arg-type]


@register_loss("contrastive")
class ContrastiveLoss(MetricLoss):
    """Contrastive loss of the XBM paper (Wang et al. 2020), Hadsell et al. (2006) cosine form.

    ``sum_{pos} [pos_margin - s]_+ + sum_{neg} [s - neg_margin]_+`` per query, mean over queries.

    Args:
        pos_margin: 1.0 (XBM: ``1 - s`` on positives).
        neg_margin: 0.5 (XBM margin lambda = 0.5).
        pair_reduction: ``"per_query_sum"`` (XBM code), ``"per_query_mean"``, ``"avg_nonzero"``.
        **kwargs: ``normalize``, ``reduction``, ``query_role``, ``hierarchy_level``.
    """

    def __init__(
        self,
        pos_margin: float = 1.0,
        neg_margin: float = 0.5,
        pair_reduction: PairReduction = "per_query_sum",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.pos_margin, self.neg_margin = (
            check_float(pos_margin, "pos_margin"),
            check_float(neg_margin, "neg_margin"),
        )
        self.pair_reduction = check_choice(
            pair_reduction, "pair_reduction", ("per_query_mean", "per_query_sum", "avg_nonzero")
        )

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:
        return pair_margin_loss_trusted(
            batch.scores,
            batch.relevance,
            batch.valid,
            self.pos_margin,
            self.neg_margin,
            self.pair_reduction,
            self.reduction,
        )

    def extra_repr(self) -> str:
        return (
            f"pos_margin={self.pos_margin}, neg_margin={self.neg_margin}, "
            f"pair_reduction={self.pair_reduction!r}"
        )


@register_loss("triplet")
class TripletMarginLoss(MetricLoss):
    """Triplet loss with margin (Schroff et al., FaceNet, CVPR 2015; Eq. 2.7 of the Ramzi thesis).

    ``l(a, p, n) = [d(a, p) - d(a, n) + margin]_+`` for every anchor a (a query), positive p and
    mined negative n of its retrieval set.

    Args:
        margin: 0.2 (FaceNet, squared Euclidean on unit vectors). For ``distance="cosine"``
            (``d = -s``, the thesis' form) the equivalent margin is ``margin / 2``.
        distance: ``"squared_euclidean"`` (``2 - 2 s`` on unit vectors) or ``"cosine"`` (``-s``).
        mining: ``"all"`` (every valid triplet), ``"semihard"`` (FaceNet Sec. 3.2: negatives
            farther than the positive but within the margin, ``d_ap < d_an < d_ap + margin``; the
            hardest of them per anchor-positive pair; a pair without one is skipped) or
            ``"hard"`` (hardest negative per anchor-positive pair).
        triplet_average: per anchor, average over ``"all"`` mined triplets or only ``"nonzero"``
            ones (the "batch-all" average of Hermans et al. 2017).
        **kwargs: ``normalize``, ``reduction``, ``query_role``, ``hierarchy_level``.
    """

    def __init__(
        self,
        margin: float = 0.2,
        distance: Literal["squared_euclidean", "cosine"] = "squared_euclidean",
        mining: Literal["all", "semihard", "hard"] = "all",
        triplet_average: Literal["all", "nonzero"] = "all",
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.margin = check_float(margin, "margin", low=0.0)
        self.distance = check_choice(distance, "distance", ("squared_euclidean", "cosine"))
        self.mining = check_choice(mining, "mining", ("all", "semihard", "hard"))
        self.triplet_average = check_choice(triplet_average, "triplet_average", ("all", "nonzero"))

    def _distances(self, batch: PreparedBatch) -> torch.Tensor:
        if self.distance == "cosine":
            return -batch.scores
        emb = batch.embeddings.to(batch.scores.dtype)
        ref = batch.ref_embeddings.to(batch.scores.dtype)
        sq = (emb * emb).sum(1, keepdim=True) + (ref * ref).sum(1)[None, :] - 2 * batch.scores
        return sq.clamp(min=0)

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:
        dist = self._distances(batch)
        pos = (batch.relevance > 0) & batch.valid
        neg = (batch.relevance <= 0) & batch.valid
        q_idx, p_idx = torch.nonzero(pos, as_tuple=True)  # one row per anchor-positive pair
        d_ap = dist[q_idx, p_idx][:, None]
        d_an = dist[q_idx]  # (R, N)
        neg_rows = neg[q_idx]
        viol = d_ap - d_an + self.margin
        if self.mining == "semihard":
            cand = neg_rows & (d_an > d_ap) & (d_an < d_ap + self.margin)
            pick = torch.where(cand, d_an, torch.full_like(d_an, float("inf"))).argmin(1)
            mined = torch.zeros_like(cand).scatter_(1, pick[:, None], True) & cand
        elif self.mining == "hard":
            pick = torch.where(neg_rows, d_an, torch.full_like(d_an, float("inf"))).argmin(1)
            mined = torch.zeros_like(neg_rows).scatter_(1, pick[:, None], True) & neg_rows
        else:
            mined = neg_rows
        losses = torch.where(mined, torch.relu(viol), torch.zeros_like(viol))
        n_q = dist.shape[0]
        count_mask = mined if self.triplet_average == "all" else mined & (losses > 0)
        sums = losses.new_zeros(n_q).index_add(0, q_idx, losses.sum(1))
        counts = losses.new_zeros(n_q).index_add(0, q_idx, count_mask.sum(1).to(losses.dtype))
        per_q = sums / counts.clamp(min=1)
        keep = (
            counts > 0
            if self.triplet_average == "all"
            else losses.new_zeros(n_q).index_add(0, q_idx, mined.sum(1).to(losses.dtype)) > 0
        )
        if not bool(keep.any()) and self.mining != "semihard":
            raise ValueError(
                "no valid triplet (anchor, positive, negative) in the batch or the references "
                "(labels / ref_labels): use an m-per-class sampler"
            )
        return reduce_kept(per_q, keep, self.reduction)  # type: ignore[arg-type]

    def extra_repr(self) -> str:
        return f"margin={self.margin}, distance={self.distance!r}, mining={self.mining!r}"
