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

The offline graph, query vectors and full-graph solve live in
:mod:`rank_lab.retrieval.diffusion_graph`, the truncated block solves in
:mod:`rank_lab.retrieval._diffusion_blocks`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_inner_products,
    check_overflow,
    check_positive_int,
)
from rank_lab.retrieval._diffusion_blocks import (
    candidate_sets,
    truncated_rank,
    truncated_solve,
)
from rank_lab.retrieval.diffusion_graph import DiffusionGraph as DiffusionGraph
from rank_lab.retrieval.diffusion_graph import build_graph as build_graph
from rank_lab.retrieval.diffusion_graph import conjugate_gradient as conjugate_gradient
from rank_lab.retrieval.diffusion_graph import diffuse, query_vectors
from rank_lab.retrieval.graph import check_dense_ok
from rank_lab.utils import DeviceLike

__all__ = ["diffusion_search", "offline_diffusion"]


def _check_graph(graph: object) -> None:
    if not isinstance(graph, DiffusionGraph):
        raise TypeError(f"graph must be a DiffusionGraph (build_graph), got {type(graph).__name__}")


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
            in :func:`offline_diffusion`). ``None``, or ``R >= n``, solves on the full graph
            (batched).
        topk: return ``(scores (Q, topk), indices (Q, topk))`` instead of dense ``(Q, n)`` scores.
        exclude_self: the queries are the gallery rows (item ``i`` never retrieves itself first
            through ``y``; its own column is still scored).
        batch_size, device: see :func:`diffuse`.
        allow_dense: allow a dense ``(Q, n)`` output with ``n > DENSE_LIMIT``.

    Returns:
        Dense ``(Q, n)`` scores (CPU) or the top-``k`` pair. Truncated items outside the
        candidates are ranked after the candidates, in their cosine order.
    """
    _check_graph(graph)
    queries = check_embeddings(queries, "queries")
    if queries.shape[1] != graph.gallery.shape[1]:
        raise ValueError(
            f"queries have d={queries.shape[1]} but the gallery has d={graph.gallery.shape[1]}"
        )
    check_inner_products(
        queries.to(graph.gallery.dtype), "queries", graph.gallery, "the graph's gallery"
    )
    alpha = check_float(alpha, "alpha", low=0.0, high=1.0, high_open=True)
    if topk is not None:
        topk = check_positive_int(topk, "topk")
    else:
        check_dense_ok(queries.shape[0], graph.n, "diffusion_search", allow_dense)
    kq = check_positive_int(kq, "kq")
    if kq > graph.n - int(bool(exclude_self)):
        raise ValueError(
            f"kq={kq} is larger than the number of gallery items available "
            f"({graph.n - int(bool(exclude_self))})"
        )
    iters = check_positive_int(iters, "iters")
    tol = check_float(tol, "tol", low=0.0, low_open=True)
    batch_size = check_positive_int(batch_size, "batch_size")
    if gamma is not None:
        gamma = check_float(gamma, "gamma", low=0.0, low_open=True)
    y, _ = query_vectors(graph, queries, kq, gamma=gamma, exclude_self=exclude_self, device=device)
    check_overflow(
        torch.from_numpy(y.data).to(graph.gallery.dtype),
        "queries",
        "the query affinities [s]_+^gamma",
    )
    if truncate is not None and check_positive_int(truncate, "truncate") >= graph.n:
        truncate = None  # the sub-graph would be the whole graph
    if truncate is None:
        f = diffuse(
            graph, y, alpha=alpha, iters=iters, tol=tol, batch_size=batch_size, device=device
        )
        if topk is None:
            return f
        v, i = torch.topk(f, min(topk, graph.n), dim=1)
        return v, i
    r = check_positive_int(truncate, "truncate")
    if r < kq:
        raise ValueError(f"truncate={r} must be >= kq={kq}")
    queries = queries.detach().cpu().to(graph.gallery.dtype)
    yc = sp.coo_matrix(y)
    table = graph.neighbour_table
    outs = []
    for a in range(0, queries.shape[0], batch_size):
        z = min(a + batch_size, queries.shape[0])
        offsets, nodes = candidate_sets(graph.gallery, queries[a:z], r, None, device)
        sel = (yc.row >= a) & (yc.row < z)
        f = truncated_solve(
            table,
            offsets,
            nodes,
            yc.row[sel] - a,
            yc.col[sel],
            yc.data[sel],
            alpha,
            iters,
            tol,
            torch.get_num_threads(),
        )
        outs.append(truncated_rank(graph.gallery, queries[a:z], offsets, nodes, f, topk))
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
    at the R-th included, certified exact) united with its query vector's support. Items are
    handled in groups of ``min(batch_size, 32)``: their sub-graphs are built at once (one
    block-diagonal matrix, from the graph's neighbour table), then each runs its own CG (step
    sizes and stopping test of :func:`conjugate_gradient`'s columns) in a compiled kernel with its
    sub-graph in cache; groups are split over ``torch.get_num_threads()`` threads, and an item's
    result does not depend on its group or thread. The per-item work is ``O(iters * R k)`` -- the
    rows of its candidates only, never a length-n vector -- apart from the candidate search itself
    (a matmul, ``O(n d)`` per item at matmul speed). Items outside the candidates are ranked after
    them in their cosine order, which needs one length-n cosine row per item only when ``topk``
    exceeds a candidate set (or for dense output).

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
    _check_graph(graph)
    alpha = check_float(alpha, "alpha", low=0.0, high=1.0, high_open=True)
    if topk is not None:
        topk = check_positive_int(topk, "topk")
    else:
        check_dense_ok(graph.n, graph.n, "offline_diffusion", allow_dense)
    kq = check_positive_int(kq, "kq")
    if kq - 1 > graph.k:
        raise ValueError(f"kq={kq} needs kq - 1 <= the graph's k={graph.k}")
    iters = check_positive_int(iters, "iters")
    tol = check_float(tol, "tol", low=0.0, low_open=True)
    batch_size = check_positive_int(batch_size, "batch_size")
    g = graph.gamma if gamma is None else check_float(gamma, "gamma", low=0.0, low_open=True)
    n = graph.n
    sv = torch.cat(
        [
            (graph.gallery * graph.gallery).sum(1, keepdim=True).double(),
            graph.knn_scores[:, : kq - 1].double(),
        ],
        1,
    )
    iv = torch.cat([torch.arange(n)[:, None], graph.knn_indices[:, : kq - 1]], 1)
    yv = sv.clamp_min(0).pow(g).numpy()
    if truncate is None:
        y = sp.csr_matrix(
            (yv.ravel(), (np.repeat(np.arange(n), kq), iv.numpy().ravel())), shape=(n, n)
        )
        out_rows: list[torch.Tensor] = []
        out_idx: list[torch.Tensor] = []
        for a in range(0, n, batch_size * 4):
            f = diffuse(
                graph,
                y[a : a + batch_size * 4],
                alpha=alpha,
                iters=iters,
                tol=tol,
                batch_size=batch_size,
                device=device,
                progress=False,
            )
            if topk is None:
                out_rows.append(f)
            else:
                v, i = torch.topk(f, min(topk, n), dim=1)
                out_rows.append(v)
                out_idx.append(i)
        return torch.cat(out_rows) if topk is None else (torch.cat(out_rows), torch.cat(out_idx))
    r = min(check_positive_int(truncate, "truncate"), n)
    outs = []
    table = graph.neighbour_table
    step = max(batch_size, 4096)  # candidate search per large block of items; solves per batch_size
    for a in range(0, n, step):
        z = min(a + step, n)
        offsets, nodes = candidate_sets(graph.gallery, graph.gallery[a:z], r, iv[a:z], device)
        y_rows = np.repeat(np.arange(z - a), kq)
        f = truncated_solve(
            table,
            offsets,
            nodes,
            y_rows,
            iv[a:z].numpy().ravel(),
            yv[a:z].ravel(),
            alpha,
            iters,
            tol,
            torch.get_num_threads(),
            group=min(batch_size, 32),
        )
        outs.append(truncated_rank(graph.gallery, graph.gallery[a:z], offsets, nodes, f, topk))
    if topk is None:
        return torch.cat(outs)  # type: ignore[arg-type]
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])  # type: ignore[index]
