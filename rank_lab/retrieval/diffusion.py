"""Diffusion on the kNN affinity graph, solved with conjugate gradient (Iscen et al. 2017).

[EXT, NOT IN THE THESIS] The Gominski thesis only cites this family ([36], [113]; §3.4.2); the
formulation is digest 004 §2.9:

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

Defaults of the reference code (digest §7.1): ``k = 50``, ``k_q = 10``, ``alpha = 0.99``,
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
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from rank_lab._validation import check_embeddings, check_positive_int
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
    """Offline stage: kNN search, mutual affinity ``[s]_+^gamma`` and normalisation (digest §2.9).

    Args:
        gallery: ``(n, d)`` descriptors, L2-normalised (cosine similarity = inner product).
        k: neighbours per item (self excluded; the reference code's ``K`` counts self, ``K = k + 1``).
        gamma: similarity power.
        mutual: keep only mutual neighbours (Iscen et al.); ``False`` keeps the union.
        backend, device, chunk_size: for the kNN search (faiss or chunked torch).
    """
    gallery = check_embeddings(gallery, "gallery").detach().cpu()
    k = check_positive_int(k, "k")
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
    if b.ndim != 2:
        raise ValueError(f"b must have shape (n, m), got {tuple(b.shape)}")
    iters = check_positive_int(iters, "iters")
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


def _check_alpha(alpha: float) -> float:
    if not 0.0 <= float(alpha) < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    return float(alpha)


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
    """Query vectors ``y_j = [s(q, x_j)]_+^gamma`` on the ``kq`` nearest gallery items (digest §2.9).

    Args:
        graph: from :func:`build_graph`.
        queries: ``(Q, d)``.
        kq: neighbours kept in ``y``.
        gamma: power (default: the graph's).
        exclude_self: the queries are the gallery rows (``Q == n``); item ``i`` is not its own neighbour.

    Returns:
        ``(Y (Q, n) CSR, initial (Q, kq) neighbour indices)``.
    """
    from rank_lab.metrics import knn_search

    queries = check_embeddings(queries, "queries").detach().cpu()
    kq = check_positive_int(kq, "kq")
    g = graph.gamma if gamma is None else gamma
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
    """
    alpha = _check_alpha(alpha)
    batch_size = check_positive_int(batch_size, "batch_size")
    dev = get_device(device)
    s_op = sparse_operator(graph.normalized, dev, dtype)

    def matvec(v: torch.Tensor) -> torch.Tensor:
        return v - alpha * s_op(v)

    n_q = y.shape[0]
    if y.shape[1] != graph.n:
        raise ValueError(f"y has {y.shape[1]} columns but the graph has n={graph.n} items")
    out = torch.empty(n_q, graph.n, dtype=dtype)
    starts = range(0, n_q, batch_size)
    show = len(starts) > 4 if progress is None else progress
    if show:
        from rank_lab._progress import tqdm

        starts = tqdm(starts, desc="diffusion (CG)", leave=False)
    for a in starts:
        yb = y[a : a + batch_size]
        yb = torch.from_numpy(yb.toarray()) if sp.issparse(yb) else yb
        f, _ = conjugate_gradient(matvec, yb.to(dev, dtype).T.contiguous(), iters=iters, tol=tol)
        out[a : a + batch_size] = ((1 - alpha) * f).T.cpu()
    return out


def _truncated_one(
    graph: DiffusionGraph, y_row: np.ndarray, cand: np.ndarray, cand_scores: np.ndarray,
    alpha: float, iters: int, tol: float,
) -> np.ndarray:
    """Scores over the whole gallery for one query with the system restricted to ``cand``."""
    sub = graph.affinity[cand][:, cand]
    s_sub = normalize_graph(sub)
    s_op = sparse_operator(s_sub, "cpu", torch.float64)
    b = torch.from_numpy(y_row[cand])[:, None]
    f, _ = conjugate_gradient(lambda v: v - alpha * s_op(v), b, iters=iters, tol=tol)
    f = (1 - alpha) * f[:, 0].numpy()
    out = np.full(graph.n, -np.inf)
    out[cand] = f
    # items outside the candidates: below every diffused score, in their initial (cosine) order
    low = f.min() - 3.0
    rest = np.ones(graph.n, dtype=bool)
    rest[cand] = False
    out[rest] = low + np.clip(cand_scores[rest], -1.0, 1.0)
    return out


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
    """The query-time form: diffuse new queries on the offline graph (Iscen et al.; digest §2.9).

    Args:
        graph: from :func:`build_graph`.
        queries: ``(Q, d)`` L2-normalised query descriptors.
        alpha, kq, gamma, iters, tol: diffusion parameters (defaults of the reference code).
        truncate: ``R`` (reference default 1000); solve on the sub-graph of the top-``R`` initial
            neighbours only. ``None``, or ``R >= n``, solves on the full graph (batched).
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
    y, _ = query_vectors(graph, queries, kq, gamma=gamma, exclude_self=exclude_self, device=device)
    if truncate is not None and check_positive_int(truncate, "truncate") >= graph.n:
        truncate = None  # the sub-graph would be the whole graph
    if truncate is None:
        f = diffuse(graph, y, alpha=alpha, iters=iters, tol=tol, batch_size=batch_size, device=device)
    else:
        from rank_lab.metrics import knn_search

        r = min(check_positive_int(truncate, "truncate"), graph.n)
        if r < kq:
            raise ValueError(f"truncate={r} must be >= kq={kq}")
        _, cand = knn_search(queries.cpu(), graph.gallery, r, device=device)
        cand = cand.cpu().numpy()
        rows = []
        for qi in range(queries.shape[0]):
            cos = (graph.gallery @ queries[qi].cpu().to(graph.gallery.dtype)).double().numpy()
            rows.append(_truncated_one(graph, y[qi].toarray().ravel(), cand[qi], cos, alpha, iters, tol))
        f = torch.from_numpy(np.stack(rows)).float()
    if topk is None:
        return f
    v, i = torch.topk(f, min(topk, graph.n), dim=1)
    return v, i


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
    evaluation then removes ``i`` from its own list. Cost ``O(n * iters * nnz(S))`` without
    truncation (batches of ``batch_size`` right-hand sides), ``O(n * iters * R k)`` with.

    Returns:
        Dense ``(n, n)`` scores (``n <= DENSE_LIMIT`` unless ``allow_dense``) or, with ``topk``,
        ``(scores (n, topk), indices (n, topk))``.
    """
    if topk is None:
        check_dense_ok(graph.n, graph.n, "offline_diffusion", allow_dense)
    kq = check_positive_int(kq, "kq")
    if kq - 1 > graph.k:
        raise ValueError(f"kq={kq} needs kq - 1 <= the graph's k={graph.k}")
    g = graph.gamma if gamma is None else gamma
    n = graph.n
    sv = torch.cat([(graph.gallery * graph.gallery).sum(1, keepdim=True).double(), graph.knn_scores[:, : kq - 1].double()], 1)
    iv = torch.cat([torch.arange(n)[:, None], graph.knn_indices[:, : kq - 1]], 1)
    y = sp.csr_matrix((sv.clamp_min(0).pow(g).numpy().ravel(), (np.repeat(np.arange(n), kq), iv.numpy().ravel())), shape=(n, n))
    if truncate is None:
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
    from rank_lab.metrics import knn_search

    r = min(check_positive_int(truncate, "truncate"), n)
    _, cand = knn_search(graph.gallery, graph.gallery, r, device=device)
    cand = cand.cpu().numpy()
    out_rows, out_idx = [], []
    for i in range(n):
        cos = (graph.gallery @ graph.gallery[i]).double().numpy()
        c = np.unique(np.concatenate([cand[i], iv[i].numpy()]))
        f = torch.from_numpy(_truncated_one(graph, y[i].toarray().ravel(), c, cos, _check_alpha(alpha), iters, tol))
        if topk is None:
            out_rows.append(f.float())
        else:
            v, ix = torch.topk(f, min(topk, n))
            out_rows.append(v.float())
            out_idx.append(ix)
    return torch.stack(out_rows) if topk is None else (torch.stack(out_rows), torch.stack(out_idx))
