"""Global-descriptor extraction over an image folder, multi-scale, resumable (Gominski thesis Fig.
4.1).

The pipeline of the Gominski thesis (Fig. 4.1; test-time preprocessing §4.1.3): image -> test-time
preprocessing (optional
**grayscale** and **0.9 centre crop**, Table 4.1; resize) -> backbone (a timm model with
``weights="imagenet"``, ``"none"`` or a local file, or any ``nn.Module``) -> pooling (MAC / SPoC /
GeM / R-MAC) -> L2 normalisation. Multi-scale extraction averages the L2-normalised descriptors of
the image resized by each factor in ``scales`` (optionally as a power mean, ``msp``, as the
cirtorch code does with GeM's ``p``) and of its horizontal flip (``flip=True``), then
re-normalises.

Long runs show a tqdm bar and write to ``out_path`` (a ``.npy`` file) batch by batch through a
memory map, with a small JSON progress file next to it: after an interruption the same call resumes
from the last completed batch (the input list and the settings are fingerprinted; a mismatch raises
instead of mixing descriptors).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rank_lab._progress import tqdm
from rank_lab._validation import (
    check_finite,
    check_input_batch,
    check_magnitude,
    check_positive_int,
)
from rank_lab.data.datasets.base import DatasetFolderError, pil_loader
from rank_lab.models.backbones import build_backbone
from rank_lab.models.pooling import build_pooling
from rank_lab.models.weights import load_weights_file, parse_weights
from rank_lab.retrieval.whitening import l2n
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "DescriptorNet",
    "build_descriptor_net",
    "list_images",
    "preprocess_image",
    "extract_descriptors",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


class DescriptorNet(nn.Module):
    """Backbone -> pooling -> L2N (-> optional whitening layer -> L2N): a global descriptor
    ``(B, D)``.

    Args:
        backbone: returns a feature map ``(B, C, h, w)`` (pooled here) or a vector ``(B, C)``.
        pooling: a pooling module (see :func:`rank_lab.models.pooling.build_pooling`).
        whitening: optional ``nn.Linear`` (e.g.
            :meth:`rank_lab.retrieval.whitening.Whitening.to_linear`).
    """

    def __init__(
        self,
        backbone: nn.Module,
        pooling: nn.Module | None = None,
        whitening: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.backbone, self.pooling, self.whitening = backbone, pooling, whitening

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Describe a batch.

        Args:
            x: ``(B, 3, H, W)`` normalised images (or what the backbone takes, e.g. ``(B, d)``),
                floating and finite; float64 is cast to the weights' dtype.

        Returns:
            ``(B, D)`` L2-normalised descriptors.

        Raises:
            TypeError: ``x`` is not a floating tensor.
            ValueError: an empty batch, or NaN / inf in ``x``.
        """
        # the backbone's shape
        free = ("B", *("_" * (x.ndim - 1))) if isinstance(x, torch.Tensor) and x.ndim else ("B",)
        x = check_input_batch(x, "x", free, dtype=self)
        f = self.backbone(x)
        if f.ndim == 4:
            if self.pooling is None:
                raise ValueError("the backbone returns a feature map: a pooling layer is needed")
            f = self.pooling(f)
        f = l2n(f.flatten(1))
        if self.whitening is not None:
            f = l2n(self.whitening(f))
        return f


def build_descriptor_net(
    backbone: str | nn.Module = "resnet18",
    pooling: str = "gem",
    *,
    pooling_kwargs: dict[str, Any] | None = None,
    whitening: nn.Module | None = None,
    weights: str | Path | None = None,
) -> DescriptorNet:
    """A :class:`DescriptorNet` from a backbone name (``"tiny_cnn"`` or any timm name) or a module.

    Args:
        backbone: name for :func:`rank_lab.models.backbones.build_backbone` or a module.
        pooling: ``"gem"``, ``"mac"``, ``"spoc"``, ``"rmac"``.
        pooling_kwargs: e.g. ``{"p": 3.0}`` for GeM.
        whitening: optional final linear layer.
        weights: ``"imagenet"`` (timm downloads; a backbone name only), ``"none"`` or a weight
            file loaded strictly (:mod:`rank_lab.models.weights`); default: random weights (nothing
            is downloaded). The record is ``net.backbone.weights_record``.
    """
    if isinstance(backbone, str):
        backbone = build_backbone(backbone, in_channels=3, weights=weights)
    elif weights is not None and weights != "none":
        spec = parse_weights(weights)
        if not isinstance(spec, Path):
            raise ValueError(
                "weights='imagenet' needs a backbone name (timm builds it), not a module"
            )
        backbone.weights_record = load_weights_file(backbone, spec)
    return DescriptorNet(backbone, build_pooling(pooling, **(pooling_kwargs or {})), whitening)


def list_images(folder: str | Path, extensions: Sequence[str] = _EXTS) -> list[Path]:
    """All image files under ``folder`` (recursively), sorted by relative path.

    Raises:
        DatasetFolderError: ``folder`` is missing or holds no image with one of ``extensions``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetFolderError(f"image folder {str(folder)!r} does not exist or is not a folder")
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in extensions)
    if not paths:
        raise DatasetFolderError(f"no image ({', '.join(extensions)}) under {str(folder)!r}")
    return paths


def preprocess_image(
    image: Any,
    *,
    image_size: int | None = 224,
    keep_aspect: bool = False,
    grayscale: bool = False,
    center_crop: float | None = None,
    box: Sequence[float] | None = None,
) -> torch.Tensor:
    """Test-time preprocessing of one image (PIL image or ``(3, H, W)`` tensor in ``[0, 1]``).

    Order: crop to ``box`` ``[x1, y1, x2, y2]`` (revisited queries) -> grayscale (replicated to 3
    channels) -> centre crop keeping ``center_crop`` of each side (thesis: 0.9) -> resize
    (square ``image_size``, or the longer side to ``image_size`` with ``keep_aspect``).

    Returns:
        ``(3, H', W')`` float tensor in ``[0, 1]`` (not mean/std normalised).

    Raises:
        TypeError: ``image`` neither a PIL image nor a floating tensor.
        ValueError: a tensor not ``(3, H, W)``, empty or with NaN / inf; ``image_size`` not a
            positive int (or None); ``center_crop`` outside (0, 1]; a ``box`` not of 4 finite
            numbers.
    """
    # heavy import, paid only on this path
    import torchvision.transforms.functional as TF

    if image_size is not None:
        image_size = check_positive_int(image_size, "image_size")
    if not isinstance(image, torch.Tensor) and not hasattr(image, "convert"):
        raise TypeError(
            f"image must be a PIL image or a (3, H, W) tensor, got {type(image).__name__}"
        )
    x = image if isinstance(image, torch.Tensor) else TF.to_tensor(image.convert("RGB"))
    if not x.is_floating_point():
        raise TypeError(f"image must be a floating tensor in [0, 1], got dtype {x.dtype}")
    if x.ndim != 3 or x.shape[0] != 3 or x.shape[1] == 0 or x.shape[2] == 0:
        raise ValueError(f"image must be a non-empty (3, H, W) tensor, got {tuple(x.shape)}")
    check_finite(x, "image")
    if box is not None:
        b = [float(v) for v in box]
        if len(b) != 4 or not all(math.isfinite(v) for v in b):
            raise ValueError(f"box must be 4 finite numbers [x1, y1, x2, y2], got {list(box)}")
        x1, y1, x2, y2 = (int(round(v)) for v in b)
        x = x[:, max(y1, 0) : max(y2, y1 + 1), max(x1, 0) : max(x2, x1 + 1)]
    if grayscale:
        x = (0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2])[None].expand(3, -1, -1)
    if center_crop is not None:
        if (
            isinstance(center_crop, bool)
            or not isinstance(center_crop, (int, float))
            or not 0 < center_crop <= 1
        ):
            raise ValueError(f"center_crop must be in (0, 1], got {center_crop}")
        h, w = x.shape[-2:]
        ch, cw = max(1, round(h * center_crop)), max(1, round(w * center_crop))
        top, left = (h - ch) // 2, (w - cw) // 2
        x = x[:, top : top + ch, left : left + cw]
    if image_size is not None:
        h, w = x.shape[-2:]
        if keep_aspect:
            s = image_size / max(h, w)
            size = (max(1, round(h * s)), max(1, round(w * s)))
        else:
            size = (image_size, image_size)
        if size != (h, w):
            x = F.interpolate(
                x[None], size=size, mode="bilinear", align_corners=False, antialias=True
            )[0]
    return x.contiguous()


def _fingerprint(items: list[str], settings: dict[str, Any]) -> str:
    h = hashlib.sha1()
    for it in items:
        h.update(it.encode())
        h.update(b"\0")
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _atomic_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj), encoding="utf-8")
    os.replace(tmp, path)


@torch.no_grad()
def _describe(
    net: nn.Module,
    batch: list[torch.Tensor],
    scales: Sequence[float],
    flip: bool,
    msp: float,
    mean: torch.Tensor | None,
    std: torch.Tensor | None,
    dev: torch.device,
) -> torch.Tensor:
    """Multi-scale (+ flip) descriptors of a list of preprocessed images, grouped by shape."""
    out: list[torch.Tensor | None] = [None] * len(batch)
    shapes: dict[tuple[int, ...], list[int]] = {}
    for i, x in enumerate(batch):
        shapes.setdefault(tuple(x.shape), []).append(i)
    for idx in shapes.values():
        x = torch.stack([batch[i] for i in idx]).to(dev)
        acc = None
        n_terms = 0
        for s in scales:
            xs = (
                x
                if s == 1
                else F.interpolate(
                    x, scale_factor=s, mode="bilinear", align_corners=False, antialias=s < 1
                )
            )
            views = [xs, xs.flip(-1)] if flip else [xs]
            for v in views:
                if mean is not None:
                    v = (v - mean) / std
                d = net(v).to(torch.float64)
                d = d.clamp_min(0).pow(msp) if msp != 1 else d
                acc = d if acc is None else acc + d
                n_terms += 1
        acc = acc / n_terms
        if msp != 1:
            acc = acc.pow(1.0 / msp)
        acc = l2n(acc).cpu()
        for j, i in enumerate(idx):
            out[i] = acc[j]
    return torch.stack(out)  # type: ignore[arg-type]


def extract_descriptors(
    images: str | Path | Sequence[str | Path] | torch.Tensor,
    net: nn.Module | str = "resnet18",
    *,
    pooling: str = "gem",
    weights: str | Path | None = None,
    image_size: int | None = 224,
    keep_aspect: bool = False,
    scales: Sequence[float] = (1.0,),
    flip: bool = False,
    grayscale: bool = False,
    center_crop: float | None = None,
    boxes: Sequence[Sequence[float] | None] | None = None,
    msp: float = 1.0,
    normalize: bool = True,
    batch_size: int = 32,
    device: DeviceLike = None,
    out_path: str | Path | None = None,
    resume: bool = True,
    progress: bool | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Extract L2-normalised global descriptors ``(N, D)`` from images, batched, resumable.

    Args:
        images: an image folder (recursively, sorted), a list of image files, or a floating,
            finite ``(N, 3, H, W)`` tensor in ``[0, 1]``.
        net: a :class:`DescriptorNet` / any module mapping images to descriptors or feature maps,
            or a backbone name for :func:`build_descriptor_net`.
        pooling: pooling for a named backbone or a module returning feature maps.
        weights: ``"imagenet"``, ``"none"`` or a weight file for a named backbone
            (:mod:`rank_lab.models.weights`; default random).
        image_size, keep_aspect, grayscale, center_crop: test-time preprocessing
            (:func:`preprocess_image`); the thesis uses ``grayscale=True, center_crop=0.9``.
        scales: resize factors for multi-scale extraction (e.g. ``(1, 2**-0.5, 0.5)``).
        flip: also describe the horizontal flip and average.
        boxes: per-image crop boxes ``[x1, y1, x2, y2]`` or ``None`` (revisited queries).
        msp: power of the multi-scale power mean (1 = plain mean).
        normalize: ImageNet mean / std normalisation before the network.
        batch_size: images per forward pass.
        device: compute device.
        out_path: ``.npy`` file written batch by batch (with ``<out_path>.progress.json``); an
            existing complete file with the same fingerprint is loaded instead of recomputed.
        resume: continue an interrupted run at ``out_path`` (``False`` restarts it).
        progress: tqdm bar (default: more than 2 batches).
        on_batch: called with the number of images done after each batch (e.g. for logging).

    Returns:
        ``(N, D)`` float32 descriptors, in input order.
    """
    if isinstance(images, torch.Tensor):
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images tensor must be (N, 3, H, W), got {tuple(images.shape)}")
        if not images.is_floating_point():
            raise TypeError(f"images tensor must be floating in [0, 1], got dtype {images.dtype}")
        check_finite(images, "images")
        # the network's batch statistics and norms overflow beyond
        check_magnitude(images, "images")
        items: list[Any] = list(images)
        ident = [hashlib.sha1(images.detach().cpu().contiguous().numpy().tobytes()).hexdigest()]
    else:
        paths = (
            list_images(images) if isinstance(images, (str, Path)) else [Path(p) for p in images]
        )
        if not paths:
            raise ValueError("images is empty")
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise DatasetFolderError(
                f"{len(missing)} image files are missing, e.g. {str(missing[0])!r}"
            )
        items = paths
        ident = [str(p) for p in paths]
    n = len(items)
    if n == 0:
        raise ValueError("images is empty")
    if boxes is not None and len(boxes) != n:
        raise ValueError(f"boxes has {len(boxes)} entries for {n} images")
    if not scales or any(s <= 0 for s in scales):
        raise ValueError(f"scales must be positive factors, got {list(scales)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    dev = get_device(device)
    if isinstance(net, str):
        name = net
        net = build_descriptor_net(net, pooling, weights=weights)
    else:
        name = type(net).__name__
        if not isinstance(net, DescriptorNet):
            net = DescriptorNet(net, build_pooling(pooling))
    net = net.to(dev).eval()
    settings = {
        "net": name,
        "params": float(sum(float(p.detach().double().sum()) for p in net.parameters())),
        "image_size": image_size,
        "keep_aspect": keep_aspect,
        "scales": list(scales),
        "flip": flip,
        "grayscale": grayscale,
        "center_crop": center_crop,
        "msp": msp,
        "normalize": normalize,
        "boxes": None
        if boxes is None
        else [None if b is None else list(map(float, b)) for b in boxes],
    }
    fp = _fingerprint(ident, settings)
    mean = torch.tensor(IMAGENET_MEAN, device=dev)[None, :, None, None] if normalize else None
    std = torch.tensor(IMAGENET_STD, device=dev)[None, :, None, None] if normalize else None

    out_file = progress_file = None
    store: np.ndarray | None = None
    done = 0
    if out_path is not None:
        out_file = Path(out_path)
        out_file.parent.mkdir(parents=True, exist_ok=True)
        progress_file = out_file.with_name(out_file.name + ".progress.json")
        meta_file = out_file.with_name(out_file.name + ".meta.json")
        if out_file.is_file() and meta_file.is_file() and resume and not progress_file.is_file():
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            if meta.get("fingerprint") == fp:
                return torch.from_numpy(np.load(out_file)).float()
            raise ValueError(
                f"{str(out_file)!r} holds descriptors of other images / settings; pass "
                "resume=False to overwrite"
            )
        if progress_file.is_file() and resume and out_file.is_file():
            state = json.loads(progress_file.read_text(encoding="utf-8"))
            if state.get("fingerprint") != fp or state.get("n") != n:
                raise ValueError(
                    f"the interrupted run at {str(out_file)!r} used other images / settings; pass "
                    "resume=False to restart"
                )
            store = np.lib.format.open_memmap(out_file, mode="r+")
            done = int(state["done"])

    def load(i: int) -> torch.Tensor:
        src = items[i] if isinstance(items[i], torch.Tensor) else pil_loader(items[i])
        return preprocess_image(
            src,
            image_size=image_size,
            keep_aspect=keep_aspect,
            grayscale=grayscale,
            center_crop=center_crop,
            box=None if boxes is None else boxes[i],
        )

    starts = range(done, n, batch_size)
    show = len(starts) > 2 if progress is None else progress
    if show:
        starts = tqdm(
            starts,
            desc="descriptors",
            initial=done // batch_size,
            total=(n + batch_size - 1) // batch_size,
            leave=False,
        )
    result: torch.Tensor | None = None
    for a in starts:
        batch = [load(i) for i in range(a, min(a + batch_size, n))]
        desc = _describe(net, batch, scales, flip, msp, mean, std, dev).float()
        if out_file is not None:
            if store is None:
                store = np.lib.format.open_memmap(
                    out_file, mode="w+", dtype=np.float32, shape=(n, desc.shape[1])
                )
            store[a : a + len(batch)] = desc.numpy()
            store.flush()
            _atomic_json(progress_file, {"fingerprint": fp, "n": n, "done": a + len(batch)})  # type: ignore[arg-type]
        else:
            if result is None:
                result = torch.empty(n, desc.shape[1])
            result[a : a + len(batch)] = desc
        if on_batch is not None:
            on_batch(a + len(batch))
    if out_file is None:
        assert result is not None
        return result
    assert store is not None
    out = torch.from_numpy(np.array(store)).float()
    del store
    out_file.with_name(out_file.name + ".meta.json").write_text(
        json.dumps({"fingerprint": fp, "n": n, "dim": out.shape[1]}), encoding="utf-8"
    )
    progress_file.unlink(missing_ok=True)  # type: ignore[union-attr]
    return out
