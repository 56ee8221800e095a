"""Rotated-box IoU by exact convex-polygon clipping, and the ICDAR'15 detection protocol.

Chapter 3 of the Patel thesis (seed 003) post-tunes a rotated text detector (RRPN) with a learned
surrogate of the IoU of *rotated* boxes (LS-IoU) and evaluates it with the ICDAR'15 "Incidental
Scene Text" protocol (Table 3.3: recall, precision, F1). This module provides both, batched:

* :func:`rotated_iou` / :func:`rotated_iou_matrix` for boxes ``(cx, cy, w, h, theta)``;
* :func:`polygon_iou` / :func:`polygon_iou_matrix` for convex quadrilaterals ``(4, 2)``;
* :func:`icdar15_evaluate`: one-to-one matching at IoU > 0.5 with don't-care regions.

The intersection of two convex polygons is computed by Sutherland-Hodgman clipping (the subject
is clipped by each edge of the other polygon), vectorised over the batch with a fixed vertex
capacity, and its area by the shoelace formula. The result is exact up to floating point, and
differentiable almost everywhere under autograd (useful to check a surrogate's gradients).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from rank_lab._validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_float,
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
    "encode_box6",
    "decode_box6",
    "match_detections",
    "icdar15_evaluate",
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
        raise ValueError(f"boxes must have shape (..., 5) = (cx, cy, w, h, theta), got {tuple(boxes.shape)}")
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


def _shoelace(poly: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Signed area of ``(..., K, 2)`` polygons whose valid vertices come first (``mask``)."""
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
    return _shoelace(poly).abs()


def _orient_ccw(poly: torch.Tensor) -> torch.Tensor:
    """Reverse the vertex order of clockwise polygons so every polygon has positive area."""
    flip = _shoelace(poly) < 0
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


def _intersection_area_ccw(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Intersection area of counter-clockwise convex polygons ``p, q`` of shape ``(N, K, 2)``.

    On the CPU the batch is processed in chunks of ``_CPU_CHUNK`` pairs: the working set then
    stays in cache, which is several times faster than one pass over a large batch.
    """
    if p.device.type == "cpu" and p.shape[0] > _CPU_CHUNK:
        return torch.cat([_intersection_area_chunk(p[i : i + _CPU_CHUNK], q[i : i + _CPU_CHUNK]) for i in range(0, p.shape[0], _CPU_CHUNK)])
    return _intersection_area_chunk(p, q)


def _intersection_area_chunk(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    n, kp = p.shape[0], p.shape[1]
    poly = p
    mask = torch.ones(n, kp, dtype=torch.bool, device=p.device)
    kq = q.shape[1]
    for i in range(kq):
        poly, mask = _clip(poly, mask, q[:, i], q[:, (i + 1) % kq], min(kp + i + 1, kp + kq))
    return _shoelace(poly, mask).clamp_min(0)


def _check_polys(p: object, name: str) -> torch.Tensor:
    p = as_tensor(p, name)
    if p.ndim == 2 and p.shape[-1] == 8:
        p = p.reshape(-1, 4, 2)
    if p.ndim != 3 or p.shape[-1] != 2 or p.shape[1] < 3:
        raise ValueError(f"{name} must have shape (N, K, 2) (or (N, 8) quads), got {tuple(p.shape)}")
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
            f"{name} holds {int(bad.sum())} non-convex polygon(s) (e.g. index {int(bad.nonzero()[0])}); "
            "the clipping IoU needs convex polygons (use icdar15_evaluate, which takes convex hulls)"
        )


def convex_intersection_area(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Area of ``p ∩ q`` for ``N`` pairs of convex polygons ``(N, K, 2)`` (any vertex order)."""
    p, q = _check_polys(p, "p"), _check_polys(q, "q")
    if p.shape[0] != q.shape[0]:
        raise ValueError(f"p has {p.shape[0]} polygons but q has {q.shape[0]}")
    p, q = _orient_ccw(p), _orient_ccw(q.to(p.dtype))
    _check_convex(p, "p")
    _check_convex(q, "q")
    return _intersection_area_ccw(p, q)


def polygon_iou(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """IoU of ``N`` pairs of convex polygons (e.g. quadrilaterals ``(N, 4, 2)`` or ``(N, 8)``).

    Returns:
        ``(N,)`` IoU in ``[0, 1]``; 0 when the union has zero area.
    """
    p, q = _check_polys(p, "p"), _check_polys(q, "q")
    if p.shape[0] != q.shape[0]:
        raise ValueError(f"p has {p.shape[0]} polygons but q has {q.shape[0]}")
    p, q = _orient_ccw(p), _orient_ccw(q.to(p.dtype))
    _check_convex(p, "p")
    _check_convex(q, "q")
    inter = _intersection_area_ccw(p, q)
    union = _shoelace(p) + _shoelace(q) - inter
    return torch.where(union > 0, inter / union.clamp_min(torch.finfo(p.dtype).tiny), torch.zeros_like(inter))


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
    ii, jj = torch.meshgrid(torch.arange(n, device=p.device), torch.arange(m, device=p.device), indexing="ij")
    ii, jj = ii.reshape(-1), jj.reshape(-1)
    out = torch.cat([polygon_iou(p[ii[s : s + chunk_size]], q[jj[s : s + chunk_size]]) for s in range(0, n * m, chunk_size)])
    return out.reshape(n, m)


def _check_boxes(b: object, name: str) -> torch.Tensor:
    b = as_tensor(b, name)
    if b.ndim != 2 or b.shape[-1] != 5:
        raise ValueError(f"{name} must have shape (N, 5) = (cx, cy, w, h, theta), got {tuple(b.shape)}")
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
    inter = _intersection_area_ccw(p, q)
    union = b1[:, 2] * b1[:, 3] + b2[:, 2] * b2[:, 3] - inter
    return torch.where(union > 0, inter / union.clamp_min(torch.finfo(b1.dtype).tiny), torch.zeros_like(inter))


def rotated_iou_matrix(boxes1: torch.Tensor, boxes2: torch.Tensor, chunk_size: int = 65536) -> torch.Tensor:
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
    out = [rotated_iou(b1[ii[s : s + chunk_size]], b2[jj[s : s + chunk_size]]) for s in range(0, n * m, chunk_size)]
    return torch.cat(out).reshape(n, m)


def _image_size(image_size: object) -> tuple[float, float]:
    """``(W, H)``: two finite numbers > 0, or raise naming ``image_size``."""
    if not isinstance(image_size, (tuple, list)) or len(image_size) != 2:
        raise TypeError(f"image_size must be a pair (W, H), got {image_size!r}")
    wd, ht = (check_float(v, "image_size", low=0.0, low_open=True) for v in image_size)
    return wd, ht


def encode_box6(boxes: torch.Tensor, image_size: tuple[float, float] = (1.0, 1.0)) -> torch.Tensor:
    """The 6-d box representation of LS-IoU (Sec. 3.3.3): ``(cx/W, cy/H, w/W, h/H, cos t, sin t)``.

    The thesis normalises centre and size "with image dimensions"; we divide x-quantities by
    the width ``W`` and y-quantities by the height ``H`` (its exact convention is not given).

    Args:
        boxes: ``(..., 5)`` rows ``(cx, cy, w, h, theta)`` in pixels.
        image_size: ``(W, H)``.

    Returns:
        ``(..., 6)`` encoding.
    """
    boxes = as_tensor(boxes, "boxes")
    if boxes.shape[-1] != 5:
        raise ValueError(f"boxes must have shape (..., 5), got {tuple(boxes.shape)}")
    if not boxes.is_floating_point():
        boxes = boxes.double()
    check_finite(boxes, "boxes")
    wd, ht = _image_size(image_size)
    cx, cy, w, h, t = boxes.unbind(-1)
    return torch.stack([cx / wd, cy / ht, w / wd, h / ht, torch.cos(t), torch.sin(t)], -1)


def decode_box6(enc: torch.Tensor, image_size: tuple[float, float] = (1.0, 1.0), min_size: float = 1e-6) -> torch.Tensor:
    """Inverse of :func:`encode_box6`; ``(cos, sin)`` need not be unit (``theta = atan2``).

    Sizes are clamped to ``min_size`` (> 0) so that a raw network output always decodes to a box.

    Args:
        enc: ``(..., 6)`` encodings (finite).
        image_size: ``(W, H)``, both > 0.
        min_size: smallest decoded width / height (> 0).

    Returns:
        ``(..., 5)`` boxes ``(cx, cy, w, h, theta)``.
    """
    enc = as_tensor(enc, "enc")
    if enc.shape[-1] != 6:
        raise ValueError(f"enc must have shape (..., 6), got {tuple(enc.shape)}")
    if not enc.is_floating_point():
        enc = enc.double()
    check_finite(enc, "enc")
    min_size = check_float(min_size, "min_size", low=0.0, low_open=True)
    wd, ht = _image_size(image_size)
    cx, cy, w, h, c, s = enc.unbind(-1)
    return torch.stack([cx * wd, cy * ht, (w * wd).clamp_min(min_size), (h * ht).clamp_min(min_size), torch.atan2(s, c)], -1)


def match_detections(
    iou: torch.Tensor,
    gt_ignore: torch.Tensor | None = None,
    det_ignore: torch.Tensor | None = None,
    threshold: float = 0.5,
    matching: str = "greedy",
) -> list[tuple[int, int]]:
    """One-to-one matching of detections to ground truths with ``IoU > threshold``.

    Args:
        iou: ``(G, D)`` finite IoU matrix (integers are cast to float).
        gt_ignore: ``(G,)`` bool, don't-care ground truths (never matched).
        det_ignore: ``(D,)`` bool, don't-care detections (never matched).
        threshold: strict IoU threshold (0.5 in ICDAR'15).
        matching: ``"greedy"`` = the official ICDAR'15 script: ground truths in file order, each
            takes the first unmatched detection (in file order) above the threshold;
            ``"maximum"`` = a maximum-cardinality matching (never fewer matches than greedy).

    Returns:
        List of matched ``(gt_index, det_index)`` pairs (none when ``G = 0`` or ``D = 0``).
    """
    iou = as_tensor(iou, "iou")
    if iou.ndim != 2:
        raise ValueError(f"iou must have shape (G, D), got {tuple(iou.shape)}")
    if not iou.is_floating_point():
        iou = iou.double()
    check_finite(iou, "iou")
    threshold = check_float(threshold, "threshold", low=0.0, high=1.0)
    check_choice(matching, "matching", ("greedy", "maximum"))
    g, d = iou.shape
    gi = _ignore_mask(gt_ignore, g, "gt_ignore", "iou rows (G)")
    di = _ignore_mask(det_ignore, d, "det_ignore", "iou columns (D)")
    ok = (iou.detach().cpu() > threshold) & ~gi[:, None] & ~di[None, :]
    if matching == "greedy":
        pairs, used = [], torch.zeros(d, dtype=torch.bool)
        for i in range(g):
            cand = (ok[i] & ~used).nonzero()
            if len(cand):
                j = int(cand[0])
                used[j] = True
                pairs.append((i, j))
        return pairs
    if matching == "maximum":

        m = maximum_bipartite_matching(csr_matrix(ok.numpy().astype(int)), perm_type="column")
        return [(i, int(j)) for i, j in enumerate(m) if j >= 0]
    raise ValueError(f"matching must be 'greedy' or 'maximum', got {matching!r}")


def _ignore_mask(mask: object, n: int, name: str, what: str) -> torch.Tensor:
    """A ``(n,)`` bool CPU mask (all False for None), or raise naming ``name`` and the other side."""
    if mask is None:
        return torch.zeros(n, dtype=torch.bool)
    m = as_tensor(mask, name, torch.bool).cpu()
    if m.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},): one flag per {what}, got {tuple(m.shape)}")
    return m


def _convex_hull_quads(q: torch.Tensor) -> torch.Tensor:
    """Convex hull of each 4-point polygon, returned as 4 points (a reflex vertex is collapsed)."""
    c = q.mean(1, keepdim=True)
    ang = torch.atan2(q[..., 1] - c[..., 1], q[..., 0] - c[..., 0])
    q = q.gather(1, ang.argsort(1)[..., None].expand_as(q))  # simple, counter-clockwise
    for _ in range(2):
        prv, nxt = torch.roll(q, 1, 1), torch.roll(q, -1, 1)
        e1, e2 = q - prv, nxt - q
        reflex = (e1[..., 0] * e2[..., 1] - e1[..., 1] * e2[..., 0]) < 0
        q = torch.where(reflex[..., None], prv, q)
    return q


def _as_quads(x: object, name: str) -> torch.Tensor:
    t = as_tensor(x, name)
    if not t.is_floating_point():
        t = t.double()
    if t.numel() == 0:
        return t.reshape(0, 4, 2).double()
    if t.ndim == 2 and t.shape[1] == 5:
        return boxes_to_polygons(t)
    if t.ndim == 2 and t.shape[1] == 8:
        t = t.reshape(-1, 4, 2)
    if t.ndim != 3 or t.shape[1:] != (4, 2):
        raise ValueError(f"{name} must be (N, 4, 2) / (N, 8) quads or (N, 5) rotated boxes, got {tuple(t.shape)}")
    check_finite(t, name)
    return t


def icdar15_evaluate(
    gt: Sequence[torch.Tensor],
    det: Sequence[torch.Tensor],
    gt_dont_care: Sequence[torch.Tensor] | None = None,
    *,
    iou_threshold: float = 0.5,
    area_precision_threshold: float = 0.5,
    matching: str = "greedy",
) -> dict[str, object]:
    """ICDAR'15 Incidental Scene Text localisation protocol (Table 3.3 of the Patel thesis).

    Per image, following the official ``script.py`` of the Robust Reading Competition:

    1. ground truths transcribed ``###`` are *don't care* (``gt_dont_care``);
    2. a detection whose intersection with any don't-care region covers more than
       ``area_precision_threshold`` of the detection's own area is don't care too;
    3. the remaining detections and ground truths are matched one-to-one at
       ``IoU > iou_threshold`` (:func:`match_detections`, greedy in file order by default).

    Then recall = matched / #care GT and precision = matched / #care detections, summed over
    all images (micro average), and F1 (the "hmean") = 2PR / (P + R). Departures from the
    official script: polygons are replaced by their convex hulls (the clipping IoU needs convex
    polygons; real ICDAR quads are almost always convex), vertex order is free, and the
    confidence-based AP of the script is not computed.

    Args:
        gt: per image, ``(G_i, 4, 2)`` / ``(G_i, 8)`` quads or ``(G_i, 5)`` rotated boxes.
        det: per image, the detections in the same formats.
        gt_dont_care: per image, ``(G_i,)`` bool; default: none.
        iou_threshold: matching threshold (strict ``>``).
        area_precision_threshold: don't-care filter threshold for detections (strict ``>``).
        matching: ``"greedy"`` (official) or ``"maximum"``.

    Returns:
        ``{"precision", "recall", "f1", "matched", "n_gt", "n_det", "per_image": [...]}``, each
        per-image entry holding its own precision/recall/f1/pairs (image conventions of the
        official script: no care GT gives recall 1 and precision 1 if no care detection else 0).
    """
    if len(gt) != len(det):
        raise ValueError(f"gt has {len(gt)} images but det has {len(det)}")
    if gt_dont_care is not None and len(gt_dont_care) != len(gt):
        raise ValueError(f"gt_dont_care has {len(gt_dont_care)} images but gt has {len(gt)}")
    if len(gt) == 0:
        raise ValueError("gt is empty (no images to evaluate)")
    iou_threshold = check_float(iou_threshold, "iou_threshold", low=0.0, high=1.0)
    area_precision_threshold = check_float(area_precision_threshold, "area_precision_threshold", low=0.0, high=1.0)
    check_choice(matching, "matching", ("greedy", "maximum"))
    matched_sum = n_gt_sum = n_det_sum = 0
    per_image = []
    for k in range(len(gt)):
        g, d = _as_quads(gt[k], f"gt[{k}]"), _as_quads(det[k], f"det[{k}]")
        g_dc = _ignore_mask(None if gt_dont_care is None else gt_dont_care[k], g.shape[0], f"gt_dont_care[{k}]",
                            f"quad of gt[{k}]")
        d_dc = torch.zeros(d.shape[0], dtype=torch.bool)
        pairs: list[tuple[int, int]] = []
        if g.shape[0] and d.shape[0]:
            g, d = _convex_hull_quads(g), _convex_hull_quads(d.to(g.dtype))
            if bool(g_dc.any()):
                dc = g[g_dc]
                dd = d.repeat_interleave(dc.shape[0], 0)
                inter = _intersection_area_ccw(dd, dc.repeat(d.shape[0], 1, 1)).reshape(d.shape[0], dc.shape[0])
                area = _shoelace(d)
                frac = torch.where(area[:, None] > 0, inter / area[:, None].clamp_min(1e-300), torch.zeros_like(inter))
                d_dc = (frac > area_precision_threshold).any(1).cpu()
            iou = polygon_iou_matrix(g, d)
            pairs = match_detections(iou, g_dc, d_dc, iou_threshold, matching)
        n_gt = int((~g_dc).sum())
        n_det = int((~d_dc).sum())
        if n_gt == 0:
            rec, prec = 1.0, (0.0 if n_det > 0 else 1.0)
        else:
            rec = len(pairs) / n_gt
            prec = 0.0 if n_det == 0 else len(pairs) / n_det
        f1 = 0.0 if prec + rec == 0 else 2 * prec * rec / (prec + rec)
        per_image.append({"precision": prec, "recall": rec, "f1": f1, "pairs": pairs, "det_dont_care": d_dc.tolist()})
        matched_sum += len(pairs)
        n_gt_sum += n_gt
        n_det_sum += n_det
    recall = 0.0 if n_gt_sum == 0 else matched_sum / n_gt_sum
    precision = 0.0 if n_det_sum == 0 else matched_sum / n_det_sum
    f1 = 0.0 if recall + precision == 0 else 2 * recall * precision / (recall + precision)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "matched": matched_sum,
        "n_gt": n_gt_sum,
        "n_det": n_det_sum,
        "per_image": per_image,
    }
