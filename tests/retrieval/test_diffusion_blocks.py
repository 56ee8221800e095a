"""Truncated diffusion's block machinery (Iscen et al. 2017 truncation): candidate sets, the padded
block-diagonal operator, block CG, against independent dense constructions and per-set solves."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from rank_lab.retrieval._diffusion_blocks import (
    BlockLayout,
    NeighbourTable,
    block_operator,
    candidate_sets,
    truncated_solve,
)
from rank_lab.retrieval._diffusion_kernels import block_cg
from rank_lab.retrieval.diffusion_graph import build_graph


def _x(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(
        torch.randn(n, d, generator=g, dtype=torch.float64), dim=1
    ).float()


def _sets(n: int, sizes: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    parts = [np.sort(rng.choice(n, s, replace=False)) for s in sizes]
    return np.concatenate([[0], np.cumsum(sizes)]), np.concatenate(parts)


def _dense_block(w: sp.csr_matrix, c: np.ndarray, alpha: float) -> np.ndarray:
    """Independent: ``-alpha D^-1/2 W[C, C] D^-1/2`` from the dense sub-matrix."""
    sub = w.toarray()[np.ix_(c, c)]
    deg = sub.sum(1)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    return -alpha * inv[:, None] * sub * inv[None, :]


@pytest.mark.parametrize("mutual", [True, False])
def test_block_operator_equals_the_dense_sub_graphs(mutual: bool) -> None:
    x = _x(90, 5, seed=1)
    g = build_graph(x, k=7, mutual=mutual, backend="torch")
    offsets, nodes = _sets(90, [30, 12, 41, 1, 30], seed=2)
    layout = BlockLayout(offsets, nodes)
    assert layout.shape == (5, 41)
    table = NeighbourTable(g.affinity)
    csr_rows = NeighbourTable(g.affinity)
    csr_rows.cols = None  # force the CSR-rows path
    mark = np.full(91, -1, dtype=np.int32)
    for tab in (table, csr_rows):
        m = block_operator(tab, layout, mark, 0.9).toarray()
        assert (mark == -1).all()  # the scratch table is left as it was
        want = np.zeros_like(m)
        for b in range(5):
            c = nodes[offsets[b] : offsets[b + 1]]
            at = b * 41 + np.arange(c.shape[0])
            want[np.ix_(at, at)] = _dense_block(g.affinity, c, 0.9)
        np.testing.assert_allclose(m, want, rtol=1e-13, atol=1e-15)


def test_neighbour_table_keeps_csr_rows_for_hub_graphs() -> None:
    n = 60
    rows = np.concatenate([np.zeros(59, dtype=int), np.arange(1, 60)])
    cols = np.concatenate([np.arange(1, 60), np.zeros(59, dtype=int)])
    star = sp.csr_matrix((np.ones(118), (rows, cols)), shape=(n, n))  # node 0 is a hub of degree 59
    assert NeighbourTable(star).cols is None
    x = _x(50, 4, seed=3)
    assert NeighbourTable(build_graph(x, k=6, backend="torch").affinity).cols is not None


def _cg_reference(a: np.ndarray, b: np.ndarray, iters: int, tol: float) -> np.ndarray:
    """Plain textbook CG on one dense system (independent of the block code)."""
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rs = r @ r
    bn = max(np.sqrt(rs), np.finfo(float).tiny)
    for _ in range(iters):
        if np.sqrt(rs) <= tol * bn:
            break
        ap = a @ p
        step = rs / (p @ ap)
        x = x + step * p
        r = r - step * ap
        rs_new = r @ r
        if np.sqrt(rs_new) <= tol * bn:
            break
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


@pytest.mark.parametrize("iters,tol", [(20, 1e-6), (500, 1e-12)])
def test_block_cg_equals_per_set_cg(iters: int, tol: float) -> None:
    x = _x(120, 6, seed=4)
    g = build_graph(x, k=8, backend="torch")
    sizes = [50, 37, 50, 9]
    offsets, nodes = _sets(120, sizes, seed=5)
    layout = BlockLayout(offsets, nodes)
    m_neg = block_operator(
        NeighbourTable(g.affinity), layout, np.full(121, -1, dtype=np.int32), 0.95
    )
    rng = np.random.default_rng(6)
    rhs = np.zeros(layout.shape)
    for b, s in enumerate(sizes):
        rhs[b, :s] = rng.random(s)
    got = block_cg(
        m_neg.indptr,
        m_neg.indices,
        m_neg.data,
        rhs.reshape(-1),
        layout.sizes,
        layout.width,
        iters,
        tol,
    ).reshape(layout.shape)
    for b, s in enumerate(sizes):
        c = nodes[offsets[b] : offsets[b + 1]]
        a = np.eye(s) + _dense_block(g.affinity, c, 0.95)
        np.testing.assert_allclose(
            got[b, :s], _cg_reference(a, rhs[b, :s], iters, tol), rtol=1e-9, atol=1e-12
        )
        assert (got[b, s:] == 0).all()  # the padding stays zero


def test_a_set_gives_the_same_bits_whatever_its_group() -> None:
    """Padding to the group's widest set must not change a set's result (dot products over its own
    entries)."""
    x = _x(200, 6, seed=7)
    g = build_graph(x, k=8, backend="torch")
    offsets, nodes = _sets(200, [40, 90, 40, 61, 40], seed=8)
    y_rows = np.repeat(np.arange(5), 3)
    y_cols = np.concatenate([nodes[offsets[b] : offsets[b] + 3] for b in range(5)])
    y_vals = np.linspace(0.2, 1.0, 15)
    outs = [
        truncated_solve(
            g.affinity, offsets, nodes, y_rows, y_cols, y_vals, 0.99, 20, 1e-6, threads, group=grp
        )
        for grp, threads in ((1, 1), (2, 1), (5, 1), (2, 2))
    ]
    for other in outs[1:]:
        assert np.array_equal(outs[0], other)


def test_candidate_sets_are_the_top_r_with_ties_and_extras() -> None:
    x = _x(80, 4, seed=9)
    x[10:14] = x[3]  # exact duplicates: tied scores at any cut
    q = x[:12]
    extra = torch.tensor([[79, 3]] * 12)
    offsets, nodes = candidate_sets(x, q, 15, extra, "cpu")
    s = (q.double() @ x.double().T).numpy()
    for i in range(12):
        got = nodes[offsets[i] : offsets[i + 1]]
        assert np.array_equal(got, np.sort(got))
        kth = np.sort(s[i])[::-1][14]
        want = set(np.flatnonzero(s[i] >= kth - 1e-6).tolist()) | {79, 3}
        assert set(got.tolist()) == want, i


def test_graph_without_edges_keeps_every_item_isolated() -> None:
    """No mutual neighbour at all: every sub-graph is empty, the diffusion is the query vector
    itself."""
    w = sp.csr_matrix((6, 6))
    table = NeighbourTable(w)
    assert table.cols is None and table.width == 0
    offsets, nodes = np.array([0, 3, 6]), np.array([0, 2, 4, 1, 3, 5])
    f = truncated_solve(
        w,
        offsets,
        nodes,
        np.array([0, 1]),
        np.array([2, 3]),
        np.array([0.5, 2.0]),
        0.9,
        20,
        1e-6,
        1,
    )
    # aligned with nodes
    np.testing.assert_allclose(f, (1 - 0.9) * np.array([0, 0.5, 0, 0, 2.0, 0]), rtol=1e-12)
