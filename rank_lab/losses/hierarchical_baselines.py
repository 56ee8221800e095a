"""Hierarchical baselines of the Ramzi thesis ch. 4 (Tabs. 4.1-4.4): Σ-losses and CSL.

* :class:`SigmaLoss` / :func:`sigma_loss` -- "Σ" baselines: a binary loss computed at every level
  of the hierarchy and summed, ``sum_l w_l L(emb, labels[:, l])`` (Σ TL_SH, Σ NSM, Σ NCA++ in the
  tables; any loss of :func:`rank_lab.losses.build_loss`, e.g. Σ SupAP).
* :class:`CSLLoss` -- Cross-Scale Learning, the loss of the Dynamic Metric Learning paper
  (Sun et al., "Dynamic Metric Learning: Towards a Scalable Metric Space to Accommodate Multiple
  Semantic Scales", CVPR 2021; ``[81]`` of the thesis), the strongest hierarchical baseline. One
  normalised proxy per training fine class, each proxy carrying its class's label path. For every
  level l, the similarity to the sample's own fine proxy must exceed the similarity to every proxy
  of a *different level-l class* by a margin ``m_l`` that grows with the level, in the smooth-max
  (log-sum-exp) form::

      L_l = mean_i softplus( logsumexp_{z: y_z^l != y_i^l} (gamma s(v_i, p_z)) - gamma s(v_i, p_{y_i}) + gamma m_l )

  summed over levels. This is the form of the re-implementation in the official HAPPIER code (which
  produced the CSL rows of the thesis' tables): the positive term is always the fine proxy ("cross
  scale"), ``gamma = 32``, margins ``(0.25, 0.35, 0.45)`` fine to coarse for L = 3.
"""  # noqa: E501

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_labels,
    check_positive_int,
    trusted_inputs,
    unit_rows,
)
from rank_lab.losses.base import MetricLoss, deferred_no_positive
from rank_lab.losses.prepared_batch import check_references, full_precision
from rank_lab.losses.registry import build_loss, list_losses, loss_info, register_loss
from rank_lab.metrics.hierarchy.relevance import as_hierarchical_labels, hierarchy_table

__all__ = ["SigmaLoss", "sigma_loss", "CSLLoss"]


class SigmaLoss(MetricLoss):
    """Σ-loss: ``sum_l w_l loss_l(embeddings, labels)``, ``loss_l`` reading label column l.

    Args:
        losses: one loss per level, each with the common call and ``hierarchy_level = l``
            (column l of the ``(B, L)`` labels; :func:`sigma_loss` builds them).
        weights: per-level weights (default 1 each: the plain sum of the tables).

    The call is the common one of :class:`~rank_lab.losses.base.MetricLoss`; a combination of
    losses, it hands the call to its parts: references go to the losses that use them
    (``uses_references``), and it normalises when they all do (``normalize``).
    """

    def __init__(self, losses: Sequence[nn.Module], weights: Sequence[float] | None = None) -> None:
        super().__init__()
        if not losses:
            raise ValueError("losses must hold at least one loss")
        self.losses = nn.ModuleList(losses)
        w = [1.0] * len(losses) if weights is None else [float(x) for x in weights]
        if len(w) != len(losses) or any(x < 0 for x in w):
            raise ValueError(f"weights must be {len(losses)} non-negative floats, got {weights!r}")
        self.weights = w
        self.uses_references = any(getattr(loss, "uses_references", True) for loss in losses)
        self.normalize = all(getattr(loss, "normalize", True) for loss in losses)

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
        """Weighted sum of the per-level losses of ``embeddings (B, d)``, ``labels (B, L)``."""
        lab = check_labels(labels, None, "labels")
        if lab.ndim != 2 or lab.shape[1] < len(self.losses):
            raise ValueError(
                f"SigmaLoss over {len(self.losses)} levels needs (B, L >= {len(self.losses)}) "
                f"labels, got {tuple(lab.shape)}"
            )
        total = embeddings.new_zeros(())
        # validate once: the first level's loss checks the inputs' values, the others trust them
        checked = False
        with deferred_no_positive(self.losses):  # every level's no-positive rule in one host sync
            for w, loss in zip(self.weights, self.losses, strict=True):
                if w == 0:
                    continue
                with trusted_inputs([loss]) if checked else contextlib.nullcontext():
                    if ref_embeddings is not None and getattr(loss, "uses_references", True):
                        total = total + w * loss(
                            embeddings,
                            labels,
                            ref_embeddings,
                            ref_labels,
                            ref_self_index=ref_self_index,
                        )
                    else:
                        total = total + w * loss(embeddings, labels)
                checked = True
        return total

    def extra_repr(self) -> str:
        return f"weights={self.weights}"


@register_loss("sigma", needs=("dim",), hierarchical=True)
def sigma_loss(
    base: str,
    n_levels: int,
    *,
    level_classes: Sequence[int] | None = None,
    dim: int | None = None,
    weights: Sequence[float] | None = None,
    **kwargs: object,
) -> SigmaLoss:
    """Build a Σ-loss from a loss name of :func:`rank_lab.losses.build_loss` (Σ TL_SH =
    ``"triplet"`` with ``mining="semihard"``, Σ NSM = ``"norm_softmax"``, Σ NCA++ =
    ``"proxy_nca_pp"``, ``"sup_ap"`` ...).

    Args:
        base: name of the binary loss (``build_loss("sigma", base="sup_ap", n_levels=2)``).
        n_levels: L (one loss per label column).
        level_classes: classes per level (proxy losses; labels must be re-indexed per column,
            as :class:`rank_lab.train.Trainer` does).
        dim: embedding dimension (passed to proxy losses only).
        weights: per-level weights (default: plain sum).
        **kwargs: constructor arguments shared by every level.
    """
    if isinstance(n_levels, bool) or not isinstance(n_levels, int) or n_levels < 1:
        raise ValueError(f"n_levels must be a positive int, got {n_levels!r}")
    if level_classes is not None and len(level_classes) != n_levels:
        raise ValueError(
            f"level_classes must give one count per level ({n_levels}), got {list(level_classes)}"
        )
    try:
        takes_dim = "dim" in loss_info(base).needs
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"base must be a loss name of build_loss, got {base!r}; known: {list_losses()}"
        ) from exc
    losses = []
    for lev in range(n_levels):
        kw = dict(kwargs, hierarchy_level=lev)
        if level_classes is not None:
            kw["n_classes"] = int(level_classes[lev])
        if dim is not None and takes_dim:
            kw["dim"] = int(dim)
        losses.append(build_loss(base, **kw))
    return SigmaLoss(losses, weights)


@register_loss("csl", needs=("n_classes", "dim"), hierarchical=True)
class CSLLoss(MetricLoss):
    """Cross-Scale Learning loss of the DyML paper (Sun et al., CVPR 2021), see the module
    docstring.

    Args:
        n_classes: number of training fine classes C (labels' column 0 in ``[0, C)``).
        dim: embedding dimension d.
        n_levels: L (number of label columns); may be omitted when ``hierarchy`` is given.
        margins: ``m_l`` for l = fine..coarse (default ``0.25 + 0.1 l``: ``(0.25, 0.35, 0.45)`` for
            L = 3, the official values).
        scale: gamma = 32 (official).
        hierarchy: optional ``(C, L)`` label path of every fine class (row c = class c); otherwise
            the paths are recorded from the batches as they come, and proxies whose path is not
            known yet are left out of the negatives.
        level_reduction: ``"sum"`` (official) or ``"mean"`` over levels.

    The common call of :class:`~rank_lab.losses.base.MetricLoss`; ``uses_references = False``
    (a proxy loss, like :class:`~rank_lab.losses.proxies.NormSoftmaxLoss`): the references are
    checked, not used, so with a memory it sees the batch only. Proxies are initialised
    ``U(-1/sqrt(d), 1/sqrt(d))`` (official); give them their own learning rate.
    """

    uses_references = False

    def __init__(
        self,
        n_classes: int,
        dim: int,
        n_levels: int | None = None,
        margins: Sequence[float] | None = None,
        scale: float = 32.0,
        hierarchy: torch.Tensor | None = None,
        level_reduction: str = "sum",
        normalize: bool = True,
    ) -> None:
        super().__init__(normalize=normalize)
        if n_levels is None:
            if hierarchy is None:
                raise ValueError(
                    "CSLLoss needs n_levels (number of label columns) or a hierarchy table"
                )
            n_levels = as_hierarchical_labels(hierarchy, name="hierarchy").shape[1]
        self.n_classes, self.dim = (
            check_positive_int(n_classes, "n_classes"),
            check_positive_int(dim, "dim"),
        )
        self.n_levels = check_positive_int(n_levels, "n_levels")
        self.margins = (
            [0.25 + 0.1 * lev for lev in range(self.n_levels)]
            if margins is None
            else [float(m) for m in margins]
        )
        if len(self.margins) != self.n_levels:
            raise ValueError(f"margins must hold {self.n_levels} values, got {self.margins}")
        scale = check_float(scale, "scale", low=0.0, low_open=True)
        if level_reduction not in ("sum", "mean"):
            raise ValueError(f"level_reduction must be 'sum' or 'mean', got {level_reduction!r}")
        self.scale, self.level_reduction = float(scale), level_reduction
        self.proxies = nn.Parameter(torch.empty(self.n_classes, self.dim))
        bound = 1.0 / math.sqrt(self.dim)
        nn.init.uniform_(self.proxies, -bound, bound)
        self.register_buffer(
            "proxy_labels", torch.full((self.n_classes, self.n_levels), -1, dtype=torch.long)
        )
        if hierarchy is not None:
            table = hierarchy_table(hierarchy)
            if table.shape[1] != self.n_levels:
                raise ValueError(
                    f"hierarchy has {table.shape[1]} levels but n_levels={self.n_levels}"
                )
            self._record(table)

    @torch.no_grad()
    def _record(self, lab: torch.Tensor) -> None:
        fine = lab[:, 0]
        outside = (fine < 0) | (fine >= self.n_classes)
        known = self.proxy_labels[fine.clamp(0, self.n_classes - 1).to(self.proxy_labels.device)]
        clash = (known[:, 0] >= 0) & (known != lab.to(known.device)).any(1)
        # one host sync
        bad_range, bad_tree = torch.stack([outside.any(), clash.any().to(outside.device)]).tolist()
        if bad_range:
            raise ValueError(
                f"fine labels must be in [0, {self.n_classes}) (one proxy per training class)"
            )
        if bad_tree:
            raise ValueError(
                f"fine class {int(fine[clash][0])} appears with two label paths: labels are not a "
                "tree"
            )
        self.proxy_labels[fine.to(self.proxy_labels.device)] = lab.to(self.proxy_labels.device)

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
        """Scalar CSL loss of ``embeddings (B, d)`` with ``labels (B, L)`` (references checked, not
        used)."""
        emb = check_embeddings(embeddings, "embeddings")
        lab = as_hierarchical_labels(labels, emb.shape[0]).to(emb.device)
        check_references(emb, ref_embeddings, ref_labels)
        if lab.shape[1] != self.n_levels:
            raise ValueError(
                f"labels have {lab.shape[1]} levels but the loss was built for "
                f"n_levels={self.n_levels}"
            )
        if emb.shape[1] != self.dim:
            raise ValueError(
                f"embeddings has dimension {emb.shape[1]} but the proxies have {self.dim}"
            )
        self._record(lab)
        v = emb.to(self.proxies.dtype)  # float32, or float64 after .double()
        v = unit_rows(v, dim=1) if self.normalize else v
        sim = self.scale * v @ unit_rows(self.proxies, dim=1).T  # (B, C)
        pl = self.proxy_labels.to(emb.device)
        known = pl[:, 0] >= 0
        pos = sim.gather(1, lab[:, :1])[:, 0]
        losses = []
        for lev in range(self.n_levels):
            neg = known[None, :] & (pl[None, :, lev] != lab[:, lev, None])
            # a finite fill keeps the gradient finite when a row has no negative at this level
            lse = torch.logsumexp(sim.masked_fill(~neg, -1e4), dim=1)
            losses.append(F.softplus(lse - pos + self.scale * self.margins[lev]).mean())
        total = torch.stack(losses).sum()
        return total / self.n_levels if self.level_reduction == "mean" else total

    def extra_repr(self) -> str:
        return (
            f"n_classes={self.n_classes}, dim={self.dim}, margins={self.margins}, "
            f"scale={self.scale}"
        )
