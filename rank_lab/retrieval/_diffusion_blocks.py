"""Truncated diffusion solved for many queries at once: candidate sets, block sub-graphs, block CG.

The truncation of Iscen et al., "Efficient diffusion on region manifolds", CVPR 2017 (cited by the
Gominski thesis §3.4.2 as [36]): query ``q``'s system ``(I - alpha S_C) f = y`` is restricted to its
candidate set ``C`` (its ``R`` nearest gallery items by cosine), ``S_C = D_C^{-1/2} W[C, C]
D_C^{-1/2}`` the sub-graph re-normalised with its own degrees; the items outside ``C`` keep their
cosine order below the diffused ones. The work per query is ``O(iters * R k)`` whatever the gallery
size ``n``.

Many queries are solved together: the sub-graphs of a *group* of sets are built at once as one
block-diagonal operator laid out in a padded ``(B, W)`` layout (set ``b`` at rows ``b W ...``,
padded to the largest set ``W``; numpy passes over the gathered rows of the candidates), then the
compiled kernel :func:`rank_lab.retrieval._diffusion_kernels.block_cg` runs each block's CG with the
block in cache. Groups are spread over threads (numpy's loops and the kernel release the GIL).

Used by :func:`rank_lab.retrieval.diffusion.diffusion_search` and
:func:`rank_lab.retrieval.diffusion.offline_diffusion`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from queue import SimpleQueue

import numpy as np
import scipy.sparse as sp
import torch

from rank_lab.metrics.engine.search.certified import certified_lists
from rank_lab.retrieval._diffusion_kernels import block_cg
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "BlockLayout",
    "NeighbourTable",
    "candidate_sets",
    "block_operator",
    "truncated_solve",
    "truncated_rank",
]


class BlockLayout:
    """Where the nodes of a group of sets live in the padded ``(B, W)`` layout.

    Args:
        offsets: ``(B + 1,)`` set boundaries in ``nodes``.
        nodes: ``(m,)`` concatenated sets (each sorted).

    Attributes:
        sizes: ``(B,)`` set sizes; ``width``: ``W = max(sizes)``.
        position: ``(m,)`` flat padded position ``b * W + slot`` of every entry of ``nodes``.
    """

    def __init__(self, offsets: np.ndarray, nodes: np.ndarray) -> None:
        self.offsets = offsets
        self.nodes = nodes
        self.sizes = np.diff(offsets)
        self.n_sets = int(self.sizes.shape[0])
        self.width = int(self.sizes.max()) if self.n_sets else 0
        set_of = np.repeat(np.arange(self.n_sets), self.sizes)
        self.position = set_of * self.width + (np.arange(nodes.shape[0]) - offsets[set_of])

    @property
    def shape(self) -> tuple[int, int]:
        """``(B, W)``."""
        return self.n_sets, self.width


def candidate_sets(
    gallery: torch.Tensor,
    queries: torch.Tensor,
    r: int,
    extra: torch.Tensor | None,
    device: DeviceLike,
) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the ``r`` nearest gallery items by cosine (ties at the r-th included), united with
    ``extra``.

    The sets are the certified exact top-``r`` sets of
    :func:`rank_lab.metrics.engine.search.certified.certified_neighbours` (unordered mode, its
    kernel), united with the ``extra (Q, e)`` gallery indices (a query vector's support, almost
    always inside already).

    Args:
        gallery: ``(n, d)``; queries: ``(Q, d)``; r: set size before ties and extras.
        extra: ``(Q, e)`` long gallery indices or None.
        device: for the neighbour search.

    Returns:
        ``(offsets (Q + 1,), nodes)``: set ``q`` is ``nodes[offsets[q]:offsets[q + 1]]``, sorted.
    """
    dev = get_device(device)
    work = torch.float64 if torch.float64 in (queries.dtype, gallery.dtype) else torch.float32
    kq = torch.full((queries.shape[0],), r, dtype=torch.long)
    lists = certified_lists(
        queries.to(dev, work),
        gallery.to(dev, work),
        kq,
        exclude_self=False,
        precision="exact",
        device=dev,
        tile=4096,
        ordered=False,
        progress=False,
    )
    n = gallery.shape[0]
    offsets, cols = lists.offsets.numpy(), lists.indices.numpy()
    if extra is None:
        return offsets, cols
    n_q = queries.shape[0]
    # sorted: rows, then items
    key = np.repeat(np.arange(n_q, dtype=np.int64) * n, np.diff(offsets)) + cols
    want = (np.arange(n_q, dtype=np.int64)[:, None] * n + extra.cpu().long().numpy()).reshape(-1)
    at = np.minimum(np.searchsorted(key, want), max(key.size - 1, 0))
    missing = want[key[at] != want] if key.size else want
    if not missing.size:  # the query vector's support is almost always inside already
        return offsets, cols
    key = np.unique(np.concatenate([key, missing]))
    rows, cols = np.divmod(key, n)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_q))])
    return offsets, cols


class NeighbourTable:
    """The affinity graph's rows as a padded ``(n, K)`` table, ``K`` the largest degree.

    ``cols[u, :deg(u)]`` are ``u``'s neighbours (CSR order), the padding holds ``n`` (a sentinel
    never in a set); ``vals`` the matching weights (0 in the padding). Gathering the rows of a set
    is then a contiguous copy and every index is machine-sized (no per-call index conversion).
    Graphs with hubs (``K`` more than twice the mean degree plus 8, e.g. a union kNN graph) keep the
    CSR rows instead (``cols is None``): the table would be mostly padding.

    Args:
        w: ``(n, n)`` CSR affinity.
    """

    def __init__(self, w: sp.csr_matrix) -> None:
        self.w = w
        self.n = int(w.shape[0])
        deg = np.diff(w.indptr)
        self.width = int(deg.max()) if deg.size else 0
        self.cols: np.ndarray | None = None
        self.vals: np.ndarray | None = None
        if self.n and 0 < self.width <= 2 * float(deg.mean()) + 8:
            row = np.repeat(np.arange(self.n), deg)
            slot = np.arange(w.nnz) - w.indptr[row]
            self.cols = np.full((self.n, self.width), self.n, dtype=np.intp)
            self.vals = np.zeros((self.n, self.width))
            self.cols[row, slot] = w.indices
            self.vals[row, slot] = w.data

    def gather(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The rows ``nodes``: ``(cols, indptr, data)``, flat neighbour indices (padding ``n``), the
        row boundaries in them, and their weights (None with the table: see :meth:`weights`)."""
        if self.cols is not None:
            return (
                np.take(self.cols, nodes, axis=0).reshape(-1),
                np.arange(nodes.shape[0] + 1) * self.width,
                None,
            )
        rows_w = self.w[nodes]
        return rows_w.indices.astype(np.intp), rows_w.indptr, rows_w.data

    def weights(
        self, data: np.ndarray | None, kept_at: np.ndarray, kept_rows: np.ndarray, nodes: np.ndarray
    ) -> np.ndarray:
        """Weights at the flat positions ``kept_at`` of :meth:`gather` ``(nodes)`` (``data``: its
        third output; ``kept_rows``: kept positions per row).

        With the table only the kept weights are read (a quarter of the row entries for a mutual
        kNN graph restricted to a candidate set), not whole rows.
        """
        if data is not None:
            return np.take(data, kept_at, mode="clip")
        # row r -> row nodes[r]
        shift = np.repeat((nodes - np.arange(nodes.shape[0])) * self.width, kept_rows)
        shift += kept_at
        return np.take(self.vals.reshape(-1), shift, mode="clip")


def block_operator(
    table: NeighbourTable, layout: BlockLayout, mark: np.ndarray, alpha: float
) -> sp.csr_matrix:
    """``-alpha S_C`` of every set of ``layout``, as one block-diagonal CSR matrix in the padded
    layout.

    Block ``b`` is ``-alpha D^{-1/2} W[C_b, C_b] D^{-1/2}`` with the degrees of the sub-graph (the
    normalisation of :func:`rank_lab.retrieval.graph.normalize_graph`, isolated nodes 0); row and
    column ``b * W + slot`` is the node ``nodes[offsets[b] + slot]``. Cost ``O(sum_b |C_b| k)``: the
    candidates' rows only, never a length-n vector (``mark``, a length ``n + 1`` int32 scratch array
    of -1, is reused and left as it was).

    Args:
        table: the affinity graph's rows (:class:`NeighbourTable`); layout: the sets; mark: scratch;
            alpha: in ``[0, 1)``.

    Returns:
        ``(B W, B W)`` CSR.
    """
    nodes, offsets, pos = layout.nodes, layout.offsets, layout.position
    cols, indptr, data = table.gather(nodes)  # the candidates' rows, in order
    local = np.empty(cols.shape[0], dtype=np.int32)
    bounds = indptr[offsets]
    # node -> padded position, one set at a time (mark stays in cache)
    for b in range(layout.n_sets):
        lo, hi = offsets[b], offsets[b + 1]
        c = nodes[lo:hi]
        mark[c] = pos[lo:hi]
        np.take(
            mark, cols[bounds[b] : bounds[b + 1]], out=local[bounds[b] : bounds[b + 1]], mode="clip"
        )
        mark[c] = -1
    inside = local >= 0  # entries inside their own set
    kept_at = np.flatnonzero(inside)
    if table.cols is not None:  # fixed-width rows
        kept_rows = np.add.reduceat(inside.view(np.uint8), indptr[:-1], dtype=np.intp)
    else:
        kept_rows = np.diff(np.searchsorted(kept_at, indptr))
    vals = table.weights(data, kept_at, kept_rows, nodes)
    local = np.take(local, kept_at, mode="clip")
    starts = np.concatenate([[0], np.cumsum(kept_rows)[:-1]])
    deg = (
        np.add.reduceat(np.append(vals, 0.0), starts) if vals.size else np.zeros(kept_rows.shape[0])
    )
    deg = np.where(kept_rows > 0, deg, 0.0)
    inv = np.zeros(deg.shape[0])
    np.divide(1.0, np.sqrt(deg), out=inv, where=deg > 0)
    size = layout.n_sets * layout.width
    inv_p = np.zeros(size)
    inv_p[pos] = inv
    vals = vals * np.repeat(-alpha * inv, kept_rows) * np.take(inv_p, local, mode="clip")
    counts = np.zeros(size + 1, dtype=np.int64)
    counts[pos + 1] = kept_rows
    return sp.csr_matrix((vals, local, np.cumsum(counts)), shape=(size, size))


def truncated_solve(
    w: sp.csr_matrix | NeighbourTable,
    offsets: np.ndarray,
    nodes: np.ndarray,
    y_rows: np.ndarray,
    y_cols: np.ndarray,
    y_vals: np.ndarray,
    alpha: float,
    iters: int,
    tol: float,
    threads: int,
    group: int = 32,
) -> np.ndarray:
    """Diffusion scores ``(1 - alpha) f`` on every candidate set (flat, aligned with ``nodes``).

    Set ``b`` is ``nodes[offsets[b]:offsets[b + 1]]`` (sorted); its right-hand side holds ``y_vals``
    at the entries ``y_cols`` of the rows ``y_rows == b`` (all inside the set). Sets are solved in
    groups of ``group`` (one padded block-diagonal system each) by ``threads`` threads.

    Args:
        w: ``(n, n)`` affinity CSR; offsets, nodes: the sets; y_rows, y_cols, y_vals: ``y`` in COO
            form.
        alpha, iters, tol: diffusion and CG parameters; threads, group: parallel layout.

    Returns:
        ``(m,)`` float64 scores.
    """
    n_sets = offsets.shape[0] - 1
    out = np.empty(nodes.shape[0], dtype=np.float64)
    order = np.argsort(y_rows, kind="stable")
    y_rows, y_cols, y_vals = y_rows[order], y_cols[order], y_vals[order]
    y_bounds = np.searchsorted(y_rows, np.arange(n_sets + 1))
    table = w if isinstance(w, NeighbourTable) else NeighbourTable(w)
    n = table.n

    def work(a: int, mark: np.ndarray) -> None:
        z = min(a + group, n_sets)
        lo, hi = offsets[a], offsets[z]
        layout = BlockLayout(offsets[a : z + 1] - lo, nodes[lo:hi])
        m_neg = block_operator(table, layout, mark, alpha)
        ys = slice(y_bounds[a], y_bounds[z])
        rhs = np.zeros(layout.shape)
        at = layout.position[
            _positions_in_sets(layout.offsets, layout.nodes, y_rows[ys] - a, y_cols[ys])
        ]
        np.add.at(rhs.reshape(-1), at, y_vals[ys])
        x = block_cg(
            m_neg.indptr,
            m_neg.indices,
            m_neg.data,
            rhs.reshape(-1),
            layout.sizes,
            layout.width,
            iters,
            tol,
        )
        out[lo:hi] = (1.0 - alpha) * x[layout.position]

    starts = list(range(0, n_sets, group))
    if threads <= 1 or len(starts) <= 1:
        mark = np.full(n + 1, -1, dtype=np.int32)
        for a in starts:
            work(a, mark)
        return out
    marks: SimpleQueue = SimpleQueue()  # one length-n position table per thread
    for _ in range(threads):
        marks.put(np.full(n + 1, -1, dtype=np.int32))

    def run(a: int) -> None:
        mark = marks.get()
        try:
            work(a, mark)
        finally:
            marks.put(mark)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(run, starts))
    return out


def _positions_in_sets(
    offsets: np.ndarray, nodes: np.ndarray, rows: np.ndarray, cols: np.ndarray
) -> np.ndarray:
    """Flat position of node ``cols[m]`` inside set ``rows[m]`` (which must hold it)."""
    n = int(max(nodes.max(initial=0), cols.max(initial=0))) + 1
    set_of = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    keys = set_of * n + nodes  # sorted: sets in order, nodes sorted inside each set
    want = rows.astype(np.int64) * n + cols
    pos = np.searchsorted(keys, want)
    if pos.size and (pos.max() >= keys.size or not np.array_equal(keys[pos], want)):
        raise RuntimeError("a query-vector entry lies outside its candidate set")
    return pos


def truncated_rank(
    gallery: torch.Tensor,
    queries: torch.Tensor,
    offsets: np.ndarray,
    nodes: np.ndarray,
    f: np.ndarray,
    topk: int | None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Top-k (or dense rows) from the diffused candidate scores.

    Items outside a query's candidates come after them in their cosine order
    (``low + clip(cos, -1, 1)`` with ``low = min f - 3``), as in the truncation of Iscen et al.
    2017.

    Args:
        gallery: ``(n, d)``; queries: ``(Q, d)``; offsets, nodes: the sets; f: ``(m,)`` their
            scores.
        topk: list length, or None for dense ``(Q, n)`` scores.

    Returns:
        Dense ``(Q, n)`` float32 scores, or ``(scores (Q, topk), indices (Q, topk))``.
    """
    n_q = offsets.shape[0] - 1
    n = gallery.shape[0]
    sizes = np.diff(offsets)
    width = int(sizes.max()) if n_q else 0
    set_of = np.repeat(np.arange(n_q), sizes)
    slot = np.arange(nodes.shape[0]) - offsets[set_of]
    fm = torch.full((n_q, width), -torch.inf, dtype=torch.float64)
    im = torch.full((n_q, width), -1, dtype=torch.long)
    fm[set_of, slot] = torch.from_numpy(f)
    im[set_of, slot] = torch.from_numpy(nodes)
    if topk is not None and topk <= int(sizes.min()):
        v, j = torch.topk(fm, topk, dim=1)
        return v.float(), im.gather(1, j)
    # dense rows, or lists longer than some candidate set: the cosine of every item is needed
    low = fm.masked_fill(torch.isinf(fm), torch.inf).amin(1) - 3.0
    out_v, out_i = [], []
    for a in range(0, n_q, 256):
        z = min(a + 256, n_q)
        cos = (queries[a:z].to(gallery.dtype) @ gallery.T).double().clamp(-1.0, 1.0)
        dense = low[a:z, None] + cos
        rr = torch.from_numpy(set_of[offsets[a] : offsets[z]] - a)
        dense[rr, torch.from_numpy(nodes[offsets[a] : offsets[z]])] = torch.from_numpy(
            f[offsets[a] : offsets[z]]
        )
        if topk is None:
            out_v.append(dense.float())
        else:
            v, j = torch.topk(dense, min(topk, n), dim=1)
            out_v.append(v.float())
            out_i.append(j)
    return torch.cat(out_v) if topk is None else (torch.cat(out_v), torch.cat(out_i))
