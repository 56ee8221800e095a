"""Exact means exact (issue 26, items 1-3) and autocast changes nothing (issue 27, item 2): the
counter-examples of the issues, per query, at every precision.

* products that underflow (entries around 1e-25; subnormal entries): the bound's absolute term;
* a crafted d = 64 case where an FMA chain and the canonical tree round subnormal products apart;
* cosine is cosine: any positive scaling of the rows gives the same figures;
* every input gets a result or one clear error: overflowing products, requires-grad inputs,
  complex and meta tensors, fp16 on subnormal inputs, NaN stage-1 scores, a violated bound;
* ``torch.autocast`` around ``retrieval_metrics`` / ``knn_search``: identical results.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from rank_lab.metrics import faiss_available, knn_search, retrieval_metrics
from rank_lab.metrics.engine.scores._stage1 import Stage1
from rank_lab.metrics.engine.scores.bound import score_bound
from rank_lab.metrics.engine.scores.exact import canonical_scores, exact_matmul

PRECISIONS = ("exact", "bf16", "fp16")
METRICS = ("R@k", "mAP@R", "MRR", "mAP")
BACKENDS = ["torch"] + (["faiss"] if faiss_available() else [])


def _per_query(x, y, **kw) -> dict[str, torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return retrieval_metrics(x, y, per_query=True, device="cpu", **kw)["per_query"]


def _all_precisions_equal(x, y, **kw) -> dict[str, torch.Tensor]:
    ref = _per_query(x, y, precision="exact", **kw)
    for prec in PRECISIONS[1:]:
        got = _per_query(x, y, precision=prec, **kw)
        for name, v in ref.items():
            assert torch.equal(got[name], v), (prec, name, int((got[name] != v).sum()))
    return ref


def _clusters(n=200, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % (n // 4)
    x = torch.randn(n // 4, d, generator=g)[y] + 0.3 * torch.randn(n, d, generator=g)
    return x, y


# ----------------------------------------------------------------------------- underflow
def test_products_that_underflow_give_the_exact_route_at_every_precision():
    """Entries around 1e-25: the products (1e-50) underflow float32, every canonical score is 0,
    every item ties. fp16 stage 1 (scaled, no underflow) gave mAP@R 0.0051 where the exact route
    gives 0."""
    x, y = _clusters()
    x = x * 1e-25
    with pytest.warns(UserWarning, match="underflows torch.float32"):
        retrieval_metrics(x, y, ks=(1,), normalize=False, device="cpu")
    ref = _all_precisions_equal(x, y, ks=(1, 5), metrics=METRICS, normalize=False)
    # all tied: worst case
    assert float(ref["mAP@R"].max()) == 0.0 and float(ref["R@5"].max()) == 0.0


def test_subnormal_entries_are_ranked_as_their_canonical_scores():
    """Entries around 1e-20: products are subnormal (around 1e-40), rounded to the subnormal
    grid."""
    x, y = _clusters(seed=1)
    x = x * 1e-20
    ref = _all_precisions_equal(x, y, ks=(1, 5), metrics=METRICS, normalize=False)
    assert float(ref["R@1"].mean()) > 0.1  # not degenerate: subnormal products still rank


def test_crafted_fma_chain_case_d64():
    """d = 64, q = 2^-70 (1, ..., 1) and gallery entries 2^-70 (1 + m 2^-10), m in 0..63: every
    product is a whole or half number of units of the subnormal grid (2^-149), and the scores stay
    subnormal. The canonical score rounds each product (half units to even) before the tree adds
    them; a batched float32 matmul (MKL's FMA chain) adds the exact products to its running sum,
    whose parity decides every half unit. Items 18 and 5 of the seeded gallery come out in opposite
    orders (canonical 33756 > 33751 units, the chain 33754 < 33755), and the relative bound (an
    eighth of a unit here) cannot see it: R@1 flipped between "exact" (0.0) and "bf16" (1.0). The
    bound's absolute term covers it."""
    d = 64
    m = torch.randint(0, 64, (50, d), generator=torch.Generator().manual_seed(1))
    gallery = 2.0**-70 * (1 + m.float() * 2.0**-10)
    q = torch.full((1, d), 2.0**-70)
    # 17 more rows (the batched kernel needs 16 or more columns), scoring below zero
    fillers = -gallery[20:37]
    x = torch.cat([q, gallery[18:19], gallery[5:6], fillers])
    y = torch.tensor([0, 0, 1, *range(2, 19)])
    s = canonical_scores(x[:1], x, torch.zeros(3, dtype=torch.long), torch.arange(3))
    assert float(s[1]) > float(s[2])  # canonical: the relevant item first
    with exact_matmul():
        batched = x @ x.T
    if not float(batched[0, 2]) > float(batched[0, 1]):  # pragma: no cover - another BLAS
        pytest.skip(
            "this BLAS rounds these products as the canonical tree does (no counter-example here)"
        )
    for prec in PRECISIONS:
        got = _per_query(x, y, ks=(1,), metrics=("R@k", "mAP@R"), normalize=False, precision=prec)
        assert float(got["R@1"][0]) == 1.0 and float(got["mAP@R"][0]) == 1.0, prec
    for backend in BACKENDS:
        _, i = knn_search(
            x, x, 1, exclude_self=True, backend=backend, precision="exact", device="cpu"
        )
        assert int(i[0, 0]) == 1, backend


def test_the_bound_has_an_absolute_term():
    """score_bound covers d products that underflow: at least (1 + gamma) d 2^-150 in float32."""
    one = torch.ones(1)
    a, _, _ = score_bound(
        one * 1e-30,
        one * 1e-30,
        0 * one,
        1e-30,
        1e-30,
        0.0,
        64,
        torch.float32,
        torch.float32,
        torch.float32,
    )
    assert float(a) >= 64 * 2.0**-150


# ----------------------------------------------------------------------------- cosine is cosine
@pytest.mark.parametrize("power", [-140, -60, -40, 0, 40, 60, 100])
def test_cosine_is_the_same_for_any_power_of_two_scaling_bit_for_bit(power):
    """Rows on a coarse grid scale exactly by 2^p (even into the subnormal range): identical
    per-query values."""
    g = torch.Generator().manual_seed(2)
    x = torch.randint(-8, 9, (120, 16), generator=g).float() / 8
    x[x.abs().sum(1) == 0, 0] = 1.0
    y = torch.arange(120) % 30
    ref = _per_query(x, y, ks=(1, 5), metrics=METRICS)
    got = _per_query(torch.ldexp(x, torch.tensor(float(power))), y, ks=(1, 5), metrics=METRICS)
    for name, v in ref.items():
        assert torch.equal(got[name], v), (power, name)


@pytest.mark.parametrize("scale", [1e-40, 1e-13, 1e-6, 1e6, 1e19, 1e30])
def test_cosine_figures_do_not_depend_on_the_scale_of_the_rows(scale):
    """x 1e-13 changed R@5; x 1e-40 and x 1e19 gave R@1 = mAP@R = 0 with no warning (F.normalize's
    1e-12 floor, a float32 norm overflowing above 1.8e19)."""
    x, y = _clusters(240, 24, seed=3)
    ref = retrieval_metrics(x, y, ks=(1, 5), device="cpu")
    got = retrieval_metrics(x * scale, y, ks=(1, 5), device="cpu")
    assert got == pytest.approx(ref, abs=1e-12), scale
    assert ref["R@1"] > 0.5


def test_zero_rows_warn_with_their_cause():
    x, y = _clusters(seed=4)
    x[3] = 0.0
    with pytest.warns(UserWarning, match="all zero"):
        retrieval_metrics(x, y, ks=(1,), device="cpu")


# ----------------------------------------------------------------------------- every input gets an
# answer
@pytest.mark.parametrize("backend", BACKENDS)
def test_products_that_overflow_are_refused_naming_the_argument(backend):
    """x 1e20, normalize=False: IndexError in the certified route, an internal name in the counting
    route, and with backend='faiss' the call never returned."""
    x, y = _clusters(seed=5)
    for metrics in (("R@k", "mAP@R"), ("mAP",)):
        with pytest.raises(ValueError, match="embeddings.*overflow"):
            retrieval_metrics(
                x * 1e20,
                y,
                ks=(1,),
                metrics=metrics,
                normalize=False,
                backend=backend,
                device="cpu",
            )
    with pytest.raises(ValueError, match="queries and gallery.*overflow"):
        knn_search(x * 1e20, x * 1e20, 3, backend=backend, device="cpu")
    # cosine: fine
    assert retrieval_metrics(x * 1e20, y, ks=(1,), backend=backend, device="cpu")["R@1"] > 0


def test_requires_grad_inputs_are_evaluated_as_if_detached():
    x, y = _clusters(seed=6)
    xg = x.clone().requires_grad_(True)
    assert retrieval_metrics(xg, y, ks=(1, 5), device="cpu") == retrieval_metrics(
        x, y, ks=(1, 5), device="cpu"
    )
    a, b = (
        knn_search(xg, xg, 3, exclude_self=True, device="cpu"),
        knn_search(x, x, 3, exclude_self=True, device="cpu"),
    )
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not a[0].requires_grad


def test_complex_and_meta_tensors_are_refused_naming_the_argument():
    x, y = _clusters(seed=7)
    with pytest.raises((TypeError, ValueError), match="embeddings"):
        retrieval_metrics(torch.complex(x, x), y, ks=(1,), device="cpu")
    with pytest.raises((TypeError, ValueError), match="embeddings"):
        retrieval_metrics(x.to("meta"), y, ks=(1,), device="cpu")
    with pytest.raises((TypeError, ValueError), match="gallery"):
        knn_search(x, torch.complex(x, x), 2, device="cpu")


def test_fp16_on_subnormal_inputs_is_exact():
    """'the embeddings overflow torch.float16' (an internal 2^137 scale overflowed float32)."""
    x, y = _clusters(seed=8)
    x = x * 1e-39  # subnormal float32 entries
    ref = _all_precisions_equal(x, y, ks=(1, 3), metrics=("R@k", "mAP@R"), normalize=False)
    assert set(ref) >= {"R@1", "R@3", "mAP@R"}
    a = knn_search(x, x, 3, exclude_self=True, precision="fp16", device="cpu")
    b = knn_search(x, x, 3, exclude_self=True, precision="exact", device="cpu")
    assert torch.equal(a[1], b[1])


@pytest.mark.parametrize("route_metrics", [("R@k",), ("R@k", "mAP")])
def test_nan_stage1_scores_raise_in_words(monkeypatch, route_metrics):
    x, y = _clusters(seed=9)
    original = Stage1.product

    def broken(self, a, b, flat=None):
        s = original(self, a, b, flat)
        s[0, 1] = float("nan")  # (s[0, 0] is a query's own item when the tile is on the diagonal)
        return s

    monkeypatch.setattr(Stage1, "product", broken)
    with pytest.raises(RuntimeError, match="NaN scores"):
        retrieval_metrics(x, y, ks=(1,), metrics=route_metrics, precision="exact", device="cpu")


def test_a_violated_bound_says_so(monkeypatch):
    """A stage-1 matmul far off its bound: an item the route must re-score lies outside its
    interval."""
    x, y = _clusters(seed=10)
    original = Stage1.product

    def off(self, a, b, flat=None):
        # every stage-1 score equal, far from most canonical ones
        return original(self, a, b, flat).fill_(0.3)

    monkeypatch.setattr(Stage1, "product", off)
    with pytest.raises(RuntimeError, match="broke its error bound"):
        retrieval_metrics(x, y, ks=(1,), metrics=("mAP",), precision="exact", device="cpu")


# ----------------------------------------------------------------------------- autocast (issue 27)
@pytest.mark.parametrize("prec", PRECISIONS)
def test_autocast_changes_no_figure_and_no_neighbour(prec):
    """Inside torch.autocast("cpu", bfloat16) the matmuls would run in bfloat16 (mAP 0.036911 ->
    0.036742)."""
    x, y = _clusters(300, 32, seed=11)
    y2 = torch.stack([y, y // 5], 1)
    kw = dict(ks=(1, 5), per_query=True, device="cpu", precision=prec)
    for labels, metrics in (
        (y, ("R@k", "mAP@R")),
        (y, ("R@k", "mAP")),
        (y2, ("H-AP", "ASI", "R@k")),
    ):
        out = retrieval_metrics(x, labels, metrics=metrics, **kw)["per_query"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ins = retrieval_metrics(x, labels, metrics=metrics, **kw)["per_query"]
        for name, v in out.items():
            assert torch.equal(ins[name], v), (prec, metrics, name)
    a = knn_search(x, x, 4, exclude_self=True, precision=prec, device="cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        b = knn_search(x, x, 4, exclude_self=True, precision=prec, device="cpu")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.is_autocast_enabled("cpu") is False  # restored


def test_exact_matmul_turns_autocast_off_and_restores_it():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with exact_matmul():
            assert not torch.is_autocast_enabled("cpu")
            assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
        assert torch.is_autocast_enabled("cpu")


def test_exact_matmul_keeps_subnormals_and_restores_flush_to_zero():
    torch.set_flush_denormal(True)
    try:
        with exact_matmul():
            assert float(torch.tensor([2.0**-126]) * 0.5) > 0
        assert float(torch.tensor([2.0**-126]) * 0.5) == 0.0
    finally:
        torch.set_flush_denormal(False)
