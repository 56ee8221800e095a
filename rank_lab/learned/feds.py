"""FEDS: Filtered Edit Distance Surrogate (Patel thesis, Ch. 4; Patel & Matas, ICDAR 2021).

FEDS changes two things in the LS-ED recipe of Ch. 3:

1. the surrogate is learned **only from the recogniser's own outputs** (eq. 4.6, the *local*
   source; no random generator), with the loss of eq. 4.5 (``w1 = 1, w2 = 0.1``);
2. the recogniser is trained only on the samples where the surrogate is accurate: the filter
   (eq. 4.7) ``g_lambda(e, e_hat) = min(|e_hat - e|, lambda)`` has zero gradient where
   ``|e_hat - e| >= lambda`` (``lambda = 0.25``: edit distances are integers, so the useful range
   is ``(0, 0.5)``).

Eq. 4.7 admits two readings, both implemented (:func:`feds_loss`):

* ``mode="masked"`` (**default**, the stated intent): "for samples where the quality of
  approximation is within the bound of lambda, the STR model is trained to minimize the edit
  distance surrogate" (Sec. 4.2.3, Fig. 4.3 caption). The loss is
  ``(1/B) sum_b 1[|e_hat_b - e_b| < lambda] e_hat_b`` with the mask computed without gradient.
* ``mode="literal"``: eq. 4.7 as printed, ``(1/B) sum_b min(|e_hat_b - e_b|, lambda)``. Inside
  the band its gradient is ``sign(e_hat - e) d e_hat``: where the surrogate *under*-estimates the
  true distance the model is pushed to *increase* ``e_hat``, i.e. away from the ground truth in
  the embedding. It trains agreement, not a lower edit distance.

``lambda = inf`` switches the filter off (LS-ED without a generator: the unfiltered baseline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rank_lab._validation import as_tensor, check_finite
from rank_lab.learned.surrogate_model import EmbeddingSurrogate, LSConfig, SurrogateTask
from rank_lab.learned.surrogate_trainer import SurrogateTrainer

__all__ = ["FEDS_MODES", "feds_filter", "feds_mask", "feds_loss", "FEDSConfig", "FEDSTrainer"]

FEDS_MODES = ("masked", "literal")


def _check(e_hat: torch.Tensor, e_true: torch.Tensor, lam: float) -> torch.Tensor:
    e_hat, e_true = as_tensor(e_hat, "e_hat"), as_tensor(e_true, "e_true")
    if e_hat.ndim != 1 or e_hat.shape != e_true.shape:
        raise ValueError(
            f"e_hat and e_true must both have shape (B,), got {tuple(e_hat.shape)} and "
            f"{tuple(e_true.shape)}"
        )
    if e_hat.shape[0] == 0:
        raise ValueError("e_hat is an empty batch")
    if not e_hat.is_floating_point():
        raise TypeError(
            f"e_hat must be a floating tensor (surrogate outputs), got dtype {e_hat.dtype}"
        )
    check_finite(e_hat, "e_hat")
    check_finite(e_true.to(e_hat.dtype), "e_true")
    if isinstance(lam, bool) or not isinstance(lam, (int, float)):
        raise TypeError(f"lam must be a number, got {type(lam).__name__}")
    if not (lam > 0):
        raise ValueError(f"lam (lambda of eq. 4.7) must be > 0, got {lam}")
    return e_true.detach().to(e_hat.dtype)


def feds_filter(e_hat: torch.Tensor, e_true: torch.Tensor, lam: float = 0.25) -> torch.Tensor:
    """Eq. 4.7, per sample: ``g_lambda(e, e_hat) = min(|e_hat - e|, lambda)``, shape ``(B,)``."""
    e_true = _check(e_hat, e_true, lam)
    return torch.clamp((e_hat - e_true).abs(), max=lam)


def feds_mask(e_hat: torch.Tensor, e_true: torch.Tensor, lam: float = 0.25) -> torch.Tensor:
    """Samples inside the band, ``|e_hat - e| < lambda`` (bool ``(B,)``, no gradient)."""
    e_true = _check(e_hat, e_true, lam)
    return (e_hat.detach() - e_true).abs() < lam


def feds_loss(
    e_hat: torch.Tensor, e_true: torch.Tensor, lam: float = 0.25, mode: str = "masked"
) -> tuple[torch.Tensor, dict[str, float]]:
    """The recogniser's FEDS loss (Algorithm 2, line 15), with both readings of eq. 4.7.

    Args:
        e_hat: ``(B,)`` surrogate values (differentiable w.r.t. the model).
        e_true: ``(B,)`` true edit distances.
        lam: the band half-width ``lambda`` (0.25 in the thesis; ``inf`` = no filtering).
        mode: ``"masked"`` (default; minimise ``e_hat`` on in-band samples) or ``"literal"``
            (``min(|e_hat - e|, lambda)`` as printed). See the module docstring.

    Returns:
        The scalar loss (a mean over all ``B`` samples, out-of-band ones contributing zero) and
        ``{"in_band": fraction of in-band samples}``.
    """
    if mode not in FEDS_MODES:
        raise ValueError(f"mode must be one of {FEDS_MODES}, got {mode!r}")
    mask = feds_mask(e_hat, e_true, lam)
    if mode == "masked":
        loss = (e_hat * mask.to(e_hat.dtype)).mean()
    else:
        loss = feds_filter(e_hat, e_true, lam).mean()
    return loss, {"in_band": float(mask.float().mean())}


@dataclass
class FEDSConfig(LSConfig):
    """:class:`~rank_lab.learned.surrogate_model.LSConfig` for Algorithm 2.

    Defaults differ from LS where Ch. 4 says so: ``source="local"`` (eq. 4.6),
    ``grad_penalty = w2 = 0.1`` and ``fit_weight = w1 = 1`` (eq. 4.5), ``lam = 0.25`` (eq. 4.7).

    Attributes:
        lam: band half-width ``lambda``; ``math.inf`` disables the filter.
        mode: ``"masked"`` (default) or ``"literal"`` reading of eq. 4.7.
    """

    source: str = "local"
    lam: float = 0.25
    mode: str = "masked"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.lam > 0:
            raise ValueError(f"lam must be > 0, got {self.lam}")
        if self.mode not in FEDS_MODES:
            raise ValueError(f"mode must be one of {FEDS_MODES}, got {self.mode!r}")


class FEDSTrainer(SurrogateTrainer):
    """Post-tuning with FEDS: Algorithm 2 (alternating surrogate / filtered model updates).

    Same arguments as :class:`~rank_lab.learned.surrogate_trainer.SurrogateTrainer`, with a
    :class:`FEDSConfig`; the model loss is :func:`feds_loss` and ``history["model"]`` records
    the in-band fraction of every step (the quantity behind Fig. 4.4).
    """

    def __init__(
        self,
        model: nn.Module,
        surrogate: EmbeddingSurrogate,
        task: SurrogateTask,
        config: FEDSConfig | None = None,
        **kwargs: Any,
    ) -> None:
        config = config or FEDSConfig()
        if not isinstance(config, FEDSConfig):
            raise TypeError(f"config must be a FEDSConfig, got {type(config).__name__}")
        if "model_loss" in kwargs:
            raise TypeError(
                "FEDSTrainer sets model_loss itself (use SurrogateTrainer for a custom loss)"
            )
        lam, mode = config.lam, config.mode
        super().__init__(
            model,
            surrogate,
            task,
            config,
            model_loss=lambda eh, e: feds_loss(eh, e, lam, mode),
            **kwargs,
        )
