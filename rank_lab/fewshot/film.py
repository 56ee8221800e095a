"""FiLM layers and FiLM-adapted ResNet feature extractors (CNAPS / Simple CNAPS, used by rCNAPS).

Feature-wise linear modulation (Perez et al. 2018, ref. [69] of the Gominski thesis, Fig. 3.21)
scales and shifts every channel of a feature map::

    FiLM(F; gamma, beta)_c = gamma_c * F_c + beta_c          (F: (B, C, H, W), gamma, beta: (C,))

CNAPS (Requeima et al. 2019) and Simple CNAPS (Bateni et al. 2020) insert one FiLM
layer after each batch-norm of every ResNet-18 BasicBlock (``conv1 -> bn1 -> FiLM(gamma1, beta1)
-> ReLU -> conv2 -> bn2 -> FiLM(gamma2, beta2) -> + shortcut -> ReLU``); the stem is not
modulated. The Gominski thesis' rCNAPS (§4.3.2) uses "the same networks as the SimpleCNAPS
variation of CNAPS", followed by GeM pooling.

FiLM parameters are passed to the forward call as a nested list, one entry per stage, one dict per
block, as in the CNAPS code::

    params[stage][block] = {"gamma1": (C,) | (B, C), "beta1": ..., "gamma2": ..., "beta2": ...}

``(B, C)`` rows give every image of the batch its own adaptation (several support sets ranked in
one pass). ``params=None`` is the unadapted network (``gamma = 1, beta = 0``), which computes
exactly the wrapped ResNet (tested against torchvision).

:class:`FiLMResNet` wraps an existing torchvision or timm ResNet made of BasicBlocks *without
copying it*, so local torchvision / timm weights load into ``extractor.body`` with
:func:`rank_lab.models.load_backbone_weights`. :func:`film_resnet18` builds ResNet-18
(random weights by default, ``weights="imagenet"`` through timm, or a local file) and
:func:`film_tiny_resnet` a small residual CNN with the same block structure for CPU smoke runs (the
FiLM machinery is identical).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock

from rank_lab._validation import check_finite_input, check_input, check_positive_int, trusts_inputs
from rank_lab.models import load_backbone_weights
from rank_lab.models.weights import create_timm_model, file_record, parse_weights

__all__ = [
    "FILM_KEYS",
    "FiLMParams",
    "film",
    "FiLM",
    "identity_film_params",
    "select_film_params",
    "FiLMResNet",
    "TinyResNetBody",
    "film_resnet18",
    "film_tiny_resnet",
]

FILM_KEYS = ("gamma1", "beta1", "gamma2", "beta2")
FiLMParams = list[list[dict[str, torch.Tensor]]]


def film(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """Feature-wise linear modulation ``gamma * x + beta`` per channel (Fig. 3.21 of the thesis).

    Args:
        x: ``(B, C, H, W)`` floating feature map (an empty batch gives an empty batch).
        gamma: ``(C,)`` shared by the batch, or ``(B, C)`` one row per image (floating, finite).
        beta: same shape as ``gamma``.

    Returns:
        ``(B, C, H, W)``.

    Raises:
        TypeError: a non-floating tensor. ValueError: wrong shapes, NaN or inf (naming the
            argument).
    """
    x = check_input(x, "x", 4, shape="(B, C, H, W)")
    gamma = check_input(gamma, "gamma", (1, 2), shape="(C,) or (B, C)")
    beta = check_input(beta, "beta", (1, 2), shape="(C,) or (B, C)")
    return _film(x, gamma, beta)


def _film(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """:func:`film` without the dtype / finiteness checks (inside :class:`FiLMResNet`, whose forward
    checks its input and all the parameters at once)."""
    if gamma.shape != beta.shape:
        raise ValueError(f"gamma has shape {tuple(gamma.shape)} but beta has {tuple(beta.shape)}")
    c = x.shape[1]
    if gamma.ndim == 1 and gamma.shape[0] == c:
        return x * gamma[None, :, None, None] + beta[None, :, None, None]
    if gamma.ndim == 2 and gamma.shape == (x.shape[0], c):
        return x * gamma[:, :, None, None] + beta[:, :, None, None]
    raise ValueError(
        f"gamma and beta (FiLM parameters) must have shape ({c},) or ({x.shape[0]}, {c}) for x of "
        f"shape {tuple(x.shape)}, got {tuple(gamma.shape)}"
    )


class FiLM(nn.Module):
    """Parameter-free FiLM layer: ``FiLM()(x, gamma, beta) = gamma * x + beta`` per channel.

    The parameters come from outside (the adaptation network), as in CNAPS; see :func:`film`.
    """

    def forward(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """Args: x ``(B, C, H, W)``; gamma, beta ``(C,)`` or ``(B, C)``. Returns ``(B, C, H, W)``
        (checks and errors of :func:`film`)."""
        x = check_input(x, "x", 4, shape="(B, C, H, W)", owner=self)
        gamma = check_input(gamma, "gamma", (1, 2), shape="(C,) or (B, C)", owner=self)
        beta = check_input(beta, "beta", (1, 2), shape="(C,) or (B, C)", owner=self)
        return _film(x, gamma, beta)


def identity_film_params(
    channels: Sequence[int], blocks: Sequence[int], device: torch.device | str | None = None
) -> FiLMParams:
    """``gamma = 1, beta = 0`` for every block: the unadapted network (setup C of the thesis)."""
    out: FiLMParams = []
    for c, nb in zip(channels, blocks, strict=True):
        one, zero = torch.ones(c, device=device), torch.zeros(c, device=device)
        out.append(
            [{"gamma1": one, "beta1": zero, "gamma2": one, "beta2": zero} for _ in range(nb)]
        )
    return out


def select_film_params(params: FiLMParams, index: torch.Tensor) -> FiLMParams:
    """Per-image parameters from per-task ones: rows ``index`` of ``(T, C)`` tensors -> ``(B, C)``.

    Args:
        params: parameters whose tensors are ``(T, C)`` (one row per support set / task).
        index: ``(B,)`` task of each image.
    """
    return [[{k: v[index] for k, v in blk.items()} for blk in stage] for stage in params]


def _block_forward(
    block: nn.Module, x: torch.Tensor, p: dict[str, torch.Tensor] | None
) -> torch.Tensor:
    """A torchvision / timm BasicBlock with FiLM after bn1 and bn2 (CNAPS ``BasicBlockFilm``)."""
    identity = x
    out = block.bn1(block.conv1(x))
    if p is not None:
        out = _film(out, p["gamma1"], p["beta1"])
    out = (block.act1 if hasattr(block, "act1") else block.relu)(out)
    out = block.bn2(block.conv2(out))
    if p is not None:
        out = _film(out, p["gamma2"], p["beta2"])
    if block.downsample is not None:
        identity = block.downsample(x)
    out = out + identity
    return (block.act2 if hasattr(block, "act2") else block.relu)(out)


def _check_film_params(params: FiLMParams, module: nn.Module) -> None:
    """Every FiLM tensor floating, and all of them finite (one reduction for the whole network; the
    check of ``module``, skipped while it trusts its inputs)."""
    tensors = []
    for si, stage in enumerate(params):
        for bi, blk in enumerate(stage):
            for key in FILM_KEYS:
                t = blk.get(key) if isinstance(blk, dict) else None
                if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                    raise TypeError(
                        f"params[{si}][{bi}][{key!r}] must be a floating tensor, got "
                        f"{type(t).__name__}"
                    )
                tensors.append(t.detach().reshape(-1))
    if tensors:
        check_finite_input(
            torch.cat([t.to(tensors[0].dtype) for t in tensors]),
            "params",
            trusted=trusts_inputs(module),
        )


def _check_block(block: nn.Module) -> None:
    for name in ("conv1", "bn1", "conv2", "bn2", "downsample"):
        if not hasattr(block, name):
            raise TypeError(
                "FiLMResNet needs BasicBlocks (conv1/bn1/conv2/bn2/downsample), got "
                f"{type(block).__name__}"
            )
    if hasattr(block, "conv3"):
        raise TypeError("FiLMResNet supports BasicBlock ResNets (18/34), not Bottleneck ones")
    for name in ("se", "drop_path"):
        if getattr(block, name, None) is not None:
            raise TypeError(f"FiLMResNet does not support blocks with {name!r}")
    for name in ("aa", "drop_block"):
        m = getattr(block, name, None)
        if m is not None and not isinstance(m, nn.Identity):
            raise TypeError(f"FiLMResNet does not support blocks with a non-identity {name!r}")


class FiLMResNet(nn.Module):
    """A BasicBlock ResNet whose blocks take FiLM parameters (CNAPS ``FilmResNet``; thesis §4.3.2).

    Args:
        body: a torchvision ``ResNet``, a timm ``ResNet`` or a :class:`TinyResNetBody` (stem
            ``conv1, bn1, relu|act1, maxpool`` and stages ``layer1 ... layerK`` of BasicBlocks).
            It is kept as ``self.body`` (same state-dict keys as the original model).

    Attributes:
        channels: output channels of each stage, e.g. ``[64, 128, 256, 512]``.
        blocks: BasicBlocks per stage, e.g. ``[2, 2, 2, 2]``.
        num_features: channels of the output map.
    """

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        stages = self._stages()
        if not stages:
            raise TypeError("body has no layer1 ... layerK stages")
        for stage in stages:
            for blk in stage:
                _check_block(blk)
        self.channels = [int(stage[-1].bn2.num_features) for stage in stages]
        self.blocks = [len(stage) for stage in stages]
        self.num_features = self.channels[-1]

    def _stages(self) -> list[nn.Sequential]:
        out, i = [], 1
        while hasattr(self.body, f"layer{i}"):
            out.append(getattr(self.body, f"layer{i}"))
            i += 1
        return out

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """Unmodulated stem: ``conv1 -> bn1 -> ReLU -> maxpool``."""
        b = self.body
        x = b.bn1(b.conv1(x))
        x = (b.act1 if hasattr(b, "act1") else b.relu)(x)
        return b.maxpool(x)

    def forward(self, x: torch.Tensor, params: FiLMParams | None = None) -> torch.Tensor:
        """Args: x ``(B, C_in, H, W)``; params (see module docstring) or ``None`` (unadapted).

        Returns:
            The last feature map ``(B, num_features, h, w)``.

        Raises:
            TypeError: ``x`` not a floating tensor. ValueError: a wrong shape, NaN or inf,
                ``params`` not matching the blocks.
        """
        x = check_input(x, "x", 4, shape="(B, C, H, W)", like=self)
        if params is not None and [len(s) for s in params] != self.blocks:
            raise ValueError(
                f"params has {[len(s) for s in params]} blocks per stage, the network {self.blocks}"
            )
        if params is not None:
            _check_film_params(params, self)
        x = self.stem(x)
        for si, stage in enumerate(self._stages()):
            for bi, blk in enumerate(stage):
                x = _block_forward(blk, x, None if params is None else params[si][bi])
        return x


class TinyResNetBody(nn.Module):
    """A small BasicBlock ResNet (3x3 stem, no max-pool) for CPU smoke runs on 8-64 px images.

    Same attribute names as torchvision's ResNet, so :class:`FiLMResNet` wraps it unchanged.

    Args:
        in_channels: input channels.
        widths: channels of the stages (stride 1 for the first, 2 for the others).
        blocks: BasicBlocks per stage.
        stem_stride: stride of the 3x3 stem (2 quarters the cost of the first stage).

    Raises:
        TypeError, ValueError: ``in_channels``, ``stem_stride``, a width or a block count not a
            positive int, or ``widths`` and ``blocks`` of different lengths.
    """

    def __init__(
        self,
        in_channels: int = 3,
        widths: Sequence[int] = (16, 32, 64),
        blocks: Sequence[int] | int = 1,
        stem_stride: int = 1,
    ) -> None:
        super().__init__()
        in_channels = check_positive_int(in_channels, "in_channels")
        stem_stride = check_positive_int(stem_stride, "stem_stride")
        widths = [check_positive_int(w, "widths") for w in widths]
        nblocks = (
            [check_positive_int(blocks, "blocks")] * len(widths)
            if isinstance(blocks, int)
            else [check_positive_int(b, "blocks") for b in blocks]
        )
        if not widths or len(nblocks) != len(widths):
            raise ValueError(
                f"widths and blocks must be positive and of equal length, got {widths}, {nblocks}"
            )
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=stem_stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity()
        cin = widths[0]
        for i, (w, nb) in enumerate(zip(widths, nblocks, strict=True)):
            stride = 1 if i == 0 else 2
            layers = []
            for j in range(nb):
                s = stride if j == 0 else 1
                down = None
                if s != 1 or cin != w:
                    down = nn.Sequential(
                        nn.Conv2d(cin, w, 1, stride=s, bias=False), nn.BatchNorm2d(w)
                    )
                layers.append(BasicBlock(cin, w, s, down))
                cin = w
            setattr(self, f"layer{i + 1}", nn.Sequential(*layers))


def film_resnet18(
    source: str = "torchvision",
    *,
    in_channels: int = 3,
    weights: str | Path | None = None,
) -> FiLMResNet:
    """ResNet-18 with FiLM layers (about 11.2M parameters, thesis §4.3.5).

    Args:
        source: ``"torchvision"`` (``torchvision.models.resnet18``) or ``"timm"``
            (``timm.create_model("resnet18")``); both have the same layout and key names.
        in_channels: input channels (only 3 with ``source="torchvision"``).
        weights: ``"imagenet"`` (timm's ``resnet18.tv_in1k``, the torchvision ImageNet weights,
            fetched by timm), ``"none"`` or a weight file, loaded strictly into the ResNet-18 body
            (:mod:`rank_lab.models.weights`; its key report in ``model.load_report``); default
            random. The record is ``model.weights_record``.
    """
    if source not in ("torchvision", "timm"):
        raise ValueError(f"source must be 'torchvision' or 'timm', got {source!r}")
    in_channels = check_positive_int(in_channels, "in_channels")
    spec = parse_weights(weights)
    if source == "torchvision":
        # heavy import, paid only on this path
        from torchvision.models import resnet18

        if in_channels != 3:
            raise ValueError("source='torchvision' builds 3-channel ResNet-18s; use source='timm'")
        body = resnet18(weights=None)
        if spec == "imagenet":  # the same weights, fetched by timm (same key names)
            ref, record = create_timm_model("resnet18", "imagenet")
            body.load_state_dict(ref.state_dict())
    elif source == "timm":
        body, record = create_timm_model(
            "resnet18", "imagenet" if spec == "imagenet" else "none", in_chans=in_channels
        )
    else:
        raise ValueError(f"source must be 'torchvision' or 'timm', got {source!r}")
    body.fc = nn.Identity()
    model = FiLMResNet(body)
    if isinstance(spec, Path):
        model.load_report = load_backbone_weights(body, spec, strict=True)
        record = file_record(spec)
    elif spec == "none":
        record = {"weights": "none"}
    model.weights_record = record
    return model


def film_tiny_resnet(
    in_channels: int = 3,
    widths: Sequence[int] = (16, 32, 64),
    blocks: Sequence[int] | int = 1,
    stem_stride: int = 1,
) -> FiLMResNet:
    """A :class:`FiLMResNet` around a :class:`TinyResNetBody` (smoke-mode backbone)."""
    return FiLMResNet(TinyResNetBody(in_channels, widths, blocks, stem_stride))
