"""The certified counting route (issue 28) and one canonical score on every route (issue 26, item
1).

Per-query values of ``retrieval_metrics`` are compared **bit for bit** with an independent brute
force: the canonical score matrix from a numpy pairwise tree, worst-case positions from a Python
sort of every row, and the registered formulas on those positions. On the adversarial sets of the
certified-search tests (random, clustered, integer-tied with duplicates, one-ulp near-duplicates,
norms over four orders of magnitude), for every stage-1 precision, both routes, chunk sizes 1 to
300, query / gallery form, binary and hierarchical labels, and whatever other metrics are asked.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rank_lab.metrics.engine.evaluate as E
from rank_lab.metrics import (
    RetrievalMetric,
    list_metrics,
    register_metric,
    retrieval_metrics,
    unregister_metric,
)
from rank_lab.metrics.engine.evaluate import normalize_rows
from rank_lab.metrics.engine.formulas.positions import BinaryPositions, LevelPositions
from rank_lab.metrics.engine.formulas.registry import get_metric
from rank_lab.metrics.hierarchy.relevance import shared_level

PRECISIONS = ("exact", "bf16", "fp16")
BINARY = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR", "mAP", "NDCG")
HIER = ("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k")


def _data(kind: str, n: int = 240, d: int = 24, seed: int = 0, n_cls: int | None = None):
    g = torch.Generator().manual_seed(seed)
    n_cls = n_cls or max(2, n // 6)
    y = torch.randint(0, n_cls, (n,), generator=g)
    if kind == "random":
        x = torch.randn(n, d, generator=g)
    elif kind == "clustered":  # tight clusters: many near-ties inside the stage-1 bound
        x = torch.randn(n_cls, d, generator=g)[y] + 1e-3 * torch.randn(n, d, generator=g)
    elif kind == "tied":  # coarse integer values and exact duplicates: many exactly tied scores
        x = torch.randint(-1, 2, (n, d), generator=g).float()
        x[10:30] = x[5]
        x[x.abs().sum(1) == 0, 0] = 1.0
    elif kind == "ulp":  # near-duplicates one ulp apart in one coordinate
        x = torch.randn(n, d, generator=g)
        x[1::2] = x[0::2]
        x[1::2, 3] = torch.nextafter(x[1::2, 3], torch.full_like(x[1::2, 3], torch.inf))
    elif kind == "norms":  # general vectors: norms over four orders of magnitude
        x = torch.randn(n, d, generator=g) * torch.logspace(-2, 2, n)[:, None]
    else:
        raise ValueError(kind)
    return x, y


def canonical_matrix(q: torch.Tensor, g: torch.Tensor) -> np.ndarray:
    """Independent canonical scores: numpy products in float32, then the pairwise tree (float64
    out)."""
    qn, gn = q.numpy(), g.numpy()
    width = 1
    while width < qn.shape[1]:
        width *= 2
    out = np.empty((qn.shape[0], gn.shape[0]), dtype=np.float64)
    for i in range(qn.shape[0]):
        p = np.zeros((gn.shape[0], width), dtype=qn.dtype)
        p[:, : qn.shape[1]] = qn[i][None, :] * gn
        while p.shape[1] > 1:
            h = p.shape[1] // 2
            p = (p[:, :h] + p[:, h:]).astype(qn.dtype)
        out[i] = p[:, 0]
    return out


def brute_binary(
    s: np.ndarray, yq: torch.Tensor, yg: torch.Tensor, exclude_self: bool
) -> BinaryPositions:
    """Worst-case positions of every relevant item by a Python sort of each row (irrelevant first on
    ties)."""
    rows, n_pos = [], []
    for i in range(s.shape[0]):
        items = [j for j in range(s.shape[1]) if not (exclude_self and j == i)]
        order = sorted(items, key=lambda j: (-s[i, j], int(yg[j]) == int(yq[i])))
        rows.append([p + 1 for p, j in enumerate(order) if int(yg[j]) == int(yq[i])])
        n_pos.append(len(rows[-1]))
    width = max(max(n_pos), 1)
    pos = torch.full((len(rows), width), torch.iinfo(torch.long).max // 4, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        pos[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        valid[i, : len(r)] = True
    return BinaryPositions(pos, valid, torch.tensor(n_pos))


def brute_levels(
    s: np.ndarray, lq: torch.Tensor, lg: torch.Tensor, exclude_self: bool, alpha: float
) -> LevelPositions:
    """Positives sorted by (score desc, level asc), with the negatives ranked before each (negatives
    first on ties)."""
    n_levels = lq.shape[1]
    lv_all = shared_level(lq, lg).numpy()
    lvs, ges, keys, counts = [], [], [], []
    for i in range(s.shape[0]):
        items = [j for j in range(s.shape[1]) if not (exclude_self and j == i)]
        order = sorted(items, key=lambda j: (-s[i, j], lv_all[i, j]))
        lv, ge, key, neg = [], [], [], 0
        for j in order:
            if lv_all[i, j] == 0:
                neg += 1
            else:
                lv.append(int(lv_all[i, j]))
                ge.append(neg)
                key.append(float(s[i, j]))
        lvs.append(lv)
        ges.append(ge)
        keys.append(key)
        counts.append([sum(1 for j in items if lv_all[i, j] == lev) for lev in range(n_levels + 1)])
    width = max(max(len(v) for v in lvs), 1)
    out_lv = torch.zeros(len(lvs), width, dtype=torch.long)
    out_ge = torch.zeros(len(lvs), width, dtype=torch.long)
    out_key = torch.full((len(lvs), width), -torch.inf, dtype=torch.float64)
    for i in range(len(lvs)):
        m = len(lvs[i])
        out_lv[i, :m], out_ge[i, :m] = (
            torch.tensor(lvs[i], dtype=torch.long),
            torch.tensor(ges[i], dtype=torch.long),
        )
        out_key[i, :m] = torch.tensor(keys[i], dtype=torch.float64)
    return LevelPositions(
        out_lv, out_lv > 0, out_ge, out_key, torch.tensor(counts), n_levels, alpha
    )


def brute_metrics(
    x, lab, ks, metrics, normalize=True, ref=None, ref_lab=None, alpha=1.0
) -> dict[str, torch.Tensor]:
    """Per-query values of ``metrics`` from the brute-force positions and the registered
    formulas."""
    same = ref is None
    q = normalize_rows(x.float()) if normalize else x.float()
    g = q if same else (normalize_rows(ref.float()) if normalize else ref.float())
    gl = lab if same else ref_lab
    s = canonical_matrix(q, g)
    lq = lab[:, None] if lab.ndim == 1 else lab
    lgl = gl[:, None] if gl.ndim == 1 else gl
    out: dict[str, torch.Tensor] = {}
    bp = brute_binary(s, lq[:, 0], lgl[:, 0], same)
    lp = (
        brute_levels(s, lq, lgl, same, alpha)
        if any(get_metric(m).family == "hierarchical" for m in metrics)
        else None
    )
    for name in metrics:
        metric = get_metric(name)
        vals = metric.compute(bp if metric.family == "binary" else lp, tuple(ks))
        if metric.reduce is not None:
            vals = metric.reduce(vals, torch.ones(q.shape[0], dtype=torch.bool), tuple(ks))[1]
        out.update(vals)
    return out


def engine(
    x, lab, route: str, monkeypatch, small: int | None = None, **kw
) -> dict[str, torch.Tensor]:
    """Per-query values of the engine on one route: ``"counting"``, ``"lists"`` or ``"auto"``;
    ``small``: the counting route's limit of its one-pass form for rows with few positives (0: the
    general form)."""
    import rank_lab.metrics.engine.routes.counting as C

    if route != "auto":
        monkeypatch.setattr(E, "NEIGHBOUR_LIST_MAX_K", 0 if route == "counting" else 10**9)
    if small is not None:
        monkeypatch.setattr(C, "SMALL_POSITIVES", small)
    try:
        return retrieval_metrics(x, lab, per_query=True, device="cpu", **kw)["per_query"]
    finally:
        monkeypatch.undo()


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], where: object) -> None:
    assert got.keys() >= want.keys(), (where, sorted(want.keys() - got.keys()))
    for name, v in want.items():
        assert torch.equal(got[name], v), (where, name, float((got[name] - v).abs().max()))


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp", "norms"])
def test_binary_metrics_bit_identical_to_the_brute_force_every_precision_and_route(
    kind, monkeypatch
):
    x, y = _data(kind, 240, 24, seed=3)
    ks = (1, 4, 17, 120)
    want = brute_metrics(x, y, ks, BINARY)
    for prec in PRECISIONS:
        for small in (0, 64):
            got = engine(
                x, y, "counting", monkeypatch, small=small, ks=ks, metrics=BINARY, precision=prec
            )
            assert_same(got, want, (kind, prec, "counting", small))
        lists = engine(x, y, "lists", monkeypatch, ks=ks, metrics=BINARY[:6], precision=prec)
        assert_same(lists, {k: v for k, v in want.items() if k in lists}, (kind, prec, "lists"))


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp"])
def test_query_gallery_form_and_unnormalised_scores(kind, monkeypatch):
    x, y = _data(kind, 260, 16, seed=4)
    q, ql, g, gl = x[:70], y[:70], x[70:], y[70:]
    ks = (1, 5, 50)
    for normalize in (True, False):
        want = brute_metrics(q, ql, ks, BINARY, normalize=normalize, ref=g, ref_lab=gl)
        for prec in PRECISIONS:
            got = engine(
                q,
                ql,
                "counting",
                monkeypatch,
                ref_embeddings=g,
                ref_labels=gl,
                ks=ks,
                metrics=BINARY,
                precision=prec,
                normalize=normalize,
            )
            assert_same(got, want, (kind, prec, normalize))


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp"])
@pytest.mark.parametrize("n_levels", [2, 3])
def test_hierarchical_metrics_bit_identical_to_the_brute_force(kind, n_levels, monkeypatch):
    x, fine = _data(kind, 200, 12, seed=5 + n_levels, n_cls=24)
    lab = torch.stack([fine // (2**j) for j in range(n_levels)], 1)
    ks = (1, 5, 30)
    for alpha in (1.0, 0.3):  # 0.3: Eq. 4.7 not monotone for some queries
        want = brute_metrics(x, lab, ks, HIER + BINARY, alpha=alpha)
        for prec in PRECISIONS:
            # the general form (intervals against intervals, bulk counted) and the one-pass form
            for small in (0, 64):
                got = engine(
                    x,
                    lab,
                    "auto",
                    monkeypatch,
                    small=small,
                    ks=ks,
                    metrics=HIER + BINARY,
                    precision=prec,
                    hap_alpha=alpha,
                )
                assert_same(got, want, (kind, n_levels, alpha, prec, small))


@pytest.mark.parametrize("chunk_size", [1, 7, 300])
def test_no_figure_depends_on_the_chunk_size_or_the_other_figures(chunk_size, monkeypatch):
    """Issue 26: asking for "mAP" with R@1 changed R@1, R@5 and mAP@R (the counting route ranked by
    the matmul); 1-row and 300-row chunks gave different scores. Now one canonical score
    everywhere."""
    x, y = _data("ulp", 300, 24, seed=6)
    ref = engine(x, y, "auto", monkeypatch, ks=(1, 5), metrics=("R@k", "mAP@R"))
    for extra in ((), ("mAP",), ("NDCG", "MRR"), ("H-AP",)):
        got = engine(
            x,
            y,
            "auto",
            monkeypatch,
            ks=(1, 5),
            metrics=("R@k", "mAP@R", *extra),
            chunk_size=chunk_size,
        )
        assert_same(got, ref, (extra, chunk_size))


def test_any_k_costs_one_pass_and_agrees_with_short_lists(monkeypatch):
    """R@k for k up to the gallery size from the counting route equals the neighbour lists' R@k for
    small k."""
    x, y = _data("clustered", 300, 16, seed=7)
    ks = (1, 10, 100, 299)
    counted = engine(
        x, y, "counting", monkeypatch, ks=ks, metrics=("R@k", "mAP@R"), precision="bf16"
    )
    lists = engine(
        x, y, "lists", monkeypatch, ks=ks[:2], metrics=("R@k", "mAP@R"), precision="bf16"
    )
    assert_same(counted, lists, "k")
    # every query with a positive finds it within the whole gallery
    assert bool((counted["R@299"] == 1).all())


def test_a_registered_metric_comes_out_of_retrieval_metrics(monkeypatch):
    """Adding a metric to the engine is one registration (docs/architecture.md): R-precision."""

    def r_precision(p: BinaryPositions, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
        return {"RP": (p.valid & (p.pos <= p.n_pos[:, None])).sum(1).double() / p.r}

    register_metric(RetrievalMetric("RP", family="binary", depth="R", compute=r_precision))
    try:
        assert "RP" in list_metrics(family="binary")
        x, y = _data("tied", 200, 12, seed=8)
        want = brute_metrics(x, y, (1,), ("RP",))
        for route in ("lists", "counting"):
            got = engine(x, y, route, monkeypatch, ks=(1,), metrics=("RP", "R@k"))
            assert_same(got, want, route)
        res = retrieval_metrics(x, y, ks=(1,), metrics=("RP",), device="cpu")
        has = (y[:, None] == y[None, :]).sum(1) > 1
        assert res["RP"] == pytest.approx(float(want["RP"][has].mean()))
        with pytest.raises(ValueError, match="registered already"):
            register_metric(RetrievalMetric("RP", family="binary", depth="R", compute=r_precision))
    finally:
        unregister_metric("RP")
    assert "RP" not in list_metrics()
    with pytest.raises(ValueError, match="unknown metrics"):
        retrieval_metrics(
            torch.randn(5, 3), torch.tensor([0, 0, 1, 1, 1]), ks=(1,), metrics=("RP",)
        )


def test_metric_definitions_are_checked():
    with pytest.raises(ValueError, match="family"):
        RetrievalMetric("x", family="graded", depth="k", compute=lambda p, ks: {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="depth"):
        RetrievalMetric("x", family="binary", depth="deep", compute=lambda p, ks: {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="compute"):
        RetrievalMetric("x", family="binary", depth="k", compute=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp", "norms"])
def test_list_depth_cut_keeps_every_figure(kind, monkeypatch):
    """Metrics of depth "k" / "R" only: the route cuts each row at its K-th stage-1 score (a
    verified sample bound) and places the positives below the cut after the K items above it."""
    x, y = _data(kind, 300, 16, seed=9, n_cls=20)  # classes of ~15: many positives beyond small k
    shallow = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R")
    for ks in ((1,), (1, 4, 17), (2, 3, 5, 8, 13, 21, 34)):
        want = brute_metrics(x, y, ks, shallow)
        # cut-offs only (positions resolved only where they straddle a k), with R, with k, all five
        for metrics in (
            ("R@k",),
            ("R@k", "P@k", "TR@k"),
            ("R@k", "mAP@R"),
            ("TR@k", "AP@k"),
            shallow,
        ):
            for prec in PRECISIONS:
                for small in (0, 64):
                    got = engine(
                        x,
                        y,
                        "counting",
                        monkeypatch,
                        small=small,
                        ks=ks,
                        metrics=metrics,
                        precision=prec,
                    )
                    assert_same(
                        got,
                        {k: v for k, v in want.items() if k in got},
                        (kind, ks, metrics, prec, small),
                    )


@pytest.mark.parametrize("kind", ["clustered", "tied", "ulp"])
def test_the_torch_form_of_the_route_equals_the_compiled_one(kind, monkeypatch):
    """GPUs run the torch form of the route (no compiled kernels): on the CPU both give the same
    bits."""
    import rank_lab.metrics.engine.routes.counting as C

    x, fine = _data(kind, 200, 12, seed=10, n_cls=24)
    lab = torch.stack([fine, fine // 4], 1)
    for labels, metrics in ((fine, BINARY), (lab, HIER + ("R@k", "mAP@R"))):
        for prec in ("exact", "bf16"):
            monkeypatch.setattr(C, "USE_KERNELS", False)
            plain = engine(
                x, labels, "counting", monkeypatch, ks=(1, 5), metrics=metrics, precision=prec
            )
            for small in (0, 64):
                compiled = engine(
                    x,
                    labels,
                    "counting",
                    monkeypatch,
                    small=small,
                    ks=(1, 5),
                    metrics=metrics,
                    precision=prec,
                )
                assert_same(plain, compiled, (kind, prec, metrics[0], small))


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp"])
@pytest.mark.parametrize("layout", ["one coarse class", "few coarse classes", "singletons"])
def test_rows_with_many_positives_bit_identical(kind, layout, monkeypatch):
    """The many-positives form (rows of more than SMALL_POSITIVES positives, grouped by a histogram
    of their 16-bit keys) without any patch: every row one coarse class (no negative at all), a few
    coarse classes, and fine classes of one item (empty finest level for those queries)."""
    x, fine = _data(kind, 180, 12, seed=11, n_cls=30)
    if layout == "one coarse class":
        coarse = torch.zeros_like(fine)
    elif layout == "few coarse classes":
        coarse = fine % 2
    else:
        fine = torch.where(torch.arange(180) % 3 == 0, 100 + torch.arange(180), fine)
        coarse = fine % 2
    lab = torch.stack([fine, coarse], 1)
    ks = (1, 7, 90)
    want = brute_metrics(x, lab, ks, HIER + BINARY)
    for prec in PRECISIONS:
        got = engine(
            x,
            lab,
            "counting",
            monkeypatch,
            ks=ks,
            metrics=HIER + BINARY,
            precision=prec,
            no_positive="skip",
        )
        assert_same(got, want, (kind, layout, prec))


def test_wide_score_span_takes_the_sorted_form(monkeypatch):
    """Unnormalised rows over twelve orders of magnitude: a row's 16-bit keys span more values
    than the histogram form takes, so the many-positives form sorts them instead -- same bits."""
    g = torch.Generator().manual_seed(12)
    x = (
        torch.randn(160, 8, generator=g)
        * torch.logspace(-6, 6, 160)[torch.randperm(160, generator=g)][:, None]
    )
    fine = torch.randint(0, 20, (160,), generator=g)
    lab = torch.stack([fine, fine % 2], 1)
    want = brute_metrics(x, lab, (1, 5), HIER, normalize=False)
    for prec in PRECISIONS:
        got = engine(
            x,
            lab,
            "counting",
            monkeypatch,
            ks=(1, 5),
            metrics=HIER,
            precision=prec,
            normalize=False,
        )
        assert_same(got, want, prec)


def _half_spy(monkeypatch) -> list[int]:
    """Count the blocks the half-product route hands over (a spy on ``_HalfProduct.hand_over``)."""
    import rank_lab.metrics.engine.routes.counting as C

    seen: list[int] = []
    real = C._HalfProduct.hand_over

    def spy(self, r0, r1, s):  # type: ignore[no-untyped-def]
        seen.append(r0)
        return real(self, r0, r1, s)

    monkeypatch.setattr(C._HalfProduct, "hand_over", spy)
    return seen


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp", "norms"])
def test_half_product_route_bit_identical(kind, monkeypatch):
    """Queries = gallery with metrics of depth "k" / "R": each block computes the columns from its
    first positive on and takes the earlier ones from the earlier blocks (scores are symmetric).
    Blocks of 7 and 64 rows (1-row blocks: the chunk-size test), every precision, rows with and
    without a cut: the brute force's bits."""
    x, y = _data(kind, 300, 16, seed=13, n_cls=40)
    shallow = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R")
    for ks in ((1,), (1, 4, 17), (2, 3, 5, 8, 13, 21, 34, 55)):
        want = brute_metrics(x, y, ks, shallow)
        for prec in PRECISIONS:
            for chunk in (7, 64):
                seen = _half_spy(monkeypatch)
                got = engine(
                    x,
                    y,
                    "counting",
                    monkeypatch,
                    ks=ks,
                    metrics=shallow,
                    precision=prec,
                    chunk_size=chunk,
                )
                assert len(seen) == -(-300 // chunk), (kind, ks, prec, chunk)
                assert_same(got, want, (kind, ks, prec, chunk))


@pytest.mark.parametrize("kind", ["tied", "ulp"])
def test_half_product_route_one_row_blocks(kind, monkeypatch):
    """Blocks of one query each: every query takes its earlier columns from all earlier blocks."""
    x, y = _data(kind, 300, 16, seed=13, n_cls=40)
    ks = (1, 4, 17)
    want = brute_metrics(x, y, ks, ("R@k", "mAP@R"))
    for prec in ("bf16", "exact"):
        seen = _half_spy(monkeypatch)
        got = engine(
            x,
            y,
            "counting",
            monkeypatch,
            ks=ks,
            metrics=("R@k", "mAP@R"),
            precision=prec,
            chunk_size=1,
        )
        assert len(seen) == 300, (kind, prec)
        assert_same(got, want, (kind, prec))


def test_half_product_route_with_a_sampled_guess(monkeypatch):
    """A gallery treated as large (HALF_SMALL_N lowered): the K-th score is guessed from every 4th
    row, the hand-over is cut at the guess, and the per-query values stay the brute force's; the
    guess cuts (far fewer items handed over than the whole lower triangle)."""
    import rank_lab.metrics.engine.routes.counting as C

    x, y = _data("clustered", 1200, 8, seed=14, n_cls=200)
    ks = (1, 10, 100)
    want = brute_metrics(x, y, ks, ("R@k", "mAP@R"))
    handed: list[int] = []
    real = C.emit_later

    def spy(*args):  # type: ignore[no-untyped-def]
        out = real(*args)
        handed.append(len(out[1]))
        return out

    for prec in ("bf16", "exact"):
        handed.clear()
        monkeypatch.setattr(C, "emit_later", spy)
        monkeypatch.setattr(C, "HALF_SMALL_N", 0)
        got = engine(
            x,
            y,
            "counting",
            monkeypatch,
            ks=ks,
            metrics=("R@k", "mAP@R"),
            precision=prec,
            chunk_size=128,
        )
        assert_same(got, want, prec)
        assert 0 < sum(handed) < 1200 * 1199 // 4, (prec, sum(handed))


def test_half_product_route_rows_whose_guess_fails(monkeypatch):
    """A guess above the K-th score (fewer than K items reach it) is caught by the check: those
    rows get their whole row of scores and the figures stay the brute force's."""
    import rank_lab.metrics.engine.routes.counting as C

    x, y = _data("tied", 300, 16, seed=15, n_cls=40)
    ks = (1, 5, 30)
    want = brute_metrics(x, y, ks, ("R@k", "mAP@R"))
    real = C.sample_kth

    def too_high(s, is_bits, stride, m, own):  # type: ignore[no-untyped-def]
        return real(s, is_bits, stride, np.ones_like(m), own)  # the row's largest score

    for prec in PRECISIONS:
        monkeypatch.setattr(C, "sample_kth", too_high)
        seen = _half_spy(monkeypatch)
        got = engine(
            x,
            y,
            "counting",
            monkeypatch,
            ks=ks,
            metrics=("R@k", "mAP@R"),
            precision=prec,
            chunk_size=32,
        )
        assert seen, prec
        assert_same(got, want, prec)


def test_half_product_route_a_failed_block_does_not_hang(monkeypatch):
    """A block that fails before its hand-over lets the later blocks stop waiting: the call
    raises instead of hanging."""
    import rank_lab.metrics.engine.routes.counting as C

    x, y = _data("random", 200, 8, seed=16)

    def broken(*args):  # type: ignore[no-untyped-def]
        raise MemoryError("no room for the hand-over")

    monkeypatch.setattr(C, "emit_later", broken)
    with pytest.raises((MemoryError, RuntimeError)):
        engine(x, y, "counting", monkeypatch, ks=(1,), metrics=("R@k",), chunk_size=16)


def test_thresholds_keep_negative_zero_at_a_zero_threshold():
    """``-0 >= 0``: a 16-bit score of -0 must pass a threshold of exactly zero."""
    from rank_lab.metrics.engine.routes._kernels import bf16_keys
    from rank_lab.metrics.engine.routes.counting import _thresholds_as

    for dtype in (torch.bfloat16, torch.float16):
        th = _thresholds_as(dtype, torch.tensor([0.0, -0.0, torch.inf, -torch.inf]).double())
        vals = torch.tensor([-0.0, 0.0, -1e-3, 1e-3]).to(dtype)
        key = bf16_keys(vals.view(torch.int16).numpy())
        assert (key[:2] >= th[0]).all() and (key[:2] >= th[1]).all()
        assert key[2] < th[0] and key[3] >= th[0]
        assert (key < th[2]).all() and (key >= th[3]).all()


def test_half_product_route_leaves_too_many_blocks_to_the_full_route(monkeypatch):
    """Each block of the half-product route reads the lists of every earlier block: beyond
    HALF_MAX_BLOCKS blocks (tiny blocks asked for a large gallery) the full route serves the
    request, with the same bits."""
    import rank_lab.metrics.engine.routes.counting as C

    x, y = _data("clustered", 300, 16, seed=17, n_cls=40)
    ks = (1, 5)
    want = brute_metrics(x, y, ks, ("R@k", "mAP@R"))
    for limit, taken in ((2, False), (300, True)):
        seen = _half_spy(monkeypatch)
        monkeypatch.setattr(C, "HALF_MAX_BLOCKS", limit)
        got = engine(x, y, "counting", monkeypatch, ks=ks, metrics=("R@k", "mAP@R"), chunk_size=7)
        assert bool(seen) == taken, limit
        assert_same(got, want, limit)
