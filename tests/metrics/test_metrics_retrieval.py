"""Exact retrieval metrics: hand-worked values from the seeds, a brute force over tie orderings,
and properties (bounds, invariances)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.metrics import (
    ap_at_k,
    average_precision,
    map_at_r,
    ndcg,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    true_recall_at_k,
    worst_case_order,
)

# ---------------------------------------------------------------- brute force (independent)


def _plain_metrics(rel: list[float], k: int) -> dict[str, float]:
    """Every metric by its textbook definition on one ordered relevance list (binary or graded)."""
    binary = [1.0 if r > 0 else 0.0 for r in rel]
    n_pos = sum(binary)
    hits, prec_sum, prec_r, first = 0.0, 0.0, 0.0, None
    for j, r in enumerate(binary, start=1):
        if r:
            hits += 1
            prec_sum += hits / j
            if j <= n_pos:
                prec_r += hits / j
            if first is None:
                first = j
    top = sum(binary[:k])
    prec_k = sum(sum(binary[:j]) / j for j in range(1, k + 1) if binary[j - 1])
    dcg = sum(g / math.log2(1 + j) for j, g in enumerate(rel, start=1))
    idcg = sum(g / math.log2(1 + j) for j, g in enumerate(sorted(rel, reverse=True), start=1))
    return {
        "ap": prec_sum / n_pos,
        "map_r": prec_r / n_pos,
        "p": top / k,
        "r": float(top > 0),
        "tr": top / min(k, n_pos),
        "ap_k": prec_k / min(k, n_pos),
        "rr": 1.0 / first,
        "ndcg": dcg / idcg,
    }


def _brute_min(scores: list[float], rel: list[float], k: int) -> dict[str, float]:
    """Minimum of each metric over every ordering consistent with the scores (ties permuted)."""
    n = len(scores)
    best: dict[str, float] = {}
    for perm in itertools.permutations(range(n)):
        if any(scores[perm[i]] < scores[perm[i + 1]] for i in range(n - 1)):
            continue
        vals = _plain_metrics([rel[i] for i in perm], k)
        for name, v in vals.items():
            best[name] = min(best.get(name, math.inf), v)
    return best


def _ours(scores: torch.Tensor, rel: torch.Tensor, k: int) -> dict[str, float]:
    binary = rel > 0
    return {
        "ap": float(average_precision(scores, binary)),
        "map_r": float(map_at_r(scores, binary)),
        "p": float(precision_at_k(scores, binary, k)),
        "r": float(recall_at_k(scores, binary, k)),
        "tr": float(true_recall_at_k(scores, binary, k)),
        "ap_k": float(ap_at_k(scores, binary, k)),
        "rr": float(reciprocal_rank(scores, binary)),
        "ndcg": float(ndcg(scores, rel)),
    }


@pytest.mark.parametrize("seed", range(40))
def test_against_brute_force_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    scores = rng.integers(0, 3, n).astype(float)  # many ties
    rel = rng.integers(0, 3, n).astype(float)  # graded gains for NDCG, >0 is relevant
    if rel.sum() == 0:
        rel[rng.integers(0, n)] = 1.0
    k = int(rng.integers(1, n + 1))
    expected = _brute_min(scores.tolist(), rel.tolist(), k)
    got = _ours(torch.tensor(scores)[None], torch.tensor(rel)[None], k)
    for name in expected:
        assert got[name] == pytest.approx(expected[name], abs=1e-9), name


def test_batched_rows_match_single_rows() -> None:
    torch.manual_seed(0)
    scores = torch.randn(7, 30).round(decimals=1)
    targets = torch.rand(7, 30) < 0.3
    targets[:, 0] = True
    batched = average_precision(scores, targets)
    single = torch.cat([average_precision(scores[i], targets[i]) for i in range(7)])
    assert torch.allclose(batched, single)


# ---------------------------------------------------------------- hand-worked values from the seeds


def test_ap_small_example() -> None:
    # positives at positions 1 and 3: (1/1 + 2/3) / 2
    ap = average_precision(torch.tensor([[0.9, 0.8, 0.7, 0.6]]), torch.tensor([[1, 0, 1, 0]]))
    assert float(ap) == pytest.approx((1 + 2 / 3) / 2)


@pytest.mark.parametrize(
    ("top5", "expected"),
    [
        ([1, 1, 1, 1, 1], 1.0),
        ([0, 0, 0, 0, 0], 0.0),
        ([1, 1, 0, 0, 0], 0.4),
        ([0, 0, 1, 1, 1], 0.2867),
    ],
)
def test_gominski_fig_3_15_ap_at_5(top5: list[int], expected: float) -> None:
    """Fig. 3.15 of the Gominski thesis: 5 positives exist, AP@5 looks at the top 5 only."""
    n_missing = 5 - sum(top5)
    rel = top5 + [1] * n_missing + [0] * (5 - n_missing)
    scores = torch.linspace(1.0, 0.0, len(rel))[None]
    got = ap_at_k(scores, torch.tensor(rel)[None], 5)
    assert float(got) == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize(
    ("m", "row"),
    [
        (3, [0.417, 0.167, 0.000]),
        (4, [0.361, 0.194, 0.083, 0.000]),
        (5, [0.321, 0.196, 0.113, 0.050, 0.000]),
    ],
)
def test_gominski_appendix_a_position_of_one_negative(m: int, row: list[float]) -> None:
    """Appendix A (Eq. A.3) of the Gominski thesis: 1 - AP when position p of M holds the
    negative."""
    for p, one_minus_ap in enumerate(row, start=1):
        rel = [1] * m
        rel[p - 1] = 0
        ap = average_precision(torch.linspace(1, 0, m)[None], torch.tensor(rel)[None])
        assert 1 - float(ap) == pytest.approx(one_minus_ap, abs=5e-4)


def test_patel_fig_5_1_true_recall() -> None:
    """Fig. 5.1 of the Patel thesis: recall@4 / recall@8 of four similarity rows, 3 positives.

    The thesis' "recall@k" there is the true recall (#positives in top k / |P|)."""
    rows = [
        (
            [0.940, 0.870, 0.850, 0.800, 0.775, 0.650, 0.570, 0.430, 0.400, 0.320],
            [0, 5, 8],
            1 / 3,
            2 / 3,
        ),
        (
            [0.940, 0.870, 0.850, 0.800, 0.775, 0.774, 0.570, 0.430, 0.400, 0.320],
            [0, 5, 8],
            1 / 3,
            2 / 3,
        ),
        (
            [0.940, 0.870, 0.850, 0.800, 0.790, 0.775, 0.570, 0.430, 0.400, 0.320],
            [0, 4, 8],
            1 / 3,
            2 / 3,
        ),
        (
            [0.940, 0.880, 0.870, 0.850, 0.820, 0.800, 0.775, 0.570, 0.430, 0.320],
            [0, 1, 4],
            2 / 3,
            1.0,
        ),
    ]
    for sims, positives, r4, r8 in rows:
        targets = torch.zeros(1, 10, dtype=torch.bool)
        targets[0, positives] = True
        s = torch.tensor(sims)[None]
        assert float(true_recall_at_k(s, targets, 4)) == pytest.approx(r4)
        assert float(true_recall_at_k(s, targets, 8)) == pytest.approx(r8)
        assert float(recall_at_k(s, targets, 4)) == 1.0  # the recall rate only asks for one hit


def test_ties_worst_case_example() -> None:
    # one negative tied with two positives: worst order N P P -> (1/2 + 2/3) / 2
    ap = average_precision(torch.tensor([[0.5, 0.5, 0.5]]), torch.tensor([[1, 0, 1]]))
    assert float(ap) == pytest.approx((1 / 2 + 2 / 3) / 2)
    # a constant embedding gets the worst AP, not a lucky one
    order = worst_case_order(torch.zeros(1, 4), torch.tensor([[1, 0, 1, 0]]))
    assert order.tolist() == [[1, 3, 0, 2]]


def test_ndcg_hand_worked() -> None:
    gains = torch.tensor([[0.0, 3.0, 1.0]])  # ranked as given: DCG = 3/log2(3) + 1/log2(4)
    scores = torch.tensor([[3.0, 2.0, 1.0]])
    dcg = 3 / math.log2(3) + 1 / 2
    idcg = 3 + 1 / math.log2(3)
    assert float(ndcg(scores, gains)) == pytest.approx(dcg / idcg)
    assert float(ndcg(scores, gains, k=1)) == pytest.approx(0.0)


# ---------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda q: st.integers(2, 25).flatmap(
            lambda n: st.tuples(
                st.lists(
                    st.lists(st.floats(-1, 1, width=32), min_size=n, max_size=n),
                    min_size=q,
                    max_size=q,
                ),
                st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=q, max_size=q),
            )
        )
    )
)
def test_bounds_and_orderings(data: tuple) -> None:
    scores, targets = torch.tensor(data[0]), torch.tensor(data[1])
    targets[:, 0] = True
    ap = average_precision(scores, targets)
    mr = map_at_r(scores, targets)
    assert bool(((ap >= 0) & (ap <= 1 + 1e-6)).all())
    assert bool((mr <= ap + 1e-6).all())  # mAP@R <= AP
    # a strictly increasing map of the scores (exact in float64: scaling by 4) changes nothing
    assert torch.allclose(average_precision(scores.double() * 4, targets).float(), ap)
    # permuting the columns (items) changes nothing
    perm = torch.randperm(scores.shape[1])
    assert torch.allclose(average_precision(scores[:, perm], targets[:, perm]), ap)
    # a perfect ranking gives 1 for every metric
    perfect = targets.float() + 0.0
    assert torch.allclose(average_precision(perfect, targets), torch.ones(len(ap)))
    assert torch.allclose(map_at_r(perfect, targets), torch.ones(len(ap)))
    assert torch.allclose(ndcg(perfect, targets.float()), torch.ones(len(ap)))


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise_clear_errors() -> None:
    s = torch.rand(2, 5)
    t = torch.zeros(2, 5, dtype=torch.bool)
    t[0, 1] = True
    with pytest.raises(ValueError, match="no relevant item"):
        average_precision(s, t)
    assert float(average_precision(s, t, no_positive="zero")[1]) == 0.0
    with pytest.raises(ValueError, match="shape"):
        average_precision(s, t[:, :4])
    with pytest.raises(ValueError, match="NaN or inf"):
        average_precision(torch.tensor([[0.1, float("nan")]]), torch.tensor([[1, 0]]))
    with pytest.raises(ValueError, match="larger than the retrieval set"):
        recall_at_k(s, t, 6)
    with pytest.raises(TypeError, match="k must be a positive int"):
        precision_at_k(s, t, 1.5)
    with pytest.raises(ValueError, match="binary"):
        average_precision(s, torch.full((2, 5), 0.5))
    with pytest.raises(ValueError, match="empty"):
        average_precision(torch.zeros(0, 3), torch.zeros(0, 3))


def test_precision_recall_curve_area_is_ap() -> None:
    from rank_lab.metrics import precision_recall_curve

    torch.manual_seed(4)
    scores = torch.randn(5, 40).round(decimals=1)
    targets = torch.rand(5, 40) < 0.25
    targets[:, 3] = True
    prec, rec = precision_recall_curve(scores, targets)
    steps = torch.diff(rec, dim=1, prepend=torch.zeros(5, 1))
    assert torch.allclose((steps * prec).sum(1), average_precision(scores, targets), atol=1e-6)
    assert torch.allclose(rec[:, -1], torch.ones(5))
