"""Procedural images of the LS-IoU task: one text-like rotated bar per image and its box (Patel
thesis, 3.3.3).

The thesis post-tunes the regression branch of a rotated text detector (RRPN on ICDAR'15); the
offline, CPU-sized stand-in of :mod:`rank_lab.learned.boxes` trains on these images:

* :func:`sample_rotated_boxes`: text-like boxes ``(cx, cy, w, h, theta)`` in ``[0, 1]`` coordinates,
  normalised (long side ``w``, ``|theta| < pi/2``);
* :func:`render_box_images`: one striped rotated bar per image, with random contrast, blur, noise
  and a distractor;
* :func:`make_box_dataset`: both, seeded.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from rank_lab._validation import check_float, check_positive_int
from rank_lab.learned._checks import check_boxes, check_generator, check_range, normal, uniform

__all__ = ["sample_rotated_boxes", "render_box_images", "make_box_dataset"]


def sample_rotated_boxes(
    n: int,
    gen: torch.Generator,
    center: tuple[float, float] = (0.3, 0.7),
    width: tuple[float, float] = (0.35, 0.75),
    aspect: tuple[float, float] = (0.2, 0.45),
    max_angle: float = math.pi / 3,
) -> torch.Tensor:
    """``n`` text-like boxes ``(cx, cy, w, h, theta)`` in ``[0, 1]`` coordinates,
    ``h = aspect * w``.

    Args:
        n: number of boxes.
        gen: random generator.
        center: ``(low, high)`` range of ``cx`` and ``cy``.
        width: ``(low, high)`` range of ``w`` (``low > 0``).
        aspect: ``(low, high)`` range of ``h / w`` (``low > 0``).
        max_angle: ``theta`` is uniform in ``[-max_angle, max_angle]`` (``>= 0``).

    Returns:
        ``(n, 5)`` float32 boxes.
    """
    n = check_positive_int(n, "n")
    check_generator(gen)
    center = check_range(center, "center")
    width, aspect = (
        check_range(width, "width", positive=True),
        check_range(aspect, "aspect", positive=True),
    )
    max_angle = check_float(max_angle, "max_angle", low=0)
    u = torch.rand(n, 5, generator=gen, dtype=torch.float64)
    cx = center[0] + (center[1] - center[0]) * u[:, 0]
    cy = center[0] + (center[1] - center[0]) * u[:, 1]
    w = width[0] + (width[1] - width[0]) * u[:, 2]
    h = w * (aspect[0] + (aspect[1] - aspect[0]) * u[:, 3])
    t = (2 * u[:, 4] - 1) * max_angle
    return torch.stack([cx, cy, w, h, t], 1).float()


def render_box_images(
    boxes: torch.Tensor,
    size: int = 32,
    gen: torch.Generator | None = None,
    noise: float = 0.08,
    supersample: int = 2,
) -> torch.Tensor:
    """Render one striped rotated bar per image, ``(N, 1, size, size)`` in ``[0, 1]``.

    Args:
        boxes: ``(N, 5)`` boxes in ``[0, 1]`` image coordinates (x right, y down).
        size: image side in pixels.
        gen: random generator (contrast, stripes, distractor, noise).
        noise: maximum standard deviation of the pixel noise.
        supersample: anti-aliasing factor.
    """
    boxes = check_boxes(boxes)
    size = check_positive_int(size, "size")
    noise = check_float(noise, "noise", low=0)
    supersample = check_positive_int(supersample, "supersample")
    gen = check_generator(gen) if gen is not None else torch.Generator().manual_seed(0)
    if boxes.shape[0] > 2048:  # bounded memory: the super-sampled grids are (n, S', S') floats
        return torch.cat(
            [
                render_box_images(boxes[i : i + 2048], size, gen, noise, supersample)
                for i in range(0, boxes.shape[0], 2048)
            ]
        )
    n = boxes.shape[0]
    s = size * supersample
    dev = boxes.device
    coords = (torch.arange(s, dtype=torch.float32, device=dev) + 0.5) / s
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    cx, cy, w, h, t = (boxes[:, i, None, None].float() for i in range(5))
    dx, dy = xx[None] - cx, yy[None] - cy
    u = dx * torch.cos(t) + dy * torch.sin(t)
    v = -dx * torch.sin(t) + dy * torch.cos(t)
    inside = ((u.abs() <= w / 2) & (v.abs() <= h / 2)).float()
    period = h * (0.5 + 0.5 * uniform(gen, n, 1, 1, device=dev))  # "characters" across the bar
    stripes = 0.6 + 0.4 * (torch.sin(2 * math.pi * u / period) > -0.3).float()
    bg = uniform(gen, n, 1, 1, device=dev)
    fg = torch.where(
        bg > 0.5,
        bg - 0.35 - 0.3 * uniform(gen, n, 1, 1, device=dev),
        bg + 0.35 + 0.3 * uniform(gen, n, 1, 1, device=dev),
    )
    # a distractor: an axis-aligned patch of random size and intensity
    p = uniform(gen, n, 4, 1, 1, device=dev)
    distractor = ((xx[None] - p[:, 0]).abs() < 0.04 + 0.06 * p[:, 2]) & (
        (yy[None] - p[:, 1]).abs() < 0.04 + 0.06 * p[:, 3]
    )
    img = bg + distractor.float() * 0.25 * (1 - 2 * (bg > 0.5).float())
    img = img + (fg - img) * inside * stripes
    img = F.avg_pool2d(img[:, None], supersample)
    sigma = noise * uniform(gen, n, 1, 1, 1, device=dev)
    img = img + sigma * normal(gen, *img.shape, device=dev)
    return img.clamp(0, 1)


def make_box_dataset(
    n: int, size: int = 32, seed: int = 0, **box_kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` procedural images ``(n, 1, size, size)`` and their boxes ``(n, 5)`` (normalised).

    Args:
        n: number of images.
        size: image side in pixels.
        seed: seeds the boxes and the rendering.
        **box_kwargs: forwarded to :func:`sample_rotated_boxes`.
    """
    n, size = check_positive_int(n, "n"), check_positive_int(size, "size")
    gen = torch.Generator().manual_seed(seed)
    boxes = sample_rotated_boxes(n, gen, **box_kwargs)
    return render_box_images(boxes, size, gen), boxes
