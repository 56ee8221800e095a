"""Diffusion on the kNN affinity graph (Iscen et al. 2017): the offline graph, query vectors and the
full-graph CG.

[EXT, NOT IN THE THESIS] The Gominski thesis only cites this family ([36], [113]; §3.4.2, where
the graph of Eq. 3.3 is kept to its k nearest neighbours); the formulation is that of Iscen et al.,
"Efficient diffusion on region manifolds", CVPR 2017 (the thesis' [36]). This module holds the
offline graph (:class:`DiffusionGraph`, :func:`build_graph`), the query vectors
(:func:`query_vectors`), batched conjugate gradient (:func:`conjugate_gradient`) and the solve on
the full graph (:func:`diffuse`); the search entry points are in
:mod:`rank_lab.retrieval.diffusion`, the truncated solves in
:mod:`rank_lab.retrieval._diffusion_blocks`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from rank_lab._progress import tqdm
from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_float,
    check_inner_products,
    check_positive_int,
    check_sparse,
)
from rank_lab.metrics.engine.search.knn import knn_search
from rank_lab.retrieval._diffusion_blocks import NeighbourTable
from rank_lab.retrieval.graph import knn_self, mutual_affinity, normalize_graph, sparse_operator
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "DiffusionGraph",
    "build_graph",
    "conjugate_gradient",
    "query_vectors",
    "diffuse",
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

    @functools.cached_property
    def neighbour_table(self) -> NeighbourTable:
        """The affinity rows as a padded table for the truncated solves (built on first use, then
        kept)."""
        return NeighbourTable(self.affinity)

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
    progress: bool | None = None,
) -> DiffusionGraph:
    """Offline stage: kNN search, mutual affinity ``[s]_+^gamma`` and normalisation (Iscen et al.
    2017).

    Args:
        gallery: ``(n, d)`` descriptors, L2-normalised (cosine similarity = inner product).
        k: neighbours per item (self excluded; the reference code's ``K`` counts self,
            ``K = k + 1``).
        gamma: similarity power.
        mutual: keep only mutual neighbours (Iscen et al.); ``False`` keeps the union.
        backend, device, chunk_size: for the kNN search (faiss or chunked torch).
        progress: tqdm bar of the kNN search (default: long searches only).

    Raises:
        ValueError: bad ``k`` or ``gamma``; rows whose inner products overflow
            (:func:`rank_lab._validation.check_inner_products`).
    """
    gallery = check_embeddings(gallery, "gallery").detach().cpu()
    check_inner_products(gallery, "gallery")
    k = check_positive_int(k, "k")
    gamma = _check_gamma(gamma)
    scores, idx = knn_self(
        gallery, k, backend=backend, device=device, chunk_size=chunk_size, progress=progress
    )
    w = mutual_affinity(scores, idx, gallery.shape[0], gamma=gamma, mutual=mutual)
    graph = DiffusionGraph(
        gallery, scores, idx, w, normalize_graph(w), k, float(gamma), bool(mutual)
    )
    graph.neighbour_table  # noqa: B018 - built here: part of the offline stage, not of the first search
    return graph


def conjugate_gradient(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    b: torch.Tensor,
    *,
    iters: int = 20,
    tol: float = 1e-6,
    x0: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | int]]:
    """Conjugate gradient for ``A X = B`` with ``A`` symmetric positive definite, column-wise
    batched.

    Every column is an independent CG run (its own step sizes); a column stops moving once its
    residual is below ``tol * ||b||``. The solve is linear in ``b``: each column is divided by a
    power of two near its largest entry before the run and the solution multiplied back (exact
    in floating point), so right-hand sides of any finite magnitude (``1e20``, subnormal) give
    the same iterations as unit ones, without overflow or underflow. The solve is an evaluation:
    ``b`` and ``x0`` are detached and the iterations run without autograd.

    Args:
        matvec: ``X (n, m) -> A X (n, m)``.
        b: ``(n, m)`` right-hand sides.
        iters: maximum number of iterations.
        tol: relative residual tolerance.
        x0: ``(n, m)`` starting point (default 0).

    Returns:
        ``(X (n, m), {"iterations": int, "residual": (m,) relative residual norms})``.
    """
    b = as_tensor(b, "b").detach()
    if b.ndim != 2:
        raise ValueError(f"b must have shape (n, m), got {tuple(b.shape)}")
    if b.shape[0] == 0 or b.shape[1] == 0:
        raise ValueError(f"b is empty (shape {tuple(b.shape)})")
    if not b.is_floating_point():
        b = b.double()
    check_finite(b, "b")
    iters = check_positive_int(iters, "iters")
    tol = _check_tol(tol)
    _, e = torch.frexp(b.abs().amax(0))  # column scales 2^e: exact, and the system is linear in b
    with torch.no_grad():
        x, info = _cg(
            matvec,
            torch.ldexp(b, -e),
            iters,
            tol,
            None if x0 is None else torch.ldexp(x0.detach(), -e),
        )
    return torch.ldexp(x, e), info


def _cg(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    b: torch.Tensor,
    iters: int,
    tol: float,
    x0: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | int]]:
    """The batched CG iterations of :func:`conjugate_gradient` on checked, scaled right-hand
    sides."""
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
        step = torch.where(
            done | (denom <= 0),
            torch.zeros_like(rs),
            rs / denom.clamp_min(torch.finfo(b.dtype).tiny),
        )
        x = x + step * p
        r = r - step * ap
        rs_new = (r * r).sum(0)
        done = done | (rs_new.sqrt() <= tol * b_norm)
        beta = torch.where(
            done, torch.zeros_like(rs), rs_new / rs.clamp_min(torch.finfo(b.dtype).tiny)
        )
        p = r + beta * p
        rs = rs_new
    return x, {"iterations": it, "residual": rs.sqrt() / b_norm}


def _check_graph(graph: object) -> None:
    """Raise ``TypeError`` naming ``graph`` unless it is a :class:`DiffusionGraph`."""
    if not isinstance(graph, DiffusionGraph):
        raise TypeError(f"graph must be a DiffusionGraph (build_graph), got {type(graph).__name__}")


def _check_alpha(alpha: float) -> float:
    """``alpha`` as a float in ``[0, 1)`` (``I - alpha S`` positive definite), else
    ``ValueError``/``TypeError``."""
    return check_float(alpha, "alpha", low=0.0, high=1.0, high_open=True)


def _check_tol(tol: float) -> float:
    """The CG tolerance as a float ``> 0``, else ``ValueError``/``TypeError`` naming ``tol``."""
    return check_float(tol, "tol", low=0.0, low_open=True)


def _check_gamma(gamma: float) -> float:
    """The similarity power as a float ``> 0``, else ``ValueError``/``TypeError`` naming
    ``gamma``."""
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
    """Query vectors ``y_j = [s(q, x_j)]_+^gamma`` on the ``kq`` nearest gallery items (Iscen et al.
    2017).

    Args:
        graph: from :func:`build_graph`.
        queries: ``(Q, d)``.
        kq: neighbours kept in ``y``.
        gamma: power (default: the graph's).
        exclude_self: the queries are the gallery rows (``Q == n``); item ``i`` is not its own
            neighbour.

    Returns:
        ``(Y (Q, n) CSR, initial (Q, kq) neighbour indices)``.

    Raises:
        TypeError / ValueError: naming the argument (not a :class:`DiffusionGraph`; queries not a
        finite ``(Q, d)`` matrix of the gallery's ``d``; ``kq`` not in ``[1, n]``; ``gamma <= 0``).
    """
    _check_graph(graph)
    queries = check_embeddings(queries, "queries").detach().cpu()
    if queries.shape[1] != graph.gallery.shape[1]:
        raise ValueError(
            f"queries have d={queries.shape[1]} but the graph's gallery has "
            f"d={graph.gallery.shape[1]}"
        )
    kq = check_positive_int(kq, "kq")
    if not isinstance(exclude_self, bool):
        raise TypeError(f"exclude_self must be a bool, got {type(exclude_self).__name__}")
    if exclude_self and queries.shape[0] != graph.n:
        raise ValueError(
            f"exclude_self=True needs the queries to be the gallery (Q = n = {graph.n}), got Q = "
            f"{queries.shape[0]}"
        )
    n_avail = graph.n - int(exclude_self)
    if kq > n_avail:
        raise ValueError(f"kq={kq} is larger than the {n_avail} gallery items available")
    g = graph.gamma if gamma is None else _check_gamma(gamma)
    s, i = knn_search(
        queries, graph.gallery, kq, exclude_self=exclude_self, backend=backend, device=device
    )
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
    """Solve ``L_alpha f = y`` on the full graph for every row of ``y`` (batched CG, sparse
    products).

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
