"""Procedural multi-source images: the same objects rendered in several "sources" and viewpoints.

A stand-in for the ALEGORIA benchmark (Gominski thesis §3.2), whose images are not available: every
class is an *object* (a fixed layout of 3-6 coloured primitives: discs, boxes, triangles, rings,
bars), and every image renders one object

* in one **source** (the domain of the cross-source measures): ``"colour"`` (a photo-like
  rendering: gradient background, lighting, texture, noise), ``"greyscale"`` (the same, converted
  to luminance with a contrast change, like the grayscale archives), ``"drawing"`` (ink outlines on
  paper, like drawings and postcards), ``"sepia"`` and ``"cyanotype"`` (the greyscale rendering
  toned brown, or mapped onto the Prussian-blue-to-white ramp of a blueprint: monochrome sources
  whose colour says which source an image comes from, never which object it shows);
* from one **viewpoint** (attribute ``vertical_orientation`` of Table 3.9, coded as there):
  2 = street view (upright, small rotation), 1 = oblique (foreshortened and sheared),
  0 = vertical (seen from above: any azimuth);
* at one **scale** (attribute ``scale``: 0 very close ... 3 far) and **illumination**
  (0 under, 1 well, 2 over-illuminated), optionally with a dark **scan border** (Fig. 3.6) of a
  chosen width.

So the intra-source task is easy and the cross-source one hard, and the inter-domain measures
(P1, mAPD) mean something. Everything is vectorised torch (signed-distance rasterisation on a pixel
grid), deterministic given ``seed``. :func:`write_alegoria_folder` writes the images and an
``annotations.csv`` in the layout read by :func:`rank_lab.data.datasets.alegoria.load_alegoria`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from rank_lab._validation import check_finite, check_float, check_labels, check_positive_int

__all__ = [
    "SOURCES",
    "MultiSourceImages",
    "make_multi_source_images",
    "TwoFactorImages",
    "make_two_factor_images",
    "write_image_folder",
    "write_alegoria_folder",
]

SOURCES = ("colour", "greyscale", "drawing", "sepia", "cyanotype")
# the cyanotype ramp: the colour of luminance 0 and of luminance 1
_CYANOTYPE = ((0.05, 0.2, 0.42), (0.88, 0.94, 1.0))
_VIEW_NAMES = {2: "street", 1: "oblique", 0: "vertical"}


@dataclass
class MultiSourceImages:
    """Rendered images and their annotations.

    Attributes:
        images: ``(N, 3, H, W)`` float in ``[0, 1]``.
        labels: ``(N,)`` object (class) index.
        domains: ``(N,)`` source index into ``source_names``.
        source_names: the sources used.
        attributes: ``{"vertical_orientation", "scale", "illumination", "border": (N,) long}``.
    """

    images: torch.Tensor
    labels: torch.Tensor
    domains: torch.Tensor
    source_names: list[str]
    attributes: dict[str, torch.Tensor]

    def __post_init__(self) -> None:
        x = self.images
        if not isinstance(x, torch.Tensor) or x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(
                f"images must be a (N, 3, H, W) tensor, got {getattr(x, 'shape', type(x).__name__)}"
            )
        if not x.is_floating_point():
            raise TypeError(f"images must be floating in [0, 1], got dtype {x.dtype}")
        check_finite(x, "images")
        n = x.shape[0]
        if n == 0:
            raise ValueError("images is empty (N = 0)")
        for name in ("labels", "domains"):
            y = check_labels(getattr(self, name), None, name)
            if y.shape[0] != n:
                raise ValueError(f"{name} has {y.shape[0]} rows but images has {n}")
            setattr(self, name, y)
        if bool((self.domains < 0).any()) or bool((self.domains >= len(self.source_names)).any()):
            raise ValueError(f"domains must index source_names ({len(self.source_names)} sources)")
        for k, v in self.attributes.items():
            if not isinstance(v, torch.Tensor) or v.shape[:1] != (n,):
                raise ValueError(
                    f"attributes[{k!r}] must have {n} rows, got "
                    f"{getattr(v, 'shape', type(v).__name__)}"
                )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def subset(self, index: torch.Tensor) -> MultiSourceImages:
        """The items at ``index``."""
        return MultiSourceImages(
            self.images[index],
            self.labels[index],
            self.domains[index],
            list(self.source_names),
            {k: v[index] for k, v in self.attributes.items()},
        )


def _objects(
    n_classes: int, g: torch.Generator, min_prims: int, max_prims: int
) -> dict[str, torch.Tensor]:
    p = max_prims
    n_prims = torch.randint(min_prims, max_prims + 1, (n_classes,), generator=g)
    active = torch.arange(p)[None, :] < n_prims[:, None]
    kind = torch.randint(0, 5, (n_classes, p), generator=g)
    centre = (torch.rand(n_classes, p, 2, generator=g) - 0.5) * 1.0
    size = 0.14 + 0.2 * torch.rand(n_classes, p, generator=g)
    angle = torch.rand(n_classes, p, generator=g) * math.pi
    hue = torch.rand(n_classes, p, generator=g)
    colour = _hsv_to_rgb(
        hue,
        0.55 + 0.45 * torch.rand(n_classes, p, generator=g),
        0.55 + 0.45 * torch.rand(n_classes, p, generator=g),
    )
    stripes = torch.rand(n_classes, p, generator=g) * 6 + 2
    return {
        "active": active,
        "kind": kind,
        "centre": centre,
        "size": size,
        "angle": angle,
        "colour": colour,
        "stripes": stripes,
    }


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    k = torch.stack([(5 + h * 6) % 6, (3 + h * 6) % 6, (1 + h * 6) % 6], -1)
    return v[..., None] - v[..., None] * s[..., None] * torch.clamp(torch.minimum(k, 4 - k), 0, 1)


def _sdf(kind: torch.Tensor, vx: torch.Tensor, vy: torch.Tensor) -> torch.Tensor:
    """Signed distance (in units of the primitive size) of the 5 primitive kinds, one kind per
    image."""
    out = torch.empty_like(vx)
    for k in range(5):
        sel = kind == k
        if not bool(sel.any()):
            continue
        x, y = vx[sel], vy[sel]
        if k == 0:  # disc
            d = torch.sqrt(x**2 + y**2) - 1
        elif k == 1:  # box
            d = torch.maximum(x.abs(), y.abs() * 1.5) - 1
        elif k == 2:  # triangle
            d = (
                torch.maximum(
                    torch.maximum(-y - 0.5, 0.866 * x + 0.5 * y - 0.5), -0.866 * x + 0.5 * y - 0.5
                )
                * 2
            )
        elif k == 3:  # ring
            d = ((torch.sqrt(x**2 + y**2) - 0.72).abs() - 0.28) / 0.28 * 0.5
        else:  # bar
            d = torch.maximum(x.abs() / 1.2, y.abs() / 0.32) - 1
        out[sel] = d
    return out


def make_multi_source_images(
    n_classes: int = 12,
    per_source: int = 6,
    sources: Sequence[str] = ("colour", "greyscale", "drawing"),
    image_size: int = 32,
    *,
    viewpoints: Sequence[int] = (2, 1, 0),
    scale_range: tuple[float, float] = (0.75, 1.4),
    border_prob: float = 0.0,
    border_width: float = 0.1,
    noise: float = 0.03,
    primitives: tuple[int, int] = (3, 6),
    class_offset: int = 0,
    seed: int = 0,
) -> MultiSourceImages:
    """Render ``n_classes x len(sources) x per_source`` images of procedural objects.

    Args:
        n_classes: number of objects.
        per_source: images of each object in each source.
        sources: subset of :data:`SOURCES` (the domains).
        image_size: output side ``H = W``.
        viewpoints: viewpoint codes drawn uniformly (2 street, 1 oblique, 0 vertical).
        scale_range: object scale (1 = the object fills the frame); binned into the ``scale`` code.
        border_prob: probability of a dark scan border.
        border_width: its width, a fraction of the side in ``(0, 0.5]`` (at least one pixel).
        noise: pixel noise of the photo-like sources.
        primitives: (min, max) primitives per object.
        class_offset: objects are generated from ``seed + class_offset`` so that two calls with
            disjoint offsets give disjoint object sets (training / test classes).
        seed: random seed.

    Returns:
        A :class:`MultiSourceImages`, ordered object-major then source then view.
    """
    for name, v in (
        ("n_classes", n_classes),
        ("per_source", per_source),
        ("image_size", image_size),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    check_float(noise, "noise", low=0.0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if isinstance(class_offset, bool) or not isinstance(class_offset, int) or class_offset < 0:
        raise ValueError(f"class_offset must be a non-negative int, got {class_offset!r}")
    lo, hi = (check_float(v, "scale_range", low=0.0, low_open=True) for v in scale_range)
    if lo > hi:
        raise ValueError(
            f"scale_range must be (low, high) with low <= high, got {tuple(scale_range)}"
        )
    p_lo, p_hi = (check_positive_int(v, "primitives") for v in primitives)
    if p_lo > p_hi:
        raise ValueError(f"primitives must be (min, max) with min <= max, got {tuple(primitives)}")
    bad = [s for s in sources if s not in SOURCES]
    if bad or not sources:
        raise ValueError(f"sources must be a non-empty subset of {SOURCES}, got {list(sources)}")
    if not 0.0 <= border_prob <= 1.0:
        raise ValueError(f"border_prob must be in [0, 1], got {border_prob}")
    check_float(border_width, "border_width", low=0.0, low_open=True, high=0.5)
    if not viewpoints or any(v not in (0, 1, 2) for v in viewpoints):
        raise ValueError(f"viewpoints must be codes in (0, 1, 2), got {list(viewpoints)}")
    g_obj = torch.Generator().manual_seed(10_007 * (seed + 1) + class_offset)
    obj = _objects(n_classes, g_obj, *primitives)
    g = torch.Generator().manual_seed(seed * 7919 + 17 + class_offset)
    n_src = len(sources)
    labels = torch.arange(n_classes).repeat_interleave(n_src * per_source)
    domains = torch.arange(n_src).repeat_interleave(per_source).repeat(n_classes)
    n = labels.numel()
    view = torch.tensor(list(viewpoints))[torch.randint(0, len(viewpoints), (n,), generator=g)]
    scale = scale_range[0] + (scale_range[1] - scale_range[0]) * torch.rand(n, generator=g)
    light = 0.6 + 0.8 * torch.rand(n, generator=g)
    # viewpoint affine: rotation, foreshortening, shear
    rot = torch.where(
        view == 0,
        torch.rand(n, generator=g) * 2 * math.pi,
        (torch.rand(n, generator=g) - 0.5) * 0.35,
    )
    squash = torch.where(view == 1, 0.5 + 0.2 * torch.rand(n, generator=g), torch.ones(n))
    shear = torch.where(view == 1, (torch.rand(n, generator=g) - 0.5) * 0.8, torch.zeros(n))
    shift = (torch.rand(n, 2, generator=g) - 0.5) * 0.2
    lin = torch.linspace(-1, 1, image_size)
    py, px = torch.meshgrid(lin, lin, indexing="ij")
    # inverse map pixel -> object coordinates: u = A^{-1} (p - t), A = s R(rot) [[1, shear], [0,
    # squash]]
    qx = px[None] - shift[:, 0, None, None]
    qy = py[None] - shift[:, 1, None, None]
    c, s = torch.cos(-rot)[:, None, None], torch.sin(-rot)[:, None, None]
    rx, ry = c * qx - s * qy, s * qx + c * qy
    sc = scale[:, None, None]
    uy = ry / (sc * squash[:, None, None])
    ux = rx / sc - shear[:, None, None] * uy
    # photo-like background and canvas
    g1, g2 = torch.rand(n, 3, generator=g), torch.rand(n, 3, generator=g)
    ang = torch.rand(n, generator=g) * 2 * math.pi
    t = (
        torch.cos(ang)[:, None, None] * px[None] + torch.sin(ang)[:, None, None] * py[None] + 1
    ) / 2
    photo = g1[:, :, None, None] * (1 - t[:, None]) + g2[:, :, None, None] * t[:, None]
    photo = 0.35 + 0.3 * photo
    ink = torch.zeros(n, image_size, image_size)
    px_per_unit = image_size / 2
    for k in range(obj["kind"].shape[1]):
        act = obj["active"][labels, k]
        cx, cy = obj["centre"][labels, k, 0], obj["centre"][labels, k, 1]
        size, a = obj["size"][labels, k], obj["angle"][labels, k]
        ca, sa = torch.cos(-a)[:, None, None], torch.sin(-a)[:, None, None]
        dx, dy = ux - cx[:, None, None], uy - cy[:, None, None]
        vx = (ca * dx - sa * dy) / size[:, None, None]
        vy = (sa * dx + ca * dy) / size[:, None, None]
        sd = _sdf(obj["kind"][labels, k], vx, vy) * (size * scale * px_per_unit)[:, None, None]
        m = torch.sigmoid(-sd / 0.6) * act[:, None, None]
        texture = 0.85 + 0.15 * torch.sin(
            obj["stripes"][labels, k][:, None, None] * (vx + 0.5 * vy) * math.pi
        )
        col = obj["colour"][labels, k][:, :, None, None] * texture[:, None]
        photo = photo * (1 - m[:, None]) + col * m[:, None]
        ink = torch.maximum(ink, torch.exp(-(sd**2) / 0.8) * act[:, None, None])
    photo = (photo * light[:, None, None, None]).clamp(0, 1)
    photo = (photo + noise * torch.randn(photo.shape, generator=g)).clamp(0, 1)
    images = torch.empty_like(photo)
    lum = 0.299 * photo[:, 0] + 0.587 * photo[:, 1] + 0.114 * photo[:, 2]
    contrast = 0.7 + 0.6 * torch.rand(n, generator=g)
    grey = ((lum - 0.5) * contrast[:, None, None] + 0.5).clamp(0, 1)
    paper = 0.9 + 0.08 * torch.rand(n, generator=g)
    drawing = (
        paper[:, None, None] - 0.85 * ink + 0.02 * torch.randn(ink.shape, generator=g)
    ).clamp(0, 1)
    for d, name in enumerate(sources):
        sel = domains == d
        if name == "colour":
            images[sel] = photo[sel]
        elif name == "greyscale":
            images[sel] = grey[sel, None].expand(-1, 3, -1, -1)
        elif name == "sepia":
            images[sel] = (
                grey[sel, None] * torch.tensor([1.0, 0.85, 0.62])[None, :, None, None]
            ).clamp(0, 1)
        elif name == "cyanotype":
            ink_c, paper_c = (torch.tensor(c)[None, :, None, None] for c in _CYANOTYPE)
            images[sel] = ink_c + (paper_c - ink_c) * grey[sel, None]
        else:
            images[sel] = drawing[sel, None].expand(-1, 3, -1, -1)
    border = torch.rand(n, generator=g) < border_prob
    if bool(border.any()):
        w = max(1, round(border_width * image_size))
        frame = torch.zeros(image_size, image_size, dtype=torch.bool)
        frame[:w], frame[-w:], frame[:, :w], frame[:, -w:] = True, True, True, True
        images[border] = torch.where(frame, torch.full_like(images[border], 0.08), images[border])
    scale_code = (
        3 - torch.bucketize(scale, torch.linspace(scale_range[0], scale_range[1], 5)[1:-1])
    ).clamp(0, 3)
    illum = torch.bucketize(light, torch.tensor([0.8, 1.2]))
    attrs = {
        "vertical_orientation": view.long(),
        "scale": scale_code.long(),
        "illumination": illum.long(),
        "border": border.long(),
    }
    return MultiSourceImages(images, labels, domains, list(sources), attrs)


@dataclass
class TwoFactorImages:
    """Images that show one *shape* (a layout of primitives) painted in one *hue*.

    Attributes:
        images: ``(N, 3, H, W)`` float in ``[0, 1]``.
        shapes: ``(N,)`` shape index (the class of the "same object" task).
        hues: ``(N,)`` hue index (the class of the "same colour" task).
        hue_values: ``(n_hues,)`` the hues, in turns of the colour circle ``[0, 1)``.
    """

    images: torch.Tensor
    shapes: torch.Tensor
    hues: torch.Tensor
    hue_values: torch.Tensor

    def __post_init__(self) -> None:
        x = self.images
        if not isinstance(x, torch.Tensor) or x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(
                f"images must be a (N, 3, H, W) tensor, got {getattr(x, 'shape', type(x).__name__)}"
            )
        if not x.is_floating_point():
            raise TypeError(f"images must be floating in [0, 1], got dtype {x.dtype}")
        check_finite(x, "images")
        if x.shape[0] == 0:
            raise ValueError("images is empty (N = 0)")
        for name in ("shapes", "hues"):
            y = check_labels(getattr(self, name), None, name)
            if y.ndim != 1 or y.shape[0] != x.shape[0]:
                raise ValueError(
                    f"{name} must have shape ({x.shape[0]},) like the images, got {tuple(y.shape)}"
                )
            setattr(self, name, y)
        h = self.hue_values
        if not isinstance(h, torch.Tensor) or h.ndim != 1 or not h.is_floating_point():
            raise TypeError(
                "hue_values must be a 1-D floating tensor, got "
                f"{getattr(h, 'shape', type(h).__name__)}"
            )
        check_finite(h, "hue_values")
        if bool((self.hues >= h.shape[0]).any()) or bool((self.hues < 0).any()):
            raise ValueError(f"hues must index hue_values ({h.shape[0]} hues)")

    def __len__(self) -> int:
        return int(self.images.shape[0])


def make_two_factor_images(
    n_shapes: int = 12,
    n_hues: int = 12,
    per_pair: int = 1,
    image_size: int = 24,
    *,
    primitives: tuple[int, int] = (2, 4),
    jitter: float = 1.0,
    noise: float = 0.02,
    paint: str = "object",
    class_offset: int = 0,
    seed: int = 0,
) -> TwoFactorImages:
    """Render every (shape, hue) pair ``per_pair`` times: two independent factors in one image.

    Each shape is a layout of ``primitives`` primitives (the objects of
    :func:`make_multi_source_images`) whose primitives keep their own brightness; all of them are
    painted in the image's hue on a light grey background. The hues are ``n_hues`` points of the
    colour circle, equally spaced from a random start. So "the images of one shape" (any hue) and
    "the images of one hue" (any shape) are two retrieval tasks over the same images, and no single
    similarity can serve both: what a query's neighbours should share depends on the task (the
    few-shot retrieval chapter's test of what a support set tells an adapted extractor).

    Args:
        n_shapes, n_hues: number of shapes and of hues.
        per_pair: renderings of each (shape, hue) pair.
        image_size: output side ``H = W``.
        primitives: (min, max) primitives per shape.
        jitter: scale of the per-image position, size and rotation jitter (0: none).
        noise: pixel noise.
        class_offset: shapes and hues are generated from ``seed + class_offset``; disjoint offsets
            give disjoint shapes and different hues (training / test classes).
        seed: random seed.

    Returns:
        A :class:`TwoFactorImages` of ``n_shapes * n_hues * per_pair`` images, ordered shape-major,
        then hue, then rendering.

    Raises:
        ValueError / TypeError: a count not a positive int, ``jitter`` or ``noise`` not a finite
            number >= 0, ``primitives`` not (min, max) positive ints with min <= max, a negative
            ``seed`` or ``class_offset``.
    """
    n_shapes, n_hues = (
        check_positive_int(n_shapes, "n_shapes"),
        check_positive_int(n_hues, "n_hues"),
    )
    per_pair, image_size = (
        check_positive_int(per_pair, "per_pair"),
        check_positive_int(image_size, "image_size"),
    )
    jitter, noise = check_float(jitter, "jitter", low=0.0), check_float(noise, "noise", low=0.0)
    for name, v in (("seed", seed), ("class_offset", class_offset)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    p_lo, p_hi = (check_positive_int(v, "primitives") for v in primitives)
    if p_lo > p_hi:
        raise ValueError(f"primitives must be (min, max) with min <= max, got {tuple(primitives)}")
    g_obj = torch.Generator().manual_seed(10_007 * (seed + 1) + class_offset + 5)
    obj = _objects(n_shapes, g_obj, p_lo, p_hi)
    value = 0.45 + 0.55 * torch.rand(n_shapes, obj["kind"].shape[1], generator=g_obj)
    hue_values = (torch.rand(1, generator=g_obj) + torch.arange(n_hues) / n_hues) % 1.0
    g = torch.Generator().manual_seed(seed * 7919 + 29 + class_offset)
    shapes = torch.arange(n_shapes).repeat_interleave(n_hues * per_pair)
    hues = torch.arange(n_hues).repeat_interleave(per_pair).repeat(n_shapes)
    n = shapes.numel()
    rot = (torch.rand(n, generator=g) - 0.5) * 0.5 * jitter
    scale = 1.35 * (1.0 + (torch.rand(n, generator=g) - 0.5) * 0.3 * jitter)
    shift = (torch.rand(n, 2, generator=g) - 0.5) * 0.2 * jitter
    lin = torch.linspace(-1, 1, image_size)
    py, px = torch.meshgrid(lin, lin, indexing="ij")
    qx, qy = px[None] - shift[:, 0, None, None], py[None] - shift[:, 1, None, None]
    c, s = torch.cos(-rot)[:, None, None], torch.sin(-rot)[:, None, None]
    ux = (c * qx - s * qy) / scale[:, None, None]
    uy = (s * qx + c * qy) / scale[:, None, None]
    if paint not in ("object", "background"):
        raise ValueError(f"paint must be 'object' or 'background', got {paint!r}")
    if paint == "object":
        img = torch.full((n, 3, image_size, image_size), 0.82) + 0.05 * torch.rand(
            n, 1, 1, 1, generator=g
        )
    else:
        bg = _hsv_to_rgb(
            hue_values[hues], torch.full((n,), 0.6), 0.8 + 0.1 * torch.rand(n, generator=g)
        )
        img = bg[:, :, None, None].expand(n, 3, image_size, image_size).clone()
    px_per_unit = image_size / 2
    for k in range(obj["kind"].shape[1]):
        act = obj["active"][shapes, k]
        cx, cy = obj["centre"][shapes, k, 0], obj["centre"][shapes, k, 1]
        size, a = obj["size"][shapes, k], obj["angle"][shapes, k]
        ca, sa = torch.cos(-a)[:, None, None], torch.sin(-a)[:, None, None]
        dx, dy = ux - cx[:, None, None], uy - cy[:, None, None]
        vx = (ca * dx - sa * dy) / size[:, None, None]
        vy = (sa * dx + ca * dy) / size[:, None, None]
        sd = _sdf(obj["kind"][shapes, k], vx, vy) * (size * scale * px_per_unit)[:, None, None]
        m = (torch.sigmoid(-sd / 0.6) * act[:, None, None])[:, None]
        if paint == "object":
            col = _hsv_to_rgb(hue_values[hues], torch.full((n,), 0.85), value[shapes, k])[
                :, :, None, None
            ]
        else:
            col = (0.6 * value[shapes, k] - 0.25)[:, None, None, None].expand(n, 3, 1, 1)
        img = img * (1 - m) + col * m
    img = (img + noise * torch.randn(img.shape, generator=g)).clamp(0, 1)
    return TwoFactorImages(img, shapes, hues, hue_values)


def write_image_folder(images: torch.Tensor, root: str | Path, names: Sequence[str]) -> list[Path]:
    """Write ``(N, 3, H, W)`` images in ``[0, 1]`` as PNG files ``root/<name>``; returns the paths.

    Raises:
        ValueError / TypeError: ``images`` not a finite floating ``(N, 3, H, W)`` tensor, or not one
            name per image.
    """
    root = Path(root)
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be (N, 3, H, W), got {tuple(getattr(images, 'shape', ()))}")
    if not images.is_floating_point():
        raise TypeError(f"images must be floating in [0, 1], got dtype {images.dtype}")
    check_finite(images, "images")
    if len(names) != images.shape[0]:
        raise ValueError(f"names has {len(names)} entries for {images.shape[0]} images")
    arr = (
        (images.detach().cpu().clamp(0, 1) * 255)
        .round()
        .to(torch.uint8)
        .permute(0, 2, 3, 1)
        .numpy()
    )
    out = []
    for a, name in zip(arr, names, strict=True):
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(a).save(p)
        out.append(p)
    return out


def write_alegoria_folder(
    data: MultiSourceImages, root: str | Path, distractors: MultiSourceImages | None = None
) -> Path:
    """Write an ALEGORIA-style folder (``annotations.csv`` + ``images/``) from rendered images.

    Collections are the source names; classes ``object_<k>``; attributes use the Table 3.9 codes
    (``representation`` 1 for drawings, ``color`` 0 colour / 1 greyscale / 2 monochrome: sepia,
    cyanotype).
    Distractors get an empty class.

    Returns:
        The path of ``annotations.csv``.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    parts = [(data, False)] + ([(distractors, True)] if distractors is not None else [])
    for part, is_distractor in parts:
        names = [f"images/{'d' if is_distractor else 'q'}{i:05d}.png" for i in range(len(part))]
        write_image_folder(part.images, root, names)
        for i, name in enumerate(names):
            src = part.source_names[int(part.domains[i])]
            rows.append(
                {
                    "image": name,
                    "class": "" if is_distractor else f"object_{int(part.labels[i])}",
                    "collection": src,
                    "scale": int(part.attributes["scale"][i]),
                    "illumination": int(part.attributes["illumination"][i]),
                    "vertical_orientation": int(part.attributes["vertical_orientation"][i]),
                    "representation": 1 if src == "drawing" else 0,
                    "alterations": int(part.attributes["border"][i]),
                    "color": {
                        "colour": 0,
                        "greyscale": 1,
                        "drawing": 1,
                        "sepia": 2,
                        "cyanotype": 2,
                    }[src],
                }
            )
    path = root / "annotations.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path
