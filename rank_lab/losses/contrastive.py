"""Contrastive classification losses of chapter 6 of the Patel thesis (Aljundi, Patel et al., AAAI 2023).

Side by side, on L2-normalised features ``z`` (``(M, d)``; with two augmented views per image,
``M = 2N`` and the labels are repeated) and class weights / prototypes ``theta`` (``(K, d)``):

* SimCLR / NT-Xent (Eqs. 6.1-6.3): the positive of view ``i`` is the other view of its image.
* SupCon (Eqs. 6.4-6.5): the positives of ``i`` are every other sample of its class.
* Cross-entropy (Eq. 6.6, no bias), and CE(n): normalised features and weights (cosine classifier).
* SPCE, simplified pairwise CE (Eqs. 6.7-6.8): class logits are batch sums ``1/N sum_{j: y_j = k} z_j^T z_i``.
* Tightness (Eqs. 6.9-6.11): ``-z_i^T theta_{y_i}``, which drives ``theta_k`` to the class mean.
* ESupCon (Eqs. 6.12-6.15): the prototypes join the SupCon pool as positives of their class;
  per pair, ``l_pt = log(exp(l_CE) + exp(l_SupCon) - 1)`` (Eqs. 6.16-6.17), a smooth max of the
  two, and the posterior is the CE softmax over prototypes.

Temperature: the thesis omits it "for clarity" in chapter 6 and gives its value only in the AAAI
supplementary; every dot product is divided by ``temperature`` here (default 0.1), consistently, so
the identity (6.17) holds for any value. ESupCon prototypes are L2-normalised by default like the
features (the thesis does not say; ``normalize_prototypes=False`` keeps them raw).

The cosine classifier (:class:`rank_lab.models.heads.PrototypeClassifier`, with
:func:`~rank_lab.models.heads.prototype_logits` and :func:`~rank_lab.models.heads.class_means`) is a
head of :mod:`rank_lab.models`; the Section 6.5 protocols (imbalance, label noise) and the toy
two-view augmentation are data tools of :mod:`rank_lab.data.perturbations`.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_class_indices,
    check_embeddings,
    check_finite,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)
from rank_lab.losses.base import ListwiseLoss
from rank_lab.losses.prepared_batch import prepare_batch
from rank_lab.losses.registry import register_loss
from rank_lab.models.heads import PrototypeClassifier, prototype_logits

__all__ = [
    "nt_xent_loss",
    "supcon_loss",
    "cross_entropy_loss",
    "spce_logits",
    "spce_loss",
    "tightness_loss",
    "esupcon_terms",
    "esupcon_loss",
    "smooth_max_ce_supcon",
    "SupConLoss",
    "SimCLRLoss",
    "ESupConLoss",
]

Reduction = Literal["mean", "none"]


def _feats(z: torch.Tensor, labels: torch.Tensor | None, normalize: bool, name: str = "z") -> tuple[torch.Tensor, torch.Tensor | None]:
    z = check_embeddings(z, name)
    if labels is not None:
        labels = check_labels(labels, z.shape[0], "labels")
        if labels.ndim != 1:
            raise ValueError(f"labels must have shape (M,), got {tuple(labels.shape)}")
        labels = labels.to(z.device)
    return (F.normalize(z, dim=1) if normalize else z), labels


def _prototypes(prototypes: object, d: int, name: str = "prototypes") -> torch.Tensor:
    """A finite ``(K, d)`` prototype matrix whose width matches the features, or raise naming ``name``."""
    p = check_embeddings(prototypes, name)
    if p.shape[1] != d:
        raise ValueError(f"{name} have d={p.shape[1]} but the features have d={d}")
    return p


def _check_temperature(t: float) -> float:
    return check_float(t, "temperature", low=0.0, low_open=True)


def nt_xent_loss(z: torch.Tensor, temperature: float = 0.1, *, normalize: bool = True) -> torch.Tensor:
    """SimCLR / NT-Xent loss (Eqs. 6.1-6.3 of the Patel thesis).

    Args:
        z: ``(2N, d)`` features; rows ``i`` and ``i + N`` are the two views of image ``i``.
        temperature: ``tau``.
        normalize: L2-normalise ``z`` (cosine similarity, Eq. 6.2).

    Returns:
        Scalar ``1/2N sum_i l(z_i, z_{i+N}) + l(z_{i+N}, z_i)``.
    """
    z, _ = _feats(z, None, normalize)
    if z.shape[0] % 2 or z.shape[0] < 2:
        raise ValueError(f"z must stack two views of N images (2N rows), got {z.shape[0]} rows")
    n = z.shape[0] // 2
    labels = torch.arange(n, device=z.device).repeat(2)
    return supcon_loss(z, labels, _check_temperature(temperature), normalize=False)


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

    ``l(z_i, P_i) = 1/|P_i| sum_{p in P_i} (-z_i^T z_p / tau + log sum_{j != i} exp(z_i^T z_j / tau))``.

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
    z, labels = _feats(z, labels, normalize)
    t = _check_temperature(temperature)
    if base_temperature is not None:
        base_temperature = check_float(base_temperature, "base_temperature", low=0.0, low_open=True)
    eye = torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
    per, has = supcon_per_anchor(z @ z.T / t, (labels[:, None] == labels[None, :]) & ~eye, ~eye)
    if not bool(has.any()):
        raise ValueError("no anchor has a positive (every label of labels is unique): SupCon needs >= 2 samples "
                         "(or views) per class")
    if base_temperature is not None:
        per = per * (t / float(base_temperature))
    return per if reduction == "none" else per.sum() / has.sum()


def supcon_per_anchor(
    sim: torch.Tensor, positives: torch.Tensor, pool: torch.Tensor, extra_log_mass: torch.Tensor | None = None
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


def cross_entropy_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    normalize: bool = False,
    temperature: float = 1.0,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Softmax cross-entropy with class weights ``theta`` (Eq. 6.6), or CE(n) with ``normalize=True``.

    Args:
        z: ``(M, d)`` features.
        labels: ``(M,)`` in ``[0, K)``.
        weight: ``(K, d)`` class weights ``theta``.
        bias: optional ``(K,)`` bias (Eq. 6.6 has none).
        normalize: CE(n): normalise features and weights (cosine logits).
        temperature: logits are divided by it.
        reduction: ``"mean"`` or ``"none"`` (``(M,)``).
    """
    check_choice(reduction, "reduction", ("mean", "none"))
    logits = prototype_logits(z, weight, normalize=normalize, temperature=temperature, name="weight")
    if bias is not None:
        b = as_tensor(bias, "bias")
        if b.shape != (logits.shape[1],):
            raise ValueError(f"bias must have shape ({logits.shape[1]},): one per class of weight, got {tuple(b.shape)}")
        check_finite(b, "bias")
        logits = logits + b.to(device=logits.device, dtype=logits.dtype)
    labels = check_labels(labels, logits.shape[0], "labels").to(logits.device)
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (M,), got {tuple(labels.shape)}")
    return F.cross_entropy(logits, check_class_indices(labels, logits.shape[1]), reduction=reduction)


def spce_logits(z: torch.Tensor, labels: torch.Tensor, n_classes: int, queries: torch.Tensor | None = None) -> torch.Tensor:
    """SPCE class logits ``1/N sum_{j: y_j = k} z_j^T z_i`` (Eqs. 6.7-6.8), ``(Q, K)``.

    ``1/N`` is the batch size (not the class size), ``j = i`` is included, and an absent class has
    logit 0. ``queries`` (default ``z``) are the ``z_i``; ``z, labels`` are the reference batch.

    Args:
        z: ``(N, d)`` reference features (normalised by the caller); labels: ``(N,)`` in ``[0, K)``.
        n_classes: ``K``; queries: ``(Q, d)`` or None.
    """
    n_classes = check_positive_int(n_classes, "n_classes")
    z, labels = _feats(z, labels, False)
    check_class_indices(labels, n_classes)
    if queries is not None:
        queries = _prototypes(queries, z.shape[1], "queries").to(device=z.device, dtype=z.dtype)
    onehot = F.one_hot(labels, n_classes).to(z.dtype)  # (N, K)
    sums = onehot.T @ z  # (K, d) class sums
    q = z if queries is None else queries
    return q @ sums.T / z.shape[0]


def spce_loss(z: torch.Tensor, labels: torch.Tensor, n_classes: int, *, normalize: bool = True, temperature: float = 1.0) -> torch.Tensor:
    """Simplified pairwise cross-entropy (Eq. 6.7; Boudiaf et al. 2020).

    Args:
        z: ``(N, d)`` features; labels ``(N,)``; n_classes ``K`` (absent classes contribute
            ``exp(0)`` to the denominator, as the formula says).
        normalize: L2-normalise ``z``.
        temperature: logits divided by it (1 = the thesis).
    """
    z, labels = _feats(z, labels, normalize)
    logits = spce_logits(z, labels, n_classes) / _check_temperature(temperature)
    return F.cross_entropy(logits, labels)


def tightness_loss(
    z: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, *, normalize: bool = True, detach_features: bool = False
) -> torch.Tensor:
    """Tightness loss ``1/N sum_i -z_i^T theta_{y_i}`` (Eq. 6.9); gradient Eq. 6.10.

    With ``detach_features`` only the prototypes learn (SupCon+Tt: no gradient into the backbone).
    """
    z, labels = _feats(z.detach() if detach_features else z, labels, normalize)
    p = _prototypes(prototypes, z.shape[1]).to(z.device)
    check_class_indices(labels, p.shape[0])
    p = F.normalize(p, dim=1) if normalize else p
    return -(z * p[labels]).sum(1).mean()


def esupcon_terms(
    z: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, temperature: float = 0.1, *, normalize: bool = True,
    normalize_prototypes: bool = True,
) -> dict[str, torch.Tensor]:
    """Per-sample quantities of Eqs. 6.12 and 6.16 (each ``(M,)``), all divided by ``temperature``.

    Returns a dict with ``T`` (``z_i^T theta_{y_i}``), ``log_C1`` (log sum over prototypes),
    ``log_C2`` (log sum over the other samples) and ``l_pt = -T + log(C1 + C2)`` (Eq. 6.12).
    """
    z, labels = _feats(z, labels, normalize)
    t = _check_temperature(temperature)
    protos = _unit_prototypes(prototypes, z, normalize_prototypes)
    return _esupcon_terms(z, labels, z @ z.T / t, ~_eye(z), protos, t)


def _eye(z: torch.Tensor) -> torch.Tensor:
    return torch.eye(z.shape[0], dtype=torch.bool, device=z.device)


def _unit_prototypes(prototypes: object, z: torch.Tensor, normalize_prototypes: bool) -> torch.Tensor:
    protos = _prototypes(prototypes, z.shape[1]).to(z.device)
    return F.normalize(protos, dim=1) if normalize_prototypes else protos


def _esupcon_terms(z: torch.Tensor, labels: torch.Tensor, sim: torch.Tensor, pool: torch.Tensor, protos: torch.Tensor,
                   t: float) -> dict[str, torch.Tensor]:
    """Eqs. 6.12 / 6.16 for anchors ``z (M, d)`` against the pool items (``sim = z r^T / tau``, ``(M, N)``)."""
    logits = prototype_logits(z, protos, normalize=False, temperature=t)
    check_class_indices(labels, logits.shape[1])
    tt = logits.gather(1, labels[:, None]).squeeze(1)
    log_c1 = torch.logsumexp(logits, 1)
    log_c2 = torch.logsumexp(sim.masked_fill(~pool, float("-inf")), 1)
    return {"T": tt, "log_C1": log_c1, "log_C2": log_c2, "l_pt": -tt + torch.logaddexp(log_c1, log_c2)}


def _esupcon(z: torch.Tensor, labels: torch.Tensor, sim: torch.Tensor, pool: torch.Tensor, positives: torch.Tensor,
             protos: torch.Tensor, t: float, all_denominators: bool) -> torch.Tensor:
    """Eq. 6.15 for anchors ``z (M, d)`` against a pool (the batch, ``j != i``, or a memory)."""
    terms = _esupcon_terms(z, labels, sim, pool, protos, t)
    k = protos.shape[0]
    onehot = F.one_hot(labels, k).to(z.dtype)  # (M, K)
    counts = onehot.sum(0)
    per_class = (onehot * terms["l_pt"][:, None]).sum(0) / counts.clamp_min(1)
    proto_term = per_class[counts > 0].sum()
    per, has = supcon_per_anchor(sim, positives, pool, terms["log_C1"] if all_denominators else None)
    if not all_denominators and not bool(has.any()):
        raise ValueError("no anchor has a positive (every label of labels is unique): SupCon needs >= 2 samples "
                         "(or views) per class")
    return (proto_term + per.sum()) / (z.shape[0] + k)


def smooth_max_ce_supcon(l_ce: torch.Tensor, l_supcon: torch.Tensor) -> torch.Tensor:
    """``log(exp(l_CE) + exp(l_SupCon) - 1)`` (Eq. 6.17), computed stably.

    Args:
        l_ce, l_supcon: per-sample losses of the same shape, finite and ``>= 0`` (both are; a
            negative value could make the argument of the log negative).
    """
    l_ce, l_supcon = _nonneg_losses(l_ce, "l_ce"), _nonneg_losses(l_supcon, "l_supcon")
    if l_ce.shape != l_supcon.shape:
        raise ValueError(f"l_ce has shape {tuple(l_ce.shape)} but l_supcon has shape {tuple(l_supcon.shape)}")
    m = torch.maximum(l_ce, l_supcon)
    return m + torch.log(torch.exp(l_ce - m) + torch.exp(l_supcon - m) - torch.exp(-m))


def _nonneg_losses(x: object, name: str) -> torch.Tensor:
    t = as_tensor(x, name)
    if not t.is_floating_point():
        t = t.float()
    check_finite(t, name)
    if bool((t < -1e-6).any()):
        raise ValueError(f"{name} must be >= 0 (a loss), got {float(t.min())}")
    return t


def esupcon_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    temperature: float = 0.1,
    *,
    normalize: bool = True,
    normalize_prototypes: bool = True,
    prototypes_in_all_denominators: bool = False,
) -> torch.Tensor:
    """ESupCon, extended supervised contrastive loss (Eq. 6.15 of the Patel thesis).

    ``1/(M + K) (sum_k l_pt(theta_k) + sum_i l_SupCon(z_i, P_i))`` with
    ``l_pt(theta_k) = 1/M_k sum_{i: y_i = k} l_pt(z_i, theta_k)`` (Eq. 6.14, ``M_k`` = number of
    class-``k`` rows, views included). Classes absent from the batch are skipped in the first sum
    (their term would be 0/0) and anchors without a positive in the second; the normaliser keeps
    the total ``M + K``. The sample-sample SupCon terms use the samples-only denominator (literal
    reading); ``prototypes_in_all_denominators`` adds the prototypes to those too (ablation).

    Args:
        z: ``(M, d)`` features; labels ``(M,)``; prototypes ``(K, d)``.
        temperature: divides every dot product.
        normalize, normalize_prototypes: L2-normalise features / prototypes.
        prototypes_in_all_denominators: the "fully extended" variant.
    """
    z, labels = _feats(z, labels, normalize)
    t = _check_temperature(temperature)
    protos = _unit_prototypes(prototypes, z, normalize_prototypes)
    pool = ~_eye(z)
    positives = (labels[:, None] == labels[None, :]) & pool
    return _esupcon(z, labels, z @ z.T / t, pool, positives, protos, t, prototypes_in_all_denominators)


@register_loss("supcon")
class SupConLoss(ListwiseLoss):
    """SupCon (Eqs. 6.4-6.5 of the Patel thesis) with the common call of every loss.

    ``loss(embeddings (B, d), labels)`` is :func:`supcon_loss` on the batch (each anchor against
    ``B \\ i``); ``loss(embeddings, labels, ref_embeddings (N, d), ref_labels)`` takes the positives and
    the denominator from the reference set instead (e.g. a cross-batch memory,
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

    def __init__(self, temperature: float = 0.1, base_temperature: float | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if base_temperature is not None:
            base_temperature = check_float(base_temperature, "base_temperature", low=0.0, low_open=True)
        self.temperature, self.base_temperature = _check_temperature(temperature), base_temperature

    def per_query(self, scores: torch.Tensor, relevance: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Per-anchor SupCon ``(Q,)`` (:func:`supcon_per_anchor`) on ``scores / temperature``."""
        per, _ = supcon_per_anchor(scores / self.temperature, (relevance > 0) & valid, valid)
        if self.base_temperature is not None:
            per = per * (self.temperature / float(self.base_temperature))
        return per

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, base_temperature={self.base_temperature}, reduction={self.reduction!r}"


class SimCLRLoss(nn.Module):
    """Module form of :func:`nt_xent_loss`; ``loss(embeddings)`` with ``(2N, d)`` stacked views."""

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        self.temperature = _check_temperature(temperature)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Args: embeddings ``(2N, d)``; labels ``(2N,)`` (checked, then ignored: the positive of a
        view is the other view of its image, whatever the labels). Returns a scalar."""
        embeddings = check_embeddings(embeddings, "embeddings")
        if labels is not None:
            check_labels(labels, embeddings.shape[0], "labels")
        return nt_xent_loss(embeddings, self.temperature)


@register_loss("esupcon", needs=("n_classes", "dim"))
class ESupConLoss(nn.Module):
    """ESupCon (Eq. 6.15 of the Patel thesis) with its own learnable prototypes and the common call.

    ``loss(embeddings (M, d), labels (M,))`` is :func:`esupcon_loss` on the batch;
    ``loss(embeddings, labels, ref_embeddings (N, d), ref_labels (N,), ref_self_index=None)`` takes
    the sample-sample terms (the SupCon positives and the ``C2`` sums of Eqs. 6.12 and 6.16) from the
    reference set (e.g. a cross-batch memory; ``ref_self_index`` removes each anchor's own copy),
    the prototype terms staying per anchor. The prototypes are the classifier
    (:class:`rank_lab.models.heads.PrototypeClassifier`): :meth:`predict_proba` is
    ``softmax(z theta^T / tau)``.

    Args:
        n_classes, dim: shape of the prototypes ``(K, d)``, in this order like every proxy loss.
        temperature: ``tau`` (default 0.1).
        prototypes_in_all_denominators: see :func:`esupcon_loss`.
        hierarchy_level: with ``(M, L)`` labels, the column of the prototypes' classes (0 = fine),
            as every binary loss.
    """

    #: the sample-sample terms use the reference set (a memory wrapper passes it).
    uses_references = True
    #: embeddings are L2-normalised inside the loss (a memory stores them normalised).
    normalize = True

    def __init__(self, n_classes: int, dim: int, temperature: float = 0.1, *, prototypes_in_all_denominators: bool = False,
                 hierarchy_level: int = 0) -> None:
        super().__init__()
        self.classifier = PrototypeClassifier(n_classes, dim, temperature)
        self.temperature = self.classifier.temperature
        self.prototypes_in_all_denominators = prototypes_in_all_denominators
        self.hierarchy_level = check_nonneg_int(hierarchy_level, "hierarchy_level")

    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        *,
        ref_self_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scalar ESupCon loss of ``embeddings (M, d)``, class ``labels (M,)|(M, L)`` in ``[0, K)`` (+ optional refs)."""
        batch = prepare_batch(embeddings, labels, ref_embeddings, ref_labels, ref_self_index=ref_self_index,
                              hierarchy_level=self.hierarchy_level)
        classes = batch.labels if batch.labels.ndim == 1 else batch.labels[:, self.hierarchy_level]
        z = batch.embeddings.to(batch.scores.dtype)
        if z.shape[1] != self.classifier.prototypes.shape[1]:
            raise ValueError(f"embeddings have d={z.shape[1]} but the prototypes have d={self.classifier.prototypes.shape[1]} "
                             "(ESupConLoss takes (n_classes, dim), in this order)")
        protos = _unit_prototypes(self.classifier.prototypes, z, True)
        positives = (batch.relevance > 0) & batch.valid
        return _esupcon(z, classes, batch.scores / self.temperature, batch.valid, positives, protos, self.temperature,
                        self.prototypes_in_all_denominators)

    def predict_proba(self, z: torch.Tensor) -> torch.Tensor:
        """``(M, K)`` posterior."""
        return self.classifier.predict_proba(z)
