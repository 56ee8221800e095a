"""Diffusion on the kNN affinity graph, solved with conjugate gradient (Iscen et al. 2017).

[EXT, NOT IN THE THESIS] The Gominski thesis only cites this family ([36], [113]; §3.4.2, where
the graph of Eq. 3.3 is kept to its k nearest neighbours); the formulation is that of Iscen et al.,
"Efficient diffusion on region manifolds", CVPR 2017 (the thesis' [36]):

* offline graph: mutual kNN affinity ``w_ij = [s_ij]_+^gamma`` (``k`` neighbours), symmetric
  normalisation ``S = D^{-1/2} W D^{-1/2}`` (:mod:`rank_lab.retrieval.graph`);
* query vector ``y_j = [s(q, x_j)]_+^gamma`` on the ``k_q`` nearest gallery items of the query,
  0 elsewhere;
* ranking scores ``f`` solve ``L_alpha f = y`` with ``L_alpha = (I - alpha S) / (1 - alpha)``,
  i.e. ``f = (1 - alpha)(I - alpha S)^{-1} y``. ``I - alpha S`` is symmetric positive definite for
  ``0 <= alpha < 1`` (the eigenvalues of ``S`` lie in ``[-1, 1]``), so conjugate gradient applies:
  each iteration is one sparse product, ``O(n k)`` per query;
* truncation: the system is restricted to the top-``R`` items of the initial (cosine) ranking,
  the sub-graph ``W[R, R]`` is re-normalised, and the items outside keep their initial order below
  the diffused ones; ``O(R k)`` per query whatever ``n``.

Defaults of the code released with Iscen et al. 2017: ``k = 50``, ``k_q = 10``, ``alpha = 0.99``,
``gamma = 3``, ``R = 1000``, 20 iterations, tolerance 1e-6. The released code applies the power
kernel twice to the query vector (``s^9``); the paper's ``s^gamma`` is used here.

Three entry points: :func:`build_graph` (offline), :func:`diffusion_search` (the query-time form:
new queries, full or truncated graph), :func:`offline_diffusion` (every gallery item diffused as a
query: the all-vs-all re-ranking of protocols whose queries belong to the base, e.g. ALEGORIA).
Memory is ``O(n k)`` for the graph and ``O(n B)`` for a batch of ``B`` queries; a dense ``(Q, n)``
result is only returned when asked (``topk=None``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from queue import SimpleQueue

import numpy as np
import scipy.sparse as sp
import torch

from rank_lab._progress import tqdm
from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_float,
    check_positive_int,
    check_sparse,
)
from rank_lab.metrics.certified import certified_neighbours
from rank_lab.metrics.engine import knn_search
from rank_lab.retrieval.graph import (
    check_dense_ok,
    knn_self,
    mutual_affinity,
    normalize_graph,
    sparse_operator,
)
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "DiffusionGraph",
    "build_graph",
    "conjugate_gradient",
    "query_vectors",
    "diffuse",
    "diffusion_search",
    "offline_diffusion",
]


@dataclass
class DiffusionGraph:
    """The offline part of diffusion: the gallery, its neighbour lists and its affinity graph.

    Attributes:
        gallery: ``(n, d)`` gallery descriptors (CPU).
        knn_scores, knn_indices: ``(n, k)`` neighbours of each item (self excluded).
        affinity: ``W``, symmetric ``(n, n)`` CSR.
        normalized: ``S = D^{-1/2} W D^{-1/2}``, ``(n, n)`` CSR.
        k, gamma, mutual: construction parameters.
    """

    gallery: torch.Tensor
    knn_scores: torch.Tensor
    knn_indices: torch.Tensor
    affinity: sp.csr_matrix
    normalized: sp.csr_matrix
    k: int
    gamma: float
    mutual: bool

    @property
    def n(self) -> int:
        """Number of gallery items."""
        return int(self.gallery.shape[0])

    def nbytes(self) -> int:
        """Bytes held by the sparse graph and neighbour lists (not the gallery descriptors)."""
        b = self.knn_scores.numel() * self.knn_scores.element_size() + self.knn_indices.numel() * 8
        for m in (self.affinity, self.normalized):
            b += m.data.nbytes + m.indices.nbytes + m.indptr.nbytes
        return int(b)


def build_graph(
    gallery: torch.Tensor,
    k: int = 50,
    *,
    gamma: float = 3.0,
    mutual: bool = True,
    backend: str = "auto",
    device: DeviceLike = None,
    chunk_size: int | None = None,
) -> DiffusionGraph:
    """Offline stage: kNN search, mutual affinity ``[s]_+^gamma`` and normalisation (Iscen et al. 2017).

    Args:
        gallery: ``(n, d)`` descriptors, L2-normalised (cosine similarity = inner product).
        k: neighbours per item (self excluded; the reference code's ``K`` counts self, ``K = k + 1``).
        gamma: similarity power.
        mutual: keep only mutual neighbours (Iscen et al.); ``False`` keeps the union.
        backend, device, chunk_size: for the kNN search (faiss or chunked torch).
    """
    gallery = check_embeddings(gallery, "gallery").detach().cpu()
    k = check_positive_int(k, "k")
    gamma = _check_gamma(gamma)
    scores, idx = knn_self(gallery, k, backend=backend, device=device, chunk_size=chunk_size)
    w = mutual_affinity(scores, idx, gallery.shape[0], gamma=gamma, mutual=mutual)
    return DiffusionGraph(gallery, scores, idx, w, normalize_graph(w), k, float(gamma), bool(mutual))


def conjugate_gradient(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    b: torch.Tensor,
    *,
    iters: int = 20,
    tol: float = 1e-6,
    x0: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | int]]:
    """Conjugate gradient for ``A X = B`` with ``A`` symmetric positive definite, column-wise batched.

    Every column is an independent CG run (its own step sizes); a column stops moving once its
    residual is below ``tol * ||b||``.

    Args:
        matvec: ``X (n, m) -> A X (n, m)``.
        b: ``(n, m)`` right-hand sides.
        iters: maximum number of iterations.
        tol: relative residual tolerance.
        x0: ``(n, m)`` starting point (default 0).

    Returns:
        ``(X (n, m), {"iterations": int, "residual": (m,) relative residual norms})``.
    """
    b = as_tensor(b, "b")
    if b.ndim != 2:
        raise ValueError(f"b must have shape (n, m), got {tuple(b.shape)}")
    if b.shape[0] == 0 or b.shape[1] == 0:
        raise ValueError(f"b is empty (shape {tuple(b.shape)})")
    if not b.is_floating_point():
        b = b.double()
    check_finite(b, "b")
    iters = check_positive_int(iters, "iters")
    tol = _check_tol(tol)
    x = torch.zeros_like(b) if x0 is None else x0.clone()
    r = b - matvec(x) if x0 is not None else b.clone()
    p = r.clone()
    rs = (r * r).sum(0)
    b_norm = b.norm(dim=0).clamp_min(torch.finfo(b.dtype).tiny)
    done = rs.sqrt() <= tol * b_norm
    it = 0
    for it in range(1, iters + 1):  # noqa: B007 - reported in info
        if bool(done.all()):
            it -= 1
            break
        ap = matvec(p)
        denom = (p * ap).sum(0)
        step = torch.where(done | (denom <= 0), torch.zeros_like(rs), rs / denom.clamp_min(torch.finfo(b.dtype).tiny))
        x = x + step * p
        r = r - step * ap
        rs_new = (r * r).sum(0)
        done = done | (rs_new.sqrt() <= tol * b_norm)
        beta = torch.where(done, torch.zeros_like(rs), rs_new / rs.clamp_min(torch.finfo(b.dtype).tiny))
        p = r + beta * p
        rs = rs_new
    return x, {"iterations": it, "residual": rs.sqrt() / b_norm}


def _check_graph(graph: object) -> None:
    if not isinstance(graph, DiffusionGraph):
        raise TypeError(f"graph must be a DiffusionGraph (build_graph), got {type(graph).__name__}")


def _check_alpha(alpha: float) -> float:
    return check_float(alpha, "alpha", low=0.0, high=1.0, high_open=True)


def _check_tol(tol: float) -> float:
    return check_float(tol, "tol", low=0.0, low_open=True)


def _check_gamma(gamma: float) -> float:
    return check_float(gamma, "gamma", low=0.0, low_open=True)


def query_vectors(
    graph: DiffusionGraph,
    queries: torch.Tensor,
    kq: int = 10,
    *,
    gamma: float | None = None,
    exclude_self: bool = False,
    backend: str = "auto",
    device: DeviceLike = None,
) -> tuple[sp.csr_matrix, torch.Tensor]:
    """Query vectors ``y_j = [s(q, x_j)]_+^gamma`` on the ``kq`` nearest gallery items (Iscen et al. 2017).

    Args:
        graph: from :func:`build_graph`.
        queries: ``(Q, d)``.
        kq: neighbours kept in ``y``.
        gamma: power (default: the graph's).
        exclude_self: the queries are the gallery rows (``Q == n``); item ``i`` is not its own neighbour.

    Returns:
        ``(Y (Q, n) CSR, initial (Q, kq) neighbour indices)``.

    Raises:
        TypeError / ValueError: naming the argument (not a :class:`DiffusionGraph`; queries not a
        finite ``(Q, d)`` matrix of the gallery's ``d``; ``kq`` not in ``[1, n]``; ``gamma <= 0``).
    """
    _check_graph(graph)
    queries = check_embeddings(queries, "queries").detach().cpu()
    if queries.shape[1] != graph.gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but the graph's gallery has d={graph.gallery.shape[1]}")
    kq = check_positive_int(kq, "kq")
    if not isinstance(exclude_self, bool):
        raise TypeError(f"exclude_self must be a bool, got {type(exclude_self).__name__}")
    if exclude_self and queries.shape[0] != graph.n:
        raise ValueError(f"exclude_self=True needs the queries to be the gallery (Q = n = {graph.n}), got Q = {queries.shape[0]}")
    n_avail = graph.n - int(exclude_self)
    if kq > n_avail:
        raise ValueError(f"kq={kq} is larger than the {n_avail} gallery items available")
    g = graph.gamma if gamma is None else _check_gamma(gamma)
    s, i = knn_search(queries, graph.gallery, kq, exclude_self=exclude_self, backend=backend, device=device)
    s, i = s.cpu().double(), i.cpu().long()
    vals = s.clamp_min(0).pow(g).numpy()
    rows = np.repeat(np.arange(queries.shape[0]), kq)
    y = sp.csr_matrix((vals.ravel(), (rows, i.numpy().ravel())), shape=(queries.shape[0], graph.n))
    return y, i


def diffuse(
    graph: DiffusionGraph,
    y: sp.spmatrix | torch.Tensor,
    *,
    alpha: float = 0.99,
    iters: int = 20,
    tol: float = 1e-6,
    batch_size: int = 256,
    device: DeviceLike = None,
    dtype: torch.dtype = torch.float32,
    progress: bool | None = None,
) -> torch.Tensor:
    """Solve ``L_alpha f = y`` on the full graph for every row of ``y`` (batched CG, sparse products).

    Args:
        graph: from :func:`build_graph`.
        y: ``(Q, n)`` query vectors (CSR from :func:`query_vectors` or a dense tensor).
        alpha: diffusion parameter in ``[0, 1)``.
        iters, tol: CG budget.
        batch_size: right-hand sides solved together (memory ``O(n * batch_size)``).
        device: compute device (the sparse graph is copied there once).
        dtype: compute dtype.
        progress: tqdm bar (default: more than 4 batches).

    Returns:
        ``f (Q, n)`` on the CPU: ``(1 - alpha) (I - alpha S)^{-1} y``.

    Raises:
        TypeError / ValueError: naming the argument (not a :class:`DiffusionGraph`; ``y`` not a
        finite non-empty ``(Q, n)`` matrix; ``alpha`` outside ``[0, 1)``; bad ``iters``, ``tol``,
        ``batch_size`` or ``dtype``).
    """
    _check_graph(graph)
    alpha = _check_alpha(alpha)
    iters = check_positive_int(iters, "iters")
    tol = _check_tol(tol)
    batch_size = check_positive_int(batch_size, "batch_size")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    if sp.issparse(y):
        y = check_sparse(y, "y")
    else:
        y = as_tensor(y, "y")
        if not y.is_floating_point():
            y = y.to(dtype)
        check_finite(y, "y")
    if y.ndim != 2 or y.shape[0] == 0:
        raise ValueError(f"y must be a non-empty (Q, n) matrix, got shape {tuple(y.shape)}")
    n_q = y.shape[0]
    if y.shape[1] != graph.n:
        raise ValueError(f"y has {y.shape[1]} columns but the graph has n={graph.n} items")
    dev = get_device(device)
    s_op = sparse_operator(graph.normalized, dev, dtype)

    def matvec(v: torch.Tensor) -> torch.Tensor:
        return v - alpha * s_op(v)

    out = torch.empty(n_q, graph.n, dtype=dtype)
    starts = range(0, n_q, batch_size)
    show = len(starts) > 4 if progress is None else progress
    if show:
        starts = tqdm(starts, desc="diffusion (CG)", leave=False)
    for a in starts:
        yb = y[a : a + batch_size]
        yb = torch.from_numpy(yb.toarray()) if sp.issparse(yb) else yb
        f, _ = conjugate_gradient(matvec, yb.to(dev, dtype).T.contiguous(), iters=iters, tol=tol)
        out[a : a + batch_size] = ((1 - alpha) * f).T.cpu()
    return out


def _block_subgraphs(w: sp.csr_matrix, offsets: np.ndarray, nodes: np.ndarray, mark: np.ndarray) -> sp.csr_matrix:
    """The graph restricted to each node set, normalised, as one block-diagonal CSR matrix.

    Block ``b`` holds the nodes ``nodes[offsets[b]:offsets[b + 1]]`` (sorted); row/column ``p`` of
    the result is the node at flat position ``p``. Every block is ``D^{-1/2} W[C, C] D^{-1/2}`` with
    the degrees of the sub-graph (:func:`~rank_lab.retrieval.graph.normalize_graph` of each block,
    entries in the same order). Cost ``O(sum_b |C_b| k)``: the rows of the candidates only, never
    a length-n vector (``mark``, a length-n scratch array of -1, is reused and left as it was).
    """
    m = nodes.shape[0]
    rows_w = w[nodes]  # the candidates' rows, in order (C row gather)
    cols = rows_w.indices
    local = np.empty(cols.shape[0], dtype=np.int64)
    bounds = rows_w.indptr[offsets]
    for b in range(offsets.shape[0] - 1):  # node -> flat position, one set at a time (mark stays in cache)
        c = nodes[offsets[b] : offsets[b + 1]]
        mark[c] = np.arange(offsets[b], offsets[b + 1])
        np.take(mark, cols[bounds[b] : bounds[b + 1]], out=local[bounds[b] : bounds[b + 1]])
        mark[c] = -1
    kept_at = np.flatnonzero(local >= 0)  # entries inside their own set (index + take: no boolean masks)
    local, vals = np.take(local, kept_at), np.take(rows_w.data, kept_at)
    kept_rows = np.diff(np.searchsorted(kept_at, rows_w.indptr))  # kept entries per row
    indptr = np.concatenate([[0], np.cumsum(kept_rows)])
    # degrees: sequential row sums (as scipy's), empty rows 0
    deg = np.add.reduceat(np.append(vals, 0.0), indptr[:-1])
    deg = np.where(kept_rows > 0, deg, 0.0)
    with np.errstate(divide="ignore"):
        inv = np.where(deg > 0, 1.0 / np.sqrt(deg), 0.0)
    vals = vals * np.repeat(inv, kept_rows) * inv[local]
    return sp.csr_matrix((vals, local, indptr), shape=(m, m))


def _block_cg(s_blocks: sp.csr_matrix, offsets: np.ndarray, b: np.ndarray, alpha: float, iters: int,
              tol: float) -> np.ndarray:
    """:func:`conjugate_gradient` on ``(I - alpha S) x = b`` for every block at once.

    Each block (``offsets[i]:offsets[i + 1]``) is an independent CG run with its own step sizes and
    stopping test ``||r|| <= tol ||b||``, exactly as the columns of :func:`conjugate_gradient`; the
    blocks share one sparse product per iteration. Vectors and products are in the dtype of ``b``
    and ``s_blocks`` (float64, or float32 for the fast mode); block sums are sequential
    (``reduceat``) and accumulated in float64, and so are the step sizes.
    """
    starts = offsets[:-1]
    sizes = np.diff(offsets)
    dt = b.dtype

    def seg(v: np.ndarray) -> np.ndarray:
        return np.add.reduceat(v, starts, dtype=np.float64)

    tiny = np.finfo(np.float64).tiny
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    tmp = np.empty_like(b)
    rs = seg(r * r)
    b_norm = np.maximum(np.sqrt(seg(b * b)), tiny)
    done = np.sqrt(rs) <= tol * b_norm
    for _ in range(iters):
        if done.all():
            break
        ap = s_blocks @ p
        ap *= dt.type(-alpha)
        ap += p
        np.multiply(p, ap, out=tmp)
        denom = seg(tmp)
        step = np.where(done | (denom <= 0), 0.0, rs / np.maximum(denom, tiny))
        step_e = np.repeat(step.astype(dt, copy=False), sizes)
        np.multiply(step_e, p, out=tmp)
        x += tmp
        np.multiply(step_e, ap, out=tmp)
        r -= tmp
        np.multiply(r, r, out=tmp)
        rs_new = seg(tmp)
        done = done | (np.sqrt(rs_new) <= tol * b_norm)
        beta = np.where(done, 0.0, rs_new / np.maximum(rs, tiny))
        p *= np.repeat(beta.astype(dt, copy=False), sizes)
        p += r
        rs = rs_new
    return x


def _truncated_solve(graph: DiffusionGraph, offsets: np.ndarray, nodes: np.ndarray, y_rows: np.ndarray,
                     y_cols: np.ndarray, y_vals: np.ndarray, alpha: float, iters: int, tol: float,
                     threads: int, group: int = 32, dtype: type = np.float64) -> np.ndarray:
    """Diffusion scores ``(1 - alpha) f`` on every candidate set (flat, aligned with ``nodes``).

    Set b is ``nodes[offsets[b]:offsets[b + 1]]`` (sorted); its right-hand side holds ``y_vals`` at
    the entries ``y_cols`` of the rows ``y_rows == b`` (all inside the set). Sets are solved in
    groups of ``group`` (one block-diagonal system each, small enough to stay in cache) by
    ``threads`` threads (scipy's sparse products and numpy's loops release the GIL).
    """
    n_sets = offsets.shape[0] - 1
    out = np.empty(nodes.shape[0], dtype=np.float64)
    y_order = np.argsort(y_rows, kind="stable")
    y_rows, y_cols, y_vals = y_rows[y_order], y_cols[y_order], y_vals[y_order]
    y_bounds = np.searchsorted(y_rows, np.arange(n_sets + 1))
    table = graph.n  # one length-n position table per thread

    def work(a: int, mark: np.ndarray) -> None:
        z = min(a + group, n_sets)
        lo_, hi_ = offsets[a], offsets[z]
        offs = offsets[a : z + 1] - lo_
        sub = nodes[lo_:hi_]
        s_blocks = _block_subgraphs(graph.affinity, offs, sub, mark)
        if dtype != np.float64:
            s_blocks = s_blocks.astype(dtype)
        ys = slice(y_bounds[a], y_bounds[z])
        rhs = np.zeros(hi_ - lo_, dtype=dtype)
        np.add.at(rhs, _positions_in_sets(offs, sub, y_rows[ys] - a, y_cols[ys]), y_vals[ys])
        out[lo_:hi_] = (1.0 - alpha) * _block_cg(s_blocks, offs, rhs, alpha, iters, tol)

    starts = list(range(0, n_sets, group))
    if threads <= 1 or len(starts) <= 1:
        mark = np.full(table, -1, dtype=np.int64)
        for a in starts:
            work(a, mark)
        return out
    marks: SimpleQueue = SimpleQueue()
    for _ in range(threads):
        marks.put(np.full(table, -1, dtype=np.int64))

    def run(a: int) -> None:
        mark = marks.get()
        try:
            work(a, mark)
        finally:
            marks.put(mark)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(run, starts))
    return out


def _positions_in_sets(offsets: np.ndarray, nodes: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Flat position of node ``cols[m]`` inside set ``rows[m]`` (which must hold it)."""
    n = int(max(nodes.max(initial=0), cols.max(initial=0))) + 1
    set_of = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    keys = set_of * n + nodes  # sorted: sets in order, nodes sorted inside each set
    want = rows.astype(np.int64) * n + cols
    pos = np.searchsorted(keys, want)
    if pos.size and (pos.max() >= keys.size or not np.array_equal(keys[pos], want)):
        raise RuntimeError("a query-vector entry lies outside its candidate set")
    return pos


def _candidate_sets(gallery: torch.Tensor, queries: torch.Tensor, r: int, extra: torch.Tensor | None,
                    device: DeviceLike) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the ``r`` nearest gallery items by cosine (ties at the r-th included, certified
    exact, :func:`rank_lab.metrics.certified.certified_neighbours`), united with ``extra (Q, e)``
    gallery indices; ``(offsets (Q + 1,), nodes)`` with each set sorted."""
    lists = certified_neighbours(queries, gallery, r, precision="exact", ordered=False, device=get_device(device),
                                 progress=False, check=False)
    n = gallery.shape[0]
    key = lists.rows * n + lists.indices  # sorted: rows, then items
    if extra is not None:  # the query vector's support, almost always inside already
        want = (torch.arange(extra.shape[0])[:, None] * n + extra.cpu().long()).reshape(-1)
        at = torch.searchsorted(key, want).clamp(max=max(key.numel() - 1, 0))
        missing = want[key[at] != want] if key.numel() else want
        if missing.numel():
            key = torch.unique(torch.cat([key, missing]))
    rows, cols = key // n, key % n
    counts = torch.bincount(rows, minlength=queries.shape[0])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    return offsets.numpy(), cols.numpy()


def _truncated_rank(graph: DiffusionGraph, queries: torch.Tensor, offsets: np.ndarray, nodes: np.ndarray,
                    f: np.ndarray, topk: int | None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Top-k (or dense rows) from the diffused candidate scores; items outside a query's candidates
    come after them in their cosine order (``low + clip(cos, -1, 1)`` with ``low = min f - 3``)."""
    n_q = offsets.shape[0] - 1
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
        cos = (queries[a:z].to(graph.gallery.dtype) @ graph.gallery.T).double().clamp(-1.0, 1.0)
        dense = low[a:z, None] + cos
        rr = torch.from_numpy(set_of[offsets[a] : offsets[z]] - a)
        dense[rr, torch.from_numpy(nodes[offsets[a] : offsets[z]])] = torch.from_numpy(f[offsets[a] : offsets[z]])
        if topk is None:
            out_v.append(dense.float())
        else:
            v, j = torch.topk(dense, min(topk, graph.n), dim=1)
            out_v.append(v.float())
            out_i.append(j)
    return torch.cat(out_v) if topk is None else (torch.cat(out_v), torch.cat(out_i))


def diffusion_search(
    graph: DiffusionGraph,
    queries: torch.Tensor,
    *,
    alpha: float = 0.99,
    kq: int = 10,
    gamma: float | None = None,
    iters: int = 20,
    tol: float = 1e-6,
    truncate: int | None = 1000,
    topk: int | None = None,
    exclude_self: bool = False,
    batch_size: int = 256,
    device: DeviceLike = None,
    allow_dense: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The query-time form: diffuse new queries on the offline graph (Iscen et al. 2017).

    Args:
        graph: from :func:`build_graph`.
        queries: ``(Q, d)`` L2-normalised query descriptors.
        alpha, kq, gamma, iters, tol: diffusion parameters (defaults of the reference code).
        truncate: ``R`` (reference default 1000); solve on the sub-graph of the top-``R`` initial
            neighbours only (ties at the R-th included; ``batch_size`` queries solved together as
            in :func:`offline_diffusion`). ``None``, or ``R >= n``, solves on the full graph (batched).
        topk: return ``(scores (Q, topk), indices (Q, topk))`` instead of dense ``(Q, n)`` scores.
        exclude_self: the queries are the gallery rows (item ``i`` never retrieves itself first
            through ``y``; its own column is still scored).
        batch_size, device: see :func:`diffuse`.
        allow_dense: allow a dense ``(Q, n)`` output with ``n > DENSE_LIMIT``.

    Returns:
        Dense ``(Q, n)`` scores (CPU) or the top-``k`` pair. Truncated items outside the
        candidates are ranked after the candidates, in their cosine order.
    """
    queries = check_embeddings(queries, "queries")
    if queries.shape[1] != graph.gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but the gallery has d={graph.gallery.shape[1]}")
    alpha = _check_alpha(alpha)
    if topk is not None:
        topk = check_positive_int(topk, "topk")
    else:
        check_dense_ok(queries.shape[0], graph.n, "diffusion_search", allow_dense)
    kq = check_positive_int(kq, "kq")
    if kq > graph.n - int(bool(exclude_self)):
        raise ValueError(f"kq={kq} is larger than the number of gallery items available ({graph.n - int(bool(exclude_self))})")
    iters = check_positive_int(iters, "iters")
    tol = _check_tol(tol)
    batch_size = check_positive_int(batch_size, "batch_size")
    if gamma is not None:
        gamma = _check_gamma(gamma)
    y, _ = query_vectors(graph, queries, kq, gamma=gamma, exclude_self=exclude_self, device=device)
    if truncate is not None and check_positive_int(truncate, "truncate") >= graph.n:
        truncate = None  # the sub-graph would be the whole graph
    if truncate is None:
        f = diffuse(graph, y, alpha=alpha, iters=iters, tol=tol, batch_size=batch_size, device=device)
        if topk is None:
            return f
        v, i = torch.topk(f, min(topk, graph.n), dim=1)
        return v, i
    r = check_positive_int(truncate, "truncate")
    if r < kq:
        raise ValueError(f"truncate={r} must be >= kq={kq}")
    queries = queries.detach().cpu().to(graph.gallery.dtype)
    yc = sp.coo_matrix(y)
    outs = []
    for a in range(0, queries.shape[0], batch_size):
        z = min(a + batch_size, queries.shape[0])
        offsets, nodes = _candidate_sets(graph.gallery, queries[a:z], r, None, device)
        sel = (yc.row >= a) & (yc.row < z)
        f = _truncated_solve(graph, offsets, nodes, yc.row[sel] - a, yc.col[sel], yc.data[sel], alpha, iters, tol,
                             torch.get_num_threads())
        outs.append(_truncated_rank(graph, queries[a:z], offsets, nodes, f, topk))
    if topk is None:
        return torch.cat(outs)  # type: ignore[arg-type]
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])  # type: ignore[index]


def offline_diffusion(
    graph: DiffusionGraph,
    *,
    alpha: float = 0.99,
    kq: int = 10,
    gamma: float | None = None,
    iters: int = 20,
    tol: float = 1e-6,
    truncate: int | None = None,
    topk: int | None = None,
    batch_size: int = 256,
    device: DeviceLike = None,
    allow_dense: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Diffuse every gallery item as a query (all-vs-all re-ranking, queries belonging to the base).

    Item ``i``'s query vector is its own entry (``s_ii^gamma``) plus its ``kq - 1`` nearest other
    items, as if ``i`` were searched in a base that contains it (the ALEGORIA protocol); the
    evaluation then removes ``i`` from its own list.

    Without truncation every system is solved on the full graph (batches of ``batch_size``
    right-hand sides, ``O(n * iters * nnz(S))`` in all). With ``truncate = R`` (the reference
    setting is 1,000), item ``i``'s system is restricted to its ``R`` nearest items by cosine (ties
    at the R-th included, certified exact) united with its query vector's support, and
    items are solved in groups of ``min(batch_size, 32)`` (small enough to stay in cache): their
    sub-graphs form one block-diagonal matrix, one
    CG run per block with its own step sizes and stopping test (as :func:`conjugate_gradient`'s
    columns), one sparse product per iteration for all of them, the blocks split over
    ``torch.get_num_threads()`` threads. The per-item work is ``O(iters * R k)`` -- the rows of its
    candidates only, never a length-n vector -- apart from the candidate search itself (a matmul,
    ``O(n d)`` per item at matmul speed). Items outside the candidates are ranked after them in
    their cosine order, which needs one length-n cosine row per item only when ``topk`` exceeds a
    candidate set (or for dense output).

    Args:
        graph: from :func:`build_graph`.
        alpha, kq, gamma, iters, tol: diffusion parameters (``kq - 1 <= graph.k``).
        truncate: ``R`` or None (full graph).
        topk: return ``(scores (n, topk), indices (n, topk))`` instead of dense ``(n, n)`` scores.
        batch_size: items solved together.
        device: for the candidate search and the full-graph products.
        allow_dense: allow a dense ``(n, n)`` output with ``n > DENSE_LIMIT``.

    Returns:
        Dense ``(n, n)`` scores (``n <= DENSE_LIMIT`` unless ``allow_dense``) or, with ``topk``,
        ``(scores (n, topk), indices (n, topk))``.
    """
    alpha = _check_alpha(alpha)
    if topk is not None:
        topk = check_positive_int(topk, "topk")
    else:
        check_dense_ok(graph.n, graph.n, "offline_diffusion", allow_dense)
    kq = check_positive_int(kq, "kq")
    if kq - 1 > graph.k:
        raise ValueError(f"kq={kq} needs kq - 1 <= the graph's k={graph.k}")
    iters = check_positive_int(iters, "iters")
    tol = _check_tol(tol)
    batch_size = check_positive_int(batch_size, "batch_size")
    g = graph.gamma if gamma is None else _check_gamma(gamma)
    n = graph.n
    sv = torch.cat([(graph.gallery * graph.gallery).sum(1, keepdim=True).double(), graph.knn_scores[:, : kq - 1].double()], 1)
    iv = torch.cat([torch.arange(n)[:, None], graph.knn_indices[:, : kq - 1]], 1)
    yv = sv.clamp_min(0).pow(g).numpy()
    if truncate is None:
        y = sp.csr_matrix((yv.ravel(), (np.repeat(np.arange(n), kq), iv.numpy().ravel())), shape=(n, n))
        out_rows: list[torch.Tensor] = []
        out_idx: list[torch.Tensor] = []
        for a in range(0, n, batch_size * 4):
            f = diffuse(graph, y[a : a + batch_size * 4], alpha=alpha, iters=iters, tol=tol, batch_size=batch_size, device=device, progress=False)
            if topk is None:
                out_rows.append(f)
            else:
                v, i = torch.topk(f, min(topk, n), dim=1)
                out_rows.append(v)
                out_idx.append(i)
        return torch.cat(out_rows) if topk is None else (torch.cat(out_rows), torch.cat(out_idx))
    r = min(check_positive_int(truncate, "truncate"), n)
    outs = []
    step = max(batch_size, 4096)  # candidate search per large block of items; solves per batch_size
    for a in range(0, n, step):
        z = min(a + step, n)
        offsets, nodes = _candidate_sets(graph.gallery, graph.gallery[a:z], r, iv[a:z], device)
        y_rows = np.repeat(np.arange(z - a), kq)
        f = _truncated_solve(graph, offsets, nodes, y_rows, iv[a:z].numpy().ravel(), yv[a:z].ravel(), alpha, iters, tol,
                             torch.get_num_threads(), group=min(batch_size, 32))
        outs.append(_truncated_rank(graph, graph.gallery[a:z], offsets, nodes, f, topk))
    if topk is None:
        return torch.cat(outs)  # type: ignore[arg-type]
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])  # type: ignore[index]
