"""Direct ``(Q, N, N)`` reference formulations of the listwise rank losses (``impl="direct"``).

These follow the papers' pseudo-code literally (SupRank/ROADMAP official code's "quick forward"):
build every pairwise difference ``D[q, k, j] = s_j - s_k``, apply the steps, mask and sum. They
cost ``O(Q N^2)`` memory and exist to check the chunked row kernel of
:func:`rank_lab.ranking.row_step_sums` (equal values and gradients, tested) and for small cases.
All functions return per-query losses ``(Q,)``; rows k are the valid positives of each query.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rank_lab.ranking.ranks import pairwise_differences
from rank_lab.ranking.steps import StepFunction

__all__ = ["direct_rank_terms", "direct_ap_loss", "direct_recall_loss"]


def direct_rank_terms(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor,
    pos_step: StepFunction,
    neg_step: StepFunction,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rank+`` (with the leading 1) and ``rank-`` of every item with the given steps, ``(Q, N)``
    each.

    ``rank+(k) = 1 + sum_{j != k, valid, rel_j >= rel_k} pos_step(D)``;
    ``rank-(k) = sum_{valid, rel_j < rel_k} neg_step(D)`` (Eq. 3.3 / 3.5 of the Ramzi thesis).
    The third output is the ``(Q, N)`` mask of rows that matter (valid positives).
    """
    diff = pairwise_differences(scores)  # (Q, N, N)
    n = scores.shape[1]
    base = valid[:, None, :] & ~torch.eye(n, dtype=torch.bool, device=scores.device)
    lower = relevance[:, None, :] < relevance[:, :, None]
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    rank_pos = 1 + torch.where(base & ~lower, pos_step(diff), zero).sum(-1)
    rank_neg = torch.where(base & lower, neg_step(diff), zero).sum(-1)
    rows = (relevance > 0) & valid
    return rank_pos, rank_neg, rows


def direct_ap_loss(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor,
    pos_step: StepFunction,
    neg_step: StepFunction,
) -> torch.Tensor:
    """``1 - (1/|P|) sum_k rank+(k) / (rank+(k) + rank-(k))`` per query (Eq. 2.9 / 3.11)."""
    rank_pos, rank_neg, rows = direct_rank_terms(scores, relevance, valid, pos_step, neg_step)
    ratio = torch.where(rows, rank_pos / (rank_pos + rank_neg), torch.zeros_like(rank_pos))
    return 1 - ratio.sum(1) / rows.sum(1).clamp(min=1)


def direct_recall_loss(
    scores: torch.Tensor,
    relevance: torch.Tensor,
    valid: torch.Tensor,
    pos_step: StepFunction,
    neg_step: StepFunction,
    ks: Sequence[int],
    tau_star: Sequence[float],
    clip: bool,
    normalization: str = "min",
) -> torch.Tensor:
    """``1 - mean_k min(k?, sum_p sigma((k - rank(p)) / tau*_k)) / norm_k`` (Eq. 3.16; Patel Eq.
    5.5).

    ``norm_k = min(k, |P|)`` (``normalization="min"``) or ``|P|`` (``"positives"``).
    """
    rank_pos, rank_neg, rows = direct_rank_terms(scores, relevance, valid, pos_step, neg_step)
    rank = rank_pos + rank_neg
    n_pos = rows.sum(1).to(scores.dtype)
    total = torch.zeros(scores.shape[0], dtype=scores.dtype, device=scores.device)
    for k, t in zip(ks, tau_star, strict=True):
        num = torch.where(rows, torch.sigmoid((k - rank) / t), torch.zeros_like(rank)).sum(1)
        if clip:
            num = num.clamp(max=float(k))
        norm = n_pos.clamp(max=float(k)) if normalization == "min" else n_pos
        total = total + num / norm.clamp(min=1)
    return 1 - total / len(ks)
