"""Tests of rank_lab.metrics.detection: rotated IoU by polygon clipping and the ICDAR'15 protocol.

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

from rank_lab.metrics.detection import (
    boxes_to_polygons,
    convex_intersection_area,
    decode_box6,
    encode_box6,
    icdar15_evaluate,
    match_detections,
    polygon_area,
    polygon_iou,
    polygon_iou_matrix,
    rotated_iou,
    rotated_iou_matrix,
)


def random_boxes(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b1 = torch.cat([torch.rand(n, 2, generator=g, dtype=torch.float64), 0.05 + 0.5 * torch.rand(n, 2, generator=g, dtype=torch.float64),
                    (torch.rand(n, 1, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi], 1)
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
    ix = (torch.minimum(a[:, 0] + a[:, 2] / 2, b[:, 0] + b[:, 2] / 2) - torch.maximum(a[:, 0] - a[:, 2] / 2, b[:, 0] - b[:, 2] / 2)).clamp_min(0)
    iy = (torch.minimum(a[:, 1] + a[:, 3] / 2, b[:, 1] + b[:, 3] / 2) - torch.maximum(a[:, 1] - a[:, 3] / 2, b[:, 1] - b[:, 3] / 2)).clamp_min(0)
    inter = ix * iy
    ref = inter / (a[:, 2] * a[:, 3] + b[:, 2] * b[:, 3] - inter)
    z = torch.zeros(200, 1, dtype=torch.float64)
    assert torch.allclose(rotated_iou(torch.cat([a, z], 1), torch.cat([b, z], 1)), ref, atol=1e-12)


box = st.tuples(
    st.floats(-2, 2), st.floats(-2, 2), st.floats(0.05, 2), st.floats(0.05, 2), st.floats(-math.pi, math.pi)
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
            assert m[i, j].item() == pytest.approx(rotated_iou(b1[i : i + 1], b2[j : j + 1]).item(), abs=1e-12)
    p1, p2 = boxes_to_polygons(b1), boxes_to_polygons(b2[:4])
    assert torch.allclose(polygon_iou_matrix(p1, p2), m, atol=1e-12)
    # clockwise vertex order and (N, 8) rows are accepted
    assert torch.allclose(polygon_iou(p1.flip(1), p1.reshape(-1, 8)), torch.ones(6, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(polygon_area(p1), b1[:, 2] * b1[:, 3], atol=1e-12)
    assert torch.allclose(convex_intersection_area(p1, p1), b1[:, 2] * b1[:, 3], atol=1e-12)


def test_encode_decode_round_trip() -> None:
    b = torch.tensor([[50.0, 20.0, 30.0, 10.0, 0.4], [10.0, 90.0, 5.0, 2.0, -1.2]], dtype=torch.float64)
    enc = encode_box6(b, (100, 200))
    assert torch.allclose(enc[:, :4], torch.tensor([[0.5, 0.1, 0.3, 0.05], [0.1, 0.45, 0.05, 0.01]], dtype=torch.float64))
    assert torch.allclose(decode_box6(enc, (100, 200)), b)
    assert torch.allclose(decode_box6(enc * torch.tensor([1, 1, 1, 1, 3.0, 3.0], dtype=torch.float64), (100, 200)), b)


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


def brute_icdar15(gt: list[np.ndarray], det: list[np.ndarray], dc: list[np.ndarray]) -> tuple[float, float, float]:
    """Independent re-implementation of the official ICDAR'15 script's logic with shapely."""
    from shapely.geometry import Polygon

    matched = n_gt = n_det = 0
    for g, d, c in zip(gt, det, dc, strict=True):
        gp = [Polygon(x) for x in g]
        dp = [Polygon(x) for x in d]
        det_dc = set()
        for j, p in enumerate(dp):
            for i in np.flatnonzero(c):
                if p.area > 0 and gp[i].intersection(p).area / p.area > 0.5:
                    det_dc.add(j)
                    break
        g_used, d_used = set(), set()
        for i, q in enumerate(gp):
            for j, p in enumerate(dp):
                if i in g_used or j in d_used or c[i] or j in det_dc:
                    continue
                if q.intersection(p).area / q.union(p).area > 0.5:
                    g_used.add(i)
                    d_used.add(j)
                    matched += 1
        n_gt += int((~c).sum())
        n_det += len(dp) - len(det_dc)
    r = matched / n_gt if n_gt else 0.0
    p = matched / n_det if n_det else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def test_icdar15_hand_example_with_dont_care() -> None:
    sq = lambda x, y, w, h: torch.tensor([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], dtype=torch.float64)  # noqa: E731
    gt = torch.stack([sq(0, 0, 10, 4), sq(20, 0, 10, 4), sq(40, 0, 10, 4)])
    dont_care = torch.tensor([False, False, True])
    det = torch.stack([sq(1, 0, 10, 4), sq(41, 0, 9, 4), sq(60, 0, 5, 5)])  # match, on ###, false positive
    r = icdar15_evaluate([gt], [det], [dont_care])
    assert r["matched"] == 1 and r["n_gt"] == 2 and r["n_det"] == 2
    assert r["recall"] == 0.5 and r["precision"] == 0.5 and r["f1"] == 0.5
    assert r["per_image"][0]["det_dont_care"] == [False, True, False]
    # an image without ground truth: recall 1, precision 0 with detections, 1 without
    r2 = icdar15_evaluate([torch.zeros(0, 4, 2)], [det[:1]])
    assert r2["per_image"][0]["recall"] == 1.0 and r2["per_image"][0]["precision"] == 0.0
    assert icdar15_evaluate([torch.zeros(0, 8)], [torch.zeros(0, 8)])["per_image"][0]["precision"] == 1.0


def test_greedy_versus_maximum_matching() -> None:
    iou = torch.tensor([[0.9, 0.6], [0.7, 0.1]])
    assert match_detections(iou) == [(0, 0)]  # official greedy: GT 0 takes detection 0 first
    assert sorted(match_detections(iou, matching="maximum")) == [(0, 1), (1, 0)]
    assert match_detections(iou, gt_ignore=torch.tensor([True, False])) == [(1, 0)]
    with pytest.raises(ValueError, match="matching"):
        match_detections(iou, matching="hungarian")


def test_icdar15_matches_independent_shapely_implementation() -> None:
    pytest.importorskip("shapely")
    rng = np.random.default_rng(0)
    gts, dets, dcs = [], [], []
    for _ in range(15):
        n = int(rng.integers(0, 6))
        g = torch.tensor(np.c_[rng.uniform(0, 100, (n, 2)), rng.uniform(10, 30, (n, 1)), rng.uniform(4, 10, (n, 1)), rng.uniform(-0.5, 0.5, (n, 1))])
        d = g[rng.permutation(n)[: max(n - 1, 0)]].clone()
        d[:, :2] += torch.tensor(rng.normal(0, 3, (len(d), 2)))
        d = torch.cat([d, torch.tensor(np.c_[rng.uniform(0, 100, (2, 2)), rng.uniform(10, 30, (2, 1)), rng.uniform(4, 10, (2, 1)), np.zeros((2, 1))])])
        gts.append(boxes_to_polygons(g))
        dets.append(boxes_to_polygons(d))
        dcs.append(torch.tensor(rng.random(n) < 0.2))
    r = icdar15_evaluate(gts, dets, dcs)
    p, rec, f = brute_icdar15([g.numpy() for g in gts], [d.numpy() for d in dets], [c.numpy() for c in dcs])
    assert (r["precision"], r["recall"], r["f1"]) == pytest.approx((p, rec, f), abs=1e-12)
    assert 0 < r["f1"] < 1


def test_icdar15_input_checks() -> None:
    with pytest.raises(ValueError, match="images"):
        icdar15_evaluate([torch.zeros(1, 4, 2)], [])
    with pytest.raises(ValueError, match="empty"):
        icdar15_evaluate([], [])
    with pytest.raises(ValueError, match="gt_dont_care"):
        icdar15_evaluate([torch.rand(2, 5)], [torch.rand(1, 5)], [torch.zeros(3, dtype=torch.bool)])


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
    with pytest.raises(ValueError, match="boxes contains 1 NaN"):
        encode_box6(boxes)
    with pytest.raises(ValueError, match="poly contains 1 NaN"):
        polygon_area(torch.tensor([[[0.0, 0.0], [1.0, 0.0], [float("inf"), 1.0]]]))
    with pytest.raises(ValueError, match="image_size must be > 0"):
        encode_box6(boxes[:1], image_size=(0.0, 3.0))  # was a division by zero
    with pytest.raises(ValueError, match="min_size must be > 0"):
        decode_box6(encode_box6(boxes[:1]), min_size=0.0)


def test_matching_inputs_are_checked():
    iou = torch.tensor([[0.7, 0.2], [0.1, 0.8]])
    assert match_detections(iou) == [(0, 0), (1, 1)]
    with pytest.raises(ValueError, match="iou contains 1 NaN"):
        match_detections(torch.tensor([[float("nan"), 0.2], [0.1, 0.8]]))  # a NaN IoU was silently "no match"
    with pytest.raises(ValueError, match=r"iou must have shape \(G, D\)"):
        match_detections(iou[0])  # was "not enough values to unpack"
    with pytest.raises(ValueError, match=r"det_ignore must have shape \(2,\)"):
        match_detections(iou, det_ignore=torch.tensor([False, True, False]))
    with pytest.raises(ValueError, match="threshold must be <= 1"):
        match_detections(iou, threshold=1.5)
    with pytest.raises(ValueError, match="iou_threshold must be >= 0"):
        icdar15_evaluate([boxes_to_polygons(torch.tensor([[0.0, 0, 1, 1, 0]]))], [torch.zeros(0, 4, 2)], iou_threshold=-0.5)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        rotated_iou_matrix(torch.tensor([[0.0, 0, 1, 1, 0]]), torch.tensor([[0.0, 0, 1, 1, 0]]), chunk_size=0)
