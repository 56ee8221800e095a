"""Hierarchical metrics (Ramzi thesis ch. 4): hand-worked values from the seeds, the reductions,
Property 1, the PR-area identity, the worst-case tie rule against a brute force over tie orderings,
and the chunked engine route against the explicit per-query functions."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.metrics import average_precision, ndcg, retrieval_metrics
from rank_lab.metrics.hierarchical_metrics import (
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
from rank_lab.metrics.hierarchical_relevance import (
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
        inter = sum(min(lv_order[:n].count(lev), ideal[:n].count(lev)) for lev in range(1, n_levels + 1))
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
    return {"hap": hap / total, "asi": asi / n_pos, "ndcg": dcg / idcg, **{f"ap{lev}": a for lev, a in enumerate(aps, 1)}}


def _tie_orderings(scores: list[float]):
    """Every ordering by non-increasing score (all orders of every tie group)."""
    idx = sorted(range(len(scores)), key=lambda i: -scores[i])
    groups = [list(g) for _, g in itertools.groupby(idx, key=lambda i: scores[i])]
    for perms in itertools.product(*[itertools.permutations(g) for g in groups]):
        yield [i for p in perms for i in p]


# ------------------------------------------------------------------ hand-worked examples (seeds)
def test_lada_example_h_rank_and_h_ap():
    """Figs. 4.3-4.5 and SupRank App. B (Figs. 13-14): H-rank(2) = 5/3 vs 4/3, H-AP 0.78 vs 0.67, AP 0.45."""
    # toy relevances 1 (Lada #2), 2/3 (other Lada), 1/3 (other car), 0 (other vehicle) = levels 3, 2, 1, 0
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
        assert float(average_precision(s, lv == 3)) == pytest.approx(0.45)  # binary AP "0.45" for both


def test_asi_and_severity_hand_examples():
    s = torch.tensor([[5.0, 4, 3, 2, 1]])
    lv = torch.tensor([[1, 3, 2, 0, 3]])
    # SI(1..4) = 0, 1/2, 2/3, 3/4 over N+ = 4
    assert float(average_set_intersection(s, lv, 3)) == pytest.approx((0 + 1 / 2 + 2 / 3 + 3 / 4) / 4)
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
        assert float(h_average_precision(s, binary)) == pytest.approx(float(average_precision(s, binary)), abs=1e-12)
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
    assert ap_per_level(s, lv, 3, no_positive="zero")[0].tolist() == pytest.approx([1.0 if bool((lv >= lev).any()) else 0.0 for lev in (1, 2, 3)])


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
    brute = [_order_metrics([float(r[0, i]) for i in o], [int(lv[0, i]) for i in o], 3) for o in _tie_orderings(s[0].tolist())]
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
            ref = float(r[q, k]) + sum(min(float(r[q, k]), float(r[q, j])) for j in range(9) if j != k and s[q, j] >= s[q, k])
            assert float(hr[q, k]) == pytest.approx(ref)
            assert float(rank[q, k]) == 1 + sum(1 for j in range(9) if j != k and s[q, j] >= s[q, k])


def test_ndcg_h_is_ndcg_with_exponential_gains():
    g = torch.Generator().manual_seed(4)
    lv = torch.randint(0, 3, (4, 10), generator=g)
    lv[:, 0] = 2
    s = torch.randn(4, 10, generator=g)
    assert torch.allclose(hierarchical_ndcg(s, lv), ndcg(s.double(), 2.0 ** lv.double() - 1).double())


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


# ------------------------------------------------------------------ the engine
def _explicit(q, ql, g, gl, exclude_self, ks=(1, 4)):
    s = q @ g.T
    lv = shared_level(ql, gl)
    if exclude_self:
        n = s.shape[0]
        keep = ~torch.eye(n, dtype=torch.bool)
        s, lv = s[keep].view(n, n - 1), lv[keep].view(n, n - 1)
    n_levels = ql.shape[1]
    has = (lv == n_levels).any(1)
    s, lv = s[has], lv[has]
    r = hap_relevance(lv, n_levels)
    out = {
        "H-AP": h_average_precision(s, r).mean(),
        "ASI": average_set_intersection(s, lv, n_levels).mean(),
        "NDCG-h": hierarchical_ndcg(s, lv).mean(),
    }
    apl = ap_per_level(s, lv, n_levels)
    for lev in range(1, n_levels + 1):
        out[f"AP@level{lev}"] = apl[:, lev - 1].mean()
    for k in ks:
        out[f"H-R@{k}"] = h_recall_at_k(s, r, k).mean()
        sev, cnt = mistake_severity(s, lv, n_levels, k)
        out[f"MS@{k}"] = sev.sum() / cnt.sum() if int(cnt.sum()) > 0 else torch.tensor(0.0)  # engine: 0 without mistakes
        out[f"mistakes@{k}"] = cnt.double().mean()
    return {k: float(v) for k, v in out.items()}


@pytest.mark.parametrize("seed", range(3))
def test_engine_hierarchical_route_matches_explicit_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (70, 4), generator=g).double()
    fine = torch.randint(0, 12, (70,), generator=g)
    lab = torch.stack([fine, fine // 3, fine // 6], 1)
    got = retrieval_metrics(x, lab, ks=(1, 4), metrics=("mAP",), hierarchical=True, normalize=False, device="cpu", chunk_size=9)
    ref = _explicit(x, lab, x, lab, True)
    for name, value in ref.items():
        assert got[name] == pytest.approx(value, abs=1e-9), name
    assert got["AP@level3"] == pytest.approx(got["mAP"], abs=1e-9)  # fine-level AP is the binary AP


def test_engine_query_gallery_and_non_monotone_relevance():
    # one query whose coarse set is tiny: rel(coarse) = (1/2) / 1 > rel(fine) = 1 / 4 (Eq. 4.7 is not monotone)
    g = torch.Generator().manual_seed(5)
    gl = torch.tensor([[0, 0]] * 4 + [[1, 0]] + [[2, 1]] * 5)
    gal = torch.randint(-1, 2, (10, 3), generator=g).double()
    ql = torch.tensor([[0, 0], [2, 1]])
    q = torch.randint(-1, 2, (2, 3), generator=g).double()
    got = retrieval_metrics(q, ql, gal, gl, ks=(1, 3), metrics=("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k"),
                            normalize=False, device="cpu")
    ref = _explicit(q, ql, gal, gl, False, ks=(1, 3))
    for name, value in ref.items():
        assert got[name] == pytest.approx(value, abs=1e-9), name


def test_engine_single_level_reduces_to_ap_and_chunking_is_invisible():
    torch.manual_seed(6)
    x, y = torch.randn(90, 5), torch.randint(0, 7, (90,))
    res = retrieval_metrics(x, y, ks=(1,), metrics=("mAP", "H-AP", "AP@level"), device="cpu")
    assert res["H-AP"] == pytest.approx(res["mAP"], abs=1e-6) and res["AP@level1"] == pytest.approx(res["mAP"], abs=1e-6)
    lab = torch.stack([y, y // 3], 1)
    a = retrieval_metrics(x, lab, ks=(1, 5), hierarchical=True, device="cpu", chunk_size=1)
    b = retrieval_metrics(x, lab, ks=(1, 5), hierarchical=True, device="cpu", chunk_size=500)
    assert a == pytest.approx(b)
    per = retrieval_metrics(x, lab, ks=(5,), metrics=("MS@k",), device="cpu", per_query=True)["per_query"]
    assert per["MS@5"].shape == (90,) and per["mistakes@5"].shape == (90,)


def test_engine_hierarchical_bad_inputs():
    x = torch.randn(6, 3)
    with pytest.raises(ValueError, match="levels"):
        retrieval_metrics(x, torch.zeros(6, 2, dtype=torch.long), x, torch.zeros(6, 3, dtype=torch.long), metrics=("H-AP",))
    with pytest.raises(ValueError, match="hap_alpha"):
        retrieval_metrics(x, torch.zeros(6, 2, dtype=torch.long), metrics=("H-AP",), ks=(1,), hap_alpha=0.0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():  # pragma: no cover - run on the GPU machine
    torch.manual_seed(8)
    x, fine = torch.randn(2000, 32), torch.randint(0, 200, (2000,))
    lab = torch.stack([fine, fine // 10, fine // 50], 1)
    a = retrieval_metrics(x, lab, ks=(1, 10), metrics=("R@k", "mAP"), hierarchical=True, device="cpu")
    b = retrieval_metrics(x.cuda(), lab.cuda(), ks=(1, 10), metrics=("R@k", "mAP"), hierarchical=True, device="cuda")
    for name in a:
        assert a[name] == pytest.approx(b[name], abs=1e-4), name


HIER = ("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k")


def _counting_route(monkeypatch, *args, **kwargs):
    """The engine with the previous route (explicit (c, N) level blocks, hierarchical_chunk_metrics)."""
    import rank_lab.metrics.engine as E
    import rank_lab.metrics.hierarchical_route as H

    monkeypatch.setattr(E, "hierarchical_route", H._route_by_counting)
    try:
        return retrieval_metrics(*args, **kwargs)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("n_levels", [1, 2, 3])
@pytest.mark.parametrize("kind", ["tied", "random"])
def test_sorted_route_equals_the_counting_route(monkeypatch, n_levels, kind):
    """Issue 19: the route at scale (permuted gallery, one sort per row, packed higher levels) gives
    the values of the counting route, per query, to float64 rounding; exactly on tied integer data."""
    g = torch.Generator().manual_seed(30 + n_levels)
    n = 400
    fine = torch.randint(0, 40, (n,), generator=g)
    lab = torch.stack([fine // (3**j) for j in range(n_levels)], 1)
    if kind == "tied":
        x = torch.randint(-2, 3, (n, 5), generator=g).double()
    else:
        x = torch.randn(n, 12, generator=g)
    for alpha in (1.0, 4.0, 0.2):  # 0.2: Eq. 4.7 non-monotone for some queries
        kw = dict(ks=(1, 5, 60), metrics=HIER, per_query=True, normalize=kind == "random", hap_alpha=alpha, device="cpu")
        got = retrieval_metrics(x, lab, **kw)["per_query"]
        ref = _counting_route(monkeypatch, x, lab, **kw)["per_query"]
        for name, v in ref.items():
            assert torch.allclose(got[name], v, atol=1e-12, rtol=0), (name, alpha, float((got[name] - v).abs().max()))
        # query / gallery form
        got_q = retrieval_metrics(x[:50], lab[:50], x[50:], lab[50:], **kw)["per_query"]
        ref_q = _counting_route(monkeypatch, x[:50], lab[:50], x[50:], lab[50:], **kw)["per_query"]
        for name, v in ref_q.items():
            assert torch.allclose(got_q[name], v, atol=1e-12, rtol=0), name


def test_sorted_route_values_do_not_depend_on_the_chunking():
    g = torch.Generator().manual_seed(40)
    x, fine = torch.randn(300, 8, generator=g), torch.randint(0, 30, (300,), generator=g)
    lab = torch.stack([fine, fine // 5], 1)
    a = retrieval_metrics(x, lab, ks=(1, 5), metrics=HIER, per_query=True, device="cpu")["per_query"]
    b = retrieval_metrics(x, lab, ks=(1, 5), metrics=HIER, per_query=True, device="cpu", chunk_size=7)["per_query"]
    for name, v in a.items():
        assert torch.equal(v, b[name]), name


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_levels_are_checked_naming_the_argument():
    from rank_lab.metrics.hierarchical_relevance import level_set

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


# ------------------------------------------------------------------ issue 19: the route at scale vs a brute force
def _brute_force_per_query(s: torch.Tensor, lv: torch.Tensor, n_levels: int, alpha: float) -> dict[str, list[float]]:
    """Per query, in plain Python on explicit rows: H-AP (Eq. 4.7 relevance, worst-case order by increasing
    relevance at ties), ASI (Eq. 4.16), NDCG-h (gains 2^l - 1) and AP^(l), ties by increasing level."""
    out: dict[str, list[float]] = {"H-AP": [], "ASI": [], "NDCG-h": [], **{f"AP@level{lvl}": [] for lvl in range(1, n_levels + 1)}}
    for row_s, row_l in zip(s.tolist(), lv.tolist(), strict=True):
        count = {lvl: row_l.count(lvl) for lvl in range(n_levels + 1)}
        rel = [((lvl / n_levels) ** alpha / count[lvl]) if lvl > 0 else 0.0 for lvl in row_l]
        order = sorted(range(len(row_s)), key=lambda j: (-row_s[j], rel[j]))
        r = [rel[j] for j in order]
        hap = sum(sum(min(r[i], r[m]) for i in range(m + 1)) / (m + 1) for m in range(len(r)) if r[m] > 0)
        out["H-AP"].append(hap / sum(r))
        by_level = [row_l[j] for j in sorted(range(len(row_s)), key=lambda j: (-row_s[j], row_l[j]))]
        ideal = sorted(row_l, reverse=True)
        n_pos = sum(1 for x in row_l if x >= 1)
        asi = 0.0
        for n in range(1, n_pos + 1):
            asi += sum(min(by_level[:n].count(lvl), ideal[:n].count(lvl)) for lvl in range(1, n_levels + 1)) / n
        out["ASI"].append(asi / n_pos)
        dcg = sum((2.0**lvl - 1.0) / math.log2(i + 2) for i, lvl in enumerate(by_level))
        idcg = sum((2.0**lvl - 1.0) / math.log2(i + 2) for i, lvl in enumerate(ideal))
        out["NDCG-h"].append(dcg / idcg)
        for lev in range(1, n_levels + 1):
            hits, ap = 0, 0.0
            for i, lvl in enumerate(by_level):
                if lvl >= lev:
                    hits += 1
                    ap += hits / (i + 1)
            out[f"AP@level{lev}"].append(ap / hits)
    return out


@pytest.mark.parametrize("kind", ["random", "clustered", "tied"])
@pytest.mark.parametrize("n_levels", [2, 3])
def test_route_at_scale_equals_a_brute_force_per_query(kind, n_levels):
    """Issue 19: per-query H-AP, ASI, NDCG-h and AP^(l) of the engine's hierarchical route (permuted gallery,
    packed levels, threads) equal a plain-Python brute force on the explicit score rows, with ties, duplicates
    and near-duplicates, self excluded and in query / gallery form."""
    g = torch.Generator().manual_seed(50 + n_levels)
    n = 150
    fine = torch.randint(0, 18, (n,), generator=g)
    lab = torch.stack([fine // (2**j) for j in range(n_levels)], 1)
    if kind == "random":
        x = torch.randn(n, 10, generator=g, dtype=torch.float64)
    elif kind == "clustered":  # tight clusters, exact duplicates and near-duplicates (one grid step apart)
        # on a grid of 1/64: every product and sum is exact in float64, so the explicit rows below and the
        # route's block matmuls give the same scores and the comparison is about the ranking, not the rounding
        x = torch.randn(18, 10, generator=g, dtype=torch.float64)[fine] + 0.05 * torch.randn(n, 10, generator=g, dtype=torch.float64)
        x = torch.round(x * 64) / 64
        x[1::4] = x[0::4]
        x[2::4] = x[0::4][: x[2::4].shape[0]]
        x[2::4, 0] += 1 / 64
    else:  # coarse integers: many exact ties
        x = torch.randint(-1, 2, (n, 4), generator=g).double()
    for alpha in (1.0, 0.3):
        kw = dict(ks=(1,), metrics=("H-AP", "ASI", "NDCG-h", "AP@level"), per_query=True, normalize=False,
                  hap_alpha=alpha, device="cpu", no_positive="skip", chunk_size=16)
        got = retrieval_metrics(x, lab, **kw)["per_query"]
        s, lv = x @ x.T, shared_level(lab, lab)
        keep = ~torch.eye(n, dtype=torch.bool)
        s, lv = s[keep].view(n, n - 1), lv[keep].view(n, n - 1)
        has = (lv >= 1).any(1) & (lv == n_levels).any(1)
        ref = _brute_force_per_query(s[has], lv[has], n_levels, alpha)
        for name, v in ref.items():
            assert torch.allclose(got[name][has], torch.tensor(v, dtype=torch.float64), atol=1e-12, rtol=0), (kind, alpha, name)
        # query / gallery form
        q, ql, gal, gl = x[:40], lab[:40], x[40:], lab[40:]
        got_q = retrieval_metrics(q, ql, gal, gl, **kw)["per_query"]
        s, lv = q @ gal.T, shared_level(ql, gl)
        has = (lv >= 1).any(1) & (lv == n_levels).any(1)
        ref = _brute_force_per_query(s[has], lv[has], n_levels, alpha)
        for name, v in ref.items():
            assert torch.allclose(got_q[name][has], torch.tensor(v, dtype=torch.float64), atol=1e-12, rtol=0), (kind, alpha, name)
