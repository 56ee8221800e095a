"""SimCLR / NT-Xent and SupCon (Eqs. 6.1-6.5 of the Patel thesis), and the checks every chapter-6
loss shares.

On L2-normalised features ``z`` (``(M, d)``; with two augmented views per image, ``M = 2N`` and
the labels are repeated):

* SimCLR / NT-Xent (Eqs. 6.1-6.3): the positive of view ``i`` is the other view of its image
  (:func:`nt_xent_loss`, :class:`SimCLRLoss`).
* SupCon (Eqs. 6.4-6.5): the positives of ``i`` are every other sample of its class
  (:func:`supcon_loss`, :class:`SupConLoss` with the common call of every loss);
  :func:`supcon_per_anchor` is the one implementation of the per-anchor terms, which ESupCon
  (:mod:`rank_lab.losses.esupcon`) reuses.

Every dot product is divided by ``temperature`` (default 0.1; see :mod:`rank_lab.losses.contrastive`
for the chapter's overview and the temperature convention).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_float,
    check_labels,
    unit_rows,
)
from rank_lab.losses.base import ListwiseLoss
from rank_lab.losses.prepared_batch import full_precision
from rank_lab.losses.registry import register_loss

__all__ = ["nt_xent_loss", "supcon_loss", "SupConLoss", "SimCLRLoss"]

#: ``"mean"`` over anchors (samples) or ``"none"`` (per anchor).
Reduction = Literal["mean", "none"]


def contrastive_features(
    z: object, labels: object | None, normalize: bool, name: str = "z"
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The checked features of a chapter-6 loss, L2-normalised if asked (Eq. 6.2 of the Patel
    thesis).

    Args:
        z: ``(M, d)`` finite floating features.
        labels: ``(M,)`` integer labels, or None.
        normalize: L2-normalise the rows of ``z`` (cosine similarities).
        name: the name of ``z`` in the messages.

    Returns:
        ``(z (M, d), labels (M,) or None)``, the labels on ``z``'s device.

    Raises:
        ValueError / TypeError: naming ``name`` or ``labels``.
    """
    z = check_embeddings(z, name)
    if labels is not None:
        labels = check_labels(labels, z.shape[0], "labels")
        if labels.ndim != 1:
            raise ValueError(f"labels must have shape (M,), got {tuple(labels.shape)}")
        labels = labels.to(z.device)
    return (unit_rows(z, dim=1) if normalize else z), labels


def check_prototypes(prototypes: object, d: int, name: str = "prototypes") -> torch.Tensor:
    """A finite ``(K, d)`` prototype matrix ``theta`` (Eq. 6.6 / 6.12 of the Patel thesis) whose
    width matches the features, or raise naming ``name``.

    Args:
        prototypes: ``(K, d)`` class weights / prototypes.
        d: the features' dimension.
        name: the name of ``prototypes`` in the messages.

    Returns:
        The ``(K, d)`` tensor.
    """
    p = check_embeddings(prototypes, name)
    if p.shape[1] != d:
        raise ValueError(f"{name} have d={p.shape[1]} but the features have d={d}")
    return p


def check_temperature(t: float) -> float:
    """The softmax temperature ``tau`` of the chapter-6 losses (every dot product is divided by it),
    a finite float ``> 0``, or a ``ValueError`` naming ``temperature``."""
    return check_float(t, "temperature", low=0.0, low_open=True)


@full_precision
def nt_xent_loss(
    z: torch.Tensor, temperature: float = 0.1, *, normalize: bool = True
) -> torch.Tensor:
    """SimCLR / NT-Xent loss (Eqs. 6.1-6.3 of the Patel thesis).

    Args:
        z: ``(2N, d)`` features; rows ``i`` and ``i + N`` are the two views of image ``i``.
        temperature: ``tau``.
        normalize: L2-normalise ``z`` (cosine similarity, Eq. 6.2).

    Returns:
        Scalar ``1/2N sum_i l(z_i, z_{i+N}) + l(z_{i+N}, z_i)``.
    """
    z, _ = contrastive_features(z, None, normalize)
    if z.shape[0] % 2 or z.shape[0] < 2:
        raise ValueError(f"z must stack two views of N images (2N rows), got {z.shape[0]} rows")
    n = z.shape[0] // 2
    labels = torch.arange(n, device=z.device).repeat(2)
    return supcon_loss(z, labels, check_temperature(temperature), normalize=False)


@full_precision
def supcon_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 0.1,
    *,
    normalize: bool = True,
    base_temperature: float | None = None,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Supervised contrastive loss (Eqs. 6.4-6.5 of the Patel thesis; Khosla et al. 2020).

    ``l(z_i, P_i) = 1/|P_i| sum_{p in P_i} (-z_i^T z_p / tau + log sum_{j != i} exp(z_i^T z_j /
    tau))``.

    Args:
        z: ``(M, d)`` features (all views stacked).
        labels: ``(M,)`` labels (views repeat their image's label).
        temperature: ``tau``.
        normalize: L2-normalise ``z``.
        base_temperature: if set, multiply by ``tau / base_temperature`` as the public SupCon code
            does (0.07); ``None`` = the thesis formula.
        reduction: ``"mean"`` over anchors that have a positive, or ``"none"`` for the ``(M,)``
            per-anchor losses (0 for an anchor without positives).

    Raises:
        ValueError: no anchor has a positive (the loss is undefined).
    """
    check_choice(reduction, "reduction", ("mean", "none"))
    z, labels = contrastive_features(z, labels, normalize)
    t = check_temperature(temperature)
    if base_temperature is not None:
        base_temperature = check_float(base_temperature, "base_temperature", low=0.0, low_open=True)
    eye = torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
    per, has = supcon_per_anchor(z @ z.T / t, (labels[:, None] == labels[None, :]) & ~eye, ~eye)
    if not bool(has.any()):
        raise ValueError(
            "no anchor has a positive (every label of labels is unique): SupCon needs >= 2 samples "
            "(or views) per class"
        )
    if base_temperature is not None:
        per = per * (t / float(base_temperature))
    return per if reduction == "none" else per.sum() / has.sum()


def supcon_per_anchor(
    sim: torch.Tensor,
    positives: torch.Tensor,
    pool: torch.Tensor,
    extra_log_mass: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-anchor SupCon terms from similarities already divided by the temperature (Eq. 6.5).

    ``l_i = log sum_{j in pool_i} exp(sim_ij) - 1/|P_i| sum_{p in P_i} sim_ip``; the one
    implementation behind :func:`supcon_loss`, :class:`SupConLoss` and ESupCon (Eq. 6.15).

    Args:
        sim: ``(Q, N)`` ``z_i^T z_j / tau`` of anchors against the pool items.
        positives: ``(Q, N)`` bool ``P_i`` (inside ``pool``).
        pool: ``(Q, N)`` bool, the items of each anchor's denominator (``j != i``).
        extra_log_mass: ``(Q,)`` log of more denominator mass (ESupCon's prototypes,
            ``prototypes_in_all_denominators``), or None.

    Returns:
        ``(per (Q,), has (Q,))``: the losses (0 for an anchor without positives) and which anchors
        have a positive.
    """
    log_den = torch.logsumexp(sim.masked_fill(~pool, float("-inf")), dim=1)  # (Q,)
    if extra_log_mass is not None:
        log_den = torch.logaddexp(extra_log_mass, log_den)
    n_pos = positives.sum(1)
    has = n_pos > 0
    pos_sim = (sim * positives).sum(1) / n_pos.clamp_min(1)
    return torch.where(has, log_den - pos_sim, torch.zeros_like(log_den)), has


@register_loss("supcon")
class SupConLoss(ListwiseLoss):
    """SupCon (Eqs. 6.4-6.5 of the Patel thesis) with the common call of every loss.

    ``loss(embeddings (B, d), labels)`` is :func:`supcon_loss` on the batch (each anchor against
    ``B \\ i``); ``loss(embeddings, labels, ref_embeddings (N, d), ref_labels)`` takes the positives
    and the denominator from the reference set instead (e.g. a cross-batch memory,
    :class:`rank_lab.memory.MemoryLoss`; ``ref_self_index`` removes each anchor's own copy). Also
    ``forward_scores(scores (Q, N), targets (Q, N))`` on cosine scores.

    Args:
        temperature: ``tau`` (softmax temperature of the similarities, default 0.1).
        base_temperature: multiply by ``tau / base_temperature`` as the public SupCon code (0.07);
            ``None`` = the thesis formula.
        **kwargs: ``normalize``, ``reduction``, ``no_positive`` (anchors without a positive are
            skipped, an error if none has one), ``hierarchy_level`` ... (see
            :class:`~rank_lab.losses.base.ListwiseLoss`).
    """

    def __init__(
        self, temperature: float = 0.1, base_temperature: float | None = None, **kwargs: object
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if base_temperature is not None:
            base_temperature = check_float(
                base_temperature, "base_temperature", low=0.0, low_open=True
            )
        self.temperature, self.base_temperature = check_temperature(temperature), base_temperature

    def per_query(
        self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Per-anchor SupCon ``(Q,)`` (:func:`supcon_per_anchor`) on ``scores / temperature``."""
        per, _ = supcon_per_anchor(scores / self.temperature, (relevance > 0) & valid, valid)
        if self.base_temperature is not None:
            per = per * (self.temperature / float(self.base_temperature))
        return per

    def extra_repr(self) -> str:
        return (
            f"temperature={self.temperature}, base_temperature={self.base_temperature}, "
            f"reduction={self.reduction!r}"
        )


class SimCLRLoss(nn.Module):
    """Module form of :func:`nt_xent_loss`; ``loss(embeddings)`` with ``(2N, d)`` stacked views."""

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature)

    @full_precision
    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Args: embeddings ``(2N, d)``; labels ``(2N,)`` (checked, then ignored: the positive of a
        view is the other view of its image, whatever the labels). Returns a scalar."""
        embeddings = check_embeddings(embeddings, "embeddings")
        if labels is not None:
            check_labels(labels, embeddings.shape[0], "labels")
        return nt_xent_loss(embeddings, self.temperature)
