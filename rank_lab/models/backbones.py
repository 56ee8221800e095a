"""Backbones that turn an input into a feature map ``(B, D, H, W)`` or a feature vector ``(B, D)``.

* :class:`TimmBackbone` -- any `timm <https://github.com/huggingface/pytorch-image-models>`_ model
  (ResNet-50 of the papers, DeiT-S, ViT-B ...), initialised from ``weights``: ``"imagenet"`` (timm's
  pretrained weights, fetched by timm), ``"none"`` (random, the default: nothing is downloaded) or a
  local weight file (e.g. a torchvision / timm ResNet-50 ``state_dict``); see
  :mod:`rank_lab.models.weights`.
* :class:`TinyCNN` -- a 3-block CNN for CPU smoke runs on 8x8 digits, 28x28 or small RGB images.
* :class:`MLPBackbone` -- an MLP for the synthetic vector inputs of
  :func:`rank_lab.data.make_open_set`.

Every backbone exposes ``num_features`` (the channel / feature dimension ``D``), as timm models do.
The retrieval setting of the Ramzi thesis (§3.5.1, §4.4.1) is ResNet-50 without its classifier,
followed by a pooling layer, LayerNorm without affine parameters, a linear projection 2048 -> 512
and L2 normalisation (see :mod:`rank_lab.models.heads`). The official code also keeps the
BatchNorm layers of the backbone in eval mode (``freeze_batch_norm: True``); see
:func:`freeze_batchnorm`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rank_lab._validation import check_input, check_module, check_positive_int
from rank_lab.models.weights import (
    create_timm_model,
    file_record,
    load_backbone_weights,
    parse_weights,
)
from rank_lab.registry import Registry

__all__ = [
    "TinyCNN",
    "MLPBackbone",
    "TimmBackbone",
    "BACKBONES",
    "build_backbone",
    "list_backbones",
    "freeze_batchnorm",
    "lock_batchnorm",
]

#: The package's own backbones by name (``"mlp"``, ``"tiny_cnn"``): each entry is a builder
#: ``builder(in_channels, input_dim, hidden_dims, width) -> nn.Module``. Any other name is a timm
#: model (:class:`TimmBackbone`). A new backbone registers its builder where it is defined.
BACKBONES: Registry[Callable[..., nn.Module]] = Registry("backbone")


def _force_eval_hook(module: nn.Module, args: object) -> None:
    module.training = False


def freeze_batchnorm(
    module: nn.Module, *, sticky: bool = False, freeze_affine: bool = False
) -> int:
    """Put every BatchNorm layer of ``module`` in eval mode (running statistics frozen): the one
    batch-norm freezer of rank_lab.

    * Default: the ``freeze_batch_norm`` option of the ROADMAP / SupRank / Smooth-AP code (the
      Ramzi thesis does not mention it): with 4 images per class the batch statistics are poor
      estimates, so the ImageNet statistics are kept, and the affine parameters still train. Call
      it after every ``module.train()`` (:class:`~rank_lab.models.heads.EmbeddingModel` does it for
      you).
    * ``sticky=True``: a forward pre-hook keeps the layers in eval mode even after
      ``module.train()`` (registered once per layer). The forward pass then does not depend on how a
      batch is chunked, so multistage back-propagation (:mod:`rank_lab.train.multistage`) reproduces
      a single pass.
    * ``freeze_affine=True``: the layers' weight and bias stop requiring gradients ("the BatchNorm
      parameters are kept frozen", Patel thesis Section 5.3.2).

    Returns:
        The number of BatchNorm layers frozen.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``.
    """
    n = 0
    for m in check_module(module, "module").modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):  # SyncBatchNorm included
            m.eval()
            n += 1
            if sticky and not getattr(m, "_rank_lab_frozen", False):
                m.register_forward_pre_hook(_force_eval_hook)
                m._rank_lab_frozen = True  # type: ignore[attr-defined]
            if freeze_affine:
                for p in m.parameters(recurse=False):
                    p.requires_grad_(False)
    return n


def lock_batchnorm(model: nn.Module, *, freeze_affine: bool = True) -> nn.Module:
    """Freeze every BatchNorm layer of ``model`` as the Patel thesis does (Section 5.3.2):
    ``freeze_batchnorm(model, sticky=True, freeze_affine=freeze_affine)``.

    The layers always run in eval mode, even after ``model.train()``; with ``freeze_affine`` their
    weight and bias stop requiring gradients (the thesis); the official code only puts BN in eval
    mode and still trains the affine parameters (``freeze_affine=False``). Re-exported by
    :mod:`rank_lab.train.multistage`.

    Returns:
        ``model`` (modified in place).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    freeze_batchnorm(check_module(model, "model"), sticky=True, freeze_affine=freeze_affine)
    return model


class TinyCNN(nn.Module):
    """A small 3-block CNN for CPU smoke runs; returns a feature map ``(B, 4*width, H/4, W/4)``.

    Blocks: conv3x3-BN-ReLU, conv3x3-BN-ReLU-maxpool2, conv3x3-BN-ReLU-maxpool2 (pools with
    ``ceil_mode`` so inputs down to 1x1 work). An 8x8 digit gives a 2x2 map, a 28x28 image a 7x7
    map.

    Args:
        in_channels: input channels (1 for digits / MNIST, 3 for RGB).
        width: channels of the first block (the output has ``4 * width``).

    Raises:
        TypeError, ValueError: ``in_channels`` or ``width`` not a positive int.
    """

    def __init__(self, in_channels: int = 1, width: int = 16) -> None:
        super().__init__()
        in_channels = check_positive_int(in_channels, "in_channels")
        width = check_positive_int(width, "width")

        def block(cin: int, cout: int, pool: bool) -> list[nn.Module]:
            layers: list[nn.Module] = [
                nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            ]
            if pool:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            return layers

        self.in_channels = in_channels
        self.features = nn.Sequential(
            *block(in_channels, width, False),
            *block(width, 2 * width, True),
            *block(2 * width, 4 * width, True),
        )
        self.num_features = 4 * width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, C, H, W)`` floating images, or ``(B, H, W)`` grey images when
        ``in_channels = 1`` (a 3-D input is always read as a batch of grey images). float64 inputs
        are cast to the weights' dtype; an empty batch gives an empty batch.

        Returns:
            The feature map ``(B, 4*width, ceil(H/4), ceil(W/4))``.

        Raises:
            TypeError: ``x`` not a floating tensor. ValueError: a wrong shape, NaN or inf.
        """
        x = check_input(x, "x", (3, 4), shape=f"(B, {self.in_channels}, H, W)", like=self)
        if x.ndim == 3:  # (B, H, W) grey images
            x = x.unsqueeze(1)
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f"x must have shape (B, {self.in_channels}, H, W), got {tuple(x.shape)}"
            )
        return self.features(x)


class MLPBackbone(nn.Module):
    """An MLP ``input_dim -> hidden_dims[0] -> ... -> hidden_dims[-1]`` with ReLU after each layer.

    Inputs with more than two dimensions are flattened, so ``(B, 1, 8, 8)`` digits work with
    ``input_dim = 64``. Returns ``(B, hidden_dims[-1])`` vectors (no pooling needed).

    Args:
        input_dim: size of the (flattened) input.
        hidden_dims: widths of the hidden layers (at least one).

    Raises:
        TypeError, ValueError: ``input_dim`` or a width of ``hidden_dims`` not a positive int.
    """

    def __init__(self, input_dim: int, hidden_dims: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        if input_dim is None:
            raise ValueError("input_dim must be a positive int, got None")
        input_dim = check_positive_int(input_dim, "input_dim")
        hidden_dims = tuple(check_positive_int(h, "hidden_dims") for h in hidden_dims)
        if not hidden_dims:
            raise ValueError(
                f"hidden_dims must hold at least one positive width, got {hidden_dims}"
            )
        layers: list[nn.Module] = []
        prev = input_dim
        for h in hidden_dims:
            layers += [nn.Linear(prev, h), nn.ReLU(inplace=True)]
            prev = h
        self.input_dim = int(input_dim)
        self.net = nn.Sequential(*layers)
        self.num_features = prev

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, input_dim)`` or ``(B, ...)`` with ``prod(...) = input_dim``, floating
        (float64 is cast to the weights' dtype). Returns ``(B, D)`` (an empty batch gives
        ``(0, D)``).

        Raises:
            TypeError: ``x`` not a floating tensor. ValueError: a wrong size, NaN or inf.
        """
        x = check_input(
            x, "x", tuple(range(2, 9)), shape=f"(B, {self.input_dim}) or (B, ...)", like=self
        )
        x = x.flatten(1)
        if x.shape[1] != self.input_dim:
            raise ValueError(f"x has {x.shape[1]} features per row but input_dim={self.input_dim}")
        return self.net(x)


class TimmBackbone(nn.Module):
    """A timm model without its classifier, returning the last feature map ``(B, D, H, W)``.

    By default the model is built with ``num_classes=0`` and :meth:`forward` calls timm's
    ``forward_features`` (the unpooled map of a CNN; NHWC maps are permuted to NCHW). For
    transformers, whose ``forward_features`` gives tokens ``(B, T, D)``, the model's own
    pre-logits pooling (class token for DeiT/ViT) is applied and a vector ``(B, D)`` is returned.
    With ``features_only=True`` timm's feature-extraction wrapper is used and the last stage's map
    is returned.

    Args:
        name: a timm model name (``"resnet50"``, ``"resnet18"``, ``"deit_small_patch16_224"`` ...).
        in_chans: input channels.
        features_only: use ``timm.create_model(..., features_only=True)``.
        weights: ``"imagenet"``, ``"none"`` (or ``None``: random weights, the default) or a weight
            file, loaded strictly (:mod:`rank_lab.models.weights`: every parameter of the network
            in the file with its shape; its classifier keys are dropped). What was used is kept in
            ``weights_record``; a file's key report (loaded, missing, unexpected, mismatched) in
            ``load_report``. For a partial load, build with ``"none"`` and call
            :func:`~rank_lab.models.weights.load_backbone_weights` with ``strict=False``.
        **timm_kwargs: passed to ``timm.create_model`` (e.g. ``img_size`` for ViTs).
    """

    def __init__(
        self,
        name: str,
        in_chans: int = 3,
        features_only: bool = False,
        weights: str | Path | None = None,
        **timm_kwargs: Any,
    ) -> None:
        super().__init__()
        try:
            # optional dependency (extra "timm"), imported where it is used
            import timm
        except ImportError as exc:  # pragma: no cover - timm is an optional dependency
            raise ImportError("TimmBackbone needs timm: pip install 'rank_lab[timm]'") from exc
        if not isinstance(name, str) or not timm.is_model(name.split(".", 1)[0]):
            raise ValueError(f"unknown timm model name {name!r} (see timm.list_models())")
        in_chans = check_positive_int(in_chans, "in_chans")
        spec = parse_weights(weights)
        self.name = name
        self.in_chans = in_chans
        self.features_only = bool(features_only)
        kwargs: dict[str, Any] = {"in_chans": in_chans, **timm_kwargs}
        kwargs.update(
            {"features_only": True, "out_indices": (-1,)}
            if self.features_only
            else {"num_classes": 0}
        )
        self.load_report: dict[str, list[str]] | None = None
        if isinstance(spec, Path):
            self.model, _ = create_timm_model(name, "none", **kwargs)
            self.load_report = load_backbone_weights(self.model, spec, strict=True)
            self.weights_record = file_record(spec)
        else:
            self.model, self.weights_record = create_timm_model(name, spec, **kwargs)
        if self.features_only:
            self.num_features = int(self.model.feature_info.channels()[-1])
        else:
            self.num_features = int(self.model.num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, C, H, W)`` floating images (float64 is cast to the weights' dtype).

        Returns:
            ``(B, D, h, w)`` (CNNs) or ``(B, D)`` (transformers).

        Raises:
            TypeError: ``x`` not a floating tensor. ValueError: a wrong shape, NaN or inf.
        """
        x = check_input(x, "x", 4, shape=f"(B, {self.in_chans}, H, W)", like=self)
        if x.shape[1] != self.in_chans:
            raise ValueError(f"x must have shape (B, {self.in_chans}, H, W), got {tuple(x.shape)}")
        if self.features_only:
            return self.model(x)[-1]
        f = self.model.forward_features(x)
        if f.ndim == 4:
            if str(getattr(self.model, "output_fmt", "NCHW")).upper().endswith("NHWC"):
                f = f.permute(0, 3, 1, 2)
            return f
        if f.ndim == 3:
            return self.model.forward_head(f, pre_logits=True)
        return f


def build_backbone(
    name: str,
    *,
    in_channels: int = 3,
    input_dim: int | None = None,
    hidden_dims: Sequence[int] = (256, 256),
    width: int = 16,
    features_only: bool = False,
    weights: str | Path | None = None,
    **timm_kwargs: Any,
) -> nn.Module:
    """Build a backbone by name: ``"mlp"``, ``"tiny_cnn"``, or a timm name (optionally
    ``"timm:<name>"``).

    Args:
        name: backbone name.
        in_channels: input channels (``tiny_cnn`` and timm).
        input_dim: flattened input size (``mlp``; required there).
        hidden_dims: hidden widths (``mlp``).
        width: first-block width (``tiny_cnn``).
        features_only, weights, timm_kwargs: see :class:`TimmBackbone`. A weight file (loaded
            strictly) also works for ``mlp`` / ``tiny_cnn``; ``"imagenet"`` does not.

    Returns:
        The backbone, with ``weights_record`` (:mod:`rank_lab.models.weights`).

    Raises:
        ValueError: for an unknown name, a missing ``input_dim`` for ``mlp``, or ``"imagenet"``
            weights for ``mlp`` / ``tiny_cnn``.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"backbone name must be a non-empty str, got {name!r}")
    key = name.lower()
    if name in BACKBONES:
        net: nn.Module = BACKBONES.build(
            name, in_channels=in_channels, input_dim=input_dim, hidden_dims=hidden_dims, width=width
        )
    else:
        timm_name = name[5:] if key.startswith("timm:") else name
        return TimmBackbone(
            timm_name,
            in_chans=in_channels,
            features_only=features_only,
            weights=weights,
            **timm_kwargs,
        )
    spec = parse_weights(weights)
    if spec == "imagenet":
        raise ValueError(
            f"backbone {name!r} has no pretrained weights; use weights='none' or a weight file"
        )
    record: dict[str, Any] = {"weights": "none"}
    if isinstance(spec, Path):
        net.load_report = load_backbone_weights(net, spec, strict=True)  # type: ignore[attr-defined]
        record = file_record(spec)
    net.weights_record = record  # type: ignore[attr-defined]
    return net


def list_backbones(filter: str = "") -> list[str]:
    """Sorted names of the package's own backbones matching ``filter`` (``fnmatch``; ``""``: all);
    any timm model name (``timm.list_models()``) is a backbone too."""
    return BACKBONES.list(filter)


@BACKBONES.register("mlp")
def _mlp_backbone(
    *, in_channels: int, input_dim: int | None, hidden_dims: Sequence[int], width: int
) -> nn.Module:
    """An MLP over flattened inputs (:class:`MLPBackbone`; needs ``input_dim``)."""
    if input_dim is None:
        raise ValueError("backbone='mlp' needs input_dim (the flattened input size)")
    return MLPBackbone(input_dim, hidden_dims)


@BACKBONES.register("tiny_cnn")
def _tiny_cnn_backbone(
    *, in_channels: int, input_dim: int | None, hidden_dims: Sequence[int], width: int
) -> nn.Module:
    """A small CNN (:class:`TinyCNN`) with ``in_channels`` inputs and first-block ``width``."""
    return TinyCNN(in_channels, width)
