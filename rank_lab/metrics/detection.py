"""The box representation of LS-IoU and the ICDAR'15 detection protocol (Patel thesis ch. 3).

Chapter 3 of the Patel thesis (seed 003) post-tunes a rotated text detector (RRPN) with a learned
surrogate of the IoU of *rotated* boxes (LS-IoU) and evaluates it with the ICDAR'15 "Incidental
Scene Text" protocol (Table 3.3: recall, precision, F1). This module provides:

* :func:`encode_box6` / :func:`decode_box6`: the 6-d box representation of LS-IoU (Sec. 3.3.3);
* :func:`match_detections`: one-to-one matching at IoU > 0.5 with don't-care regions;
* :func:`icdar15_evaluate`: the protocol, per image and pooled.

The IoU itself (rotated boxes and convex polygons, by exact clipping) is in
:mod:`rank_lab.metrics.rotated_iou`.
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
)
from rank_lab.metrics.rotated_iou import (
    boxes_to_polygons,
    ccw_intersection_area,
    polygon_iou_matrix,
    shoelace_area,
)

__all__ = [
    "encode_box6",
    "decode_box6",
    "match_detections",
    "icdar15_evaluate",
]


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


def decode_box6(
    enc: torch.Tensor, image_size: tuple[float, float] = (1.0, 1.0), min_size: float = 1e-6
) -> torch.Tensor:
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
    return torch.stack(
        [
            cx * wd,
            cy * ht,
            (w * wd).clamp_min(min_size),
            (h * ht).clamp_min(min_size),
            torch.atan2(s, c),
        ],
        -1,
    )


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
    """A ``(n,)`` bool CPU mask (all False for None), or raise naming ``name`` and the other
    side."""
    if mask is None:
        return torch.zeros(n, dtype=torch.bool)
    m = as_tensor(mask, name, torch.bool).cpu()
    if m.shape != (n,):
        raise ValueError(
            f"{name} must have shape ({n},): one flag per {what}, got {tuple(m.shape)}"
        )
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
        raise ValueError(
            f"{name} must be (N, 4, 2) / (N, 8) quads or (N, 5) rotated boxes, got {tuple(t.shape)}"
        )
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
    area_precision_threshold = check_float(
        area_precision_threshold, "area_precision_threshold", low=0.0, high=1.0
    )
    check_choice(matching, "matching", ("greedy", "maximum"))
    matched_sum = n_gt_sum = n_det_sum = 0
    per_image = []
    for k in range(len(gt)):
        g, d = _as_quads(gt[k], f"gt[{k}]"), _as_quads(det[k], f"det[{k}]")
        g_dc = _ignore_mask(
            None if gt_dont_care is None else gt_dont_care[k],
            g.shape[0],
            f"gt_dont_care[{k}]",
            f"quad of gt[{k}]",
        )
        d_dc = torch.zeros(d.shape[0], dtype=torch.bool)
        pairs: list[tuple[int, int]] = []
        if g.shape[0] and d.shape[0]:
            g, d = _convex_hull_quads(g), _convex_hull_quads(d.to(g.dtype))
            if bool(g_dc.any()):
                dc = g[g_dc]
                dd = d.repeat_interleave(dc.shape[0], 0)
                inter = ccw_intersection_area(dd, dc.repeat(d.shape[0], 1, 1)).reshape(
                    d.shape[0], dc.shape[0]
                )
                area = shoelace_area(d)
                frac = torch.where(
                    area[:, None] > 0,
                    inter / area[:, None].clamp_min(1e-300),
                    torch.zeros_like(inter),
                )
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
        per_image.append(
            {
                "precision": prec,
                "recall": rec,
                "f1": f1,
                "pairs": pairs,
                "det_dont_care": d_dc.tolist(),
            }
        )
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
