"""Hierarchical metrics (Ramzi thesis ch. 4): hand-worked values from the seeds, the reductions,
Property 1, the PR-area identity, the worst-case tie rule against a brute force over tie orderings
(the engine's route: test_hierarchical_route.py)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.metrics import average_precision, ndcg
from rank_lab.metrics.hierarchy.metrics import (
    ap_per_level,
    average_set_intersection,
    h_ap_from_pr_curve,
    h_average_precision,
    h_precision_at_k,
    h_rank,
    h_recall_at_k,
    hierarchical_ndcg,
    hierarchical_pr_curve,
    mistake_levels,
    mistake_severity,
    weighted_sum_ap,
)
from rank_lab.metrics.hierarchy.relevance import (
    binary_level_relevance,
    hap_relevance,
    hierarchy_table,
    level_counts,
    ndcg_gains,
    relevance_table,
    shared_level,
    weighted_ap_relevance,
)

SETTINGS = settings(max_examples=40, deadline=None)


# ------------------------------------------------------------------ independent brute forces
def _order_metrics(rel_order: list[float], lv_order: list[int], n_levels: int) -> dict[str, float]:
    """Metrics of one explicit ordering, straight from the definitions (positions 1-based)."""
    r = rel_order
    total = sum(r)
    hap = 0.0
    for k in range(len(r)):
        if r[k] > 0:
            hap += sum(min(r[j], r[k]) for j in range(k + 1)) / (k + 1)
    ideal = sorted(lv_order, reverse=True)
    n_pos = sum(1 for v in lv_order if v >= 1)
    asi = 0.0
    for n in range(1, n_pos + 1):
        inter = sum(
            min(lv_order[:n].count(lev), ideal[:n].count(lev)) for lev in range(1, n_levels + 1)
        )
        asi += inter / n
    gains = [2.0**v - 1 for v in lv_order]
    dcg = sum(g / math.log2(2 + i) for i, g in enumerate(gains))
    idcg = sum(g / math.log2(2 + i) for i, g in enumerate(sorted(gains, reverse=True)))
    aps = []
    for lev in range(1, n_levels + 1):
        pos = [v >= lev for v in lv_order]
        hits, acc = 0, 0.0
        for i, p in enumerate(pos):
            if p:
                hits += 1
                acc += hits / (i + 1)
        aps.append(acc / max(sum(pos), 1))
    return {
        "hap": hap / total,
        "asi": asi / n_pos,
        "ndcg": dcg / idcg,
        **{f"ap{lev}": a for lev, a in enumerate(aps, 1)},
    }


def _tie_orderings(scores: list[float]):
    """Every ordering by non-increasing score (all orders of every tie group)."""
    idx = sorted(range(len(scores)), key=lambda i: -scores[i])
    groups = [list(g) for _, g in itertools.groupby(idx, key=lambda i: scores[i])]
    for perms in itertools.product(*[itertools.permutations(g) for g in groups]):
        yield [i for p in perms for i in p]


# ------------------------------------------------------------------ hand-worked examples (seeds)
def test_lada_example_h_rank_and_h_ap():
    """Figs. 4.3-4.5 and SupRank App. B (Figs. 13-14): H-rank(2) = 5/3 vs 4/3, H-AP 0.78 vs 0.67, AP
    0.45."""
    # toy relevances 1 (Lada #2), 2/3 (other Lada), 1/3 (other car), 0 (other vehicle) = levels 3,
    # 2, 1, 0
    top = torch.tensor([[2, 3, 0, 1, 3]])
    bottom = torch.tensor([[1, 3, 0, 1, 3]])
    s = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0]])
    r_top, r_bot = hap_relevance(top, 3, normalize=False), hap_relevance(bottom, 3, normalize=False)
    assert r_top.tolist()[0] == pytest.approx([2 / 3, 1, 0, 1 / 3, 1])
    assert float(h_rank(s, r_top)[0][0, 1]) == pytest.approx(5 / 3)
    assert float(h_rank(s, r_bot)[0][0, 1]) == pytest.approx(4 / 3)
    assert float(h_average_precision(s, r_top)) == pytest.approx(2.35 / 3)  # 0.7833 -> "0.78"
    assert round(float(h_average_precision(s, r_bot)), 2) == 0.67
    for lv in (top, bottom):
        # binary AP "0.45" for both
        assert float(average_precision(s, lv == 3)) == pytest.approx(0.45)


def test_asi_and_severity_hand_examples():
    s = torch.tensor([[5.0, 4, 3, 2, 1]])
    lv = torch.tensor([[1, 3, 2, 0, 3]])
    # SI(1..4) = 0, 1/2, 2/3, 3/4 over N+ = 4
    assert float(average_set_intersection(s, lv, 3)) == pytest.approx(
        (0 + 1 / 2 + 2 / 3 + 3 / 4) / 4
    )
    sev, n = mistake_severity(s, lv, 3, k=4)  # top-4 mistakes: levels 1, 2, 0 -> heights 2, 1, 3
    assert float(sev) == 6.0 and int(n) == 3
    assert mistake_levels(s, lv, 3, k=4).tolist() == [[1, 1, 1, 1]]


def test_relevance_functions_and_tables():
    lv = torch.tensor([[3, 3, 2, 1, 1, 1, 0]])
    r = hap_relevance(lv, 3)  # Eq. 4.7, alpha = 1: level totals 1, 2/3, 1/3
    assert r.tolist()[0] == pytest.approx([1 / 2, 1 / 2, 2 / 3, 1 / 9, 1 / 9, 1 / 9, 0])
    r5 = hap_relevance(lv, 3, alpha=5.0)
    assert float(r5[0, 2]) == pytest.approx((2 / 3) ** 5)
    w = [0.2, 0.3, 0.5]
    rw = weighted_ap_relevance(lv, 3, w)  # sum_{p<=l} w_p / |Omega^{+,p}|, |Omega^{+,.}| = 6, 3, 2
    assert float(rw[0, 0]) == pytest.approx(0.2 / 6 + 0.3 / 3 + 0.5 / 2)
    assert float(rw[0, 3]) == pytest.approx(0.2 / 6)
    assert float(rw.sum()) == pytest.approx(1.0)  # the normaliser of Property 1 is 1 (Eq. B.22)
    assert ndcg_gains(lv).tolist()[0] == [7, 7, 3, 1, 1, 1, 0]
    assert binary_level_relevance(lv, 3).tolist()[0] == [1, 1, 0, 0, 0, 0, 0]
    assert level_counts(lv, 3).tolist() == [[1, 3, 1, 2]]
    assert relevance_table(level_counts(lv, 3), 3, "ndcg").tolist() == [[0, 1, 3, 7]]


def test_shared_level_modes_and_table():
    lab = torch.tensor([[0, 0, 0], [1, 0, 0], [2, 1, 0], [3, 2, 1]])
    assert shared_level(lab[:1], lab).tolist() == [[3, 2, 1, 0]]
    assert torch.equal(shared_level(lab, lab, mode="count"), shared_level(lab, lab))
    homonym = torch.tensor([[5, 7, 0], [6, 7, 1]])  # same middle id under different roots
    assert shared_level(homonym[:1], homonym).tolist() == [[3, 0]]
    assert shared_level(homonym[:1], homonym, mode="count").tolist() == [[3, 1]]
    assert hierarchy_table(torch.tensor([[2, 1], [0, 0], [2, 1]])).tolist() == [[0, 0], [2, 1]]
    with pytest.raises(ValueError, match="not a tree"):
        hierarchy_table(torch.tensor([[2, 1], [2, 0]]))


# ------------------------------------------------------------------ properties
levels_strategy = st.lists(st.integers(0, 3), min_size=3, max_size=9)


@SETTINGS
@given(levels_strategy, st.integers(0, 10_000))
def test_binary_reduction_area_identity_and_scale(levels, seed):
    """L = 1 gives AP; Eq. 4.6 = Eq. 4.3; invariance to a global rescaling; 0 <= H-AP <= 1."""
    g = torch.Generator().manual_seed(seed)
    lv = torch.tensor([levels])
    if not bool((lv > 0).any()):
        lv[0, 0] = 3
    s = torch.randint(0, 4, lv.shape, generator=g).double()  # many ties
    binary = (lv == 3).double()
    if bool(binary.any()):
        assert float(h_average_precision(s, binary)) == pytest.approx(
            float(average_precision(s, binary)), abs=1e-12
        )
    r = hap_relevance(lv, 3)
    hap = float(h_average_precision(s, r))
    assert 0.0 <= hap <= 1.0 + 1e-12
    assert float(h_ap_from_pr_curve(s, r)) == pytest.approx(hap, abs=1e-12)
    assert float(h_average_precision(s, 7.5 * r)) == pytest.approx(hap, abs=1e-12)
    hp, hr = hierarchical_pr_curve(s, r)
    assert float(hr[0, -1]) == pytest.approx(1.0)
    assert float(h_recall_at_k(s, r, 2)) == pytest.approx(float(hr[0, 1]))
    assert float(h_precision_at_k(s, r, 1)) == pytest.approx(float(hp[0, 0]))


@SETTINGS
@given(levels_strategy)
def test_perfect_ranking_gives_one(levels):
    lv = torch.tensor([levels])
    if not bool((lv > 0).any()):
        lv[0, 0] = 2
    s = lv.double() + 0.0  # scores sorted by level (ties only within a level)
    for alpha in (1.0, 3.0):
        r = hap_relevance(lv, 3, alpha)
        if bool((r[lv > 0] >= 0).all()) and _monotone(r, lv):
            assert float(h_average_precision(s, r)) == pytest.approx(1.0)
    assert float(average_set_intersection(s, lv, 3)) == pytest.approx(1.0)
    assert float(hierarchical_ndcg(s, lv)) == pytest.approx(1.0)
    assert ap_per_level(s, lv, 3, no_positive="zero")[0].tolist() == pytest.approx(
        [1.0 if bool((lv >= lev).any()) else 0.0 for lev in (1, 2, 3)]
    )


def _monotone(r: torch.Tensor, lv: torch.Tensor) -> bool:
    """Relevance non-decreasing with the level (then sorting by level sorts by relevance)."""
    pairs = sorted(zip(lv[0].tolist(), r[0].tolist(), strict=True))
    return all(b[1] >= a[1] - 1e-15 for a, b in itertools.pairwise(pairs) if b[0] > a[0])


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_property_1_weighted_sum_of_ap(seed, n_levels):
    """H-AP with the relevance of Property 1 equals sum_l w_l AP^(l) (Eq. 4.9, SupRank App. B)."""
    g = torch.Generator().manual_seed(seed)
    lv = torch.randint(0, n_levels + 1, (3, 12), generator=g)
    lv[:, 0] = n_levels  # every Omega^{+,p} is non-empty
    s = torch.randn(3, 12, generator=g, dtype=torch.float64)
    w = torch.rand(n_levels, generator=g, dtype=torch.float64) + 0.05
    w = w / w.sum()
    hap = h_average_precision(s, weighted_ap_relevance(lv, n_levels, w))
    assert torch.allclose(hap, weighted_sum_ap(s, lv, n_levels, w), atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_worst_case_ties_equal_brute_force_minimum(seed):
    """Every metric equals its minimum (severity: its maximum) over all orderings of the ties."""
    g = torch.Generator().manual_seed(seed)
    n = 7
    lv = torch.randint(0, 4, (1, n), generator=g)
    lv[0, 0] = 3
    s = torch.randint(0, 3, (1, n), generator=g).double()
    r = hap_relevance(lv, 3)
    brute = [
        _order_metrics([float(r[0, i]) for i in o], [int(lv[0, i]) for i in o], 3)
        for o in _tie_orderings(s[0].tolist())
    ]
    worst = {name: min(b[name] for b in brute) for name in brute[0]}
    assert float(h_average_precision(s, r)) == pytest.approx(worst["hap"], abs=1e-12)
    assert float(average_set_intersection(s, lv, 3)) == pytest.approx(worst["asi"], abs=1e-12)
    assert float(hierarchical_ndcg(s, lv)) == pytest.approx(worst["ndcg"], abs=1e-12)
    apl = ap_per_level(s, lv, 3)[0]
    for lev in (1, 2, 3):
        assert float(apl[lev - 1]) == pytest.approx(worst[f"ap{lev}"], abs=1e-12)
    sev, _ = mistake_severity(s, lv, 3, k=3)
    heights = []
    for o in _tie_orderings(s[0].tolist()):
        heights.append(sum(3 - int(lv[0, i]) for i in o[:3] if int(lv[0, i]) < 3))
    assert float(sev) == max(heights)


def test_h_rank_matches_eq_4_2_without_ties():
    g = torch.Generator().manual_seed(3)
    s = torch.randn(2, 9, generator=g, dtype=torch.float64)
    r = torch.rand(2, 9, generator=g, dtype=torch.float64) * (torch.rand(2, 9, generator=g) > 0.3)
    hr, rank = h_rank(s, r)
    for q in range(2):
        for k in range(9):
            if r[q, k] == 0:
                continue
            ref = float(r[q, k]) + sum(
                min(float(r[q, k]), float(r[q, j]))
                for j in range(9)
                if j != k and s[q, j] >= s[q, k]
            )
            assert float(hr[q, k]) == pytest.approx(ref)
            assert float(rank[q, k]) == 1 + sum(
                1 for j in range(9) if j != k and s[q, j] >= s[q, k]
            )


def test_ndcg_h_is_ndcg_with_exponential_gains():
    g = torch.Generator().manual_seed(4)
    lv = torch.randint(0, 3, (4, 10), generator=g)
    lv[:, 0] = 2
    s = torch.randn(4, 10, generator=g)
    assert torch.allclose(
        hierarchical_ndcg(s, lv), ndcg(s.double(), 2.0 ** lv.double() - 1).double()
    )


def test_ndcg_h_names_its_levels():
    """Float levels (x1e20 overflowed the gains to NaN), levels beyond float32's gains, negative
    levels and queries without a positive are refused naming ``levels`` (issue 26, bad-input
    matrix)."""
    s = torch.randn(2, 5, dtype=torch.float64)
    lv = torch.tensor([[2, 0, 1, 0, 0], [1, 1, 0, 0, 0]])
    with pytest.raises(TypeError, match="levels"):
        hierarchical_ndcg(s, lv.double() * 1e20)
    with pytest.raises(ValueError, match="levels"):
        hierarchical_ndcg(s, lv * 1000)
    with pytest.raises(ValueError, match="levels"):
        hierarchical_ndcg(s, -lv)
    empty = lv.clone()
    empty[1] = 0
    with pytest.raises(ValueError, match="no relevant item in levels"):
        hierarchical_ndcg(s, empty)
    got = hierarchical_ndcg(s, empty, no_positive="zero")
    assert float(got[1]) == 0.0 and float(got[0]) == float(hierarchical_ndcg(s[:1], lv[:1])[0])
    high = torch.tensor([[119, 0, 0, 0, 0]])  # 2^119 - 1: the largest level five items allow
    assert float(hierarchical_ndcg(torch.tensor([[0.9, 0.1, 0.2, 0.3, 0.4]]), high)[0]) == 1.0


def test_bad_inputs():
    s = torch.randn(1, 4)
    with pytest.raises(ValueError, match="n_levels"):
        average_set_intersection(s, torch.tensor([[0, 1, 5, 1]]), 3)
    with pytest.raises(ValueError, match="sum to 1"):
        weighted_ap_relevance(torch.tensor([[0, 1, 2, 1]]), 2, [0.5, 0.6])
    with pytest.raises(ValueError, match="> 0"):
        weighted_ap_relevance(torch.tensor([[0, 1, 2, 1]]), 2, [0.0, 1.0])
    with pytest.raises(ValueError, match="no relevant item"):
        h_average_precision(s, torch.zeros(1, 4))
    assert float(h_average_precision(s, torch.zeros(1, 4), no_positive="zero")) == 0.0
    with pytest.raises(ValueError, match="shape"):
        h_average_precision(s, torch.ones(1, 3))
    with pytest.raises(TypeError, match="integers"):
        ap_per_level(s, torch.ones(1, 4) * 0.5, 2)
    with pytest.raises(ValueError, match="levels"):
        shared_level(torch.zeros(2, 2, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="NaN"):
        h_average_precision(torch.tensor([[float("nan"), 1.0]]), torch.ones(1, 2))


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_levels_are_checked_naming_the_argument():
    from rank_lab.metrics.hierarchy.relevance import level_set

    with pytest.raises(ValueError, match="levels is empty"):
        level_counts(torch.zeros(0, 4, dtype=torch.long), 2)  # was an empty (0, 3) table
    with pytest.raises(TypeError, match="levels must hold integers"):
        ndcg_gains(torch.tensor([[0.0, float("nan")]]))  # was silently cast to an integer
    with pytest.raises(TypeError, match="level must be an int >= 0"):
        level_set(torch.tensor([[0, 1, 2]]), 1.5)  # was int(1.5) = 1
    with pytest.raises(ValueError, match="levels must lie in"):
        binary_level_relevance(torch.tensor([[0, 3]]), 2)
    with pytest.raises(ValueError, match="n_levels must be >= 1"):
        relevance_table(torch.ones(2, 3), 0)  # was "counts must have shape (Q, 1)"
    with pytest.raises(ValueError, match="counts contains 1 NaN"):
        relevance_table(torch.tensor([[1.0, float("nan"), 1.0]]), 2)
