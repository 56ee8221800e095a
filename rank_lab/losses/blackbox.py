"""BlackBox-AP: exact ranks forward, blackbox differentiation backward (a baseline of Tab. 3.1 /
Tab. I).

Rolinek, Musil, Paulus, Vlastelica, Michaelis, Martius, "Optimizing Rank-based Metrics with
Blackbox Differentiation" (CVPR 2020; RaMBO), built on Vlastelica et al., "Differentiation of
Blackbox Combinatorial Solvers" (ICLR 2020).

* Forward: the exact normalised ranks ``rank(s) / N`` (1/N for the highest score) and the exact AP
  ``(1/|P|) sum_{k in P} rank+(k) / rank(k)``, rank+ taken among the positives (no gradient).
* Backward of the ranking ``y = rank(s)`` (an argmin of ``<s, y>`` over permutations): with the
  incoming gradient ``g = dL/dy``, ``dL/ds = -(rank(s) - rank(s + lambda g)) / lambda`` — a
  piecewise-constant interpolation of the loss, ``lambda = 4`` (official ROADMAP/SupRank baseline
  config ``lambda_val=4``).
* Margin (RaMBO "score margin"): before ranking, positives are lowered and negatives raised,
  ``s <- s - margin * (y - 1/2)`` with ``margin = 0.02`` (official config). The RaMBO recall code
  uses this deterministic shift (default); the mAP code multiplies it by ``|N(0, 1)|`` noise
  (``margin_noise=True``, drawn from the global torch RNG).

Not a smooth surrogate: no gradcheck applies (tests check the forward value and the blackbox
backward formula instead). The RaMBO "batch memory" is :class:`rank_lab.memory.MemoryLoss` here.

:func:`blackbox_rank` is the checked entry point of the ranking with its blackbox backward; the
``torch.autograd.Function`` behind it, :class:`BlackBoxRank`, stays importable for ``.apply`` but is
not part of ``__all__`` (an autograd Function is never instantiated, and ``apply`` skips the
checks).
"""

from __future__ import annotations

import torch

from rank_lab._validation import as_tensor, check_finite, check_float
from rank_lab.losses.base import ListwiseLoss
from rank_lab.losses.registry import register_loss

__all__ = ["BlackBoxAP", "normalised_rank", "blackbox_rank"]


def _score_rows(scores: object) -> torch.Tensor:
    """A non-empty finite ``(Q, N)`` floating score matrix (integers are cast), or raise naming
    ``scores``."""
    s = as_tensor(scores, "scores")
    if s.ndim != 2 or s.numel() == 0:
        raise ValueError(f"scores must be a non-empty (Q, N) matrix, got shape {tuple(s.shape)}")
    if not s.is_floating_point():
        s = s.float()
    check_finite(s, "scores")
    return s


def normalised_rank(scores: torch.Tensor) -> torch.Tensor:
    """``rank / N`` of every item of each row (highest score -> 1/N; ties by sort order).
    ``(Q, N)``.

    Args:
        scores: ``(Q, N)`` finite scores.
    """
    return _normalised_rank(_score_rows(scores))


def blackbox_rank(scores: torch.Tensor, lambda_val: float = 4.0) -> torch.Tensor:
    """Normalised ranks ``rank(s) / N`` with the blackbox backward of Vlastelica et al. (ICLR 2020).

    Forward: :func:`normalised_rank`. Backward, with the incoming gradient ``g``:
    ``dL/ds = -(rank(s) - rank(s + lambda g)) / lambda``.

    Args:
        scores: ``(Q, N)`` finite scores.
        lambda_val: interpolation strength lambda > 0 (4 in the official baseline config).

    Returns:
        ``(Q, N)`` normalised ranks.
    """
    return BlackBoxRank.apply(
        _score_rows(scores), check_float(lambda_val, "lambda_val", low=0.0, low_open=True)
    )


def _normalised_rank(scores: torch.Tensor) -> torch.Tensor:
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(
        1,
        order,
        torch.arange(1, scores.shape[1] + 1, device=scores.device).expand_as(order).contiguous(),
    )
    return ranks.to(scores.dtype) / scores.shape[1]


class BlackBoxRank(torch.autograd.Function):
    """Normalised ranks with the blackbox backward ``-(rank(s) - rank(s + lambda g)) / lambda``."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lambda_val: float) -> torch.Tensor:  # type: ignore[override]
        ranks = _normalised_rank(scores)
        ctx.save_for_backward(scores, ranks)
        ctx.lambda_val = float(lambda_val)
        return ranks

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        scores, ranks = ctx.saved_tensors
        perturbed = _normalised_rank(scores + ctx.lambda_val * grad_out)
        return -(ranks - perturbed) / ctx.lambda_val, None


@register_loss("blackbox_ap")
class BlackBoxAP(ListwiseLoss):
    """BlackBox-AP loss ``1 - mean_q AP_q`` (Rolinek et al. 2020).

    Args:
        lambda_val: interpolation strength lambda (4; official baseline config).
        margin: score margin (0.02; official baseline config). 0 disables it.
        margin_noise: multiply the margin shift by ``|N(0, 1)|`` (RaMBO mAP code) instead of the
            deterministic shift (RaMBO recall code / paper; default).
        **kwargs: ``no_positive``, ``normalize``, ``reduction``, ``query_role``,
            ``hierarchy_level``.
    """

    def __init__(
        self,
        lambda_val: float = 4.0,
        margin: float = 0.02,
        margin_noise: bool = False,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        lambda_val = check_float(lambda_val, "lambda_val", low=0.0, low_open=True)
        margin = check_float(margin, "margin", low=0.0)
        self.lambda_val, self.margin, self.margin_noise = lambda_val, margin, bool(margin_noise)

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        pos = (relevance > 0) & valid
        shift = pos.to(scores.dtype) - 0.5
        if self.margin_noise:
            shift = shift * torch.randn_like(scores).abs()
        s = scores - self.margin * shift
        low = s.detach().min() - 10.0  # items outside the retrieval set go last
        s = torch.where(valid, s, low.expand_as(s))
        rank_all = BlackBoxRank.apply(s, self.lambda_val)  # (Q, N), normalised
        with torch.no_grad():
            # rank+ among positives, in the order of rank_all (exact, no gradient)
            key = torch.where(pos, rank_all, torch.full_like(rank_all, 2.0))
            rank_pos = _normalised_rank(-key)
        ratio = torch.where(pos, rank_pos / rank_all, torch.zeros_like(rank_all))
        return 1 - ratio.sum(1) / pos.sum(1).clamp(min=1)

    def extra_repr(self) -> str:
        return (
            f"lambda_val={self.lambda_val}, margin={self.margin}, margin_noise={self.margin_noise}"
        )
