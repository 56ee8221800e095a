"""AP baselines by soft histogram binning: FastAP and SoftBin-AP (the baselines of Tab. 3.1 / Tab.
I).

Both approximate AP from soft histograms of a query's scores (or distances) with a triangular
kernel ``delta(x, z) = [1 - |x - z| / Delta]_+`` centred on ``M`` bins; a score is shared between
its two nearest bins, so the histograms are piecewise linear in the scores. Neither is an upper
bound of the AP loss; their resolution is limited by the bin width (Ramzi thesis Sec. 2.3.2).

* :class:`FastAP` -- Cakir, He, Xia, Kulis, Sclaroff, "Deep Metric Learning to Rank" (CVPR 2019).
  Squared Euclidean distances of unit vectors ``d = 2 - 2 s`` in ``[0, 4]``, ``L + 1`` bin centres
  ``z_l = l * 4 / L`` (``L = 10``: FastAP paper/official code, and PML's default used for the
  ROADMAP baseline)::

      FastAP_q = (1 / N+) sum_l h+_l H+_l / H_l

  with ``h+`` the positive histogram, ``H+`` / ``H`` the cumulative positive / total histograms
  (from small to large distance); bins with ``H_l = 0`` contribute 0.
* :class:`SoftBinAP` -- Revaud, Almazan, Rezende, de Souza, "Learning with Average Precision:
  Training Image Retrieval with a Listwise Loss" (ICCV 2019). ``M`` bin centres ``b_m`` evenly on
  ``[min, max]`` from the top (``M = 20``, ``[-1, 1]``: official ROADMAP baseline config)::

      AP_q = sum_m P_m * r_m,   P_m = (sum_{m' <= m} c+_m') / (sum_{m' <= m} c_m'),  r_m = c+_m / N+

  Scores outside ``[min, max]`` are clamped (the official quantiser's saturated end bins).

Memory ``O(Q * N * M)`` (the per-bin kernels are kept for the backward pass). Neither loss has a
"direct" variant; ``impl`` does not apply.
"""

from __future__ import annotations

import torch

from rank_lab._validation import (
    as_tensor,
    check_finite,
    check_float,
    check_positive_int,
    check_scores_targets,
)
from rank_lab.losses.base import ListwiseLoss
from rank_lab.losses.registry import register_loss

__all__ = ["FastAP", "SoftBinAP", "triangular_histogram"]


def triangular_histogram(
    values: torch.Tensor, weights: torch.Tensor, centres: torch.Tensor, width: float
) -> torch.Tensor:
    """Soft histogram
    ``h[q, m] = sum_j weights[q, j] * [1 - |values[q, j] - centres[m]| / width]_+``.

    Args:
        values: ``(Q, N)`` finite values (a ``(N,)`` vector is one row).
        weights: ``(Q, N)`` non-negative weights (0/1 masks of the items to count).
        centres: ``(M,)`` bin centres.
        width: kernel half-width Delta (> 0).

    Returns:
        ``(Q, M)`` histogram, differentiable in ``values``.
    """
    values, weights = check_scores_targets(values, weights, "values", "weights")
    centres = as_tensor(centres, "centres")
    if centres.ndim != 1 or centres.numel() == 0:
        raise ValueError(
            f"centres must be a non-empty (M,) vector, got shape {tuple(centres.shape)}"
        )
    if not centres.is_floating_point():
        centres = centres.to(values.dtype)
    check_finite(centres, "centres")
    width = check_float(width, "width", low=0.0, low_open=True)
    return _triangular_histogram(values, weights.to(values.dtype), centres.to(values.device), width)


def _triangular_histogram(
    values: torch.Tensor, weights: torch.Tensor, centres: torch.Tensor, width: float
) -> torch.Tensor:
    cols = [(weights * torch.relu(1 - (values - c).abs() / width)).sum(1) for c in centres]
    return torch.stack(cols, dim=1)


@register_loss("fast_ap")
class FastAP(ListwiseLoss):
    """FastAP loss ``1 - mean_q FastAP_q`` (Cakir et al. 2019).

    Args:
        num_bins: L (10; FastAP paper and official code).
        **kwargs: ``no_positive``, ``normalize``, ``reduction``, ``query_role``,
            ``hierarchy_level``.

    Shapes:
        ``forward(embeddings (B, d), labels ...)`` or
        ``forward_scores(scores (Q, N), targets (Q, N))`` with cosine scores in ``[-1, 1]``.
    """

    def __init__(self, num_bins: int = 10, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.num_bins = check_positive_int(num_bins, "num_bins")

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        dist = (2 - 2 * scores).clamp(0, 4)
        width = 4.0 / self.num_bins
        centres = torch.linspace(0, 4, self.num_bins + 1, dtype=scores.dtype, device=scores.device)
        pos = ((relevance > 0) & valid).to(scores.dtype)
        h_pos = _triangular_histogram(dist, pos, centres, width)
        h_all = _triangular_histogram(dist, valid.to(scores.dtype), centres, width)
        cum_pos, cum_all = h_pos.cumsum(1), h_all.cumsum(1)
        terms = torch.where(
            cum_all > 0, h_pos * cum_pos / cum_all.clamp(min=1e-12), torch.zeros_like(cum_all)
        )
        return 1 - terms.sum(1) / pos.sum(1).clamp(min=1)

    def extra_repr(self) -> str:
        return f"num_bins={self.num_bins}"


@register_loss("softbin_ap")
class SoftBinAP(ListwiseLoss):
    """SoftBin-AP loss ``1 - mean_q AP_q`` by soft quantisation (Revaud et al. 2019).

    Args:
        num_bins: M (20; official ROADMAP baseline config ``nq=20``).
        min_score, max_score: range of the bins (``[-1, 1]``, cosine scores).
        **kwargs: see :class:`FastAP`.
    """

    def __init__(
        self, num_bins: int = 20, min_score: float = -1.0, max_score: float = 1.0, **kwargs: object
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if check_positive_int(num_bins, "num_bins") < 2:
            raise ValueError(f"num_bins must be >= 2, got {num_bins}")
        min_score, max_score = (
            check_float(min_score, "min_score"),
            check_float(max_score, "max_score"),
        )
        if not max_score > min_score:
            raise ValueError(f"max_score must be > min_score, got {min_score}, {max_score}")
        self.num_bins, self.min_score, self.max_score = (
            int(num_bins),
            float(min_score),
            float(max_score),
        )

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        width = (self.max_score - self.min_score) / (self.num_bins - 1)
        centres = torch.linspace(
            self.max_score, self.min_score, self.num_bins, dtype=scores.dtype, device=scores.device
        )
        x = scores.clamp(self.min_score, self.max_score)
        pos = ((relevance > 0) & valid).to(scores.dtype)
        c_pos = _triangular_histogram(x, pos, centres, width)
        c_all = _triangular_histogram(x, valid.to(scores.dtype), centres, width)
        prec = c_pos.cumsum(1) / c_all.cumsum(1).clamp(min=1e-12)
        rec = c_pos / pos.sum(1, keepdim=True).clamp(min=1)
        return 1 - (prec * rec).sum(1)

    def extra_repr(self) -> str:
        return f"num_bins={self.num_bins}, range=[{self.min_score}, {self.max_score}]"
