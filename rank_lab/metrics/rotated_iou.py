"""Rotated-box and convex-polygon IoU by exact clipping (Sec. 3.3.3 of the Patel thesis).

Chapter 3 of the Patel thesis (seed 003) post-tunes a rotated text detector (RRPN) with a learned
surrogate of the IoU of *rotated* boxes (LS-IoU); this module computes that IoU exactly, batched:

* :func:`rotated_iou` / :func:`rotated_iou_matrix` for boxes ``(cx, cy, w, h, theta)``
  (:func:`boxes_to_polygons` gives their corners);
* :func:`polygon_iou` / :func:`polygon_iou_matrix` / :func:`convex_intersection_area` for convex
  polygons such as quadrilaterals ``(4, 2)``.

The intersection of two convex polygons is computed by Sutherland-Hodgman clipping (the subject
is clipped by each edge of the other polygon), vectorised over the batch with a fixed vertex
capacity, and its area by the shoelace formula. The result is exact up to floating point, and
differentiable almost everywhere under autograd (useful to check a surrogate's gradients). The
ICDAR'15 protocol that uses it is in :mod:`rank_lab.metrics.detection`.
"""

from __future__ import annotations

import torch

from rank_lab._validation import (
    as_tensor,
    check_finite,
    check_positive_int,
)

_CPU_CHUNK = 1024

__all__ = [
    "boxes_to_polygons",
    "polygon_area",
    "convex_intersection_area",
    "polygon_iou",
    "polygon_iou_matrix",
    "rotated_iou",
    "rotated_iou_matrix",
]


def boxes_to_polygons(boxes: torch.Tensor) -> torch.Tensor:
    """Corners of rotated boxes.

    Args:
        boxes: ``(..., 5)`` rows ``(cx, cy, w, h, theta)``; ``theta`` in radians rotates the box's
            width axis from the x axis towards the y axis.

    Returns:
        ``(..., 4, 2)`` corners in counter-clockwise order (positive shoelace area for
        ``w, h > 0`` in an x-right / y-up frame; in image coordinates this is clockwise on screen).
    """
    boxes = as_tensor(boxes, "boxes")
    if boxes.shape[-1] != 5:
        raise ValueError(
            f"boxes must have shape (..., 5) = (cx, cy, w, h, theta), got {tuple(boxes.shape)}"
        )
    if not boxes.is_floating_point():
        boxes = boxes.double()
    check_finite(boxes, "boxes")
    cx, cy, w, h, t = boxes.unbind(-1)
    c, s = torch.cos(t), torch.sin(t)
    dx = torch.stack([-w, w, w, -w], -1) / 2
    dy = torch.stack([-h, -h, h, h], -1) / 2
    x = cx[..., None] + dx * c[..., None] - dy * s[..., None]
    y = cy[..., None] + dx * s[..., None] + dy * c[..., None]
    return torch.stack([x, y], -1)


def shoelace_area(poly: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Signed shoelace area of polygons (positive for counter-clockwise vertices), unchecked.

    The area of the Sutherland-Hodgman clipping result, ``1/2 sum_i (x_i y_{i+1} - y_i x_{i+1})``
    (the IoU of rotated boxes, Sec. 3.3.3 of the Patel thesis); no input check (internal helper).

    Args:
        poly: ``(..., K, 2)`` vertices.
        mask: ``(..., K)`` bool, the valid vertices first (None: all K are valid).

    Returns:
        ``(...)`` signed areas.
    """
    k = poly.shape[-2]
    if mask is None:
        nxt = torch.roll(poly, -1, dims=-2)
        return 0.5 * (poly[..., 0] * nxt[..., 1] - poly[..., 1] * nxt[..., 0]).sum(-1)
    n = mask.sum(-1, keepdim=True)
    idx = torch.arange(k, device=poly.device).expand_as(mask)
    nxt_idx = torch.where(idx + 1 < n, idx + 1, torch.zeros_like(idx))
    nxt = poly.gather(-2, nxt_idx[..., None].expand_as(poly))
    cross = poly[..., 0] * nxt[..., 1] - poly[..., 1] * nxt[..., 0]
    return 0.5 * (cross * mask).sum(-1)


def polygon_area(poly: torch.Tensor) -> torch.Tensor:
    """Unsigned shoelace area of simple polygons ``(..., K, 2)`` -> ``(...)``."""
    poly = as_tensor(poly, "poly")
    if poly.ndim < 2 or poly.shape[-1] != 2:
        raise ValueError(f"poly must have shape (..., K, 2), got {tuple(poly.shape)}")
    poly = poly if poly.is_floating_point() else poly.double()
    check_finite(poly, "poly")
    return shoelace_area(poly).abs()


def _orient_ccw(poly: torch.Tensor) -> torch.Tensor:
    """Reverse the vertex order of clockwise polygons so every polygon has positive area."""
    flip = shoelace_area(poly) < 0
    return torch.where(flip[..., None, None], poly.flip(-2), poly)


def _clip(
    poly: torch.Tensor, mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor, cap: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One Sutherland-Hodgman step: keep the part of each polygon left of the line ``a -> b``.

    A convex polygon crosses a line at most twice, so clipping adds at most one vertex; ``cap``
    (the number of vertex slots returned) only has to be one more than the input's.
    """
    k = poly.shape[1]
    n = mask.sum(1, keepdim=True)
    idx = torch.arange(k, device=poly.device).expand_as(mask)
    nxt_idx = torch.where(idx + 1 < n, idx + 1, torch.zeros_like(idx))
    q = poly.gather(1, nxt_idx[..., None].expand_as(poly))
    e = (b - a)[:, None, :]
    s_p = e[..., 0] * (poly[..., 1] - a[:, None, 1]) - e[..., 1] * (poly[..., 0] - a[:, None, 0])
    s_q = e[..., 0] * (q[..., 1] - a[:, None, 1]) - e[..., 1] * (q[..., 0] - a[:, None, 0])
    in_p, in_q = s_p >= 0, s_q >= 0
    crossing = mask & (in_p != in_q)
    denom = torch.where(crossing, s_p - s_q, torch.ones_like(s_p))
    t = torch.where(crossing, s_p / denom, torch.zeros_like(s_p))
    inter = poly + t[..., None] * (q - poly)
    cand = torch.stack([inter, q], 2).reshape(poly.shape[0], 2 * k, 2)
    cmask = torch.stack([crossing, mask & in_q], 2).reshape(poly.shape[0], 2 * k)
    # Compact the kept candidates to the front (order preserved) with a scatter; the discarded
    # ones and any overflow land in a dump slot that is cut off.
    pos = torch.cumsum(cmask, 1) - 1
    pos = torch.where(cmask & (pos < cap), pos, torch.full_like(pos, cap))
    out = torch.zeros(poly.shape[0], cap + 1, 2, dtype=poly.dtype, device=poly.device)
    out = out.scatter(1, pos[..., None].expand(-1, -1, 2), cand)
    new_n = cmask.sum(1, keepdim=True).clamp_max(cap)
    new_mask = torch.arange(cap, device=poly.device)[None] < new_n
    return out[:, :cap], new_mask


def ccw_intersection_area(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Intersection area of pairs of counter-clockwise convex polygons, unchecked.

    Sutherland-Hodgman clipping of ``p`` by every edge of ``q``, then the shoelace area (the IoU
    of rotated boxes, Sec. 3.3.3 of the Patel thesis); no input check (internal helper: the
    public :func:`convex_intersection_area` checks and orients its inputs). On the CPU the batch is
    processed in chunks of ``_CPU_CHUNK`` pairs: the working set then stays in cache, which is
    several times faster than one pass over a large batch.

    Args:
        p: ``(N, K, 2)`` convex polygons, counter-clockwise.
        q: ``(N, K', 2)`` convex polygons, counter-clockwise, paired row by row with ``p``.

    Returns:
        ``(N,)`` areas ``>= 0``.
    """
    if p.device.type == "cpu" and p.shape[0] > _CPU_CHUNK:
        return torch.cat(
            [
                _intersection_area_chunk(p[i : i + _CPU_CHUNK], q[i : i + _CPU_CHUNK])
                for i in range(0, p.shape[0], _CPU_CHUNK)
            ]
        )
    return _intersection_area_chunk(p, q)


def _intersection_area_chunk(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    n, kp = p.shape[0], p.shape[1]
    poly = p
    mask = torch.ones(n, kp, dtype=torch.bool, device=p.device)
    kq = q.shape[1]
    for i in range(kq):
        poly, mask = _clip(poly, mask, q[:, i], q[:, (i + 1) % kq], min(kp + i + 1, kp + kq))
    return shoelace_area(poly, mask).clamp_min(0)


def _check_polys(p: object, name: str) -> torch.Tensor:
    p = as_tensor(p, name)
    if p.ndim == 2 and p.shape[-1] == 8:
        p = p.reshape(-1, 4, 2)
    if p.ndim != 3 or p.shape[-1] != 2 or p.shape[1] < 3:
        raise ValueError(
            f"{name} must have shape (N, K, 2) (or (N, 8) quads), got {tuple(p.shape)}"
        )
    if not p.is_floating_point():
        p = p.double()
    check_finite(p, name)
    return p


def _check_convex(p: torch.Tensor, name: str, tol: float = 1e-9) -> None:
    e = torch.roll(p, -1, 1) - p
    e2 = torch.roll(e, -1, 1)
    cross = e[..., 0] * e2[..., 1] - e[..., 1] * e2[..., 0]
    scale = (e.norm(dim=-1) * e2.norm(dim=-1)).clamp_min(1e-300)
    bad = ((cross / scale) < -tol).any(1)
    if bool(bad.any()):
        raise ValueError(
            f"{name} holds {int(bad.sum())} non-convex polygon(s) (e.g. index "
            f"{int(bad.nonzero()[0])}); the clipping IoU needs convex polygons (use "
            "icdar15_evaluate, which takes convex hulls)"
        )


def _convex_pair(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``N`` pairs of polygons checked (shapes, convexity) and oriented counter-clockwise."""
    p, q = _check_polys(p, "p"), _check_polys(q, "q")
    if p.shape[0] != q.shape[0]:
        raise ValueError(f"p has {p.shape[0]} polygons but q has {q.shape[0]}")
    p, q = _orient_ccw(p), _orient_ccw(q.to(p.dtype))
    _check_convex(p, "p")
    _check_convex(q, "q")
    return p, q


def convex_intersection_area(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Area of ``p ∩ q`` for ``N`` pairs of convex polygons ``(N, K, 2)`` (any vertex order)."""
    p, q = _convex_pair(p, q)
    return ccw_intersection_area(p, q)


def polygon_iou(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """IoU of ``N`` pairs of convex polygons (e.g. quadrilaterals ``(N, 4, 2)`` or ``(N, 8)``).

    Returns:
        ``(N,)`` IoU in ``[0, 1]``; 0 when the union has zero area.
    """
    p, q = _convex_pair(p, q)
    inter = ccw_intersection_area(p, q)
    union = shoelace_area(p) + shoelace_area(q) - inter
    return torch.where(
        union > 0, inter / union.clamp_min(torch.finfo(p.dtype).tiny), torch.zeros_like(inter)
    )


def polygon_iou_matrix(p: torch.Tensor, q: torch.Tensor, chunk_size: int = 65536) -> torch.Tensor:
    """IoU of every polygon of ``p (N, K, 2)`` with every polygon of ``q (M, K', 2)`` -> ``(N, M)``.

    ``N = 0`` or ``M = 0`` (an image without ground truths or detections) gives an empty matrix.
    ``chunk_size`` pairs are clipped at a time.
    """
    p = _check_polys(p, "p")
    q = _check_polys(q, "q").to(p.dtype)
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    n, m = p.shape[0], q.shape[0]
    if n == 0 or m == 0:
        return torch.zeros(n, m, dtype=p.dtype, device=p.device)
    ii, jj = torch.meshgrid(
        torch.arange(n, device=p.device), torch.arange(m, device=p.device), indexing="ij"
    )
    ii, jj = ii.reshape(-1), jj.reshape(-1)
    out = torch.cat(
        [
            polygon_iou(p[ii[s : s + chunk_size]], q[jj[s : s + chunk_size]])
            for s in range(0, n * m, chunk_size)
        ]
    )
    return out.reshape(n, m)


def _check_boxes(b: object, name: str) -> torch.Tensor:
    b = as_tensor(b, name)
    if b.ndim != 2 or b.shape[-1] != 5:
        raise ValueError(
            f"{name} must have shape (N, 5) = (cx, cy, w, h, theta), got {tuple(b.shape)}"
        )
    if not b.is_floating_point():
        b = b.double()
    check_finite(b, name)
    if bool((b[:, 2:4] < 0).any()):
        raise ValueError(f"{name} has negative widths or heights")
    return b


def rotated_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """IoU of ``N`` pairs of rotated boxes (the metric that LS-IoU approximates, Sec. 3.3.3).

    Args:
        boxes1: ``(N, 5)`` rows ``(cx, cy, w, h, theta)`` with ``w, h >= 0``.
        boxes2: ``(N, 5)``, paired row by row with ``boxes1``.

    Returns:
        ``(N,)`` IoU, differentiable almost everywhere.
    """
    b1, b2 = _check_boxes(boxes1, "boxes1"), _check_boxes(boxes2, "boxes2")
    if b1.shape[0] != b2.shape[0]:
        raise ValueError(f"boxes1 has {b1.shape[0]} rows but boxes2 has {b2.shape[0]}")
    b2 = b2.to(b1.dtype)
    p, q = boxes_to_polygons(b1), boxes_to_polygons(b2)
    inter = ccw_intersection_area(p, q)
    union = b1[:, 2] * b1[:, 3] + b2[:, 2] * b2[:, 3] - inter
    return torch.where(
        union > 0, inter / union.clamp_min(torch.finfo(b1.dtype).tiny), torch.zeros_like(inter)
    )


def rotated_iou_matrix(
    boxes1: torch.Tensor, boxes2: torch.Tensor, chunk_size: int = 65536
) -> torch.Tensor:
    """IoU of every box of ``boxes1 (N, 5)`` with every box of ``boxes2 (M, 5)`` -> ``(N, M)``.

    ``N = 0`` or ``M = 0`` gives an empty matrix; ``chunk_size`` pairs are computed at a time.
    """
    b1, b2 = _check_boxes(boxes1, "boxes1"), _check_boxes(boxes2, "boxes2")
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    n, m = b1.shape[0], b2.shape[0]
    ii = torch.arange(n, device=b1.device).repeat_interleave(m)
    jj = torch.arange(m, device=b1.device).repeat(n)
    if n * m == 0:
        return torch.zeros(n, m, dtype=b1.dtype, device=b1.device)
    out = [
        rotated_iou(b1[ii[s : s + chunk_size]], b2[jj[s : s + chunk_size]])
        for s in range(0, n * m, chunk_size)
    ]
    return torch.cat(out).reshape(n, m)
