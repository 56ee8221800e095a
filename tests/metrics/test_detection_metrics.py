"""Tests of rank_lab.metrics.detection: the LS-IoU box encoding, detection matching and the
ICDAR'15 protocol (against an independent shapely re-implementation of the official script).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rank_lab.metrics.detection import (
    decode_box6,
    encode_box6,
    icdar15_evaluate,
    match_detections,
)
from rank_lab.metrics.rotated_iou import boxes_to_polygons


def test_encode_decode_round_trip() -> None:
    b = torch.tensor(
        [[50.0, 20.0, 30.0, 10.0, 0.4], [10.0, 90.0, 5.0, 2.0, -1.2]], dtype=torch.float64
    )
    enc = encode_box6(b, (100, 200))
    assert torch.allclose(
        enc[:, :4],
        torch.tensor([[0.5, 0.1, 0.3, 0.05], [0.1, 0.45, 0.05, 0.01]], dtype=torch.float64),
    )
    assert torch.allclose(decode_box6(enc, (100, 200)), b)
    assert torch.allclose(
        decode_box6(enc * torch.tensor([1, 1, 1, 1, 3.0, 3.0], dtype=torch.float64), (100, 200)), b
    )


def brute_icdar15(
    gt: list[np.ndarray], det: list[np.ndarray], dc: list[np.ndarray]
) -> tuple[float, float, float]:
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
    def sq(x, y, w, h):
        return torch.tensor([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], dtype=torch.float64)  # noqa: E731

    gt = torch.stack([sq(0, 0, 10, 4), sq(20, 0, 10, 4), sq(40, 0, 10, 4)])
    dont_care = torch.tensor([False, False, True])
    # match, on ###, false positive
    det = torch.stack([sq(1, 0, 10, 4), sq(41, 0, 9, 4), sq(60, 0, 5, 5)])
    r = icdar15_evaluate([gt], [det], [dont_care])
    assert r["matched"] == 1 and r["n_gt"] == 2 and r["n_det"] == 2
    assert r["recall"] == 0.5 and r["precision"] == 0.5 and r["f1"] == 0.5
    assert r["per_image"][0]["det_dont_care"] == [False, True, False]
    # an image without ground truth: recall 1, precision 0 with detections, 1 without
    r2 = icdar15_evaluate([torch.zeros(0, 4, 2)], [det[:1]])
    assert r2["per_image"][0]["recall"] == 1.0 and r2["per_image"][0]["precision"] == 0.0
    assert (
        icdar15_evaluate([torch.zeros(0, 8)], [torch.zeros(0, 8)])["per_image"][0]["precision"]
        == 1.0
    )


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
        g = torch.tensor(
            np.c_[
                rng.uniform(0, 100, (n, 2)),
                rng.uniform(10, 30, (n, 1)),
                rng.uniform(4, 10, (n, 1)),
                rng.uniform(-0.5, 0.5, (n, 1)),
            ]
        )
        d = g[rng.permutation(n)[: max(n - 1, 0)]].clone()
        d[:, :2] += torch.tensor(rng.normal(0, 3, (len(d), 2)))
        d = torch.cat(
            [
                d,
                torch.tensor(
                    np.c_[
                        rng.uniform(0, 100, (2, 2)),
                        rng.uniform(10, 30, (2, 1)),
                        rng.uniform(4, 10, (2, 1)),
                        np.zeros((2, 1)),
                    ]
                ),
            ]
        )
        gts.append(boxes_to_polygons(g))
        dets.append(boxes_to_polygons(d))
        dcs.append(torch.tensor(rng.random(n) < 0.2))
    r = icdar15_evaluate(gts, dets, dcs)
    p, rec, f = brute_icdar15(
        [g.numpy() for g in gts], [d.numpy() for d in dets], [c.numpy() for c in dcs]
    )
    assert (r["precision"], r["recall"], r["f1"]) == pytest.approx((p, rec, f), abs=1e-12)
    assert 0 < r["f1"] < 1


def test_icdar15_input_checks() -> None:
    with pytest.raises(ValueError, match="images"):
        icdar15_evaluate([torch.zeros(1, 4, 2)], [])
    with pytest.raises(ValueError, match="empty"):
        icdar15_evaluate([], [])
    with pytest.raises(ValueError, match="gt_dont_care"):
        icdar15_evaluate([torch.rand(2, 5)], [torch.rand(1, 5)], [torch.zeros(3, dtype=torch.bool)])


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_non_finite_box_encodings_are_refused():
    boxes = torch.tensor([[0.0, 0.0, 2.0, 1.0, 0.3], [1.0, 1.0, 1.0, 1.0, float("nan")]])
    with pytest.raises(ValueError, match="boxes contains 1 NaN"):
        encode_box6(boxes)
    with pytest.raises(ValueError, match="image_size must be > 0"):
        encode_box6(boxes[:1], image_size=(0.0, 3.0))  # was a division by zero
    with pytest.raises(ValueError, match="min_size must be > 0"):
        decode_box6(encode_box6(boxes[:1]), min_size=0.0)


def test_matching_inputs_are_checked():
    iou = torch.tensor([[0.7, 0.2], [0.1, 0.8]])
    assert match_detections(iou) == [(0, 0), (1, 1)]
    with pytest.raises(ValueError, match="iou contains 1 NaN"):
        # a NaN IoU was silently "no match"
        match_detections(torch.tensor([[float("nan"), 0.2], [0.1, 0.8]]))
    with pytest.raises(ValueError, match=r"iou must have shape \(G, D\)"):
        match_detections(iou[0])  # was "not enough values to unpack"
    with pytest.raises(ValueError, match=r"det_ignore must have shape \(2,\)"):
        match_detections(iou, det_ignore=torch.tensor([False, True, False]))
    with pytest.raises(ValueError, match="threshold must be <= 1"):
        match_detections(iou, threshold=1.5)
    with pytest.raises(ValueError, match="iou_threshold must be >= 0"):
        icdar15_evaluate(
            [boxes_to_polygons(torch.tensor([[0.0, 0, 1, 1, 0]]))],
            [torch.zeros(0, 4, 2)],
            iou_threshold=-0.5,
        )
