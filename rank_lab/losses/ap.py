"""Average-precision surrogates: Smooth-AP (Brown et al. 2020) and SupAP (Ramzi et al. 2021/2025).

Exact AP of a query (Eq. 3.9 of the Ramzi thesis; Eq. 9 of SupRank)::

    AP = (1/|P|) sum_{k in P} rank+(k) / (rank+(k) + rank-(k))

* **Smooth-AP** (Eq. 2.9 of the thesis; Brown et al., ECCV 2020) replaces *every* Heaviside by
  ``sigma(t / tau)``, ``tau = 0.01``: both rank+ and rank- are smooth. It is not an upper bound of
  the AP loss, its gradient vanishes for ``|s_j - s_k| > ~0.05`` and the rank+ term pushes the
  higher of two positives *down* (thesis Sec. 3.4.1, App. A.1.1; the 3-item toy of Fig. 3.8).
* **SupAP** (Eq. 3.11 of the thesis; Eq. 11 of SupRank; Eq. 5 of ROADMAP) keeps the exact
  Heaviside for rank+ (no gradient) and uses SupRank ``H^-`` for rank-: an upper bound,
  ``L_SupAP >= L_AP = 1 - AP`` where AP is computed with the same rank formula (``H(0) = 1``); on
  tie-free scores this is the AP of :func:`rank_lab.metrics.average_precision`.

Both have an ``O(Q * P * N)``-memory implementation (only rows k that are positives are ever built,
in chunks; default) and the direct ``O(Q * N^2)`` one (``impl="direct"``), with equal values and
gradients (tested). The official SupAP/Smooth-AP code keeps the query in its own retrieval set
(``query_role="positive"`` here); the papers rank against ``B \\ q`` (default). The
official Smooth-AP code also always uses the sigmoid for rank+ (its "heaviside" switch is dead
code), which is what :class:`SmoothAP` does.
"""

from __future__ import annotations

import torch

from rank_lab.losses._direct import direct_ap_loss
from rank_lab.losses.base import RankLoss, per_query_mean_trusted
from rank_lab.losses.registry import register_loss
from rank_lab.ranking.ranks import split_rank_rows_trusted
from rank_lab.ranking.row_kernel import positive_rows_trusted, row_step_sums_trusted
from rank_lab.ranking.steps import Heaviside, SigmoidStep, StepFunction, SupRankStep

__all__ = ["SmoothAP", "SupAP", "smooth_ap_loss", "sup_ap_loss"]


@register_loss("smooth_ap")
class SmoothAP(RankLoss):
    """Smooth-AP loss ``1 - mean_q Smooth-AP_q`` (Eq. 2.9 of the Ramzi thesis; Brown et al. 2020).

    Per query ``(1/|P|) sum_k (1 + sum_{j in P, j != k} sig(D)) / (1 + sum_{j != k} sig(D))`` with
    ``sig(D) = sigma((s_j - s_k) / tau)``.

    Args:
        tau: sigmoid temperature (0.01: Brown et al.; thesis; official configs).
        **kwargs: ``impl``, ``max_elements``, ``no_positive``, ``normalize``, ``reduction``,
            ``query_role``, ``hierarchy_level`` (see :class:`RankLoss`).

    Shapes:
        ``forward(embeddings (B, d), labels (B,) | (B, L)[, ref_embeddings (N, d), ref_labels])``;
        ``forward_scores(scores (Q, N), targets (Q, N))``. Output: scalar or ``(Q,)``.
    """

    def __init__(self, tau: float = 0.01, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.step = SigmoidStep(tau)
        self.tau = float(tau)

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        if self.impl == "direct":
            return direct_ap_loss(scores, relevance, valid, self.step, self.step)
        q_idx, k_idx = positive_rows_trusted(relevance, valid)
        sums = row_step_sums_trusted(
            scores,
            q_idx,
            k_idx,
            self.step,
            ("geq", "lower"),
            valid=valid,
            relevance=relevance,
            max_elements=self.max_elements,
            rows_are_top=True,
        )
        rank_pos = 1 + sums[:, 0]
        ratio = rank_pos / (rank_pos + sums[:, 1])
        return 1 - per_query_mean_trusted(ratio, q_idx, scores.shape[0])

    def extra_repr(self) -> str:
        return f"tau={self.tau}, impl={self.impl!r}, reduction={self.reduction!r}"


@register_loss("sup_ap")
class SupAP(RankLoss):
    """SupAP loss (Eq. 3.11 of the Ramzi thesis; SupRank Eq. 11; ROADMAP Eq. 5).

    ``1 - mean_q (1/|P|) sum_k rank+(k) / (rank+(k) + rank_s^-(k))`` with exact ``rank+`` and
    ``rank_s^-(k) = sum_{j: rel_j < rel_k} H^-(s_j - s_k)``. Gradient flows only through
    ``rank_s^-``: positives are pushed up, negatives down, until a margin of about delta.

    Args:
        tau, rho, delta, eps, start, offset, linear_origin, zero_branch: the SupRank step, see
            :class:`rank_lab.ranking.SupRankStep` (defaults: thesis/paper; code variants as
            options).
        neg_step: replace ``H^-`` by another step for rank- (e.g. ``SigmoidStep(0.01)``: the
            "``H^+ = H``, sigmoid rank-" ablation of thesis Fig. 3.9a / ROADMAP Tab. 3); the other
            step arguments are then ignored.
        **kwargs: see :class:`RankLoss`.
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
        neg_step: StepFunction | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if neg_step is not None and not isinstance(neg_step, StepFunction):
            raise TypeError(f"neg_step must be a StepFunction, got {type(neg_step).__name__}")
        self.step = neg_step or SupRankStep(
            tau, rho, delta, eps, start, offset, linear_origin, zero_branch
        )  # type: ignore[arg-type]

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        if self.impl == "direct":
            return direct_ap_loss(scores, relevance, valid, Heaviside(), self.step)
        q_idx, k_idx = positive_rows_trusted(relevance, valid)
        rank_pos, rank_neg = split_rank_rows_trusted(
            scores,
            relevance,
            q_idx,
            k_idx,
            self.step,
            valid=valid,
            max_elements=self.max_elements,
            binary=True,
        )
        ratio = rank_pos / (rank_pos + rank_neg)
        return 1 - per_query_mean_trusted(ratio, q_idx, scores.shape[0])

    def extra_repr(self) -> str:
        return f"step={self.step!r}, impl={self.impl!r}, reduction={self.reduction!r}"


def smooth_ap_loss(
    scores: torch.Tensor,
    targets: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    tau: float = 0.01,
    **kwargs: object,
) -> torch.Tensor:
    """Functional :class:`SmoothAP` on ``scores (Q, N)`` / ``targets (Q, N)``."""
    return SmoothAP(tau=tau, **kwargs).forward_scores(scores, targets, valid)


def sup_ap_loss(
    scores: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor | None = None, **kwargs: object
) -> torch.Tensor:
    """Functional :class:`SupAP` on ``scores (Q, N)`` / ``targets (Q, N)``; kwargs as the class."""
    return SupAP(**kwargs).forward_scores(scores, targets, valid)  # type: ignore[arg-type]
