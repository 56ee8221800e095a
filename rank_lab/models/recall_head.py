"""The embedding head of the RS@k chapter: GeM -> LayerNorm -> FC -> L2 (Section 5.3.2 of the Patel
thesis).

"After the convolutional layers, Generalized mean pooling and layer normalization are used, similar
to ProxyNCA++. [...] The last layer of the model is a d dimensional fully connected layer with L2
normalization." The LayerNorm has affine parameters as in the official code (``src/netlib.py``;
:class:`rank_lab.models.heads.EmbeddingHead`, the ROADMAP head, has none). For ViTs the official
code takes the CLS token, then LayerNorm, FC and L2; for
R-Oxford / R-Paris there is no LayerNorm and the FC is initialised with learned whitening
(``layer_norm=False`` and :meth:`RecallHead.init_whitening`).

:class:`RecallEmbedder` chains a backbone (any module returning a ``(B, D, H, W)`` map or ``(B, D)``
vector) with the head and optionally freezes BatchNorm like the thesis.
"""

from __future__ import annotations

import torch
from torch import nn

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_input,
    check_module,
    check_positive_int,
    unit_rows,
)
from rank_lab.models.backbones import lock_batchnorm
from rank_lab.models.pooling import GeM

__all__ = ["RecallHead", "RecallEmbedder"]


class RecallHead(nn.Module):
    """GeM pooling -> LayerNorm -> Linear(D, d) -> L2-normalisation.

    Args:
        in_dim: channels ``D`` of the backbone output.
        embed_dim: output dimension ``d`` (thesis: 128 or 512; 2048 for R-Oxford/R-Paris).
        gem_p: initial GeM exponent (3, learnable, as in the official code).
        learn_p: learn the GeM exponent.
        layer_norm: apply LayerNorm before the FC (thesis: yes, except R-Oxford/R-Paris).
        bias: FC bias.

    Shapes:
        input ``(B, D, H, W)`` (pooled with GeM) or ``(B, D)`` (already pooled, e.g. a ViT CLS
        token); output ``(B, d)`` with unit rows.
    """

    def __init__(
        self,
        in_dim: int,
        embed_dim: int = 512,
        *,
        gem_p: float = 3.0,
        learn_p: bool = True,
        layer_norm: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        in_dim = check_positive_int(in_dim, "in_dim")
        embed_dim = check_positive_int(embed_dim, "embed_dim")
        gem_p = check_float(gem_p, "gem_p", low=0.0, low_open=True)
        self.pool = GeM(p=gem_p, learnable=learn_p)
        self.norm: nn.Module = nn.LayerNorm(in_dim) if layer_norm else nn.Identity()
        self.fc = nn.Linear(in_dim, embed_dim, bias=bias)
        self.in_dim, self.embed_dim = in_dim, embed_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, D, H, W)`` or ``(B, D)`` floating (float64 is cast to the weights' dtype).

        Returns:
            ``(B, d)`` L2-normalised (an empty batch gives ``(0, d)``).

        Raises:
            TypeError: ``x`` not a floating tensor. ValueError: a wrong shape, NaN or inf.
        """
        x = check_input(
            x, "x", (2, 4), shape=f"(B, {self.in_dim}, H, W) or (B, {self.in_dim})", like=self
        )
        if x.ndim == 4:
            x = self.pool(x)
        if x.shape[1] != self.in_dim:
            raise ValueError(
                f"x has {x.shape[1]} channels but the head expects in_dim={self.in_dim}"
            )
        return unit_rows(self.fc(self.norm(x)), dim=1)

    @torch.no_grad()
    def init_whitening(self, features: torch.Tensor, eps: float = 1e-6) -> None:
        """Initialise the FC with PCA whitening of pooled ``features`` ``(N, D)`` (R-Oxford/R-Paris
        recipe).

        Sets ``W = diag(lambda^-1/2) U^T`` (top ``d`` eigenvectors of the covariance) and
        ``b = -W mu`` so that ``fc(f)`` is whitened. This is the unsupervised PCA-whitening
        variant; the learned (supervised) whitening of Radenovic et al. needs matching pairs.
        """
        features = check_embeddings(features, "features")
        eps = check_float(eps, "eps", low=0.0, low_open=True)
        if features.shape[1] != self.in_dim:
            raise ValueError(
                f"features must have shape (N, {self.in_dim}), got {tuple(features.shape)}"
            )
        if features.shape[0] < 2:
            raise ValueError("features needs at least 2 rows to estimate a covariance")
        f = features.to(torch.float64)
        mu = f.mean(0)
        cov = torch.cov((f - mu).T)
        evals, evecs = torch.linalg.eigh(cov)
        order = evals.argsort(descending=True)[: self.embed_dim]
        if order.numel() < self.embed_dim:
            raise ValueError(f"cannot whiten to d={self.embed_dim} from D={self.in_dim} features")
        w = evecs[:, order].T / (evals[order].clamp_min(0) + eps).sqrt()[:, None]
        self.fc.weight.copy_(w.to(self.fc.weight.dtype))
        if self.fc.bias is not None:
            self.fc.bias.copy_((-w @ mu).to(self.fc.bias.dtype))


class RecallEmbedder(nn.Module):
    """A backbone followed by :class:`RecallHead`; BatchNorm frozen by default, as in the thesis.

    Args:
        backbone: module mapping images to a ``(B, D, H, W)`` map or a ``(B, D)`` vector (e.g.
            ``build_backbone("resnet50", weights=...)`` of :mod:`rank_lab.models.backbones`, or a
            ``timm`` model created with ``num_classes=0, global_pool=""``).
        in_dim: ``D``.
        embed_dim: ``d``.
        freeze_bn: lock every BatchNorm of the backbone in eval mode
            (:func:`rank_lab.models.backbones.lock_batchnorm`).
        freeze_bn_affine: also freeze the BN affine parameters (thesis: "BatchNorm parameters are
            kept frozen"); the official code still trains them (``False``).
        **head_kwargs: passed to :class:`RecallHead`.
    """

    def __init__(
        self,
        backbone: nn.Module,
        in_dim: int,
        embed_dim: int = 512,
        *,
        freeze_bn: bool = True,
        freeze_bn_affine: bool = True,
        **head_kwargs: object,
    ) -> None:
        super().__init__()
        self.backbone = check_module(backbone, "backbone")
        self.head = RecallHead(in_dim, embed_dim, **head_kwargs)  # type: ignore[arg-type]
        if freeze_bn:
            lock_batchnorm(self.backbone, freeze_affine=freeze_bn_affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, ...)`` images. Returns ``(B, d)`` unit-norm embeddings."""
        return self.head(self.backbone(x))
