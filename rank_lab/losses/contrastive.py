"""Contrastive classification losses of chapter 6 of the Patel thesis (Aljundi, Patel et al., AAAI
2023).

Side by side, on L2-normalised features ``z`` (``(M, d)``; with two augmented views per image,
``M = 2N`` and the labels are repeated) and class weights / prototypes ``theta`` (``(K, d)``):

* SimCLR / NT-Xent (Eqs. 6.1-6.3): the positive of view ``i`` is the other view of its image.
* SupCon (Eqs. 6.4-6.5): the positives of ``i`` are every other sample of its class.
* Cross-entropy (Eq. 6.6, no bias), and CE(n): normalised features and weights (cosine classifier).
* SPCE, simplified pairwise CE (Eqs. 6.7-6.8): class logits are batch sums
  ``1/N sum_{j: y_j = k} z_j^T z_i``.
* Tightness (Eqs. 6.9-6.11): ``-z_i^T theta_{y_i}``, which drives ``theta_k`` to the class mean.
* ESupCon (Eqs. 6.12-6.15): the prototypes join the SupCon pool as positives of their class;
  per pair, ``l_pt = log(exp(l_CE) + exp(l_SupCon) - 1)`` (Eqs. 6.16-6.17), a smooth max of the
  two, and the posterior is the CE softmax over prototypes.

Temperature: the thesis omits it "for clarity" in chapter 6 and gives its value only in the AAAI
supplementary; every dot product is divided by ``temperature`` here (default 0.1), consistently, so
the identity (6.17) holds for any value. ESupCon prototypes are L2-normalised by default like the
features (the thesis does not say; ``normalize_prototypes=False`` keeps them raw).

This module holds the classification losses (cross-entropy, CE(n), SPCE and tightness); SimCLR and
SupCon are in :mod:`rank_lab.losses.supcon`, ESupCon in :mod:`rank_lab.losses.esupcon`.

The cosine classifier (:class:`rank_lab.models.heads.PrototypeClassifier`, with
:func:`~rank_lab.models.heads.prototype_logits` and :func:`~rank_lab.models.heads.class_means`) is a
head of :mod:`rank_lab.models`; the Section 6.5 protocols (imbalance, label noise) and the toy
two-view augmentation are data tools of :mod:`rank_lab.data.perturbations`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_class_indices,
    check_finite,
    check_labels,
    check_positive_int,
    unit_rows,
)
from rank_lab.losses.prepared_batch import full_precision
from rank_lab.losses.supcon import (
    Reduction,
    check_prototypes,
    check_temperature,
    contrastive_features,
)
from rank_lab.models.heads import prototype_logits

__all__ = ["cross_entropy_loss", "spce_logits", "spce_loss", "tightness_loss"]


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
    """Softmax cross-entropy with class weights ``theta`` (Eq. 6.6), or CE(n) with
    ``normalize=True``.

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
    logits = prototype_logits(
        z, weight, normalize=normalize, temperature=temperature, name="weight"
    )
    if bias is not None:
        b = as_tensor(bias, "bias")
        if b.shape != (logits.shape[1],):
            raise ValueError(
                f"bias must have shape ({logits.shape[1]},): one per class of weight, got "
                f"{tuple(b.shape)}"
            )
        check_finite(b, "bias")
        logits = logits + b.to(device=logits.device, dtype=logits.dtype)
    labels = check_labels(labels, logits.shape[0], "labels").to(logits.device)
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (M,), got {tuple(labels.shape)}")
    return F.cross_entropy(
        logits, check_class_indices(labels, logits.shape[1]), reduction=reduction
    )


@full_precision
def spce_logits(
    z: torch.Tensor, labels: torch.Tensor, n_classes: int, queries: torch.Tensor | None = None
) -> torch.Tensor:
    """SPCE class logits ``1/N sum_{j: y_j = k} z_j^T z_i`` (Eqs. 6.7-6.8), ``(Q, K)``.

    ``1/N`` is the batch size (not the class size), ``j = i`` is included, and an absent class has
    logit 0. ``queries`` (default ``z``) are the ``z_i``; ``z, labels`` are the reference batch.

    Args:
        z: ``(N, d)`` reference features (normalised by the caller); labels: ``(N,)`` in ``[0, K)``.
        n_classes: ``K``; queries: ``(Q, d)`` or None.
    """
    n_classes = check_positive_int(n_classes, "n_classes")
    z, labels = contrastive_features(z, labels, False)
    check_class_indices(labels, n_classes)
    if queries is not None:
        queries = check_prototypes(queries, z.shape[1], "queries").to(
            device=z.device, dtype=z.dtype
        )
    onehot = F.one_hot(labels, n_classes).to(z.dtype)  # (N, K)
    sums = onehot.T @ z  # (K, d) class sums
    q = z if queries is None else queries
    return q @ sums.T / z.shape[0]


@full_precision
def spce_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    n_classes: int,
    *,
    normalize: bool = True,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Simplified pairwise cross-entropy (Eq. 6.7; Boudiaf et al. 2020).

    Args:
        z: ``(N, d)`` features; labels ``(N,)``; n_classes ``K`` (absent classes contribute
            ``exp(0)`` to the denominator, as the formula says).
        normalize: L2-normalise ``z``.
        temperature: logits divided by it (1 = the thesis).
    """
    z, labels = contrastive_features(z, labels, normalize)
    logits = spce_logits(z, labels, n_classes) / check_temperature(temperature)
    return F.cross_entropy(logits, labels)


@full_precision
def tightness_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    normalize: bool = True,
    detach_features: bool = False,
) -> torch.Tensor:
    """Tightness loss ``1/N sum_i -z_i^T theta_{y_i}`` (Eq. 6.9); gradient Eq. 6.10.

    With ``detach_features`` only the prototypes learn (SupCon+Tt: no gradient into the backbone).
    """
    z, labels = contrastive_features(z.detach() if detach_features else z, labels, normalize)
    p = check_prototypes(prototypes, z.shape[1]).to(z.device)
    check_class_indices(labels, p.shape[0])
    p = unit_rows(p, dim=1) if normalize else p
    return -(z * p[labels]).sum(1).mean()
