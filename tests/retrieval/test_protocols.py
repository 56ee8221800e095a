"""Evaluation protocols: revisited Oxford/Paris (Easy/Medium/Hard, junk, R1M) and the cross-source
protocol (mAP, per-domain / per-attribute mAP, P1, mP1, qP1, mAPD; multi-label; Student-t CIs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.metrics import average_precision
from rank_lab.retrieval.cross_source import cross_domain_evaluate, grouped_map, multilabel_targets
from rank_lab.retrieval.protocols import (
    revisited_evaluate,
    revisited_masks,
    trapezoid_ap_from_positions,
)
from rank_lab.stats import mean_ci

# ----------------------------------------------------------------------------- cross-source


def test_p1_apd_toy_example_of_the_thesis() -> None:
    """Fig. 4.2 / digest §3.4: query red; list [red+, blue-, red+, green-, blue+, green+] -> P1 = 5,
    APD = 1.75."""
    red, blue, green = 0, 1, 2
    scores = torch.tensor([[6.0, 5, 4, 3, 2, 1]])
    pos = torch.tensor([[True, False, True, False, True, True]])
    rep = cross_domain_evaluate(
        scores, pos, torch.tensor([red]), torch.tensor([red, blue, red, green, blue, green])
    )
    assert rep.p1.tolist() == [5.0]
    assert rep.apd.tolist() == [1.75]
    assert rep.summary["mP1"] == 5.0 and rep.summary["qP1"] == 5.0 and rep.summary["mAPD"] == 1.75
    # AP of positives at 1, 3, 5, 6 (eq. 3.1): (1 + 2/3 + 3/5 + 4/6) / 4
    assert rep.ap.item() == pytest.approx((1 + 2 / 3 + 3 / 5 + 4 / 6) / 4)
    assert rep.summary["mAP"] == pytest.approx(100 * (1 + 2 / 3 + 3 / 5 + 4 / 6) / 4)


def test_worst_case_ties_for_inter_domain_measures() -> None:
    # a same-domain and a cross-domain positive tied at the top: the cross one is placed second
    scores = torch.tensor([[1.0, 1.0, 0.5]])
    pos = torch.tensor([[True, True, False]])
    rep = cross_domain_evaluate(scores, pos, torch.tensor([0]), torch.tensor([0, 1, 1]))
    assert rep.p1.item() == 2.0
    assert rep.apd.item() == pytest.approx(2 - 1.5)
    # a negative tied with the cross positive comes first (worst case)
    rep2 = cross_domain_evaluate(
        torch.tensor([[1.0, 0.7, 0.7]]),
        torch.tensor([[True, True, False]]),
        torch.tensor([0]),
        torch.tensor([0, 1, 1]),
    )
    assert rep2.p1.item() == 3.0


def _brute(
    scores: np.ndarray, pos: np.ndarray, qd: np.ndarray, gd: np.ndarray, self_idx: np.ndarray
):
    """Explicit sorting with the worst-case tie order (negatives, then same-domain positives, then
    cross)."""
    aps, p1s, apds = [], [], []
    for i in range(len(scores)):
        keep = np.ones(scores.shape[1], dtype=bool)
        if self_idx[i] >= 0:
            keep[self_idx[i]] = False
        s, p, cross = scores[i][keep], pos[i][keep], (gd != qd[i])[keep]
        # for AP and the mean of all positives: negatives first among ties
        rank_key = np.lexsort((p.astype(int), -s))
        rel = p[rank_key]
        positions = np.nonzero(rel)[0] + 1
        if len(positions) == 0:
            aps.append(np.nan)
            p1s.append(np.nan)
            apds.append(np.nan)
            continue
        aps.append(np.mean(np.arange(1, len(positions) + 1) / positions))
        tier = np.where(p & cross, 2, np.where(p, 1, 0))
        order = np.lexsort((tier, -s))
        cross_pos = np.nonzero((p & cross)[order])[0] + 1
        if len(cross_pos) == 0:
            p1s.append(np.nan)
            apds.append(np.nan)
        else:
            p1s.append(cross_pos[0])
            apds.append(cross_pos.mean() - positions.mean())
    return np.array(aps), np.array(p1s, dtype=float), np.array(apds, dtype=float)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_levels=st.integers(2, 6))
def test_cross_domain_matches_brute_force_with_ties(seed: int, n_levels: int) -> None:
    rng = np.random.default_rng(seed)
    n_q, n = 7, 15
    scores = rng.integers(0, n_levels, size=(n_q, n)).astype(float)  # many ties
    labels = rng.integers(0, 3, size=n)
    qidx = rng.choice(n, n_q, replace=False)
    qidx[-1] = -1  # one query outside the base
    qlab = np.where(qidx >= 0, labels[qidx], rng.integers(0, 3))
    pos = qlab[:, None] == labels[None]
    gd = rng.integers(0, 3, size=n)
    qd = np.where(qidx >= 0, gd[qidx], 0)
    rep = cross_domain_evaluate(
        torch.from_numpy(scores),
        torch.from_numpy(pos),
        torch.from_numpy(qd),
        torch.from_numpy(gd),
        self_index=torch.from_numpy(qidx),
        chunk_size=3,
    )
    ap, p1, apd = _brute(scores, pos, qd, gd, qidx)
    np.testing.assert_allclose(rep.ap.numpy(), ap, equal_nan=True)
    np.testing.assert_allclose(rep.p1.numpy(), p1, equal_nan=True)
    np.testing.assert_allclose(rep.apd.numpy(), apd, equal_nan=True)
    ok = ~np.isnan(p1)
    if ok.any():
        assert rep.summary["mP1"] == pytest.approx(np.median(p1[ok]))
        assert rep.summary["qP1"] == pytest.approx(np.percentile(p1[ok], 25))
        assert rep.summary["mAPD"] == pytest.approx(apd[ok].mean())


def test_cross_domain_ap_equals_average_precision_without_self() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 4))
    s = torch.from_numpy(x @ x.T)
    y = torch.from_numpy(rng.integers(0, 4, 30))
    dom = torch.from_numpy(rng.integers(0, 2, 30))
    rep = cross_domain_evaluate(s, y[:, None] == y[None], dom, dom, self_index=torch.arange(30))
    keep = ~torch.eye(30, dtype=torch.bool)
    ref = average_precision(s[keep].view(30, 29), (y[:, None] == y[None])[keep].view(30, 29))
    torch.testing.assert_close(rep.ap, ref.double())


def test_groups_and_skipped_queries() -> None:
    scores = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    pos = torch.tensor([[False, True, False], [True, True, False], [False, False, False]])
    rep = cross_domain_evaluate(
        scores,
        pos,
        torch.tensor([0, 1, 0]),
        torch.tensor([0, 0, 1]),
        query_groups={"scale": torch.tensor([0, 1, -1])},
        group_names={"scale": {0: "close", 1: "far"}},
    )
    assert rep.summary["n_skipped"] == 1.0 and torch.isnan(rep.ap[2])
    assert rep.summary["mAP[scale=close]"] == pytest.approx(50.0)  # positive at position 2
    assert rep.summary["mAP[scale=far]"] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)
    assert rep.summary["n_inter"] == 1.0  # query 0: its positive is from its own domain
    assert grouped_map(torch.tensor([0.5, float("nan"), 1.0]), torch.tensor([1, 1, 2])) == {
        "1": 50.0,
        "2": 100.0,
    }


def test_multilabel_targets() -> None:
    single = multilabel_targets(torch.tensor([0, 2]), torch.tensor([0, 1, 2, 0]))
    assert single.tolist() == [[True, False, False, True], [False, False, True, False]]
    hot_q = torch.tensor([[1, 0, 1]])
    hot_g = torch.tensor([[0, 0, 1], [0, 1, 0], [1, 1, 0]])
    assert multilabel_targets(hot_q, hot_g).tolist() == [[True, False, True]]
    sets = multilabel_targets([{0, 4}, set()], [{4}, {1, 2}, {0}])
    assert sets.tolist() == [[True, False, True], [False, False, False]]
    with pytest.raises(ValueError, match="multi-hot"):
        multilabel_targets(torch.tensor([[2, 0]]), torch.tensor([[1, 0]]))


def test_mean_ci_student_t() -> None:
    m, h = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m == 3.0
    assert h == pytest.approx(2.7764451 * np.std([1, 2, 3, 4, 5], ddof=1) / np.sqrt(5))
    vals = np.arange(25, dtype=float)
    _, h25 = mean_ci(vals)
    assert h25 == pytest.approx(2.0638986 * vals.std(ddof=1) / 5)
    with pytest.raises(ValueError, match="at least 2"):
        mean_ci([1.0])
    with pytest.raises(ValueError, match="NaN"):
        mean_ci([1.0, float("nan")])


def test_cross_domain_errors() -> None:
    s = torch.zeros(2, 3)
    p = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="query_domains"):
        cross_domain_evaluate(s, p, torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="both be"):
        cross_domain_evaluate(
            s, torch.zeros(2, 2, dtype=torch.bool), torch.zeros(2), torch.zeros(3)
        )
    with pytest.raises(ValueError, match="NaN"):
        cross_domain_evaluate(torch.full((2, 3), float("nan")), p, torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="self_index"):
        cross_domain_evaluate(s, p, torch.zeros(2), torch.zeros(3), self_index=torch.tensor([0, 5]))


# ----------------------------------------------------------------------------- revisited


def _revisitop_brute(scores: np.ndarray, gnd: list[dict], proto: str, ks=(1, 5, 10)):
    """The protocol written out: rank, drop ignored images, trapezoidal AP, mP@k (worst-case
    ties)."""
    aps, prs = [], []
    for i, g in enumerate(gnd):
        easy, hard, junk = set(g["easy"]), set(g["hard"]), set(g["junk"])
        ok = {"easy": easy, "medium": easy | hard, "hard": hard}[proto]
        ign = {"easy": junk | hard, "medium": junk, "hard": junk | easy}[proto]
        if not ok:
            continue
        items = [j for j in range(scores.shape[1]) if j not in ign]
        items.sort(key=lambda j: (-scores[i, j], j in ok))  # ties: negatives first
        pos = [r for r, j in enumerate(items) if j in ok]  # 0-based
        ap = 0.0
        for jj, r in enumerate(pos):
            p0 = 1.0 if r == 0 else jj / r
            p1 = (jj + 1) / (r + 1)
            ap += (p0 + p1) / 2 / len(pos)
        aps.append(ap)
        p1b = np.array(pos) + 1
        row = []
        for k in ks:
            kq = min(p1b.max(), k)
            row.append((p1b <= kq).sum() / kq)
        prs.append(row)
    return 100 * np.mean(aps), 100 * np.mean(prs, 0), len(gnd) - len(aps)


def _random_gnd(rng: np.random.Generator, n_q: int, n_db: int) -> list[dict]:
    gnd = []
    for _ in range(n_q):
        perm = rng.permutation(n_db)
        a, b, c = rng.integers(0, 4, 3)
        gnd.append(
            {
                "easy": perm[:a].tolist(),
                "hard": perm[a : a + b].tolist(),
                "junk": perm[a + b : a + b + c].tolist(),
            }
        )
    return gnd


def test_revisited_hand_worked() -> None:
    # ranking (by score): db0 easy, db1 junk, db2 negative, db3 hard, db4 negative
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5]])
    gnd = [{"easy": [0], "hard": [3], "junk": [1]}]
    res = revisited_evaluate(scores, gnd)
    # medium: positives db0 (0-based position 0), db3 (position 2 once junk db1 is removed)
    # AP = 1/2 * [(1 + 1)/2 + (1/2 + 2/3)/2] = 0.7916..
    assert res["medium"]["mAP"] == pytest.approx(100 * 0.5 * (1 + (0.5 + 2 / 3) / 2))
    # easy: db3 ignored too; only db0, first -> AP 1
    assert res["easy"]["mAP"] == pytest.approx(100.0)
    # hard: db0 ignored (easy), db1 junk: list db2 (neg), db3 (pos at position 1) -> (0/1 + 1/2)/2
    assert res["hard"]["mAP"] == pytest.approx(100 * 0.25)
    # mP@5 for hard: k_q = min(max pos = 2, 5) = 2, one positive in the top 2 -> 0.5
    assert res["hard"]["mP@5"] == pytest.approx(50.0)
    assert res["hard"]["mP@1"] == pytest.approx(0.0)
    # non-interpolated AP (thesis eq. 3.1) for medium: (1/1 + 2/3)/2 >= trapezoid
    non = revisited_evaluate(scores, gnd, ap_kind="noninterp")
    assert non["medium"]["mAP"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert non["medium"]["mAP"] >= res["medium"]["mAP"]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_revisited_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_q, n_db = 6, 14
    scores = rng.integers(0, 5, size=(n_q, n_db)).astype(float)
    gnd = _random_gnd(rng, n_q, n_db)
    res = revisited_evaluate(torch.from_numpy(scores), gnd, chunk_size=4)
    for proto in ("easy", "medium", "hard"):
        m, pr, n_empty = _revisitop_brute(scores, gnd, proto)
        if n_empty == n_q:
            assert np.isnan(res[proto]["mAP"])
            continue
        assert res[proto]["mAP"] == pytest.approx(m)
        assert [res[proto][f"mP@{k}"] for k in (1, 5, 10)] == pytest.approx(list(pr))
        assert res[proto]["n_empty"] == n_empty


def test_revisited_distractors_are_extra_negatives() -> None:
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(5, 12))
    dis = rng.normal(size=(5, 40))
    gnd = _random_gnd(rng, 5, 12)
    for g in gnd:
        g["easy"] = g["easy"] or [0]
    a = revisited_evaluate(torch.from_numpy(scores), gnd, distractor_scores=torch.from_numpy(dis))
    b = revisited_evaluate(torch.from_numpy(np.concatenate([scores, dis], 1)), gnd)
    assert a == b
    c = revisited_evaluate(torch.from_numpy(scores), gnd)
    assert c["medium"]["mAP"] >= a["medium"]["mAP"]


def test_trapezoid_is_at_most_noninterp() -> None:
    pos = torch.tensor([[1, 2, 5, 9], [1, 2, 3, 4]])
    valid = torch.ones_like(pos, dtype=torch.bool)
    t = trapezoid_ap_from_positions(pos, valid)
    non = (torch.arange(1, 5) / pos).mean(1).double()
    assert t[0] < non[0] and t[1] == pytest.approx(1.0) and non[1] == pytest.approx(1.0)


def test_revisited_masks_and_errors() -> None:
    g = {"easy": [0, 1], "hard": [2], "junk": [3]}
    ok, ign = revisited_masks(g, 5, "hard")
    assert ok.tolist() == [False, False, True, False, False]
    assert ign.tolist() == [True, True, False, True, False]
    with pytest.raises(ValueError, match="protocol"):
        revisited_masks(g, 5, "extreme")
    with pytest.raises(ValueError, match="outside"):
        revisited_masks({"easy": [7]}, 5, "easy")
    with pytest.raises(ValueError, match="gnd has"):
        revisited_evaluate(torch.zeros(2, 5), [g])
    with pytest.raises(ValueError, match="distractor_scores"):
        revisited_evaluate(torch.zeros(1, 5), [g], distractor_scores=torch.zeros(2, 3))
