"""Embedding heads and the retrieval model: backbone -> pooling -> [LayerNorm] -> [Linear] -> L2
norm.

The retrieval network of the Ramzi thesis (§3.5.1 "validation setting", §4.4.1) and of the SupRank /
ROADMAP papers: a ResNet-50 without its classifier, average pooling (GeM for the state-of-the-art
runs, max pooling for CUB in ROADMAP), a LayerNorm *without affine parameters*, a linear projection
2048 -> 512 and L2 normalisation, so that the score of two images is the cosine similarity
``s(q, x) = v_q^T v_x`` (Eq. 2.0 / §3.2.1 of the thesis). :func:`build_model` builds it from a
:class:`ModelConfig`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._validation import (
    check_class_indices,
    check_embeddings,
    check_float,
    check_input,
    check_labels,
    check_positive_int,
    unit_rows,
)
from rank_lab.models.backbones import BACKBONES, MLPBackbone, build_backbone, freeze_batchnorm
from rank_lab.models.pooling import POOLINGS, build_pooling

__all__ = [
    "EmbeddingHead",
    "EmbeddingModel",
    "ModelConfig",
    "build_model",
    "PrototypeClassifier",
    "prototype_logits",
    "class_means",
]


class EmbeddingHead(nn.Module):
    """``[LayerNorm(in_dim, affine=False)] -> [Linear(in_dim, embed_dim)] -> [L2 normalise]``.

    Args:
        in_dim: input feature size ``D``.
        embed_dim: output size; ``None`` keeps ``D`` (no projection).
        layer_norm: LayerNorm without affine parameters before the projection (thesis §3.5.1).
        normalize: L2-normalise the output (computed in float32, also under autocast).

    Raises:
        TypeError, ValueError: ``in_dim`` or ``embed_dim`` (unless ``None``) not a positive int.
    """

    def __init__(
        self,
        in_dim: int,
        embed_dim: int | None = 512,
        layer_norm: bool = True,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        in_dim = check_positive_int(in_dim, "in_dim")
        if embed_dim is not None:
            embed_dim = check_positive_int(embed_dim, "embed_dim")
        self.in_dim = in_dim
        self.norm = nn.LayerNorm(in_dim, elementwise_affine=False) if layer_norm else nn.Identity()
        self.proj = nn.Linear(in_dim, embed_dim) if embed_dim is not None else nn.Identity()
        self.normalize = bool(normalize)
        self.out_dim = embed_dim if embed_dim is not None else in_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, in_dim)`` floating features (float64 is cast to the weights' dtype).

        Returns:
            ``(B, out_dim)``, unit-norm rows when ``normalize`` (an empty batch gives
            ``(0, out_dim)``).

        Raises:
            TypeError: ``x`` not a floating tensor. ValueError: a wrong shape, NaN or inf.
        """
        x = check_input(x, "x", 2, shape=f"(B, {self.in_dim})", like=self)
        if x.shape[1] != self.in_dim:
            raise ValueError(f"x has {x.shape[1]} features per row but in_dim={self.in_dim}")
        z = self.proj(self.norm(x))
        if self.normalize:
            z = unit_rows(z.float(), dim=-1, eps=1e-12)
        return z


class EmbeddingModel(nn.Module):
    """Backbone + pooling + :class:`EmbeddingHead`; ``model(x)`` gives ``(B, d)`` embeddings.

    Args:
        backbone: returns a map ``(B, D, H, W)`` (pooled by ``pooling``) or vectors ``(B, D)``.
        pooling: a ``(B, D, H, W) -> (B, D)`` layer (:func:`rank_lab.models.build_pooling`); may be
            ``None`` for vector backbones.
        head: the embedding head.
        freeze_bn: keep the backbone's BatchNorm layers in eval mode during training
            (:func:`~rank_lab.models.backbones.freeze_batchnorm`, as in the official code).
    """

    def __init__(
        self,
        backbone: nn.Module,
        pooling: nn.Module | None,
        head: EmbeddingHead,
        freeze_bn: bool = False,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.pooling = pooling
        self.head = head
        self.freeze_bn = bool(freeze_bn)

    @property
    def embedding_dim(self) -> int:
        """Size ``d`` of the output embeddings."""
        return self.head.out_dim

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled backbone features ``(B, D)`` (before the head)."""
        x = check_input(x, "x", tuple(range(1, 9)), like=self)
        f = self.backbone(x)
        if f.ndim == 4:
            if self.pooling is None:
                raise ValueError(
                    "the backbone returned a feature map (B, D, H, W) but pooling is None"
                )
            f = self.pooling(f)
        if f.ndim != 2:
            raise ValueError(
                f"backbone features must be (B, D) after pooling, got {tuple(f.shape)}"
            )
        return f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x a batch of floating inputs (the backbone's shape; float64 is cast to the weights'
        dtype).

        Returns:
            Embeddings ``(B, d)`` (L2-normalised by default).

        Raises:
            TypeError: ``x`` not a floating tensor. ValueError: a shape the backbone refuses, NaN or
                inf.
        """
        return self.head(self.features(x))

    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters of the backbone (trained with ``lr``)."""
        return self.backbone.parameters()

    def head_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters of the new layers: pooling (GeM's ``p``) and head (trained with
        ``head_lr``)."""
        if self.pooling is not None:
            yield from self.pooling.parameters()
        yield from self.head.parameters()

    def train(self, mode: bool = True) -> EmbeddingModel:
        """Set train/eval mode; with ``freeze_bn`` the backbone's BatchNorm stays in eval mode."""
        super().train(mode)
        if mode and self.freeze_bn:
            freeze_batchnorm(self.backbone)
        return self


@dataclass
class ModelConfig:
    """Typed description of an :class:`EmbeddingModel` (see :func:`build_model`).

    Attributes:
        backbone: ``"mlp"``, ``"tiny_cnn"`` or a timm name (``"resnet50"`` ...).
        weights: the backbone's initial weights: ``"imagenet"`` (timm's pretrained weights, fetched
            by timm), ``"none"`` (or ``None``, the default: random weights) or a local weight file,
            loaded strictly (:mod:`rank_lab.models.weights`).
        in_channels: input channels (``tiny_cnn`` / timm).
        input_dim: flattened input size (``mlp``); the trainer fills it from the data when ``None``.
        hidden_dims: hidden widths of the ``mlp``.
        width: first-block width of ``tiny_cnn``.
        features_only: use timm's ``features_only`` wrapper.
        pooling: ``"avg"``, ``"max"``, ``"gem"`` (or any name known to ``build_pooling``).
        gem_p: initial GeM exponent.
        layer_norm: LayerNorm without affine parameters before the projection.
        embed_dim: embedding size (``None``: no projection).
        normalize: L2-normalise the embeddings.
        freeze_bn: BatchNorm of the backbone in eval mode while training.
        timm_kwargs: extra keyword arguments for ``timm.create_model``.
    """

    backbone: str = "mlp"
    weights: str | None = None
    in_channels: int = 3
    input_dim: int | None = None
    hidden_dims: tuple[int, ...] = (256, 256)
    width: int = 16
    features_only: bool = False
    pooling: str = "avg"
    gem_p: float = 3.0
    layer_norm: bool = True
    embed_dim: int | None = 512
    normalize: bool = True
    freeze_bn: bool = False
    timm_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hidden_dims = tuple(int(h) for h in self.hidden_dims)
        if not isinstance(self.backbone, str) or not self.backbone:
            raise ValueError(f"model.backbone must be a non-empty str, got {self.backbone!r}")
        check_backbone_name(self.backbone)
        if not isinstance(self.pooling, str):
            raise ValueError(f"model.pooling must be a str, got {self.pooling!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(
                f"unknown pooling {self.pooling!r} (model.pooling); known: {sorted(POOLINGS)}"
            )
        for name in ("in_channels", "width"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"model.{name} must be a positive int, got {v!r}")
        for name in ("input_dim", "embed_dim"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"model.{name} must be a positive int or None, got {v!r}")
        check_float(self.gem_p, "model.gem_p", low=0.0, low_open=True)
        if isinstance(self.weights, os.PathLike):
            self.weights = os.fspath(self.weights)
        if self.weights is not None and not isinstance(self.weights, str):
            raise TypeError(
                f"model.weights must be 'imagenet', 'none' or a file path, got {self.weights!r}"
            )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelConfig:
        """Build from a mapping; unknown keys raise ``ValueError`` listing the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown model config key(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(d))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (tuples become lists)."""
        out = dataclasses.asdict(self)
        out["hidden_dims"] = list(self.hidden_dims)
        return out


def check_backbone_name(name: str, argument: str = "model.backbone") -> None:
    """Refuse a backbone name that is neither ``mlp`` / ``tiny_cnn`` nor a timm model (when timm is
    installed; without it the build says so); the message names ``argument``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"{argument} must be a backbone name (a non-empty str), got {name!r}")
    key = name.lower()
    if name in BACKBONES:
        return
    try:
        # optional dependency (extra "timm"), imported where it is used
        import timm
    except ImportError:  # pragma: no cover - timm is optional; build_backbone raises ImportError
        return
    arch = (name[5:] if key.startswith("timm:") else name).split(".", 1)[0]
    if not timm.is_model(arch):
        raise ValueError(
            f"unknown backbone {name!r} ({argument}): use 'mlp', 'tiny_cnn' or a timm model name "
            "(see timm.list_models())"
        )


def build_model(config: ModelConfig | Mapping[str, Any] | Any) -> EmbeddingModel:
    """Build an :class:`EmbeddingModel` from a :class:`ModelConfig`, a dict, or an object with a
    ``.model`` attribute (a :class:`rank_lab.train.TrainConfig`).

    Pooling is only created for backbones that return feature maps (``tiny_cnn``, timm CNNs);
    vector backbones (``mlp``, transformers) go straight to the head.
    """
    if not isinstance(config, (ModelConfig, Mapping)) and hasattr(config, "model"):
        config = config.model
    if isinstance(config, Mapping):
        config = ModelConfig.from_dict(config)
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig or a mapping, got {type(config).__name__}")
    backbone = build_backbone(
        config.backbone,
        in_channels=config.in_channels,
        input_dim=config.input_dim,
        hidden_dims=config.hidden_dims,
        width=config.width,
        features_only=config.features_only,
        weights=config.weights,
        **config.timm_kwargs,
    )
    pooling: nn.Module | None = None
    if _returns_map(backbone):
        kwargs: dict[str, Any] = {"p": config.gem_p} if config.pooling.lower() == "gem" else {}
        pooling = build_pooling(config.pooling, **kwargs)
    head = EmbeddingHead(
        int(backbone.num_features),
        config.embed_dim,
        layer_norm=config.layer_norm,
        normalize=config.normalize,
    )
    return EmbeddingModel(backbone, pooling, head, freeze_bn=config.freeze_bn)


def _returns_map(backbone: nn.Module) -> bool:
    """Vector backbones (the MLP) need no pooling; any other may return a map. For timm
    transformers the pooling layer exists but is skipped at run time (their output is 2-D)."""
    return not isinstance(backbone, MLPBackbone)


# ------------------------------------------------------------------ prototype (cosine) classifier
def prototype_logits(
    z: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    normalize: bool = True,
    temperature: float = 1.0,
    name: str = "prototypes",
) -> torch.Tensor:
    """``z theta^T / tau`` (``(M, K)``), with both sides L2-normalised when ``normalize``.

    The logits of a cosine classifier (CE(n), Eq. 6.6 of the Patel thesis with normalised features
    and weights) and the prototype term of ESupCon (Eq. 6.12).

    Args:
        z: ``(M, d)`` features; prototypes: ``(K, d)`` (``name`` is used in error messages).
        normalize: L2-normalise both; temperature: ``tau > 0``.
    """
    z = check_embeddings(z, "z")
    p = check_embeddings(prototypes, name)
    if p.shape[1] != z.shape[1]:
        raise ValueError(f"{name} have d={p.shape[1]} but the features have d={z.shape[1]}")
    p = p.to(device=z.device, dtype=z.dtype)
    if normalize:
        z, p = unit_rows(z, dim=1), unit_rows(p, dim=1)
    return z @ p.T / check_float(temperature, "temperature", low=0.0, low_open=True)


def class_means(
    z: torch.Tensor, labels: torch.Tensor, n_classes: int, *, normalize: bool = True
) -> torch.Tensor:
    """Class means ``c_k`` of (normalised) features, ``(K, d)``; an absent class gets zeros.

    The prototypes of SPCE(M) (Section 6.3 of the Patel thesis: the SPCE logits of Eq. 6.8 with the
    class sums replaced by class means), and the fixed point of the tightness loss (Eqs. 6.9-6.11).

    Args:
        z: ``(N, d)``; labels: ``(N,)`` in ``[0, n_classes)``; n_classes: ``K``.
        normalize: L2-normalise the features first.
    """
    z = check_embeddings(z, "z")
    labels = check_labels(labels, z.shape[0], "labels")
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (M,), got {tuple(labels.shape)}")
    labels = labels.to(z.device)
    z = unit_rows(z, dim=1) if normalize else z
    n_classes = check_positive_int(n_classes, "n_classes")
    onehot = F.one_hot(check_class_indices(labels, n_classes), n_classes).to(z.dtype)
    return (onehot.T @ z) / onehot.sum(0).clamp_min(1)[:, None]


class PrototypeClassifier(nn.Module):
    """``K`` learnable class weights / prototypes ``theta`` of shape ``(K, d)`` with cosine logits.

    The classifier of CE(n) and ESupCon (Eqs. 6.6 and 6.12-6.15 of the Patel thesis): logits
    ``z^T theta_k / tau`` on L2-normalised vectors, posterior ``softmax`` over the prototypes.

    Args:
        n_classes: ``K``; dim: ``d`` (the order of every proxy / prototype matrix ``(K, d)``);
        temperature: logits ``z^T theta / tau`` on normalised vectors.
    """

    def __init__(self, n_classes: int, dim: int, temperature: float = 0.1) -> None:
        super().__init__()
        self.prototypes = nn.Parameter(
            torch.randn(check_positive_int(n_classes, "n_classes"), check_positive_int(dim, "dim"))
            * 0.1
        )
        self.temperature = check_float(temperature, "temperature", low=0.0, low_open=True)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Args: z ``(M, d)``. Returns logits ``(M, K)``."""
        return prototype_logits(z, self.prototypes, normalize=True, temperature=self.temperature)

    def predict_proba(self, z: torch.Tensor) -> torch.Tensor:
        """Softmax posterior ``p(k | z)`` (the CE posterior of ESupCon), ``(M, K)``."""
        return self(z).softmax(1)

    @torch.no_grad()
    def set_to_class_means(self, z: torch.Tensor, labels: torch.Tensor) -> None:
        """SPCE(M): set the prototypes to the class means of ``z``."""
        self.prototypes.copy_(class_means(z, labels, self.prototypes.shape[0]))
