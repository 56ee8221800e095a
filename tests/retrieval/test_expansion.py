"""Query expansion and re-ranking: AQE, alpha-QE (eq. 4.10), k-reciprocal, GQE (eq. 4.11)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.metrics import average_precision
from rank_lab.retrieval.expansion import alpha_qe, average_qe, gqe, k_reciprocal_rerank
from rank_lab.retrieval.synthetic import bridged_clusters
from rank_lab.retrieval.whitening import l2n


def _x(n: int, d: int = 8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return l2n(torch.randn(n, d, generator=g, dtype=torch.float64))


def _map(s: torch.Tensor, y: torch.Tensor) -> float:
    s = s.clone().double()
    s.fill_diagonal_(float(s.min()) - 1)
    t = y[:, None] == y[None]
    t.fill_diagonal_(False)
    return float(average_precision(s, t).mean())


# ----------------------------------------------------------------------------- alpha-QE


def test_alpha_qe_hand_worked() -> None:
    # query q = e1; gallery: a = (cos .6, sin), b = (0.8, -0.6), c = -e1
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[0.6, 0.8], [0.8, -0.6], [-1.0, 0.0]], dtype=torch.float64)
    # n = 2 neighbours: b (0.8), a (0.6); alpha = 2: 1 * q + 0.64 b + 0.36 a
    expected = l2n(q + 0.64 * g[1] + 0.36 * g[0])
    torch.testing.assert_close(alpha_qe(q, g, n=2, alpha=2.0), expected)
    # without the query itself
    torch.testing.assert_close(
        alpha_qe(q, g, n=2, alpha=2.0, include_self=False), l2n(0.64 * g[1:2] + 0.36 * g[0:1])
    )
    # AQE = plain mean of the query and its top-n (c has a negative similarity but is not in the top
    # 2)
    torch.testing.assert_close(average_qe(q, g, n=2), l2n(q + g[0] + g[1]))
    # clamping: with n = 3 the negative neighbour gets weight 0 for alpha > 0
    torch.testing.assert_close(alpha_qe(q, g, n=3, alpha=1.0), l2n(q + 0.8 * g[1] + 0.6 * g[0]))


def _alpha_qe_brute(x: torch.Tensor, n: int, alpha: float, include_self: bool) -> torch.Tensor:
    out = []
    for i in range(x.shape[0]):
        s = (x @ x[i]).numpy().copy()
        s[i] = -np.inf
        nn = np.argsort(-s, kind="stable")[:n]
        v = sum(max(float(s[j]), 0.0) ** alpha * x[j] for j in nn)
        if include_self:
            v = v + x[i]
        out.append(v)
    return l2n(torch.stack(out))


@pytest.mark.parametrize("include_self", [True, False])
def test_alpha_qe_matches_brute_force_all_vs_all(include_self: bool) -> None:
    x = _x(40, seed=1)
    got = alpha_qe(x, n=5, alpha=3.0, include_self=include_self, backend="torch")
    torch.testing.assert_close(got, _alpha_qe_brute(x, 5, 3.0, include_self))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000), n=st.integers(1, 6))
def test_alpha_qe_permutation_equivariant(seed: int, n: int) -> None:
    x = _x(25, seed=seed)
    perm = torch.randperm(25, generator=torch.Generator().manual_seed(seed))
    a = alpha_qe(x, n=n, alpha=2.0)
    b = alpha_qe(x[perm], n=n, alpha=2.0)
    torch.testing.assert_close(a[perm], b)


# ----------------------------------------------------------------------------- k-reciprocal


def _k_reciprocal_dense(x: np.ndarray, k1: int, k2: int, lam: float) -> np.ndarray:
    """Written from Zhong et al.'s definitions: dense V, Jaccard as sum(min) / sum(max); (n, n)."""
    n = len(x)
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    d = d / d.max(1, keepdims=True)
    order = np.argsort(d, axis=1, kind="stable")

    def recip(i: int, k: int) -> set[int]:
        return {int(j) for j in order[i, : k + 1] if i in set(order[j, : k + 1].tolist())}

    half = int(np.around(k1 / 2))
    v = np.zeros((n, n))
    for i in range(n):
        r = recip(i, k1)
        exp = set(r)
        for c in r:
            rc = recip(c, half)
            if len(rc & r) > 2 / 3 * len(rc):
                exp |= rc
        idx = np.array(sorted(exp))
        w = np.exp(-d[i, idx])
        v[i, idx] = w / w.sum()
    if k2 > 1:
        v = np.stack([v[order[i, :k2]].mean(0) for i in range(n)])
    jac = np.zeros((n, n))
    for i in range(n):
        mn = np.minimum(v[i][None], v).sum(1)
        mx = np.maximum(v[i][None], v).sum(1)
        jac[i] = 1 - mn / mx
    return (1 - lam) * jac + lam * d


def test_k_reciprocal_matches_dense_definition() -> None:
    x = bridged_clusters(n_classes=6, per_stage=6, seed=2).x.double()
    q, g = x[:15], x[15:]
    ref = _k_reciprocal_dense(x.numpy(), 20, 6, 0.3)[:15, 15:]
    got = -k_reciprocal_rerank(q, g, k1=20, k2=6, lambda_value=0.3, backend="torch")
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-10)
    # top-k form is exact (including items that share no encoding mass)
    s, i = k_reciprocal_rerank(q, g, topk=len(g), backend="torch")
    np.testing.assert_allclose(-s.numpy(), np.sort(ref, 1), atol=1e-10)
    # lambda = 1 is the normalised original distance
    d1 = -k_reciprocal_rerank(q, g, lambda_value=1.0, backend="torch")
    xx = torch.cat([q, g])
    dist = torch.cdist(xx, xx) ** 2
    torch.testing.assert_close(d1, (dist / dist.amax(1, keepdim=True))[:15, 15:])


# k2 > k1 + 1: the local QE reads past the k1 lists
@pytest.mark.parametrize("k1,k2", [(6, 1), (5, 3), (3, 9)])
def test_k_reciprocal_all_vs_all(k1: int, k2: int) -> None:
    x = _x(30, seed=3)
    got = -k_reciprocal_rerank(None, x, k1=k1, k2=k2, backend="torch")
    np.testing.assert_allclose(got.numpy(), _k_reciprocal_dense(x.numpy(), k1, k2, 0.3), atol=1e-10)


# ----------------------------------------------------------------------------- GQE


def _gqe_dense(
    x: np.ndarray, k1: int, k2: int, alpha: float, layers: int, variant: str
) -> np.ndarray:
    n = len(x)
    s = x @ x.T
    order = np.argsort(-s, axis=1, kind="stable")
    a = np.zeros((n, n))
    for i in range(n):
        a[i, order[i, :k1]] = 1.0
    h = (a + a.T) / 2 if variant == "thesis" else a.copy()
    for _ in range(layers):
        if variant == "code":
            h = h + h.T
        new = np.zeros_like(h) if variant == "thesis" else h.copy()
        for i in range(n):
            for j in order[i, :k2]:
                new[i] += max(s[i, j], 0) ** alpha * h[j]
        h = new / np.linalg.norm(new, axis=1, keepdims=True)
    h = h / np.linalg.norm(h, axis=1, keepdims=True)
    return h @ h.T


@pytest.mark.parametrize(
    "variant,layers,alpha",
    [("thesis", 1, 1.0), ("thesis", 2, 3.0), ("code", 2, 2.0), ("thesis", 0, 1.0)],
)
def test_gqe_matches_dense(variant: str, layers: int, alpha: float) -> None:
    x = _x(40, seed=4)
    got = gqe(x, k1=8, k2=3, alpha=alpha, layers=layers, variant=variant, backend="torch")
    np.testing.assert_allclose(
        got.numpy(), _gqe_dense(x.numpy(), 8, 3, alpha, layers, variant), atol=1e-10
    )


def test_gqe_queries_topk_and_permutation() -> None:
    x = _x(50, seed=5)
    full = gqe(x, k1=10, k2=4, backend="torch")
    s, i = gqe(x, k1=10, k2=4, topk=7, backend="torch")
    torch.testing.assert_close(s, torch.topk(full, 7, dim=1).values)
    # separate queries: the graph is built on [queries; gallery]
    q = gqe(x[10:], x[:10], k1=10, k2=4, backend="torch")
    both = gqe(torch.cat([x[:10], x[10:]]), k1=10, k2=4, backend="torch")
    torch.testing.assert_close(q, both[:10, 10:])
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(gqe(x[perm], k1=10, k2=4, backend="torch"), full[perm][:, perm])


def test_gqe_encoding_edges_runs_and_differs() -> None:
    x = _x(40, seed=6)
    a = gqe(x, k1=8, k2=3, backend="torch")
    b = gqe(x, k1=8, k2=3, edge_similarity="encoding", backend="torch")
    assert a.shape == b.shape == (40, 40)
    assert torch.isfinite(b).all() and not torch.allclose(a, b)


def test_expansion_helps_on_bridged_clusters() -> None:
    """Digest R3 (prototype: raw 45.1, alpha-QE(1,3) 57.5, GQE(38,5,1) 64.1)."""
    ds = bridged_clusters(seed=0)
    x, y = ds.x.double(), ds.labels
    raw = _map(x @ x.T, y)
    xq = alpha_qe(x, n=2, alpha=1.0)
    aqe = _map(xq @ xq.T, y)
    g = _map(gqe(x, k1=38, k2=5, alpha=1.0), y)
    assert abs(raw - 0.451) < 0.005
    assert aqe > raw + 0.08 and g > aqe + 0.04, (raw, aqe, g)


def test_errors() -> None:
    x = _x(10)
    with pytest.raises(ValueError, match="alpha"):
        alpha_qe(x, n=2, alpha=-1.0)
    with pytest.raises(ValueError, match="d="):
        alpha_qe(x, torch.ones(4, 3))
    with pytest.raises(ValueError, match="variant"):
        gqe(x, k1=3, k2=2, variant="gnn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lambda_value"):
        k_reciprocal_rerank(x, x, k1=3, lambda_value=2.0)
    with pytest.raises(ValueError, match="k1"):
        k_reciprocal_rerank(None, x, k1=20)
    with pytest.raises(ValueError, match="NaN"):
        gqe(torch.full((5, 2), float("nan")))


def test_k_larger_than_the_set_names_the_argument() -> None:
    """Each function names its own cut-off (issue 16), not the ``k`` of the shared kNN helper."""
    x = _x(10)
    with pytest.raises(ValueError, match=r"^n=11 is larger than the gallery"):
        alpha_qe(x[:3], x, n=11)
    with pytest.raises(ValueError, match=r"^n=10 is too large"):
        alpha_qe(x, n=10)  # all-vs-all: 9 other items
    with pytest.raises(ValueError, match=r"^k1=11 is too large"):
        gqe(x, k1=11, k2=2)
    with pytest.raises(ValueError, match=r"^k2=11 is too large"):
        gqe(x, k1=3, k2=11)
    with pytest.raises(ValueError, match=r"^k2=21 is larger than the number of items"):
        k_reciprocal_rerank(x, x, k1=3, k2=21)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="alpha"):
            alpha_qe(x, n=2, alpha=bad)
        with pytest.raises(ValueError, match="alpha"):
            gqe(x, k1=3, k2=2, alpha=bad)
