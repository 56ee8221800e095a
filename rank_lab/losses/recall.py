"""Recall@k surrogates: Smooth-R@k (RS@k, Patel et al. 2022) and Sup-R@k (SupRank, Ramzi et al.).

True recall of a query (Eq. 3.15 of the Ramzi thesis; Eq. 15 of SupRank)::

    TR@k = (1 / min(|P|, k)) sum_{p in P} H(k - rank(p))

Both surrogates replace the outer Heaviside by ``sigma((k - rank) / tau*)`` and average over a set
``K`` of k values (SupRank Eq. 16-17; Patel thesis Eq. 5.5-5.7); they differ in the inner rank:

* **Smooth-R@k** (Patel, Tolias, Matas, CVPR 2022 "Recall@k Surrogate Loss with Large Batches and
  Similarity Mixup"): ``rank(p) = 1 + sum_{j != p} sigma((s_j - s_p) / tau2)`` over *all* j,
  ``tau2 = 0.01``, ``tau1 = tau* = 1``, ``K = {1, 2, 4, 8, 16}``, and the numerator clipped at k
  (Patel thesis, "training modification"; ``clip=True`` by default here).
* **Sup-R@k** (Eq. 3.16 of the Ramzi thesis; SupRank Eq. 16): ``rank = rank+ + rank_s^-`` with the
  exact rank+ and the SupRank ``H^-`` for rank-. SupRank follows [28] (Patel) for ``K`` and
  ``tau*``; the official SupRank code uses ``K = {1, 2, 4, 8, 16}``, ``tau* = 1`` and no clipping
  (``clip=False`` default, ``clip=True`` as an option).

**What is bounded.** The rank substitution is an upper bound (``rank_s >= rank``), and
``sigma((k - r)/tau*)`` decreases in r, so ``L_Sup-R@k >= `` the same loss with the exact rank inside
the same outer sigmoid. It is *not* an upper bound of ``1 - TR@k``: for a positive ranked beyond
k, ``sigma(.) > 0 = H(.)`` (thesis Sec. 3.3.2 overstates this; see the digest's note). Tested.

Per-k outer temperatures: ``tau_star`` may be a float or one value per k (an earlier RS@k commit
used ``tau1_k = k``). A k larger than the retrieval set (whose term would be constant, without
gradient) is clipped to the set size with a ``UserWarning``, as the official RS@k code's
``min(k, batch - 1)`` (:func:`rank_lab.losses.base.reachable_ks`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rank_lab._validation import (
    as_tensor,
    check_finite,
    check_float,
    check_index,
    check_positive_int,
)
from rank_lab.losses._direct import direct_recall_loss
from rank_lab.losses.base import RankLoss, reachable_ks
from rank_lab.losses.registry import register_loss
from rank_lab.ranking.ranks import exact_rank_plus_rows, positive_rows, row_step_sums
from rank_lab.ranking.steps import Heaviside, SigmoidStep, StepFunction, SupRankStep

__all__ = ["SmoothRecallAtK", "SupRecallAtK", "recall_surrogate_from_ranks"]

DEFAULT_KS = (1, 2, 4, 8, 16)


def _check_ks(ks: Sequence[int], tau_star: float | Sequence[float]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
        raise TypeError(f"ks must be a non-empty sequence of positive ints, got {ks!r}")
    ks_t = tuple(check_positive_int(k.item() if isinstance(k, torch.Tensor) else k, "ks") for k in ks)
    if not ks_t:
        raise ValueError(f"ks must be a non-empty sequence of positive ints, got {ks!r}")
    if isinstance(tau_star, (int, float)):
        taus = (float(tau_star),) * len(ks_t)
    else:
        taus = tuple(float(t) for t in tau_star)
        if len(taus) != len(ks_t):
            raise ValueError(f"tau_star has {len(taus)} values but ks has {len(ks_t)}")
    taus = tuple(check_float(t, "tau_star", low=0.0, low_open=True) for t in taus)
    return ks_t, taus


def recall_surrogate_from_ranks(
    rank: torch.Tensor,
    q_idx: torch.Tensor,
    n_queries: int,
    ks: Sequence[int] = DEFAULT_KS,
    tau_star: float | Sequence[float] = 1.0,
    clip: bool = False,
) -> torch.Tensor:
    """Per-query ``1 - mean_k min(k?, sum_p sigma((k - rank(p))/tau*_k)) / min(k, |P|)``.

    Args:
        rank: ``(R,)`` (smooth or exact) ranks of the positive rows.
        q_idx: ``(R,)`` query of each row.
        n_queries: Q.
        ks, tau_star, clip: see :class:`SupRecallAtK`.

    Returns:
        ``(Q,)`` per-query losses (1 for queries without rows).
    """
    ks_t, taus = _check_ks(ks, tau_star)
    rank = as_tensor(rank, "rank")
    if rank.ndim != 1:
        raise ValueError(f"rank must be a (R,) vector of ranks, got shape {tuple(rank.shape)}")
    if not rank.is_floating_point():
        rank = rank.float()
    check_finite(rank, "rank")
    q_idx = check_index(q_idx, rank.shape[0], check_positive_int(n_queries, "n_queries"), "q_idx", "rank").to(rank.device)
    return _recall_from_ranks(rank, q_idx, n_queries, ks_t, taus, bool(clip))


def _recall_from_ranks(rank: torch.Tensor, q_idx: torch.Tensor, n_queries: int, ks_t: tuple[int, ...], taus: tuple[float, ...],
                       clip: bool) -> torch.Tensor:
    n_pos = torch.bincount(q_idx, minlength=n_queries).to(rank.dtype)
    total = rank.new_zeros(n_queries)
    for k, t in zip(ks_t, taus, strict=True):
        num = rank.new_zeros(n_queries).index_add(0, q_idx, torch.sigmoid((k - rank) / t))
        if clip:
            num = num.clamp(max=float(k))
        total = total + num / n_pos.clamp(max=float(k)).clamp(min=1)
    return 1 - total / len(ks_t)


class _RecallLoss(RankLoss):
    pos_step: StepFunction
    neg_step: StepFunction

    def __init__(self, ks: Sequence[int], tau_star: float | Sequence[float], clip: bool, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.ks, self.tau_star = _check_ks(ks, tau_star)
        self.clip = bool(clip)

    def _ranks(self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor, q_idx: torch.Tensor, k_idx: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover

    def per_query(self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        ks = reachable_ks(self.ks, valid)
        if self.impl == "direct":
            return direct_recall_loss(scores, relevance, valid, self.pos_step, self.neg_step, ks, self.tau_star, self.clip)
        q_idx, k_idx = positive_rows(relevance, valid)
        rank = self._ranks(scores, relevance, valid, q_idx, k_idx)
        return _recall_from_ranks(rank, q_idx, scores.shape[0], ks, self.tau_star, self.clip)

    def extra_repr(self) -> str:
        return f"ks={self.ks}, tau_star={self.tau_star}, clip={self.clip}, impl={self.impl!r}"


@register_loss("smooth_recall")
class SmoothRecallAtK(_RecallLoss):
    """Smooth-R@k / RS@k loss (Patel et al. 2022; Patel thesis Eq. 5.5-5.7).

    Args:
        ks: the set K (``{1, 2, 4, 8, 16}`` without SiMix, Patel).
        tau: inner sigmoid temperature tau2 on score differences (0.01, Patel).
        tau_star: outer temperature tau1 on ranks (1.0, Patel; float or one per k).
        clip: clip the numerator at k (True, Patel's training loss).
        **kwargs: see :class:`~rank_lab.losses.base.RankLoss`.
    """

    def __init__(
        self,
        ks: Sequence[int] = DEFAULT_KS,
        tau: float = 0.01,
        tau_star: float | Sequence[float] = 1.0,
        clip: bool = True,
        **kwargs: object,
    ) -> None:
        super().__init__(ks, tau_star, clip, **kwargs)
        self.pos_step = self.neg_step = SigmoidStep(tau)

    def _ranks(self, scores, relevance, valid, q_idx, k_idx):  # type: ignore[no-untyped-def]
        sums = row_step_sums(scores, q_idx, k_idx, self.pos_step, ("all",), valid=valid, relevance=relevance, max_elements=self.max_elements)
        return 1 + sums[:, 0]


@register_loss("sup_recall")
class SupRecallAtK(_RecallLoss):
    """Sup-R@K loss (Eq. 3.16-3.17 of the Ramzi thesis; SupRank Eq. 16-17).

    ``1 - mean_{k in K} (1/min(|P|, k)) sum_p sigma((k - rank+(p) - rank_s^-(p)) / tau*)``.

    Args:
        ks: the set K (``{1, 2, 4, 8, 16}``: SupRank follows [28]; official code).
        tau_star: outer temperature (1.0; official code).
        clip: clip the numerator at k (False: SupRank Eq. 16 and code; True: Patel's variant).
        tau, rho, delta, eps, start, offset, linear_origin, zero_branch: the SupRank ``H^-``.
        **kwargs: see :class:`~rank_lab.losses.base.RankLoss`.
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
        super().__init__(ks, tau_star, clip, **kwargs)
        self.pos_step = Heaviside()
        self.neg_step = SupRankStep(tau, rho, delta, eps, start, offset, linear_origin, zero_branch)  # type: ignore[arg-type]

    def _ranks(self, scores, relevance, valid, q_idx, k_idx):  # type: ignore[no-untyped-def]
        rank_pos = exact_rank_plus_rows(scores, relevance, q_idx, k_idx, valid=valid, max_elements=self.max_elements)
        rank_neg = row_step_sums(scores, q_idx, k_idx, self.neg_step, ("lower",), valid=valid, relevance=relevance, max_elements=self.max_elements)
        return rank_pos + rank_neg[:, 0]
