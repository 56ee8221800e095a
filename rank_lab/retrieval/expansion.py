"""Query expansion and re-ranking: AQE, alpha-QE, k-reciprocal re-ranking, GQE.

* **AQE** (average query expansion; Gominski thesis §3.4.2, refs [18, 6, 41, 96]): the query is
  replaced by the mean of itself and its top-``n`` results, then L2-normalised.
* **alpha-QE** (eq. 4.10 of the thesis, Radenović et al.): ``d_q <- L2N(d_q + sum_{j in NN_n(q)}
  [s_qj]_+^alpha d_j)``. ``include_self=True`` keeps the query with weight ``s_qq^alpha = 1`` (the
  paper); ``include_self=False`` is the thesis' Chapter-5 code (neighbours only). Here ``n`` counts
  the neighbours *other than* the query. Negative similarities are clamped before the power (a
  rank_lab decision: a non-integer power of a negative number is undefined).
* **k-reciprocal re-ranking** (Zhong et al. 2017, [122]; [EXT], not in the thesis' tables): the
  Jaccard distance of k-reciprocal encodings, ``d* = (1 - lambda) d_J + lambda d``; a faithful port
  of the reference code (squared Euclidean distances normalised by each row's maximum, expansion by
  ``R(j, round(k1/2))`` sets overlapping more than 2/3, local query expansion over ``k2`` rows),
  written with sparse matrices: ``O(N k1)`` memory for the encodings instead of ``N^2``.
* **GQE** (graph query expansion, Zhang et al. [119]; thesis eq. 4.11, its main reference):
  node features are the rows of the symmetrised kNN adjacency ``A* = (A + A^T)/2`` (``k1``,
  self included), propagated ``layers`` times over the top-``k2`` neighbours,
  ``h_i <- L2N(sum_{j in NN_k2(i)} [s_ij]_+^alpha h_j)``, and the final similarity is the cosine
  between node features. ``variant="code"`` is the authors' released implementation of GQE (Zhang et
  al.) (``A <- A + A^T`` summed, ``h_i <- h_i + sum s_ij^2 h_j``, 2 layers) -- [EXT], not checked
  against the CUDA source. Edge weights ``s_ij`` are descriptor cosines (the code); the thesis'
  sentence that GQE "uses neighbor encoding features to re-compute similarities (edge features)" is
  available as ``edge_similarity="encoding"`` (cosine between rows of ``A*``).

All neighbour lists come from :func:`rank_lab.metrics.knn_search` (faiss / chunked torch) and the
graphs are scipy sparse; dense ``(Q, N)`` outputs are refused past ``DENSE_LIMIT^2`` entries
unless ``topk`` is given.
"""

from __future__ import annotations

from typing import Literal

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
from rank_lab.metrics import knn_search
from rank_lab.retrieval.graph import (
    check_dense_ok,
    knn_self,
    sparse_from_knn,
    sparse_row_topk,
    symmetrize,
)
from rank_lab.retrieval.whitening import l2n
from rank_lab.utils import DeviceLike

__all__ = ["average_qe", "alpha_qe", "k_reciprocal_rerank", "gqe"]


def alpha_qe(
    queries: torch.Tensor,
    gallery: torch.Tensor | None = None,
    *,
    n: int = 3,
    alpha: float = 1.0,
    include_self: bool = True,
    backend: str = "auto",
    device: DeviceLike = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """alpha-weighted query expansion (eq. 4.10 of the Gominski thesis; Radenović et al.).

    Args:
        queries: ``(Q, d)`` L2-normalised descriptors.
        gallery: ``(N, d)``; ``None`` expands every item of ``queries`` among the others (the
            all-vs-all setting of the thesis' Chapter 4, the item itself excluded by index).
        n: neighbours used (thesis optimum on ALEGORIA ``(alpha, n) = (1, 3)``; Chapter 5: (3, 10)),
            at most the gallery size (``Q - 1`` without a gallery).
        alpha: exponent, a finite number >= 0; ``alpha = 0`` is average QE.
        include_self: add the query itself with weight ``<q, q>^alpha``.
        backend, device, chunk_size: kNN search.

    Returns:
        ``(Q, d)`` expanded, L2-normalised descriptors (inputs that require grad are detached: an
        evaluation, not differentiable).

    Raises:
        ValueError: bad ``n`` or ``alpha``, mismatched widths, rows whose inner products overflow
            (:func:`rank_lab._validation.check_inner_products`).
    """
    queries = check_embeddings(queries, "queries").detach()
    n = check_positive_int(n, "n")
    alpha = check_float(alpha, "alpha", low=0.0)
    if gallery is None:
        check_inner_products(queries, "queries")
        s, i = knn_self(queries, n, backend=backend, device=device, chunk_size=chunk_size, name="n")
        g = queries.cpu()
    else:
        g = check_embeddings(gallery, "gallery").detach().cpu()
        if g.shape[1] != queries.shape[1]:
            raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={g.shape[1]}")
        check_inner_products(queries, "queries", g, "gallery")
        if n > g.shape[0]:
            raise ValueError(f"n={n} is larger than the gallery ({g.shape[0]} items)")
        s, i = knn_search(queries, g, n, backend=backend, device=device, chunk_size=chunk_size)
        s, i = s.cpu(), i.cpu()
    q = queries.cpu()
    w = s.to(q.dtype).clamp_min(0).pow(alpha)  # (Q, n)
    out = torch.einsum("qn,qnd->qd", w, g[i].to(q.dtype))
    if include_self:
        out = out + (q * q).sum(1, keepdim=True).clamp_min(0).pow(alpha) * q
    return l2n(
        check_overflow(
            out,
            "queries" if gallery is None else "queries/gallery",
            "the weighted sums of descriptors",
        )
    )


def average_qe(
    queries: torch.Tensor,
    gallery: torch.Tensor | None = None,
    *,
    n: int = 3,
    include_self: bool = True,
    **kwargs: object,
) -> torch.Tensor:
    """Average query expansion: ``L2N(q + sum of the top-n results)`` (alpha-QE with
    ``alpha = 0``)."""
    return alpha_qe(queries, gallery, n=n, alpha=0.0, include_self=include_self, **kwargs)  # type: ignore[arg-type]


def _euclid_knn(
    x: torch.Tensor, k: int, backend: str, device: DeviceLike
) -> tuple[torch.Tensor, torch.Tensor]:
    """k nearest rows by squared Euclidean distance (self included), via an inner-product search."""
    sq = (x * x).sum(1, keepdim=True)
    qa = torch.cat([x, torch.ones_like(sq)], 1)
    ga = torch.cat([2 * x, -sq], 1)
    s, i = knn_search(qa, ga, k, backend=backend, device=device)
    i = i.cpu().long()
    d = (sq - s.cpu().to(x.dtype)).clamp_min(0)  # |x_i|^2 - (2<x_i,x_j> - |x_j|^2)
    return d, i


def _row_max_sqdist(x: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """``max_j ||x_i - x_j||^2`` for every row, in chunks (``O(N^2 d)`` time, ``O(chunk N)``
    memory)."""
    sq = (x * x).sum(1)
    out = torch.empty(x.shape[0], dtype=x.dtype)
    for a in range(0, x.shape[0], chunk):
        c = x[a : a + chunk]
        out[a : a + chunk] = sq[a : a + chunk] + (sq[None, :] - 2 * c @ x.T).amax(1)
    return out.clamp_min(1e-12)


def k_reciprocal_rerank(
    queries: torch.Tensor | None,
    gallery: torch.Tensor,
    *,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
    topk: int | None = None,
    backend: str = "auto",
    device: DeviceLike = None,
    allow_dense: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """k-reciprocal re-ranking (Zhong et al. 2017; reference-code defaults
    ``k1=20, k2=6, lambda=0.3``).

    Args:
        queries: ``(Q, d)`` or ``None`` (every gallery item is a query, all-vs-all).
        gallery: ``(G, d)``.
        k1, k2, lambda_value: the method's parameters (``k1 < n`` and ``k2 <= n`` items,
            queries and gallery together; ``lambda_value`` in [0, 1]).
        topk: return the top-``k`` ``(scores, indices)`` instead of dense scores (exact: items with
            no shared encoding mass are ordered by the original distance alone).
        backend, device: kNN search.
        allow_dense: allow a dense ``(Q, G)`` result above ``DENSE_LIMIT^2`` entries.

    Returns:
        Scores ``-d*`` (higher = more similar): dense ``(Q, G)`` float64, or the top-``k`` pair.
    """
    gallery = check_embeddings(gallery, "gallery").detach().cpu().double()
    if queries is not None:
        queries = check_embeddings(queries, "queries").detach().cpu().double()
        if queries.shape[1] != gallery.shape[1]:
            raise ValueError(
                f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}"
            )
        x = torch.cat([queries, gallery])
        n_q = queries.shape[0]
    else:
        x, n_q = gallery, gallery.shape[0]
    n = x.shape[0]
    k1 = check_positive_int(k1, "k1")
    k2 = check_positive_int(k2, "k2")
    if k1 + 1 > n:
        raise ValueError(f"k1={k1} needs more than k1 items (got {n})")
    if k2 > n:
        raise ValueError(f"k2={k2} is larger than the number of items ({n}, queries and gallery)")
    if not 0.0 <= lambda_value <= 1.0:
        raise ValueError(f"lambda_value must be in [0, 1], got {lambda_value}")
    n_g = gallery.shape[0]
    off = n - n_g  # gallery columns start here
    if topk is None:
        check_dense_ok(n_q, n_g, "k_reciprocal_rerank", allow_dense)
    rowmax = _row_max_sqdist(x)
    _, init = _euclid_knn(x, max(k1 + 1, k2), backend, device)  # (n, max(k1 + 1, k2)), self first
    initn = init.numpy()

    def reciprocal(k: int) -> list[np.ndarray]:
        fwd = initn[:, : k + 1]
        back = initn[fwd][:, :, : k + 1]  # (n, k+1, k+1)
        mask = (back == np.arange(n)[:, None, None]).any(2)
        return [fwd[i][mask[i]] for i in range(n)]

    r_full = reciprocal(k1)
    r_half = reciprocal(int(np.around(k1 / 2.0)))
    rows, cols = [], []
    for i in range(n):
        r = r_full[i]
        exp = [r]
        rset = set(r.tolist())
        for c in r:
            rc = r_half[c]
            if len(rset.intersection(rc.tolist())) > 2.0 / 3.0 * len(rc):
                exp.append(rc)
        e = np.unique(np.concatenate(exp))
        rows.append(np.full(e.shape, i))
        cols.append(e)
    rr, cc = np.concatenate(rows), np.concatenate(cols)
    xr, xc = x[torch.from_numpy(rr)], x[torch.from_numpy(cc)]
    d_pairs = ((xr - xc) ** 2).sum(1) / rowmax[torch.from_numpy(rr)]
    w = np.exp(-d_pairs.numpy())
    v = sp.csr_matrix((w, (rr, cc)), shape=(n, n))
    v = sp.csr_matrix(sp.diags(1.0 / np.asarray(v.sum(1)).ravel()) @ v)
    if k2 != 1:
        qe = sp.csr_matrix(
            (np.full(n * k2, 1.0 / k2), (np.repeat(np.arange(n), k2), initn[:, :k2].ravel())),
            shape=(n, n),
        )
        v = sp.csr_matrix(qe @ v)
    vc = sp.csc_matrix(v[:, :])

    def jaccard_row(i: int) -> np.ndarray:
        row = v[i]
        sub = sp.csc_matrix(vc[:, row.indices])
        sub.data = np.minimum(sub.data, np.repeat(row.data, np.diff(sub.indptr)))
        tm = np.asarray(sub.sum(1)).ravel()[off:]
        return 1.0 - tm / (2.0 - tm)

    def orig_row(rows_idx: np.ndarray) -> torch.Tensor:
        xq = x[torch.from_numpy(rows_idx)]
        g = x[off:]
        d = (xq * xq).sum(1, keepdim=True) + (g * g).sum(1)[None] - 2 * xq @ g.T
        return d.clamp_min(0) / rowmax[torch.from_numpy(rows_idx)][:, None]

    if topk is None:
        jac = torch.from_numpy(np.stack([jaccard_row(i) for i in range(n_q)]))
        final = jac * (1 - lambda_value) + orig_row(np.arange(n_q)) * lambda_value
        return -final
    topk = min(check_positive_int(topk, "topk"), n_g)
    out_s, out_i = [], []
    for i in range(n_q):
        jac = torch.from_numpy(jaccard_row(i))
        final = jac * (1 - lambda_value) + orig_row(np.array([i]))[0] * lambda_value
        s, ix = torch.topk(-final, topk)
        out_s.append(s)
        out_i.append(ix)
    return torch.stack(out_s), torch.stack(out_i)


def _row_l2n(m: sp.spmatrix) -> sp.csr_matrix:
    m = sp.csr_matrix(m)
    norms = np.sqrt(np.asarray(m.multiply(m).sum(1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ m)


def gqe(
    gallery: torch.Tensor,
    queries: torch.Tensor | None = None,
    *,
    k1: int = 38,
    k2: int = 5,
    alpha: float = 1.0,
    layers: int = 1,
    include_self: bool = True,
    variant: Literal["thesis", "code"] = "thesis",
    edge_similarity: Literal["descriptor", "encoding"] = "descriptor",
    topk: int | None = None,
    backend: str = "auto",
    device: DeviceLike = None,
    allow_dense: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Graph query expansion (eq. 4.11 of the Gominski thesis; Zhang et al. GNN re-ranking).

    Args:
        gallery: ``(N, d)`` L2-normalised descriptors.
        queries: ``(Q, d)`` extra queries; the graph is built on ``[queries; gallery]`` and the
            result is ``(Q, N)``. ``None``: every gallery item is a query (``(N, N)``).
        k1: adjacency size (self included, at most the number of items); thesis optimum on
            ALEGORIA 38.
        k2: propagation neighbours (self included when ``include_self``; at most the number of
            items); thesis optimum 5.
        alpha: exponent of ``[s_ij]_+^alpha``, finite and >= 0 (thesis 1.0; the code squares,
            ``alpha = 2``).
        layers: number of propagations (thesis 1; code 2).
        include_self: the item is its own first propagation neighbour (the code's
            ``rank[i, 0] = i``).
        variant: ``"thesis"`` (eq. 4.11 on ``A* = (A + A^T)/2``) or ``"code"`` (see module
            docstring).
        edge_similarity: ``"descriptor"`` (cosine of the descriptors, the code) or ``"encoding"``
            (cosine of the rows of ``A*``, one reading of the thesis' text) for ``NN_k2`` and
            ``s_ij``.
        topk: return ``(scores (Q, topk), indices (Q, topk))`` instead of dense scores.
        backend, device: kNN search.
        allow_dense: allow a dense output above ``DENSE_LIMIT^2`` entries.

    Returns:
        Cosine similarities of the propagated node features, dense (float64) or top-``k``.
        Node features are sparse: ``O(n k1 k2^layers)`` non-zeros.
    """
    gallery = check_embeddings(gallery, "gallery").detach().cpu()
    x = (
        gallery
        if queries is None
        else torch.cat(
            [check_embeddings(queries, "queries").detach().cpu().to(gallery.dtype), gallery]
        )
    )
    check_inner_products(x, "gallery" if queries is None else "queries/gallery")
    n, n_q = x.shape[0], (gallery.shape[0] if queries is None else queries.shape[0])
    off = n - gallery.shape[0]
    k1, k2 = check_positive_int(k1, "k1"), check_positive_int(k2, "k2")
    alpha = check_float(alpha, "alpha", low=0.0)
    layers = int(layers)
    if layers < 0:
        raise ValueError(f"layers must be >= 0, got {layers}")
    if variant not in ("thesis", "code"):
        raise ValueError(f"variant must be 'thesis' or 'code', got {variant!r}")
    if edge_similarity not in ("descriptor", "encoding"):
        raise ValueError(
            f"edge_similarity must be 'descriptor' or 'encoding', got {edge_similarity!r}"
        )
    if topk is None:
        check_dense_ok(n_q, gallery.shape[0], "gqe", allow_dense)
    _, i1 = knn_self(x, k1, include_self=True, backend=backend, device=device, name="k1")
    a = sparse_from_knn(i1, None, n)
    h = symmetrize(a, "mean") if variant == "thesis" else a
    if edge_similarity == "descriptor":
        s2, i2 = knn_self(
            x, k2, include_self=include_self, backend=backend, device=device, name="k2"
        )
    else:
        enc = _row_l2n(h)
        cos = (enc @ enc.T).tocsr()
        if not include_self:
            cos.setdiag(-np.inf)

        s2, i2 = sparse_row_topk(cos, k2)
        s2 = torch.where(i2 >= 0, s2, torch.zeros_like(s2))
    w = sparse_from_knn(i2, s2.double().clamp_min(0).pow(alpha), n)
    for _ in range(layers):
        if variant == "thesis":
            h = _row_l2n(w @ h)
        else:
            h = symmetrize(h, "sum")
            h = _row_l2n(h + w @ h)
    h = _row_l2n(h)
    hq, hg = h[:n_q] if queries is not None else h, h[off:]
    if topk is None:
        return torch.from_numpy((hq @ hg.T).toarray())
    topk = min(check_positive_int(topk, "topk"), gallery.shape[0])
    out_s, out_i = [], []
    for a0 in range(0, n_q, 1024):
        c = torch.from_numpy((hq[a0 : a0 + 1024] @ hg.T).toarray())
        s, ix = torch.topk(c, topk, dim=1)
        out_s.append(s)
        out_i.append(ix)
    return torch.cat(out_s), torch.cat(out_i)
