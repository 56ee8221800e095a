"""ESupCon, the extended supervised contrastive loss (Eqs. 6.12-6.17 of the Patel thesis).

The class prototypes ``theta`` (``(K, d)``) join the SupCon pool (:mod:`rank_lab.losses.supcon`) as
positives of their class; per pair, ``l_pt = log(exp(l_CE) + exp(l_SupCon) - 1)`` (Eqs. 6.16-6.17),
a smooth max of the two, and the posterior is the CE softmax over prototypes.

* :func:`esupcon_terms` -- the per-sample quantities of Eqs. 6.12 and 6.16;
* :func:`smooth_max_ce_supcon` -- Eq. 6.17, computed stably;
* :func:`esupcon_loss` -- Eq. 6.15 on a batch, and :class:`ESupConLoss`, the same with its own
  learnable prototypes (:class:`rank_lab.models.heads.PrototypeClassifier`) and the common call of
  every loss (a reference set, e.g. a cross-batch memory, gives the sample-sample terms).

Every dot product is divided by ``temperature`` (default 0.1); the prototypes are L2-normalised by
default like the features (the thesis does not say; ``normalize_prototypes=False`` keeps them raw).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    as_tensor,
    check_class_indices,
    check_finite,
    check_nonneg_int,
    unit_rows,
)
from rank_lab.losses.base import MetricLoss
from rank_lab.losses.prepared_batch import PreparedBatch, full_precision
from rank_lab.losses.registry import register_loss
from rank_lab.losses.supcon import (
    check_prototypes,
    check_temperature,
    contrastive_features,
    supcon_per_anchor,
)
from rank_lab.models.heads import PrototypeClassifier

__all__ = ["esupcon_terms", "esupcon_loss", "smooth_max_ce_supcon", "ESupConLoss"]


@full_precision
def esupcon_terms(
    z: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    temperature: float = 0.1,
    *,
    normalize: bool = True,
    normalize_prototypes: bool = True,
) -> dict[str, torch.Tensor]:
    """Per-sample quantities of Eqs. 6.12 and 6.16 (each ``(M,)``), all divided by ``temperature``.

    Returns a dict with ``T`` (``z_i^T theta_{y_i}``), ``log_C1`` (log sum over prototypes),
    ``log_C2`` (log sum over the other samples) and ``l_pt = -T + log(C1 + C2)`` (Eq. 6.12).
    """
    z, labels = contrastive_features(z, labels, normalize)
    t = check_temperature(temperature)
    protos = _unit_prototypes(prototypes, z, normalize_prototypes)
    return _esupcon_terms(z, labels, z @ z.T / t, ~_eye(z), protos, t)


def _eye(z: torch.Tensor) -> torch.Tensor:
    return torch.eye(z.shape[0], dtype=torch.bool, device=z.device)


def _unit_prototypes(
    prototypes: object, z: torch.Tensor, normalize_prototypes: bool
) -> torch.Tensor:
    protos = check_prototypes(prototypes, z.shape[1]).to(z.device)
    return unit_rows(protos, dim=1) if normalize_prototypes else protos


def _esupcon_terms(
    z: torch.Tensor,
    labels: torch.Tensor,
    sim: torch.Tensor,
    pool: torch.Tensor,
    protos: torch.Tensor,
    t: float,
) -> dict[str, torch.Tensor]:
    """Eqs. 6.12 / 6.16 for anchors ``z (M, d)`` against the pool items (``sim = z r^T / tau``,
    ``(M, N)``)."""
    # prototype_logits of checked inputs
    logits = z @ protos.to(device=z.device, dtype=z.dtype).T / t
    check_class_indices(labels, logits.shape[1])
    tt = logits.gather(1, labels[:, None]).squeeze(1)
    log_c1 = torch.logsumexp(logits, 1)
    log_c2 = torch.logsumexp(sim.masked_fill(~pool, float("-inf")), 1)
    return {
        "T": tt,
        "log_C1": log_c1,
        "log_C2": log_c2,
        "l_pt": -tt + torch.logaddexp(log_c1, log_c2),
    }


def _esupcon(
    z: torch.Tensor,
    labels: torch.Tensor,
    sim: torch.Tensor,
    pool: torch.Tensor,
    positives: torch.Tensor,
    protos: torch.Tensor,
    t: float,
    all_denominators: bool,
) -> torch.Tensor:
    """Eq. 6.15 for anchors ``z (M, d)`` against a pool (the batch, ``j != i``, or a memory)."""
    terms = _esupcon_terms(z, labels, sim, pool, protos, t)
    k = protos.shape[0]
    onehot = F.one_hot(labels, k).to(z.dtype)  # (M, K)
    counts = onehot.sum(0)
    per_class = (onehot * terms["l_pt"][:, None]).sum(0) / counts.clamp_min(1)
    proto_term = per_class[counts > 0].sum()
    per, has = supcon_per_anchor(
        sim, positives, pool, terms["log_C1"] if all_denominators else None
    )
    if not all_denominators and not bool(has.any()):
        raise ValueError(
            "no anchor has a positive (every label of labels is unique): SupCon needs >= 2 samples "
            "(or views) per class"
        )
    return (proto_term + per.sum()) / (z.shape[0] + k)


def smooth_max_ce_supcon(l_ce: torch.Tensor, l_supcon: torch.Tensor) -> torch.Tensor:
    """``log(exp(l_CE) + exp(l_SupCon) - 1)`` (Eq. 6.17), computed stably.

    Args:
        l_ce, l_supcon: per-sample losses of the same shape, finite and ``>= 0`` (both are; a
            negative value could make the argument of the log negative).
    """
    l_ce, l_supcon = _nonneg_losses(l_ce, "l_ce"), _nonneg_losses(l_supcon, "l_supcon")
    if l_ce.shape != l_supcon.shape:
        raise ValueError(
            f"l_ce has shape {tuple(l_ce.shape)} but l_supcon has shape {tuple(l_supcon.shape)}"
        )
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


@full_precision
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
    z, labels = contrastive_features(z, labels, normalize)
    t = check_temperature(temperature)
    protos = _unit_prototypes(prototypes, z, normalize_prototypes)
    pool = ~_eye(z)
    positives = (labels[:, None] == labels[None, :]) & pool
    return _esupcon(
        z, labels, z @ z.T / t, pool, positives, protos, t, prototypes_in_all_denominators
    )


@register_loss("esupcon", needs=("n_classes", "dim"))
class ESupConLoss(MetricLoss):
    """ESupCon (Eq. 6.15 of the Patel thesis) with its own learnable prototypes and the common call.

    ``loss(embeddings (M, d), labels (M,))`` is :func:`esupcon_loss` on the batch;
    ``loss(embeddings, labels, ref_embeddings (N, d), ref_labels (N,), ref_self_index=None)`` takes
    the sample-sample terms (the SupCon positives and the ``C2`` sums of Eqs. 6.12 and 6.16) from
    the reference set (e.g. a cross-batch memory; ``ref_self_index`` removes each anchor's own
    copy), the prototype terms staying per anchor. The prototypes are the classifier
    (:class:`rank_lab.models.heads.PrototypeClassifier`): :meth:`predict_proba` is
    ``softmax(z theta^T / tau)``.

    Args:
        n_classes, dim: shape of the prototypes ``(K, d)``, in this order like every proxy loss.
        temperature: ``tau`` (default 0.1).
        prototypes_in_all_denominators: see :func:`esupcon_loss`.
        hierarchy_level: with ``(M, L)`` labels, the column of the prototypes' classes (0 = fine),
            as every binary loss.
    """

    def __init__(
        self,
        n_classes: int,
        dim: int,
        temperature: float = 0.1,
        *,
        prototypes_in_all_denominators: bool = False,
        hierarchy_level: int = 0,
    ) -> None:
        super().__init__(hierarchy_level=check_nonneg_int(hierarchy_level, "hierarchy_level"))
        self.classifier = PrototypeClassifier(n_classes, dim, temperature)
        self.temperature = self.classifier.temperature
        self.prototypes_in_all_denominators = prototypes_in_all_denominators

    def loss_from_batch(self, batch: PreparedBatch) -> torch.Tensor:
        """Scalar ESupCon loss of the prepared common call: ``embeddings (M, d)``, class labels
        ``(M,)|(M, L)`` in ``[0, K)`` (+ optional references, the sample-sample terms' pool)."""
        classes = batch.labels if batch.labels.ndim == 1 else batch.labels[:, self.hierarchy_level]
        z = batch.embeddings.to(batch.scores.dtype)
        if z.shape[1] != self.classifier.prototypes.shape[1]:
            raise ValueError(
                f"embeddings have d={z.shape[1]} but the prototypes have "
                f"d={self.classifier.prototypes.shape[1]} (ESupConLoss takes (n_classes, dim), in "
                "this order)"
            )
        # the loss' own parameters
        protos = unit_rows(self.classifier.prototypes.to(z.device), dim=1)
        positives = (batch.relevance > 0) & batch.valid
        return _esupcon(
            z,
            classes,
            batch.scores / self.temperature,
            batch.valid,
            positives,
            protos,
            self.temperature,
            self.prototypes_in_all_denominators,
        )

    def predict_proba(self, z: torch.Tensor) -> torch.Tensor:
        """``(M, K)`` posterior."""
        return self.classifier.predict_proba(z)
