"""Tests of rank_lab.metrics.rotated_iou: rotated-box and convex-polygon IoU by polygon clipping.

The polygon library shapely is a test dependency (exact reference); a high-resolution
rasterisation written here is a second, dependency-free reference.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.metrics.rotated_iou import (
    boxes_to_polygons,
    convex_intersection_area,
    polygon_area,
    polygon_iou,
    polygon_iou_matrix,
    rotated_iou,
    rotated_iou_matrix,
)


def random_boxes(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b1 = torch.cat(
        [
            torch.rand(n, 2, generator=g, dtype=torch.float64),
            0.05 + 0.5 * torch.rand(n, 2, generator=g, dtype=torch.float64),
            (torch.rand(n, 1, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi,
        ],
        1,
    )
    b2 = b1.clone()
    b2[:, :2] += 0.1 * torch.randn(n, 2, generator=g, dtype=torch.float64)
    b2[:, 2:4] *= torch.exp(0.3 * torch.randn(n, 2, generator=g, dtype=torch.float64))
    b2[:, 4] += torch.randn(n, generator=g, dtype=torch.float64)
    return b1, b2


def raster_iou(p: np.ndarray, q: np.ndarray, res: int = 1000) -> float:
    """IoU of two convex polygons by counting pixel centres of a res x res grid over their bbox."""
    pts = np.concatenate([p, q])
    lo, hi = pts.min(0), pts.max(0)
    xs = lo[0] + (np.arange(res) + 0.5) / res * (hi[0] - lo[0])
    ys = lo[1] + (np.arange(res) + 0.5) / res * (hi[1] - lo[1])
    x, y = np.meshgrid(xs, ys)

    def inside(poly: np.ndarray) -> np.ndarray:
        s = None
        for i in range(len(poly)):
            a, b = poly[i], poly[(i + 1) % len(poly)]
            c = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0])
            s = (c >= 0) if s is None else s & (c >= 0)
        return s

    ip, iq = inside(p), inside(q)
    return float((ip & iq).sum() / max((ip | iq).sum(), 1))


def test_rotated_iou_matches_shapely() -> None:
    shapely = pytest.importorskip("shapely.geometry")
    b1, b2 = random_boxes(2500, 0)  # more than one CPU chunk
    got = rotated_iou(b1, b2)
    p1, p2 = boxes_to_polygons(b1).numpy(), boxes_to_polygons(b2).numpy()
    ref = []
    for a, b in zip(p1, p2, strict=True):
        pa, pb = shapely.Polygon(a), shapely.Polygon(b)
        ref.append(pa.intersection(pb).area / pa.union(pb).area)
    ref = torch.tensor(ref, dtype=torch.float64)
    assert (ref > 0).float().mean() > 0.7 and (ref < 1e-12).any()  # overlapping and disjoint cases
    assert torch.allclose(got, ref, atol=1e-10)


def test_rotated_iou_matches_rasterisation() -> None:
    b1, b2 = random_boxes(12, 1)
    got = rotated_iou(b1, b2).numpy()
    p1, p2 = boxes_to_polygons(b1).numpy(), boxes_to_polygons(b2).numpy()
    ref = np.array([raster_iou(a, b) for a, b in zip(p1, p2, strict=True)])
    assert np.abs(got - ref).max() < 5e-3


def test_hand_worked_values() -> None:
    # two unit squares shifted by 0.5: IoU = 0.5 / 1.5
    b = torch.tensor([[0.0, 0, 1, 1, 0], [0.5, 0, 1, 1, 0]], dtype=torch.float64)
    assert rotated_iou(b[:1], b[1:]).item() == pytest.approx(1 / 3, abs=1e-12)
    # a square and the same square rotated by 45 degrees: intersection is the regular octagon
    sq = torch.tensor([[0.0, 0, 2, 2, 0]], dtype=torch.float64)
    rot = torch.tensor([[0.0, 0, 2, 2, math.pi / 4]], dtype=torch.float64)
    octagon = 8 * (math.sqrt(2) - 1)  # area of the octagon with inradius 1
    assert rotated_iou(sq, rot).item() == pytest.approx(octagon / (8 - octagon), abs=1e-12)
    # contained box: IoU = area ratio
    inner = torch.tensor([[0.1, 0.0, 0.5, 0.4, 0.3]], dtype=torch.float64)
    assert rotated_iou(sq, inner).item() == pytest.approx(0.2 / 4, abs=1e-12)
    # disjoint
    far = torch.tensor([[10.0, 0, 1, 1, 0.2]], dtype=torch.float64)
    assert rotated_iou(sq, far).item() == 0.0


def test_axis_aligned_agrees_with_interval_formula() -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.rand(200, 4, generator=g, dtype=torch.float64)
    b = torch.rand(200, 4, generator=g, dtype=torch.float64)
    a[:, 2:] += 0.05
    b[:, 2:] += 0.05
    ix = (
        torch.minimum(a[:, 0] + a[:, 2] / 2, b[:, 0] + b[:, 2] / 2)
        - torch.maximum(a[:, 0] - a[:, 2] / 2, b[:, 0] - b[:, 2] / 2)
    ).clamp_min(0)
    iy = (
        torch.minimum(a[:, 1] + a[:, 3] / 2, b[:, 1] + b[:, 3] / 2)
        - torch.maximum(a[:, 1] - a[:, 3] / 2, b[:, 1] - b[:, 3] / 2)
    ).clamp_min(0)
    inter = ix * iy
    ref = inter / (a[:, 2] * a[:, 3] + b[:, 2] * b[:, 3] - inter)
    z = torch.zeros(200, 1, dtype=torch.float64)
    assert torch.allclose(rotated_iou(torch.cat([a, z], 1), torch.cat([b, z], 1)), ref, atol=1e-12)


box = st.tuples(
    st.floats(-2, 2),
    st.floats(-2, 2),
    st.floats(0.05, 2),
    st.floats(0.05, 2),
    st.floats(-math.pi, math.pi),
)


@settings(max_examples=60, deadline=None)
@given(box, box, st.floats(-math.pi, math.pi), st.floats(-3, 3), st.floats(-3, 3))
def test_iou_properties(a: tuple, b: tuple, phi: float, tx: float, ty: float) -> None:
    ba = torch.tensor([a], dtype=torch.float64)
    bb = torch.tensor([b], dtype=torch.float64)
    iou = rotated_iou(ba, bb).item()
    assert 0.0 <= iou <= 1.0 + 1e-12
    assert rotated_iou(bb, ba).item() == pytest.approx(iou, abs=1e-9)  # symmetric
    assert rotated_iou(ba, ba).item() == pytest.approx(1.0, abs=1e-9)  # identity
    # the same rectangle written as (w, h, t + pi) and (h, w, t + pi/2)
    flip = ba.clone()
    flip[0, 4] += math.pi
    swap = ba[:, [0, 1, 3, 2, 4]].clone()
    swap[0, 4] += math.pi / 2
    assert rotated_iou(flip, bb).item() == pytest.approx(iou, abs=1e-9)
    assert rotated_iou(swap, bb).item() == pytest.approx(iou, abs=1e-9)

    # invariance under a rigid motion of both boxes
    def move(x: torch.Tensor) -> torch.Tensor:
        c, s = math.cos(phi), math.sin(phi)
        out = x.clone()
        out[0, 0] = c * x[0, 0] - s * x[0, 1] + tx
        out[0, 1] = s * x[0, 0] + c * x[0, 1] + ty
        out[0, 4] = x[0, 4] + phi
        return out

    assert rotated_iou(move(ba), move(bb)).item() == pytest.approx(iou, abs=1e-9)


def test_gradcheck_on_a_generic_configuration() -> None:
    b1 = torch.tensor([[0.1, 0.2, 1.0, 0.5, 0.3]], dtype=torch.float64, requires_grad=True)
    b2 = torch.tensor([[0.3, 0.1, 0.8, 0.6, -0.2]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(rotated_iou, (b1, b2), eps=1e-6, atol=1e-6)


def test_matrix_and_polygon_forms_agree() -> None:
    b1, b2 = random_boxes(6, 4)
    m = rotated_iou_matrix(b1, b2[:4])
    assert m.shape == (6, 4)
    for i in range(6):
        for j in range(4):
            assert m[i, j].item() == pytest.approx(
                rotated_iou(b1[i : i + 1], b2[j : j + 1]).item(), abs=1e-12
            )
    p1, p2 = boxes_to_polygons(b1), boxes_to_polygons(b2[:4])
    assert torch.allclose(polygon_iou_matrix(p1, p2), m, atol=1e-12)
    # clockwise vertex order and (N, 8) rows are accepted
    assert torch.allclose(
        polygon_iou(p1.flip(1), p1.reshape(-1, 8)), torch.ones(6, dtype=torch.float64), atol=1e-12
    )
    assert torch.allclose(polygon_area(p1), b1[:, 2] * b1[:, 3], atol=1e-12)
    assert torch.allclose(convex_intersection_area(p1, p1), b1[:, 2] * b1[:, 3], atol=1e-12)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="negative"):
        rotated_iou(torch.tensor([[0.0, 0, -1, 1, 0]]), torch.tensor([[0.0, 0, 1, 1, 0]]))
    with pytest.raises(ValueError, match="shape"):
        rotated_iou(torch.zeros(3, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="rows"):
        rotated_iou(torch.ones(3, 5), torch.ones(2, 5))
    with pytest.raises(ValueError, match="NaN"):
        rotated_iou(torch.tensor([[0.0, float("nan"), 1, 1, 0]]), torch.ones(1, 5))
    dart = torch.tensor([[[0.0, 0], [2, 1], [0, 2], [0.5, 1]]], dtype=torch.float64)  # non-convex
    with pytest.raises(ValueError, match="non-convex"):
        polygon_iou(dart, dart)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rotated_iou_cuda_matches_cpu() -> None:
    b1, b2 = random_boxes(5000, 7)
    assert torch.allclose(rotated_iou(b1.cuda(), b2.cuda()).cpu(), rotated_iou(b1, b2), atol=1e-10)


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_non_finite_geometry_is_refused():
    boxes = torch.tensor([[0.0, 0.0, 2.0, 1.0, 0.3], [1.0, 1.0, 1.0, 1.0, float("nan")]])
    with pytest.raises(ValueError, match="boxes contains 1 NaN"):
        boxes_to_polygons(boxes)  # was NaN corners
    with pytest.raises(ValueError, match="poly contains 1 NaN"):
        polygon_area(torch.tensor([[[0.0, 0.0], [1.0, 0.0], [float("inf"), 1.0]]]))
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        rotated_iou_matrix(
            torch.tensor([[0.0, 0, 1, 1, 0]]), torch.tensor([[0.0, 0, 1, 1, 0]]), chunk_size=0
        )
