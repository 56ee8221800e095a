"""Certified two-stage neighbour search (issue 19): canonical scores, the stage-1 error bound, and
bit-identical results whatever the stage-1 precision, backend, tiling or symmetry, on random,
clustered, tied, duplicated and one-ulp near-duplicate sets, against independent brute forces."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import rank_lab.metrics.engine.scores.bound as sb
from rank_lab.metrics import (
    faiss_available,
    knn_search,
    map_at_r,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    retrieval_metrics,
)
from rank_lab.metrics.engine.scores.bound import reduced_copy, reduced_matmul, score_bound
from rank_lab.metrics.engine.scores.exact import canonical_scores, exact_matmul
from rank_lab.metrics.engine.search.certified import certified_neighbours

PRECISIONS = ["exact", "bf16", "fp16"]
KNN = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR")
BACKENDS = ["torch"] + (["faiss"] if faiss_available() else [])


def _tree_reference(q: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Independent canonical score: numpy products in the inputs' dtype, then the pairwise tree."""
    dt = q.dtype.type
    width = 1
    while width < q.shape[1]:
        width *= 2
    out = np.empty((q.shape[0], g.shape[0]), dtype=q.dtype)
    for i in range(q.shape[0]):
        p = np.zeros((g.shape[0], width), dtype=q.dtype)
        p[:, : q.shape[1]] = q[i][None, :] * g  # rounded products
        while p.shape[1] > 1:
            h = p.shape[1] // 2
            p = (p[:, :h] + p[:, h:]).astype(dt)
        out[i] = p[:, 0]
    return out


def _brute_lists(
    q: torch.Tensor, g: torch.Tensor, k: int, exclude_self: bool
) -> list[list[tuple[float, int]]]:
    """Per query: every (score, index) with canonical score >= the k-th, by score desc then
    index."""
    s = _tree_reference(q.numpy(), g.numpy())
    out = []
    for i in range(q.shape[0]):
        items = [(float(s[i, j]), j) for j in range(g.shape[0]) if not (exclude_self and i == j)]
        items.sort(key=lambda t: (-t[0], t[1]))
        kth = items[k - 1][0]
        out.append([t for t in items if t[0] >= kth])
    return out


def _data(kind: str, n: int = 240, d: int = 24, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    n_cls = max(2, n // 6)
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
    return x.to(dtype), y


# ----------------------------------------------------------------------------- canonical score


@pytest.mark.parametrize("d", [1, 5, 32, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_canonical_scores_equal_an_independent_pairwise_tree(d: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(d)
    q = torch.randn(7, d, generator=g, dtype=dtype) * torch.logspace(-3, 3, d, dtype=dtype)
    x = torch.randn(30, d, generator=g, dtype=dtype)
    rows, cols = torch.meshgrid(torch.arange(7), torch.arange(30), indexing="ij")
    got = canonical_scores(q, x, rows.flatten(), cols.flatten()).view(7, 30)
    assert torch.equal(got, torch.from_numpy(_tree_reference(q.numpy(), x.numpy())))


def test_canonical_scores_do_not_depend_on_batching_or_order() -> None:
    x, _ = _data("random", 150, 40)
    rows, cols = torch.randint(0, 150, (3000,)), torch.randint(0, 150, (3000,))
    a = canonical_scores(x, x, rows, cols)
    b = canonical_scores(x, x, rows, cols, block_elements=64)  # one pair at a time, padded to 64
    perm = torch.randperm(3000)
    c = torch.empty_like(a)
    c[perm] = canonical_scores(x, x, rows[perm], cols[perm], block_elements=12345)
    assert torch.equal(a, b) and torch.equal(a, c)
    # symmetric in its two arguments (elementwise products commute)
    assert torch.equal(a, canonical_scores(x, x, cols, rows))


# ----------------------------------------------------------------------------- the bound


def _stage1_error_ok(q: torch.Tensor, x: torch.Tensor, fmt: torch.dtype) -> tuple[bool, float]:
    with exact_matmul():
        qr, qs, qn, qe = reduced_copy(q, fmt, per_row_scale=True)
        gr, gs, gn, ge = reduced_copy(x, fmt, per_row_scale=False)
        s, out_fmt = reduced_matmul(qr, gr)
    s = torch.ldexp(s.to(torch.float64), -(qs[:, None] + gs[None, :]).to(torch.float64))
    rows, cols = torch.meshgrid(torch.arange(q.shape[0]), torch.arange(x.shape[0]), indexing="ij")
    canon = (
        canonical_scores(q, x, rows.flatten(), cols.flatten())
        .view(q.shape[0], -1)
        .to(torch.float64)
    )
    flush = torch.ldexp(torch.ones_like(qn), -(qs + gs[0]).to(torch.float64))
    a, c, eta = score_bound(
        q.to(torch.float64).norm(dim=1),
        qn,
        qe,
        float(x.to(torch.float64).norm(dim=1).max()),
        float(gn.max()),
        float(ge.max()),
        q.shape[1],
        q.dtype,
        fmt,
        out_fmt,
        flush,
    )
    lo = s - c * s.abs() - eta[:, None] - a[:, None]
    hi = s + c * s.abs() + eta[:, None] + a[:, None]
    ok = bool(((canon >= lo) & (canon <= hi)).all())
    slack = float(((hi - lo) / 2 - (canon - s).abs()).min())
    return ok, slack


@pytest.mark.parametrize("fmt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["random", "clustered", "norms"])
def test_reduced_scores_lie_within_the_bound(fmt: torch.dtype, kind: str) -> None:
    x, _ = _data(kind, 200, 96, seed=3)
    if kind != "norms":
        x = F.normalize(x, dim=1)
    ok, slack = _stage1_error_ok(x[:40], x, fmt)
    assert ok and slack >= 0


def test_bound_holds_under_cancellation_and_for_float64_inputs() -> None:
    g = torch.Generator().manual_seed(4)
    big = torch.randn(64, 256, generator=g)
    q = torch.cat([big, -big], 1)  # sums of large terms that cancel: the relative error is huge
    x = torch.cat([big, -big + 1e-3 * torch.randn(64, 256, generator=g)], 1)
    for fmt in (torch.bfloat16, torch.float16):
        assert _stage1_error_ok(q, x, fmt)[0]
    x64 = torch.randn(50, 33, generator=g, dtype=torch.float64)
    assert _stage1_error_ok(x64[:9], x64, torch.float32)[0]  # fp32 stage for float64 inputs


def test_probe_rejects_a_short_accumulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A matmul whose partial sums are rounded to bfloat16 breaks the bound: the probe must see
    it."""

    def short_acc(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
        acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.bfloat16)
        for i in range(a.shape[1]):
            acc = (acc.float() + a[:, i : i + 1].float() * b[:, i].float()[None, :]).to(
                torch.bfloat16
            )
        return acc, torch.bfloat16

    sb._probe.cache_clear()
    monkeypatch.setattr(sb, "reduced_matmul", short_acc)
    try:
        assert not sb.check_accumulation(torch.bfloat16, torch.device("cpu"))
        with pytest.raises(RuntimeError, match="probe failed"):
            sb.resolve_precision("bf16", torch.float32, torch.device("cpu"))
        if sb._cpu_native_bf16():
            assert sb.resolve_precision("auto", torch.float32, torch.device("cpu")) == torch.float32
    finally:
        sb._probe.cache_clear()
    monkeypatch.undo()
    assert sb.check_accumulation(torch.bfloat16, torch.device("cpu"))


def test_exact_matmul_pins_and_restores_the_settings() -> None:
    cm = torch.backends.cuda.matmul
    mk = torch.backends.mkldnn.matmul
    before = (
        cm.fp32_precision,
        mk.fp32_precision,
        cm.allow_fp16_reduced_precision_reduction,
        cm.allow_bf16_reduced_precision_reduction,
    )
    cm.fp32_precision, mk.fp32_precision = "tf32", "bf16"
    cm.allow_fp16_reduced_precision_reduction = True
    try:
        with exact_matmul():
            assert cm.fp32_precision == "ieee" and mk.fp32_precision == "ieee"
            assert (
                not cm.allow_fp16_reduced_precision_reduction
                and not cm.allow_bf16_reduced_precision_reduction
            )
        assert (
            cm.fp32_precision,
            mk.fp32_precision,
            cm.allow_fp16_reduced_precision_reduction,
        ) == ("tf32", "bf16", True)
    finally:
        cm.fp32_precision, mk.fp32_precision = before[0], before[1]
        cm.allow_fp16_reduced_precision_reduction = before[2]
    assert (
        cm.fp32_precision,
        mk.fp32_precision,
        cm.allow_fp16_reduced_precision_reduction,
        cm.allow_bf16_reduced_precision_reduction,
    ) == before


def test_exact_route_ignores_an_implicit_bfloat16_matmul_setting() -> None:
    """With oneDNN's float32 matmuls set to bfloat16 by the user, the exact route must not
    change."""
    x, y = _data("clustered", 200, 32, seed=11)
    ref = retrieval_metrics(
        x, y, ks=(1, 5), metrics=KNN + ("mAP",), precision="exact", per_query=True, device="cpu"
    )
    mk = torch.backends.mkldnn.matmul
    before = mk.fp32_precision
    mk.fp32_precision = "bf16"
    try:
        got = retrieval_metrics(
            x, y, ks=(1, 5), metrics=KNN + ("mAP",), precision="exact", per_query=True, device="cpu"
        )
    finally:
        mk.fp32_precision = before
    for name, v in ref["per_query"].items():
        assert torch.equal(got["per_query"][name], v), name


# ----------------------------------------------------------------------------- the search


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp", "norms"])
def test_certified_lists_equal_the_brute_force(kind: str) -> None:
    x, _ = _data(kind, 160, 20, seed=5)
    want = _brute_lists(x, x, 6, True)
    for prec in PRECISIONS:
        for tile in (16, 64, 4096):
            lists = certified_neighbours(x, x, 6, exclude_self=True, precision=prec, tile=tile)
            for i in range(160):
                a, b = int(lists.offsets[i]), int(lists.offsets[i + 1])
                got = list(
                    zip(lists.scores[a:b].tolist(), lists.indices[a:b].tolist(), strict=True)
                )
                assert got == want[i], (prec, tile, i)


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp", "norms"])
def test_knn_search_identical_across_precisions_backends_and_shapes(kind: str) -> None:
    x, _ = _data(kind, 200, 16, seed=6)
    q = x[:50].clone()
    ref_self = knn_search(
        x, x, 9, exclude_self=True, precision="exact", backend="torch", device="cpu"
    )
    ref_q = knn_search(q, x, 9, precision="exact", backend="torch", device="cpu")
    for prec in PRECISIONS:
        for backend in BACKENDS:
            if backend == "faiss" and prec != "exact":
                continue
            for cs in (None, 64):
                a = knn_search(
                    x,
                    x,
                    9,
                    exclude_self=True,
                    precision=prec,
                    backend=backend,
                    device="cpu",
                    chunk_size=cs,
                )
                b = knn_search(
                    x,
                    x.clone(),
                    9,
                    exclude_self=True,
                    precision=prec,
                    backend=backend,
                    device="cpu",
                )
                c = knn_search(
                    q, x, 9, precision=prec, backend=backend, device="cpu", chunk_size=cs
                )
                for got, want in ((a, ref_self), (b, ref_self), (c, ref_q)):
                    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (
                        prec,
                        backend,
                        cs,
                    )
    # and the list is the brute-force top 9 (scores desc, ties by index)
    brute = _brute_lists(x, x, 9, True)
    assert ref_self[1].tolist() == [[j for _, j in row[:9]] for row in brute]


def test_float64_inputs_use_float64_canonical_scores() -> None:
    x, _ = _data("ulp", 120, 12, seed=7, dtype=torch.float64)
    a = knn_search(x, x, 5, exclude_self=True, precision="exact", device="cpu")
    for prec in ("fp32", "bf16"):
        b = knn_search(x, x, 5, exclude_self=True, precision=prec, device="cpu")
        assert a[0].dtype == torch.float64 and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert [r[:5] for r in a[1].tolist()] == [
        [j for _, j in row[:5]] for row in _brute_lists(x, x, 5, True)
    ]


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp"])
def test_long_lists_and_unordered_sets(kind: str) -> None:
    """k > 128 takes the whole-row stage 1; ``ordered=False`` returns the same sets by index."""
    x, _ = _data(kind, 400, 12, seed=12)
    q = x[:60]
    want = _brute_lists(q, x, 150, False)
    for prec in PRECISIONS:
        lists = certified_neighbours(q, x, 150, precision=prec)
        sets = certified_neighbours(q, x, 150, precision=prec, ordered=False)
        assert sets.n_candidates <= lists.n_candidates
        for i in range(60):
            a, b = int(lists.offsets[i]), int(lists.offsets[i + 1])
            assert (
                list(zip(lists.scores[a:b].tolist(), lists.indices[a:b].tolist(), strict=True))
                == want[i]
            ), (prec, i)
            a2, b2 = int(sets.offsets[i]), int(sets.offsets[i + 1])
            assert sets.indices[a2:b2].tolist() == sorted(j for _, j in want[i]), (prec, i)
            exact = dict((j, sc) for sc, j in want[i])
            assert all(
                sc <= exact[j]
                for sc, j in zip(
                    sets.scores[a2:b2].tolist(), sets.indices[a2:b2].tolist(), strict=True
                )
            )
    # small k, self excluded, unordered
    for prec in PRECISIONS:
        sets = certified_neighbours(x, x, 7, exclude_self=True, precision=prec, ordered=False)
        brute = _brute_lists(x, x, 7, True)
        assert [
            sets.indices[int(sets.offsets[i]) : int(sets.offsets[i + 1])].tolist()
            for i in range(400)
        ] == [sorted(j for _, j in row) for row in brute]


def test_dense_neighbourhoods_are_rescanned_exactly() -> None:
    """700 items within 1e-4 of each other: bfloat16 cannot separate them, the exact route must."""
    g = torch.Generator().manual_seed(8)
    base = F.normalize(torch.randn(1, 32, generator=g), dim=1)
    x = F.normalize(
        torch.cat(
            [base + 1e-4 * torch.randn(700, 32, generator=g), torch.randn(300, 32, generator=g)]
        ),
        dim=1,
    )
    bf = certified_neighbours(x, x, 5, exclude_self=True, precision="bf16")
    ex = certified_neighbours(x, x, 5, exclude_self=True, precision="exact")
    assert bf.n_rescanned > 0 and ex.n_rescanned == 0
    assert (
        torch.equal(bf.offsets, ex.offsets)
        and torch.equal(bf.indices, ex.indices)
        and torch.equal(bf.scores, ex.scores)
    )


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(8, 60), d=st.integers(1, 9), k=st.integers(1, 7))
def test_knn_search_precision_invariance_property(seed: int, n: int, d: int, k: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, (n, d), generator=g).float() / 3  # ties and one-third values
    k = min(k, n - 1)
    a = knn_search(x, x, k, exclude_self=True, precision="exact", device="cpu")
    b = knn_search(x, x, k, exclude_self=True, precision="bf16", device="cpu")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert a[1].tolist() == [[j for _, j in row[:k]] for row in _brute_lists(x, x, k, True)]


# ----------------------------------------------------------------------------- the engine


@pytest.mark.parametrize("kind", ["random", "clustered", "tied", "ulp", "norms"])
@pytest.mark.parametrize("normalize", [True, False])
def test_engine_per_query_values_bit_identical_across_routes(kind: str, normalize: bool) -> None:
    x, y = _data(kind, 240, 20, seed=9)
    ks = (1, 4, 17)
    runs = {}
    for prec in PRECISIONS:
        for backend in BACKENDS:
            if backend == "faiss" and prec != "exact":
                continue
            runs[(prec, backend)] = retrieval_metrics(
                x,
                y,
                ks=ks,
                metrics=KNN,
                normalize=normalize,
                precision=prec,
                backend=backend,
                device="cpu",
                per_query=True,
            )
    ref = runs[("exact", "torch")]
    for key, res in runs.items():
        for name, v in ref["per_query"].items():
            assert torch.equal(res["per_query"][name], v), (key, name)
        assert {n: res[n] for n in ref if n != "per_query"} == {
            n: ref[n] for n in ref if n != "per_query"
        }
    # against the per-query metrics of the explicit canonical score matrix (self column removed)
    xe = F.normalize(x, dim=1) if normalize else x
    s = torch.from_numpy(_tree_reference(xe.numpy(), xe.numpy())).double()
    t = y[:, None] == y[None, :]
    keep = ~torch.eye(240, dtype=torch.bool)
    s, t = s[keep].view(240, 239), t[keep].view(240, 239)
    has = t.any(1)
    pq = ref["per_query"]
    assert torch.allclose(pq["mAP@R"][has], map_at_r(s[has], t[has]).double(), atol=1e-12, rtol=0)
    assert torch.allclose(
        pq["MRR"][has], reciprocal_rank(s[has], t[has]).double(), atol=1e-12, rtol=0
    )
    for k in ks:
        assert torch.equal(pq[f"R@{k}"][has], recall_at_k(s[has], t[has], k).double())
        assert torch.allclose(
            pq[f"P@{k}"][has], precision_at_k(s[has], t[has], k).double(), atol=1e-12, rtol=0
        )


def test_mrr_beyond_the_lists_is_counted_exactly() -> None:
    """Two large classes far apart and one item per query whose positives are all ranked far
    away."""
    g = torch.Generator().manual_seed(10)
    x = torch.randn(300, 8, generator=g)
    y = torch.arange(300) % 150  # pairs of positives, at random places
    got = retrieval_metrics(x, y, ks=(1,), metrics=("MRR",), per_query=True, device="cpu")
    bf = retrieval_metrics(
        x, y, ks=(1,), metrics=("MRR",), per_query=True, device="cpu", precision="bf16"
    )
    xe = F.normalize(x, dim=1)
    s = torch.from_numpy(_tree_reference(xe.numpy(), xe.numpy())).double()
    keep = ~torch.eye(300, dtype=torch.bool)
    t = (y[:, None] == y[None, :])[keep].view(300, 299)
    ref = reciprocal_rank(s[keep].view(300, 299), t).double()
    assert torch.equal(got["per_query"]["MRR"], bf["per_query"]["MRR"])
    assert torch.allclose(got["per_query"]["MRR"], ref, atol=1e-15, rtol=0)
    assert float(ref.min()) < 0.05  # some first positives are far beyond the lists


def test_precision_is_validated() -> None:
    x, y = torch.randn(10, 3), torch.randint(0, 3, (10,))
    with pytest.raises(ValueError, match="precision"):
        retrieval_metrics(x, y, ks=(1,), precision="int8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="precision"):
        knn_search(x, x, 2, precision="fp8")  # type: ignore[arg-type]
    if faiss_available():
        with pytest.raises(ValueError, match="precision"):
            knn_search(x, x, 2, backend="faiss", precision="bf16")


@pytest.mark.parametrize("n", [2, 3, 6])
def test_smallest_galleries_take_every_other_item(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 3, generator=g)
    for prec in PRECISIONS:
        s, i = knn_search(x, x, n - 1, exclude_self=True, precision=prec, device="cpu")
        assert i.tolist() == [
            [j for _, j in row[: n - 1]] for row in _brute_lists(x, x, n - 1, True)
        ]
        assert all(r not in row for r, row in enumerate(i.tolist()))


@pytest.mark.parametrize("exclude_self", [False, True])
def test_long_lists_when_the_column_sample_overestimates_the_kth(exclude_self: bool) -> None:
    """Whole-row stage 1 takes a lower bound of the k-th score from every stride-th column; a
    gallery whose best items sit exactly on the sampled columns defeats it, and the rows must fall
    back to a full selection with the same certified lists."""
    g = torch.Generator().manual_seed(21)
    n, d, k = 420, 12, 150
    centre = torch.randn(1, d, generator=g)
    q = F.normalize(centre + 0.05 * torch.randn(6, d, generator=g), dim=1)
    x = F.normalize(torch.randn(n, d, generator=g), dim=1)
    x[::3] = F.normalize(centre + 0.05 * torch.randn(n // 3, d, generator=g), dim=1)
    x[:6] = q  # the queries are gallery items 0..5 (for exclude_self, queries = gallery)
    queries = x if exclude_self else q
    # the construction defeats the sample: fewer than k items reach its ceil(1.5 k / 3)-th largest
    s = (q @ x.T).numpy()
    t = np.sort(s[:, ::3], axis=1)[:, ::-1][:, 75 - 1]
    assert ((s >= t[:, None]).sum(1) < k).all()
    want = _brute_lists(queries, x, k, exclude_self)
    for prec in PRECISIONS:
        lists = certified_neighbours(queries, x, k, exclude_self=exclude_self, precision=prec)
        sets = certified_neighbours(
            queries, x, k, exclude_self=exclude_self, precision=prec, ordered=False
        )
        for i in range(queries.shape[0]):
            a, b = int(lists.offsets[i]), int(lists.offsets[i + 1])
            assert (
                list(zip(lists.scores[a:b].tolist(), lists.indices[a:b].tolist(), strict=True))
                == want[i]
            ), (prec, i)
            a2, b2 = int(sets.offsets[i]), int(sets.offsets[i + 1])
            assert sets.indices[a2:b2].tolist() == sorted(j for _, j in want[i]), (prec, i)
