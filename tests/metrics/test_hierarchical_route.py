"""The engine's hierarchical metrics (the certified counting route,
rank_lab.metrics.engine.routes.counting) against the explicit per-query functions of
rank_lab.metrics.hierarchy.metrics and against a brute force per query (split from
test_hierarchical_metrics.py); every precision and the adversarial sets of the certified search are
in test_counting_route.py."""

from __future__ import annotations

import math

import pytest
import torch

from rank_lab.metrics import retrieval_metrics
from rank_lab.metrics.hierarchy.metrics import (
    ap_per_level,
    average_set_intersection,
    h_average_precision,
    h_recall_at_k,
    hierarchical_ndcg,
    mistake_severity,
)
from rank_lab.metrics.hierarchy.relevance import (
    hap_relevance,
    shared_level,
)


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
        # engine: 0 without mistakes
        out[f"MS@{k}"] = sev.sum() / cnt.sum() if int(cnt.sum()) > 0 else torch.tensor(0.0)
        out[f"mistakes@{k}"] = cnt.double().mean()
    return {k: float(v) for k, v in out.items()}


@pytest.mark.parametrize("seed", range(3))
def test_engine_hierarchical_route_matches_explicit_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (70, 4), generator=g).double()
    fine = torch.randint(0, 12, (70,), generator=g)
    lab = torch.stack([fine, fine // 3, fine // 6], 1)
    got = retrieval_metrics(
        x,
        lab,
        ks=(1, 4),
        metrics=("mAP",),
        hierarchical=True,
        normalize=False,
        device="cpu",
        chunk_size=9,
    )
    ref = _explicit(x, lab, x, lab, True)
    for name, value in ref.items():
        assert got[name] == pytest.approx(value, abs=1e-9), name
    assert got["AP@level3"] == pytest.approx(got["mAP"], abs=1e-9)  # fine-level AP is the binary AP


def test_engine_query_gallery_and_non_monotone_relevance():
    # one query whose coarse set is tiny: rel(coarse) = (1/2) / 1 > rel(fine) = 1 / 4 (Eq. 4.7 is
    # not monotone)
    g = torch.Generator().manual_seed(5)
    gl = torch.tensor([[0, 0]] * 4 + [[1, 0]] + [[2, 1]] * 5)
    gal = torch.randint(-1, 2, (10, 3), generator=g).double()
    ql = torch.tensor([[0, 0], [2, 1]])
    q = torch.randint(-1, 2, (2, 3), generator=g).double()
    got = retrieval_metrics(
        q,
        ql,
        gal,
        gl,
        ks=(1, 3),
        metrics=("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k"),
        normalize=False,
        device="cpu",
    )
    ref = _explicit(q, ql, gal, gl, False, ks=(1, 3))
    for name, value in ref.items():
        assert got[name] == pytest.approx(value, abs=1e-9), name


def test_engine_single_level_reduces_to_ap_and_chunking_is_invisible():
    torch.manual_seed(6)
    x, y = torch.randn(90, 5), torch.randint(0, 7, (90,))
    res = retrieval_metrics(x, y, ks=(1,), metrics=("mAP", "H-AP", "AP@level"), device="cpu")
    assert res["H-AP"] == pytest.approx(res["mAP"], abs=1e-6) and res["AP@level1"] == pytest.approx(
        res["mAP"], abs=1e-6
    )
    lab = torch.stack([y, y // 3], 1)
    a = retrieval_metrics(x, lab, ks=(1, 5), hierarchical=True, device="cpu", chunk_size=1)
    b = retrieval_metrics(x, lab, ks=(1, 5), hierarchical=True, device="cpu", chunk_size=500)
    assert a == pytest.approx(b)
    per = retrieval_metrics(x, lab, ks=(5,), metrics=("MS@k",), device="cpu", per_query=True)[
        "per_query"
    ]
    assert per["MS@5"].shape == (90,) and per["mistakes@5"].shape == (90,)


def test_engine_hierarchical_bad_inputs():
    x = torch.randn(6, 3)
    with pytest.raises(ValueError, match="levels"):
        retrieval_metrics(
            x,
            torch.zeros(6, 2, dtype=torch.long),
            x,
            torch.zeros(6, 3, dtype=torch.long),
            metrics=("H-AP",),
        )
    with pytest.raises(ValueError, match="hap_alpha"):
        retrieval_metrics(
            x, torch.zeros(6, 2, dtype=torch.long), metrics=("H-AP",), ks=(1,), hap_alpha=0.0
        )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():  # pragma: no cover - run on the GPU machine
    torch.manual_seed(8)
    x, fine = torch.randn(2000, 32), torch.randint(0, 200, (2000,))
    lab = torch.stack([fine, fine // 10, fine // 50], 1)
    a = retrieval_metrics(
        x, lab, ks=(1, 10), metrics=("R@k", "mAP"), hierarchical=True, device="cpu"
    )
    b = retrieval_metrics(
        x.cuda(), lab.cuda(), ks=(1, 10), metrics=("R@k", "mAP"), hierarchical=True, device="cuda"
    )
    for name in a:
        assert a[name] == pytest.approx(b[name], abs=1e-4), name


HIER = ("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k")


def test_sorted_route_values_do_not_depend_on_the_chunking():
    g = torch.Generator().manual_seed(40)
    x, fine = torch.randn(300, 8, generator=g), torch.randint(0, 30, (300,), generator=g)
    lab = torch.stack([fine, fine // 5], 1)
    a = retrieval_metrics(x, lab, ks=(1, 5), metrics=HIER, per_query=True, device="cpu")[
        "per_query"
    ]
    b = retrieval_metrics(
        x, lab, ks=(1, 5), metrics=HIER, per_query=True, device="cpu", chunk_size=7
    )["per_query"]
    for name, v in a.items():
        assert torch.equal(v, b[name]), name


# ------------------------------------------------------------------ issue 19: the route at scale vs
# a brute force
def _brute_force_per_query(
    s: torch.Tensor, lv: torch.Tensor, n_levels: int, alpha: float
) -> dict[str, list[float]]:
    """Per query, in plain Python on explicit rows: H-AP (Eq. 4.7 relevance, worst-case order by
    increasing relevance at ties), ASI (Eq. 4.16), NDCG-h (gains 2^l - 1) and AP^(l), ties by
    increasing level."""
    out: dict[str, list[float]] = {
        "H-AP": [],
        "ASI": [],
        "NDCG-h": [],
        **{f"AP@level{lvl}": [] for lvl in range(1, n_levels + 1)},
    }
    for row_s, row_l in zip(s.tolist(), lv.tolist(), strict=True):
        count = {lvl: row_l.count(lvl) for lvl in range(n_levels + 1)}
        rel = [((lvl / n_levels) ** alpha / count[lvl]) if lvl > 0 else 0.0 for lvl in row_l]
        order = sorted(range(len(row_s)), key=lambda j: (-row_s[j], rel[j]))
        r = [rel[j] for j in order]
        hap = sum(
            sum(min(r[i], r[m]) for i in range(m + 1)) / (m + 1) for m in range(len(r)) if r[m] > 0
        )
        out["H-AP"].append(hap / sum(r))
        by_level = [
            row_l[j] for j in sorted(range(len(row_s)), key=lambda j: (-row_s[j], row_l[j]))
        ]
        ideal = sorted(row_l, reverse=True)
        n_pos = sum(1 for x in row_l if x >= 1)
        asi = 0.0
        for n in range(1, n_pos + 1):
            asi += (
                sum(
                    min(by_level[:n].count(lvl), ideal[:n].count(lvl))
                    for lvl in range(1, n_levels + 1)
                )
                / n
            )
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
    """Issue 19: per-query H-AP, ASI, NDCG-h and AP^(l) of the engine's hierarchical route (permuted
    gallery, packed levels, threads) equal a plain-Python brute force on the explicit score rows,
    with ties, duplicates and near-duplicates, self excluded and in query / gallery form."""
    g = torch.Generator().manual_seed(50 + n_levels)
    n = 150
    fine = torch.randint(0, 18, (n,), generator=g)
    lab = torch.stack([fine // (2**j) for j in range(n_levels)], 1)
    if kind == "random":
        x = torch.randn(n, 10, generator=g, dtype=torch.float64)
    # tight clusters, exact duplicates and near-duplicates (one grid step apart)
    elif kind == "clustered":
        # on a grid of 1/64: every product and sum is exact in float64, so the explicit rows below
        # and the route's block matmuls give the same scores and the comparison is about the
        # ranking, not the rounding
        x = torch.randn(18, 10, generator=g, dtype=torch.float64)[fine] + 0.05 * torch.randn(
            n, 10, generator=g, dtype=torch.float64
        )
        x = torch.round(x * 64) / 64
        x[1::4] = x[0::4]
        x[2::4] = x[0::4][: x[2::4].shape[0]]
        x[2::4, 0] += 1 / 64
    else:  # coarse integers: many exact ties
        x = torch.randint(-1, 2, (n, 4), generator=g).double()
    for alpha in (1.0, 0.3):
        kw = dict(
            ks=(1,),
            metrics=("H-AP", "ASI", "NDCG-h", "AP@level"),
            per_query=True,
            normalize=False,
            hap_alpha=alpha,
            device="cpu",
            no_positive="skip",
            chunk_size=16,
        )
        got = retrieval_metrics(x, lab, **kw)["per_query"]
        s, lv = x @ x.T, shared_level(lab, lab)
        keep = ~torch.eye(n, dtype=torch.bool)
        s, lv = s[keep].view(n, n - 1), lv[keep].view(n, n - 1)
        has = (lv >= 1).any(1) & (lv == n_levels).any(1)
        ref = _brute_force_per_query(s[has], lv[has], n_levels, alpha)
        for name, v in ref.items():
            assert torch.allclose(
                got[name][has], torch.tensor(v, dtype=torch.float64), atol=1e-12, rtol=0
            ), (kind, alpha, name)
        # query / gallery form
        q, ql, gal, gl = x[:40], lab[:40], x[40:], lab[40:]
        got_q = retrieval_metrics(q, ql, gal, gl, **kw)["per_query"]
        s, lv = q @ gal.T, shared_level(ql, gl)
        has = (lv >= 1).any(1) & (lv == n_levels).any(1)
        ref = _brute_force_per_query(s[has], lv[has], n_levels, alpha)
        for name, v in ref.items():
            assert torch.allclose(
                got_q[name][has], torch.tensor(v, dtype=torch.float64), atol=1e-12, rtol=0
            ), (kind, alpha, name)
