"""Proxy (classification) losses: NormSoftmax and ProxyNCA++.

Both learn one proxy per *training* class and compare L2-normalised embeddings with L2-normalised
proxies; the proxies are parameters of the loss module. They ignore ``ref_embeddings``
(``uses_references = False``): with a memory they see only the batch, as in the official ROADMAP /
HAPPIER code.

* :class:`NormSoftmaxLoss` -- Zhai & Wu, "Classification is a Strong Baseline for Deep Metric
  Learning" (BMVC 2019): ``-log softmax_y(v^T p_z / T)``, temperature ``T = 0.05``. This is also the
  proxy-based decomposability loss ``L*_DG`` of Eq. 3.8 of the Ramzi thesis (SupRank Eq. 8),
  ``eta = 0.05`` from the official HAPPIER/SupRank code (the papers do not print it).
* :class:`ProxyNCAPlusPlusLoss` -- Teh, DeVries, Taylor, "ProxyNCA++: Revisiting and Revitalizing
  Proxy Neighborhood Component Analysis" (ECCV 2020): ``-log softmax_y(-||v - p_z||^2 / T)`` over
  *all* proxies (the positive is in the denominator, unlike ProxyNCA), ``T = 1/9``. With unit
  vectors ``||v - p||^2 = 2 - 2 v^T p``, so this is NormSoftmax with temperature ``T / 2``.
  ProxyNCA++'s other ingredients live outside the loss: fast-moving proxies (a separate optimizer,
  official proxy lr 4e2 with Adam), layer norm and global max + average pooling in the model.

Proxy initialisation: ``U(-1/sqrt(d), 1/sqrt(d))`` for NormSoftmax (official HAPPIER code), and
``N(0, 1) / 8`` for ProxyNCA++ (official code). The trainer should give ``loss.parameters()`` their
own optimizer (official HAPPIER/SupRank: Adam, lr 10, no weight decay; see :data:`PROXY_LR`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._validation import (
    check_choice,
    check_embeddings,
    check_float,
    check_labels,
    check_positive_int,
    trusts_inputs,
    unit_rows,
)
from rank_lab.losses.base import MetricLoss
from rank_lab.losses.prepared_batch import check_references, full_precision
from rank_lab.losses.registry import register_loss

__all__ = ["NormSoftmaxLoss", "ProxyNCAPlusPlusLoss", "PROXY_LR"]

#: Proxy learning rates of the official code: NormSoftmax / L*_DG (HAPPIER, SupRank: Adam lr 10,
#: cosine to 0.1) and ProxyNCA++ (Adam lr 4e2).
PROXY_LR = {"norm_softmax": 10.0, "proxy_nca_pp": 400.0}


class _ProxyLoss(MetricLoss):
    uses_references = False

    def __init__(self, n_classes: int, dim: int, temperature: float, **kwargs: object) -> None:
        kwargs.setdefault("reduction", "mean")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.n_classes, self.dim = (
            check_positive_int(n_classes, "n_classes"),
            check_positive_int(dim, "dim"),
        )
        self.temperature = check_float(temperature, "temperature", low=0.0, low_open=True)
        self.proxies = nn.Parameter(torch.empty(self.n_classes, self.dim))

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    @full_precision
    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        *,
        ref_self_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Cross-entropy over proxies of ``embeddings (B, d)``, ``labels (B,)|(B, L)``.

        References are checked (:func:`~rank_lab.losses.prepared_batch.check_references`) but not
        used: a proxy loss compares each embedding with the class proxies only
        (``uses_references = False``).
        """
        trusted = trusts_inputs(self)  # a combined loss or the engine checked the values (finite)
        emb = check_embeddings(embeddings, "embeddings", finite=not trusted)
        lab = check_labels(labels, emb.shape[0], "labels").to(emb.device)
        check_references(emb, ref_embeddings, ref_labels, finite=not trusted)
        if lab.ndim == 2:
            if not 0 <= self.hierarchy_level < lab.shape[1]:
                raise ValueError(
                    f"hierarchy_level={self.hierarchy_level} is out of range for labels with "
                    f"{lab.shape[1]} levels"
                )
            lab = lab[:, self.hierarchy_level]
        if emb.shape[1] != self.dim:
            raise ValueError(
                f"embeddings has dimension {emb.shape[1]} but the proxies have {self.dim}"
            )
        if bool(((lab < 0) | (lab >= self.n_classes)).any()):  # one host sync
            raise ValueError(
                f"labels must be in [0, {self.n_classes}) (one proxy per training class); got "
                f"range [{int(lab.min())}, {int(lab.max())}]"
            )
        logits = self.logits(emb.float() if emb.dtype in (torch.float16, torch.bfloat16) else emb)
        return F.cross_entropy(logits, lab, reduction=self.reduction)

    def extra_repr(self) -> str:
        return f"n_classes={self.n_classes}, dim={self.dim}, temperature={self.temperature}"


@register_loss("norm_softmax", needs=("n_classes", "dim"))
class NormSoftmaxLoss(_ProxyLoss):
    """NormSoftmax (Zhai & Wu 2019) = ``L*_DG`` (Eq. 3.8 of the Ramzi thesis).

    ``-log [exp(v_y^T p_y / T) / sum_z exp(v_y^T p_z / T)]`` with normalised v and proxies.

    Args:
        n_classes: number of training (fine) classes; labels must be in ``[0, n_classes)``.
        dim: embedding dimension d.
        temperature: T = eta = 0.05 (Zhai & Wu; official HAPPIER code).
        **kwargs: ``reduction`` (over the batch), ``hierarchy_level`` (label column, 0 = fine).

    Shapes:
        ``embeddings (B, d)``, ``labels (B,)`` -> scalar (``(B,)`` with ``reduction="none"``).
    """

    def __init__(
        self, n_classes: int, dim: int, temperature: float = 0.05, **kwargs: object
    ) -> None:
        super().__init__(n_classes, dim, temperature, **kwargs)
        bound = 1.0 / math.sqrt(self.dim)
        nn.init.uniform_(self.proxies, -bound, bound)

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        """``(B, C)`` logits ``v^T p_z / T`` (normalised v unless ``normalize=False``)."""
        v = unit_rows(embeddings, dim=1) if self.normalize else embeddings
        return v @ unit_rows(self.proxies, dim=1).to(v.dtype).T / self.temperature


@register_loss("proxy_nca_pp", needs=("n_classes", "dim"))
class ProxyNCAPlusPlusLoss(_ProxyLoss):
    """ProxyNCA++ (Teh et al. 2020): softmax over negative squared distances to normalised proxies.

    Args:
        n_classes: number of training classes.
        dim: embedding dimension.
        temperature: T = 1/9 (ProxyNCA++ paper; the official code's ``scale = 3 = sqrt(1/T)``).
        distance: ``"squared_euclidean"`` (paper).
        **kwargs: ``reduction``, ``hierarchy_level``.
    """

    def __init__(
        self,
        n_classes: int,
        dim: int,
        temperature: float = 1.0 / 9.0,
        distance: str = "squared_euclidean",
        **kwargs: object,
    ) -> None:
        super().__init__(n_classes, dim, temperature, **kwargs)
        self.distance = check_choice(distance, "distance", ("squared_euclidean",))
        with torch.no_grad():
            self.proxies.normal_(0.0, 1.0).div_(8.0)

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        """``(B, C)`` logits ``-||v - p_z||^2 / T`` with normalised v and p."""
        v = unit_rows(embeddings, dim=1) if self.normalize else embeddings
        p = unit_rows(self.proxies, dim=1).to(v.dtype)
        d2 = (v * v).sum(1, keepdim=True) + (p * p).sum(1)[None, :] - 2 * v @ p.T
        return -d2.clamp(min=0) / self.temperature
