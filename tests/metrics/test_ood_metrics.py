"""OOD metrics: hand-worked cases, brute force, sklearn, properties, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, roc_auc_score

from rank_lab.metrics.ood import aupr_in, aupr_out, auroc, evaluate_ood, fpr_at_tpr, ood_metrics

# ------------------------------------------------------------------ brute-force references


def brute_auroc(s_in, s_out, half=True):
    tot = 0.0
    for a in s_in:
        for b in s_out:
            tot += 1.0 if a < b else (0.5 if (a == b and half) else 0.0)
    return tot / (len(s_in) * len(s_out))


def brute_fpr(s_in, s_out, tpr=0.95):
    """Minimum FPR over every threshold t (accept E <= t) whose TPR reaches ``tpr``."""
    best = math.inf
    for t in sorted(set(s_in) | set(s_out)):
        tp = sum(a <= t for a in s_in) / len(s_in)
        if tp >= tpr - 1e-12:
            best = min(best, sum(b <= t for b in s_out) / len(s_out))
    return best


def brute_ap(scores, positive):
    """sum over distinct thresholds t (descending) of (R(t) - R(prev)) * P(t), predicted = score >=
    t."""
    n_pos = sum(positive)
    ap, prev_r = 0.0, 0.0
    for t in sorted(set(scores), reverse=True):
        sel = [p for s, p in zip(scores, positive, strict=True) if s >= t]
        r = sum(sel) / n_pos
        ap += (r - prev_r) * (sum(sel) / len(sel))
        prev_r = r
    return ap


# ------------------------------------------------------------------ hand-worked cases


def test_auroc_hand_worked():
    # out 2.5 beats in {1, 2}; out 0.5 beats nothing: 2 of the 8 pairs
    assert auroc([1.0, 2.0, 3.0, 4.0], [2.5, 0.5]) == pytest.approx(0.25)
    assert auroc([0.0, 1.0, 2.0], [3.0, 4.0]) == 1.0
    assert auroc([3.0, 4.0], [0.0, 1.0, 2.0]) == 0.0


def test_auroc_ties_count_half_and_strict_is_eq_5_8():
    # pairs: (1,1) x2 tied, (1,2) x2 won -> 3/4 with 1/2 per tie, 2/4 strictly (Eq. 5.8)
    assert auroc([1.0, 1.0], [1.0, 2.0]) == pytest.approx(0.75)
    assert auroc([1.0, 1.0], [1.0, 2.0], ties="strict") == pytest.approx(0.5)
    assert auroc([5.0] * 3, [5.0] * 4) == pytest.approx(0.5)


def test_fpr95_hand_worked_exact_and_percentile():
    s_in = list(range(20))  # 0..19; 95 % of 20 = 19 samples -> threshold = 19th smallest = 18
    s_out = [-1.0, 18.0, 18.5, 30.0]
    fpr, thr = fpr_at_tpr(s_in, s_out, return_threshold=True)
    assert thr == 18.0
    assert fpr == pytest.approx(0.5)  # -1 and 18 (tied with the threshold: accepted, Eq. 2.12) pass
    # official code: percentile(0..19, 95) = 18.05 (linear), strict '<'
    fpr_p, thr_p = fpr_at_tpr(s_in, s_out, method="percentile", return_threshold=True)
    assert thr_p == pytest.approx(18.05)
    assert fpr_p == pytest.approx(np.sum(np.array(s_out) < np.percentile(s_in, 95)) / len(s_out))
    assert fpr_at_tpr([0.0, 1.0], [0.5], tpr=0.5) == 0.0  # accept only the lowest ID energy


def test_aupr_hand_worked():
    # descending: 0.8 (OOD), 0.4 (ID), 0.35 (OOD), 0.1 (ID): AP = 0.5 * 1 + 0.5 * 2/3
    assert aupr_out([0.1, 0.4], [0.35, 0.8]) == pytest.approx(0.5 + 0.5 * 2 / 3)
    # ID positive with score -E: order -0.1 (ID), -0.35 (OOD), -0.4 (ID), -0.8: AP = 0.5 * 1 + 0.5 *
    # 2/3
    assert aupr_in([0.1, 0.4], [0.35, 0.8]) == pytest.approx(0.5 + 0.5 * 2 / 3)
    assert aupr_out([0.0, 0.1], [1.0, 2.0]) == 1.0 and aupr_in([0.0, 0.1], [1.0, 2.0]) == 1.0


# ------------------------------------------------------------------ brute force / sklearn (property
# tests)

scores = st.lists(st.integers(-6, 6).map(float), min_size=1, max_size=25)  # small ints: many ties


@settings(max_examples=60, deadline=None)
@given(s_in=scores, s_out=scores)
def test_auroc_matches_brute_force_and_sklearn(s_in, s_out):
    assert auroc(s_in, s_out) == pytest.approx(brute_auroc(s_in, s_out))
    assert auroc(s_in, s_out, ties="strict") == pytest.approx(brute_auroc(s_in, s_out, half=False))
    y = [0] * len(s_in) + [1] * len(s_out)
    assert auroc(s_in, s_out) == pytest.approx(roc_auc_score(y, s_in + s_out))
    assert auroc(s_in, s_out) + auroc(s_out, s_in) == pytest.approx(1.0)  # symmetry with half ties


@settings(max_examples=60, deadline=None)
@given(s_in=scores, s_out=scores, tpr=st.sampled_from([0.5, 0.8, 0.9, 0.95, 1.0]))
def test_fpr_matches_brute_force(s_in, s_out, tpr):
    assert fpr_at_tpr(s_in, s_out, tpr) == pytest.approx(brute_fpr(s_in, s_out, tpr))


@settings(max_examples=60, deadline=None)
@given(s_in=scores, s_out=scores)
def test_aupr_matches_brute_force_and_sklearn(s_in, s_out):
    sc = s_in + s_out
    pos_out = [0] * len(s_in) + [1] * len(s_out)
    assert aupr_out(s_in, s_out) == pytest.approx(brute_ap(sc, pos_out))
    assert aupr_out(s_in, s_out) == pytest.approx(average_precision_score(pos_out, sc))
    pos_in = [1 - p for p in pos_out]
    assert aupr_in(s_in, s_out) == pytest.approx(average_precision_score(pos_in, [-s for s in sc]))


@settings(max_examples=30, deadline=None)
@given(
    s_in=st.lists(st.integers(-40, 40), min_size=2, max_size=30),
    s_out=st.lists(st.integers(-40, 40), min_size=2, max_size=30),
)
def test_invariant_to_increasing_maps_and_bounded(s_in, s_out):
    a, b = torch.tensor(s_in, dtype=torch.float64), torch.tensor(s_out, dtype=torch.float64)
    m1 = ood_metrics(a, b)
    m2 = ood_metrics(a**3 + 2 * a + 7, b**3 + 2 * b + 7)  # strictly increasing (exact on integers)
    for k in m1:
        assert 0.0 <= m1[k] <= 1.0
        assert m1[k] == pytest.approx(m2[k])


def test_sign_convention_higher_is_ood():
    s_in, s_out = torch.zeros(50), torch.ones(50)
    m = ood_metrics(s_in, s_out)
    assert m == {"AUROC": 1.0, "FPR95": 0.0, "AUPR-In": 1.0, "AUPR-Out": 1.0}
    m_rev = ood_metrics(s_out, s_in)  # a confidence passed by mistake gives the worst values
    assert m_rev["AUROC"] == 0.0 and m_rev["FPR95"] == 1.0


def test_evaluate_ood_average_and_keys():
    g = torch.Generator().manual_seed(0)
    s_in = torch.randn(200, generator=g)
    res = evaluate_ood(
        s_in, {"near": torch.randn(100, generator=g) + 0.5, "far": torch.randn(80, generator=g) + 3}
    )
    assert set(res) == {"near", "far", "Average"}
    assert res["far"]["AUROC"] > res["near"]["AUROC"]
    for k in ("AUROC", "FPR95", "AUPR-In", "AUPR-Out"):
        assert res["Average"][k] == pytest.approx((res["near"][k] + res["far"][k]) / 2)
    assert "FPR90" in ood_metrics(s_in, s_in + 1, tpr=0.9)


def test_numpy_and_tensor_inputs_agree_and_are_deterministic():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=300), rng.normal(size=200) + 1
    m_np = ood_metrics(a, b)
    assert m_np == ood_metrics(torch.from_numpy(a), torch.from_numpy(b))
    assert m_np == ood_metrics(a, b)


@pytest.mark.parametrize(
    "bad, err",
    [
        ([], ValueError),
        ([[1.0, 2.0]], ValueError),
        ([1.0, float("nan")], ValueError),
        ([1.0, float("inf")], ValueError),
        ("abc", TypeError),
    ],
)
def test_bad_inputs_raise(bad, err):
    for fn in (auroc, fpr_at_tpr, aupr_in, aupr_out):
        with pytest.raises(err):
            fn(bad, [1.0, 2.0])
        with pytest.raises(err):
            fn([1.0, 2.0], bad)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="ties"):
        auroc([1.0], [2.0], ties="worst")
    with pytest.raises(ValueError, match="tpr"):
        fpr_at_tpr([1.0], [2.0], tpr=0.0)
    with pytest.raises(ValueError, match="tpr"):
        fpr_at_tpr([1.0], [2.0], tpr=1.5)
    with pytest.raises(ValueError, match="method"):
        fpr_at_tpr([1.0], [2.0], method="roc")
    with pytest.raises(ValueError, match="non-empty"):
        evaluate_ood([1.0], {})
    with pytest.raises(ValueError, match="far"):
        evaluate_ood([1.0, 2.0], {"far": [float("nan")]})


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_ood_metrics_name_tpr_and_fpr_method():
    s_in, s_out = torch.tensor([0.1, 0.4, 0.2]), torch.tensor([0.5, 0.9])
    with pytest.raises(ValueError, match="tpr must be a number in"):
        ood_metrics(s_in, s_out, tpr=float("nan"))  # was "cannot convert float NaN to integer"
    with pytest.raises(ValueError, match="fpr_method must be one of"):
        evaluate_ood(s_in, {"a": s_out}, fpr_method="bogus")  # was "method must be ..."
