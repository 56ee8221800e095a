"""rCNAPS: retrieval-adapted CNAPS (Gominski thesis §4.3.2-4.3.5).

Networks ("the same networks as the SimpleCNAPS variation of CNAPS"; architecture details from the
CNAPS code of Requeima et al. 2019, used unchanged by Simple CNAPS, Bateni et al. 2020):

* feature extractor: ResNet-18 with FiLM layers (:mod:`rank_lab.fewshot.film`), then GeM pooling
  and L2 normalisation (the thesis' "GeM global descriptors");
* set encoder ``g``: 5 x [conv3x3 -> 64, BN, ReLU, max-pool 2], global average pooling, and the
  mean over the support set, ``z = (1/|S|) sum_{x in S} g(x)`` -- permutation invariant and
  independent of the support size. Its batch norm always normalises a support set with the
  statistics of that set: the CNAPS code keeps the set encoder "always in train mode to process
  context data", in training and at test time alike, so a support is encoded the same way in both
  (train as you test);
* adaptation network: per ResNet stage with ``C`` channels a shared ``h = ReLU(W z + b)`` (``C``),
  and per block and per FiLM parameter a processor ``DRL -> ReLU -> DRL -> ReLU -> DRL`` with
  ``DRL(u) = W u + b + u``; ``gamma = P_gamma(h) * r_gamma + 1``, ``beta = P_beta(h) * r_beta``
  with learnable per-channel ``r ~ N(0, 1e-3)``, so the network starts (near) the identity FiLM.
  The CNAPS code initialises the four ``r`` of a block from *one* shared tensor; here they are
  drawn independently. ``init_std=0`` gives an exactly unadapted network at initialisation.

Parameter count (:func:`adaptation_parameter_count`): ``sum_C (24 C^2 + 97 C)`` = 8,448,960 for
ResNet-18 plus 150,144 for the set encoder, i.e. 8.60M, the thesis' "~8.5M parameters [added] to
the ~11.2M parameters of ResNet18" (§4.3.5; ResNet-18 without its classifier: 11,176,512).

Training (:func:`rank_lab.fewshot.rcnaps_train.fit_rcnaps`, Fig. 4.8): every episode adapts the
extractor to ``k`` support images of a target class and minimises the class-specific Smooth-AP (eq.
4.13) of the ``m`` target-class queries of a batch of ``N * m`` images
(:class:`rank_lab.fewshot.EpisodeSampler`; ``k = 5``, ``m = 10``, ``N = 6``). Optimiser, learning
rate and iterations are not given by the thesis (defaults: Adam, 1e-4, tau = 0.01, as the author's
Chapter-5 code). Whether the ResNet is trained is not stated either: it is frozen by default, as in
Simple CNAPS (``train_backbone=True`` trains it). ``mode="plain"`` trains the unadapted network with
the usual Smooth-AP (eq. 4.12) on the same batches: the plain-embedding baseline, and the
pre-training of the smoke runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_input,
    check_labels,
    check_positive_int,
    unit_rows,
)
from rank_lab.fewshot.film import (
    FiLMParams,
    FiLMResNet,
    film_resnet18,
    film_tiny_resnet,
)
from rank_lab.losses import SmoothAP
from rank_lab.models.pooling import GeM

__all__ = [
    "SetEncoder",
    "FiLMLayerNetwork",
    "FiLMAdaptationNetwork",
    "RCNAPS",
    "build_rcnaps",
    "adaptation_parameter_count",
    "class_specific_smooth_ap",
    "ClassSpecificSmoothAP",
]


class SetEncoder(nn.Module):
    """DeepSets encoder ``z = mean_{x in S} g(x)`` of CNAPS (conv blocks + global average pooling).

    Args:
        in_channels: image channels.
        width: channels of every block and size of ``z`` (CNAPS: 64).
        depth: number of ``conv3x3 -> BN -> ReLU -> max-pool 2`` blocks (CNAPS: 5). Pools use
            ``ceil_mode=True`` so that small images work (the CNAPS code floors; the parameter
            count is the same).

    Batch norm uses the statistics of the set being encoded, in train and in eval mode alike
    (``track_running_stats=False``; the CNAPS code keeps its set encoder "always in train mode to
    process context data"). Running statistics would encode a support differently at evaluation
    than in training, where the adaptation network learned to read the codes; each set of a
    ``(T, k, C, H, W)`` batch is normalised by its own statistics, never by its neighbours'.

    Raises:
        TypeError, ValueError: ``in_channels``, ``width`` or ``depth`` not a positive int.
    """

    def __init__(self, in_channels: int = 3, width: int = 64, depth: int = 5) -> None:
        super().__init__()
        in_channels = check_positive_int(in_channels, "in_channels")
        width, depth = check_positive_int(width, "width"), check_positive_int(depth, "depth")
        self.in_channels = in_channels
        layers: list[nn.Module] = []
        cin = in_channels
        for _ in range(depth):
            layers += [
                nn.Conv2d(cin, width, 3, padding=1),
                nn.BatchNorm2d(width, track_running_stats=False),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2, ceil_mode=True),
            ]
            cin = width
        self.net = nn.Sequential(*layers)
        self.out_dim = int(width)
        self.depth = int(depth)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Per-image codes ``g(x)`` of one set: ``(k, C, H, W)`` -> ``(k, width)`` (batch norm with
        the set's own statistics)."""
        return self.net(x).mean(dim=(-2, -1))

    def _check_statistics(self, k: int, h: int, w: int) -> None:
        """The last batch norm must see more than one value per channel (``k h' w' > 1``)."""
        h_last, w_last = h, w
        for _ in range(self.depth - 1):
            h_last, w_last = -(-h_last // 2), -(-w_last // 2)
        if k * h_last * w_last < 2:
            raise ValueError(
                f"support of k={k} image(s) of {h} x {w} px: the last of the {self.depth} encoder "
                "blocks sees a 1 x 1 map, so its batch norm has a single value per channel to "
                "normalise with (the set's own statistics); give k >= 2 or larger images"
            )

    def forward(self, support: torch.Tensor) -> torch.Tensor:
        """``(k, C, H, W)`` -> ``(width,)``; ``(T, k, C, H, W)`` -> ``(T, width)`` (one code per
        set).

        A ``(1, k, C, H, W)`` support is one task: its code has shape ``(1, width)``. float64 is
        cast to the weights' dtype.

        Raises:
            TypeError: ``support`` not a floating tensor. ValueError: a wrong shape, an empty set
                (``k = 0``: the mean of no code), NaN or inf, a set of one image too small to
                have batch statistics (one value per channel in the last block).
        """
        support = check_input(
            support,
            "support",
            (4, 5),
            shape=f"(k, {self.in_channels}, H, W) or (T, k, {self.in_channels}, H, W)",
            like=self,
        )
        if support.shape[-3] != self.in_channels or 0 in support.shape[: support.ndim - 3]:
            raise ValueError(
                f"support must have shape (k, {self.in_channels}, H, W) or (T, k, "
                f"{self.in_channels}, H, W) with k >= 1, got {tuple(support.shape)}"
            )
        self._check_statistics(support.shape[-4], support.shape[-2], support.shape[-1])
        if support.ndim == 4:
            return self.encode(support).mean(0)
        # one set at a time: each set is normalised by its own statistics
        return torch.stack([self.encode(s).mean(0) for s in support])


class _DenseResidual(nn.Linear):
    """``DRL(u) = W u + b + u`` (CNAPS ``DenseResidualLayer``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + x


def _processor(c: int) -> nn.Sequential:
    return nn.Sequential(
        _DenseResidual(c, c), nn.ReLU(), _DenseResidual(c, c), nn.ReLU(), _DenseResidual(c, c)
    )


class FiLMLayerNetwork(nn.Module):
    """FiLM parameters of one ResNet stage (``C`` channels, ``n_blocks`` blocks) from ``z``.

    Args:
        channels: ``C``.
        n_blocks: blocks of the stage.
        z_dim: size of the task code.
        init_std: standard deviation of the regularisers ``r`` (CNAPS: 1e-3; 0 = exact identity).

    Raises:
        TypeError, ValueError: ``channels``, ``n_blocks`` or ``z_dim`` not a positive int,
            ``init_std`` not a finite number >= 0.
    """

    def __init__(self, channels: int, n_blocks: int, z_dim: int, init_std: float = 1e-3) -> None:
        super().__init__()
        channels, n_blocks = (
            check_positive_int(channels, "channels"),
            check_positive_int(n_blocks, "n_blocks"),
        )
        z_dim, init_std = (
            check_positive_int(z_dim, "z_dim"),
            check_float(init_std, "init_std", low=0.0),
        )
        self.z_dim = z_dim
        self.shared = nn.Sequential(nn.Linear(z_dim, channels), nn.ReLU())
        self.processors = nn.ModuleList(
            nn.ModuleDict({k: _processor(channels) for k in ("gamma1", "beta1", "gamma2", "beta2")})
            for _ in range(n_blocks)
        )
        self.regularizers = nn.ModuleList()
        for _ in range(n_blocks):
            pl = nn.ParameterDict(
                {
                    k: nn.Parameter(torch.randn(channels) * init_std)
                    for k in ("gamma1", "beta1", "gamma2", "beta2")
                }
            )
            self.regularizers.append(pl)

    def forward(self, z: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """``z (z_dim,)`` or ``(T, z_dim)`` -> one dict per block of ``(C,)`` or ``(T, C)``
        tensors."""
        z = check_input(z, "z", (1, 2), shape=f"({self.z_dim},) or (T, {self.z_dim})", like=self)
        if z.shape[-1] != self.z_dim:
            raise ValueError(
                f"z must have shape ({self.z_dim},) or (T, {self.z_dim}), got {tuple(z.shape)}"
            )
        h = self.shared(z)
        out = []
        for proc, reg in zip(self.processors, self.regularizers, strict=True):
            out.append(
                {k: proc[k](h) * reg[k] + (1.0 if k.startswith("gamma") else 0.0) for k in proc}
            )
        return out

    def regularization_term(self) -> torch.Tensor:
        """``sum ||r||^2`` (the CNAPS code's L2 term: ``||gamma - 1||`` and ``||beta||`` scales)."""
        return sum((p**2).sum() for reg in self.regularizers for p in reg.values())


class FiLMAdaptationNetwork(nn.Module):
    """The CNAPS feature-adaptation network: one :class:`FiLMLayerNetwork` per ResNet stage.

    Args:
        channels: channels of every stage of the extractor.
        blocks: blocks of every stage.
        z_dim: size of the task code.
        init_std: initial std of the regularisers.

    Raises:
        TypeError, ValueError: as :class:`FiLMLayerNetwork`; ``channels`` and ``blocks`` of
            different lengths.
    """

    def __init__(
        self,
        channels: Sequence[int],
        blocks: Sequence[int],
        z_dim: int = 64,
        init_std: float = 1e-3,
    ) -> None:
        super().__init__()
        z_dim, init_std = (
            check_positive_int(z_dim, "z_dim"),
            check_float(init_std, "init_std", low=0.0),
        )
        if len(channels) != len(blocks) or not len(channels):
            raise ValueError(
                f"channels and blocks must list the same (>= 1) stages, got {list(channels)}, "
                f"{list(blocks)}"
            )
        self.layers = nn.ModuleList(
            FiLMLayerNetwork(c, b, z_dim, init_std) for c, b in zip(channels, blocks, strict=True)
        )

    def forward(self, z: torch.Tensor) -> FiLMParams:
        """Task code ``(z_dim,)`` or ``(T, z_dim)`` -> FiLM parameters of every stage and block."""
        return [layer(z) for layer in self.layers]

    def regularization_term(self) -> torch.Tensor:
        """Sum of the layers' :meth:`FiLMLayerNetwork.regularization_term`."""
        return sum(layer.regularization_term() for layer in self.layers)


def adaptation_parameter_count(
    channels: Sequence[int], blocks: Sequence[int], z_dim: int = 64
) -> int:
    """Closed-form size of :class:`FiLMAdaptationNetwork`: per stage
    ``z C + C + b (12 (C^2 + C) + 4 C)``.

    ResNet-18 (``C = 64, 128, 256, 512``, 2 blocks) with ``z_dim = 64``: 8,448,960.

    Raises:
        TypeError, ValueError: ``z_dim``, a channel or a block count not a positive int, or
            ``channels`` and ``blocks`` of different lengths.
    """
    z_dim = check_positive_int(z_dim, "z_dim")
    channels = [check_positive_int(c, "channels") for c in channels]
    blocks = [check_positive_int(b, "blocks") for b in blocks]
    if len(channels) != len(blocks):
        raise ValueError(f"channels and blocks must have the same length, got {channels}, {blocks}")
    return sum(
        z_dim * c + c + b * (12 * (c * c + c) + 4 * c)
        for c, b in zip(channels, blocks, strict=True)
    )


class RCNAPS(nn.Module):
    """rCNAPS: FiLM extractor + set encoder + adaptation network + GeM + L2N (thesis §4.3.2).

    Args:
        extractor: a :class:`~rank_lab.fewshot.film.FiLMResNet`.
        in_channels: image channels (for the set encoder).
        encoder_width, encoder_depth: see :class:`SetEncoder`.
        init_std: see :class:`FiLMLayerNetwork`.
        gem_p: initial GeM exponent (learnable, as in the thesis' GeM).
        train_backbone: train the ResNet too (default False: frozen as in Simple CNAPS, its
            batch-norm statistics frozen too).

    Raises:
        TypeError, ValueError: ``extractor`` not a :class:`FiLMResNet`; ``in_channels``,
            ``encoder_width`` or ``encoder_depth`` not a positive int; ``init_std`` not a finite
            number >= 0; ``gem_p`` not a finite positive number (named as here).
    """

    def __init__(
        self,
        extractor: FiLMResNet,
        *,
        in_channels: int = 3,
        encoder_width: int = 64,
        encoder_depth: int = 5,
        init_std: float = 1e-3,
        gem_p: float = 3.0,
        train_backbone: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(extractor, FiLMResNet):
            raise TypeError(
                "extractor must be a FiLMResNet (film_resnet18 / film_tiny_resnet), got "
                f"{type(extractor).__name__}"
            )
        in_channels = check_positive_int(in_channels, "in_channels")
        encoder_width = check_positive_int(encoder_width, "encoder_width")
        encoder_depth = check_positive_int(encoder_depth, "encoder_depth")
        init_std = check_float(init_std, "init_std", low=0.0)
        gem_p = check_float(gem_p, "gem_p", low=0.0, low_open=True)
        self.extractor = extractor
        self.set_encoder = SetEncoder(in_channels, encoder_width, encoder_depth)
        self.adaptation = FiLMAdaptationNetwork(
            extractor.channels, extractor.blocks, encoder_width, init_std
        )
        self.pool = GeM(gem_p)
        self.out_dim = extractor.num_features
        self.set_train_backbone(train_backbone)

    def set_train_backbone(self, flag: bool) -> None:
        """Freeze (False) or unfreeze (True) the ResNet weights."""
        self.train_backbone = bool(flag)
        for p in self.extractor.parameters():
            p.requires_grad_(self.train_backbone)
        self.train(self.training)

    def train(self, mode: bool = True) -> RCNAPS:
        """Train mode, keeping a frozen backbone's batch-norm layers in eval mode."""
        super().train(mode)
        if mode and not self.train_backbone:
            self.extractor.eval()
        return self

    def film_params(self, support: torch.Tensor) -> FiLMParams:
        """FiLM parameters from a support ``(k, C, H, W)`` (or ``(T, k, C, H, W)``: one set per
        task)."""
        return self.adaptation(self.set_encoder(support))

    def forward(
        self,
        x: torch.Tensor,
        support: torch.Tensor | None = None,
        *,
        params: FiLMParams | None = None,
    ) -> torch.Tensor:
        """Descriptors ``(B, D)`` (unit norm) of ``x (B, C, H, W)``.

        ``support`` adapts the extractor (its parameters are computed here); ``params`` passes
        precomputed ones; neither = the unadapted network (setup C).
        """
        if support is not None and params is not None:
            raise ValueError("give support or params, not both")
        if support is not None:
            params = self.film_params(support)
        return unit_rows(self.pool(self.extractor(x, params)), dim=-1)

    def parameter_counts(self) -> dict[str, int]:
        """``{"backbone", "set_encoder", "adaptation", "pooling", "added", "total"}`` parameter
        numbers."""
        n = {
            name: sum(p.numel() for p in getattr(self, attr).parameters())
            for name, attr in (
                ("backbone", "extractor"),
                ("set_encoder", "set_encoder"),
                ("adaptation", "adaptation"),
                ("pooling", "pool"),
            )
        }
        n["added"] = n["set_encoder"] + n["adaptation"]
        n["total"] = sum(p.numel() for p in self.parameters())
        return n


def build_rcnaps(
    backbone: str = "resnet18",
    *,
    source: str = "torchvision",
    weights: str | Path | None = None,
    in_channels: int = 3,
    widths: Sequence[int] = (16, 32, 64),
    blocks: Sequence[int] | int = 1,
    stem_stride: int = 1,
    encoder_width: int = 64,
    encoder_depth: int = 5,
    init_std: float = 1e-3,
    gem_p: float = 3.0,
    train_backbone: bool = False,
) -> RCNAPS:
    """Build rCNAPS with ``backbone="resnet18"`` (the thesis; ``source`` torchvision or timm) or
    ``"tiny"``.

    ``weights`` initialises ResNet-18: ``"imagenet"`` (timm), ``"none"`` or a local file
    (:mod:`rank_lab.models.weights`, a file loaded strictly);
    ``widths`` / ``blocks`` / ``stem_stride`` shape the tiny residual CNN of the smoke runs.
    """
    if backbone == "resnet18":
        ext = film_resnet18(source, in_channels=in_channels, weights=weights)
    elif backbone == "tiny":
        if weights not in (None, "none"):
            raise ValueError(
                f"weights={weights!r} needs backbone='resnet18' (the tiny CNN has no pretrained "
                "weights)"
            )
        ext = film_tiny_resnet(in_channels, widths, blocks, stem_stride)
    else:
        raise ValueError(f"backbone must be 'resnet18' or 'tiny', got {backbone!r}")
    return RCNAPS(
        ext,
        in_channels=in_channels,
        encoder_width=encoder_width,
        encoder_depth=encoder_depth,
        init_std=init_std,
        gem_p=gem_p,
        train_backbone=train_backbone,
    )


def class_specific_smooth_ap(
    embeddings: torch.Tensor, labels: torch.Tensor, target: int, *, tau: float = 0.01
) -> torch.Tensor:
    """Class-specific Smooth-AP loss, eq. 4.13 of the Gominski thesis:
    ``(1/m) sum_{q in c*} (1 - AP_q)``.

    Only the ``m`` queries of the target class contribute; each ranks the whole batch (itself
    excluded) with Smooth-AP's sigmoid ranks (Brown et al. 2020, temperature ``tau``). The other
    items still appear in the queries' rankings (as negatives, or positives of ``c*``).

    Args:
        embeddings: ``(B, d)`` batch descriptors.
        labels: ``(B,)`` classes.
        target: ``c*``; it needs at least 2 items in the batch.
        tau: sigmoid temperature.

    Returns:
        Scalar loss.
    """
    emb = check_embeddings(embeddings, "embeddings")
    y = check_labels(labels, emb.shape[0], "labels").to(emb.device)
    q = torch.nonzero(y == int(target)).flatten()
    if q.numel() < 2:
        raise ValueError(
            f"target class {target} needs at least 2 items in the batch, got {q.numel()}"
        )
    loss = SmoothAP(tau=tau, no_positive="raise")
    return loss(emb[q], y[q], emb, y, ref_self_index=q)


class ClassSpecificSmoothAP(nn.Module):
    """Module form of :func:`class_specific_smooth_ap`: ``loss(embeddings, labels, target)``."""

    def __init__(self, tau: float = 0.01) -> None:
        super().__init__()
        self.tau = float(tau)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, target: int) -> torch.Tensor:
        return class_specific_smooth_ap(embeddings, labels, target, tau=self.tau)
