"""The kNN affinity graph and the sparse helpers shared by expansion, diffusion and MD.

Graph view of diffusion (Gominski thesis §3.4.2, eqs. 3.2-3.4; digest 004 §2.7): the similarity
``s_ij`` (eq. 3.2), the kNN adjacency ``a_ij = 1[x_j in NN_k(x_i)]`` (eq. 3.4), its
symmetrisation ``A* = (A + A^T)/2`` (eq. 4.3, values in {0, 0.5, 1}, eq. 4.4), and the mutual
kNN affinity of Iscen et al. ``w_ij = [s_ij]_+^gamma`` when ``i`` and ``j`` are each in the other's
k nearest neighbours, normalised as ``D^{-1/2} W D^{-1/2}`` (digest §2.9, [EXT]).

**Sparse throughout.** Neighbour lists come from :func:`rank_lab.metrics.knn_search` (faiss or
chunked torch); graphs are ``scipy.sparse.csr_matrix`` with ``n k`` non-zeros and are turned into
torch sparse CSR tensors (:func:`to_torch_sparse`) for products on the compute device. No function
of :mod:`rank_lab.retrieval` builds an ``n x n`` dense matrix when ``n > DENSE_LIMIT`` unless asked
to explicitly; :func:`check_dense_ok` is the single place that enforces it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch

from rank_lab._validation import check_embeddings, check_positive_int
from rank_lab.utils import DeviceLike

__all__ = [
    "DENSE_LIMIT",
    "check_dense_ok",
    "knn_self",
    "sparse_from_knn",
    "symmetrize",
    "mutual_affinity",
    "normalize_graph",
    "to_torch_sparse",
    "sparse_operator",
    "in_neighbour_lists",
    "sparse_row_topk",
    "sparse_rows_to_dense",
]

#: Largest ``n`` for which an ``n x n`` dense matrix is built (``n^2`` float32 = 256 MiB at 8192).
DENSE_LIMIT = 8192

Symmetrize = Literal["mean", "sum", "min", "max", "none"]


def check_dense_ok(n_rows: int, n_cols: int, what: str, allow_dense: bool = False) -> None:
    """Raise ``ValueError`` if a dense ``n_rows x n_cols`` matrix would exceed ``DENSE_LIMIT^2`` entries.

    An ``(n, n)`` matrix is refused once ``n > DENSE_LIMIT``; a ``(Q, n)`` score block for a few
    queries is fine even for a large gallery.
    """
    if n_rows * n_cols > DENSE_LIMIT**2 and not allow_dense:
        raise ValueError(
            f"{what}: a dense {n_rows} x {n_cols} matrix would be built (more than DENSE_LIMIT^2 = "
            f"{DENSE_LIMIT}^2 entries); use the sparse / top-k form (topk=..., mode='sparse') or "
            "pass allow_dense=True"
        )


def knn_self(
    x: torch.Tensor,
    k: int,
    *,
    include_self: bool = False,
    backend: str = "auto",
    device: DeviceLike = None,
    chunk_size: int | None = None,
    name: str = "k",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest neighbours (inner product) of every row of ``x`` among the rows of ``x``.

    Args:
        x: ``(n, d)`` descriptors (L2-normalise them first for cosine similarity).
        k: list length.
        include_self: the item itself is column 0 (score ``<x_i, x_i>``) followed by its ``k - 1``
            nearest other items; otherwise the item is excluded by index (never by dropping the
            first neighbour, which is wrong with duplicates).
        backend, device, chunk_size: passed to :func:`rank_lab.metrics.knn_search`.
        name: how the caller calls ``k`` (named in the errors, e.g. ``"k1"``).

    Returns:
        ``(scores (n, k), indices (n, k))`` on the CPU, sorted by decreasing score.

    Raises:
        ValueError: ``k`` not a positive int or larger than the ``n - 1`` other items (``n`` with
            ``include_self``).
    """
    from rank_lab.metrics import knn_search

    x = check_embeddings(x, "x")
    k = check_positive_int(k, name)
    n = x.shape[0]
    n_other = k - 1 if include_self else k
    if n_other > n - 1:
        raise ValueError(f"{name}={k} is too large for n={n} items (include_self={include_self})")
    cols_s, cols_i = [], []
    if include_self:
        cols_s.append((x * x).sum(1, keepdim=True).cpu())
        cols_i.append(torch.arange(n)[:, None])
    if n_other > 0:
        s, i = knn_search(x, x, n_other, exclude_self=True, backend=backend, device=device, chunk_size=chunk_size)
        cols_s.append(s.cpu().to(x.dtype))
        cols_i.append(i.cpu().long())
    return torch.cat(cols_s, 1), torch.cat(cols_i, 1)


def sparse_from_knn(indices: torch.Tensor, values: torch.Tensor | None, n_cols: int) -> sp.csr_matrix:
    """A ``(n, n_cols)`` CSR matrix with ``values[i, t]`` at ``(i, indices[i, t])`` (1 if ``values`` is None).

    Entries with a negative index (padding) are dropped; repeated entries are summed.
    """
    idx = indices.detach().cpu().numpy().astype(np.int64)
    n, k = idx.shape
    vals = np.ones((n, k), dtype=np.float64) if values is None else values.detach().cpu().double().numpy()
    rows = np.repeat(np.arange(n), k)
    keep = idx.reshape(-1) >= 0
    m = sp.csr_matrix((vals.reshape(-1)[keep], (rows[keep], idx.reshape(-1)[keep])), shape=(n, n_cols))
    m.sum_duplicates()
    return m


def symmetrize(a: sp.spmatrix, how: Symmetrize = "mean") -> sp.csr_matrix:
    """Symmetrise a square sparse matrix.

    ``"mean"``: ``(A + A^T)/2`` (eq. 4.3 of the Gominski thesis, reciprocal pairs weigh 1, one-way
    pairs 0.5); ``"sum"``: ``A + A^T`` (GQE code); ``"min"``: ``min(A, A^T)`` (mutual neighbours,
    Iscen et al.); ``"max"``: ``max(A, A^T)`` (union); ``"none"``: unchanged.
    """
    a = sp.csr_matrix(a)
    if a.shape[0] != a.shape[1]:
        raise ValueError(f"a must be square, got shape {a.shape}")
    if how == "mean":
        return sp.csr_matrix((a + a.T) * 0.5)
    if how == "sum":
        return sp.csr_matrix(a + a.T)
    if how == "min":
        return sp.csr_matrix(a.minimum(a.T))
    if how == "max":
        return sp.csr_matrix(a.maximum(a.T))
    if how == "none":
        return a
    raise ValueError(f"how must be 'mean', 'sum', 'min', 'max' or 'none', got {how!r}")


def mutual_affinity(
    scores: torch.Tensor, indices: torch.Tensor, n: int, *, gamma: float = 3.0, mutual: bool = True
) -> sp.csr_matrix:
    """The kNN affinity graph of Iscen et al. (digest 004 §2.9, [EXT]).

    ``w_ij = [s_ij]_+^gamma`` if ``j in NN_k(i)`` and ``i in NN_k(j)`` (``mutual=True``; ``W =
    min(W~, W~^T)``), or if either holds (``mutual=False``; ``max``). The diagonal is zero.

    Args:
        scores: ``(n, k)`` similarities of each item's neighbours (self excluded).
        indices: ``(n, k)`` neighbour indices.
        n: number of items.
        gamma: similarity power.
        mutual: keep only mutual neighbours.

    Returns:
        Symmetric ``(n, n)`` CSR matrix with at most ``n k`` non-zeros.
    """
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    w = sparse_from_knn(indices, scores.clamp_min(0).to(torch.float64).pow(gamma), n)
    w = symmetrize(w, "min" if mutual else "max")
    w.setdiag(0)
    w.eliminate_zeros()
    return w


def normalize_graph(w: sp.spmatrix) -> sp.csr_matrix:
    """Symmetric normalisation ``D^{-1/2} W D^{-1/2}`` with ``D = diag(W 1)``; isolated nodes get 0."""
    w = sp.csr_matrix(w)
    deg = np.asarray(w.sum(1)).ravel()
    with np.errstate(divide="ignore"):
        inv = np.where(deg > 0, 1.0 / np.sqrt(deg), 0.0)
    d = sp.diags(inv)
    return sp.csr_matrix(d @ w @ d)


def to_torch_sparse(m: sp.spmatrix, device: DeviceLike = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A scipy sparse matrix as a torch sparse CSR tensor on ``device`` (for ``S @ dense`` products)."""
    from rank_lab.utils import get_device

    m = sp.csr_matrix(m)
    dev = get_device(device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        return torch.sparse_csr_tensor(
            torch.from_numpy(m.indptr.astype(np.int64)),
            torch.from_numpy(m.indices.astype(np.int64)),
            torch.from_numpy(m.data).to(dtype),
            size=m.shape,
            check_invariants=False,
        ).to(dev)


def sparse_operator(
    m: sp.spmatrix, device: DeviceLike = None, dtype: torch.dtype = torch.float32
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v -> M @ v`` for ``(n, B)`` tensors: scipy on the CPU, torch sparse CSR on CUDA.

    torch's CPU sparse-CSR product has a fixed cost of several milliseconds per call, which
    dominates the many small products of CG on truncated graphs; scipy's does not.
    """
    from rank_lab.utils import get_device

    dev = get_device(device)
    if dev.type == "cpu":
        mc = sp.csr_matrix(m, dtype=np.float64 if dtype == torch.float64 else np.float32)

        def apply_cpu(v: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(np.asarray(mc @ v.detach().cpu().numpy())).to(v.dtype)

        return apply_cpu
    mt = to_torch_sparse(m, dev, dtype)

    def apply_dev(v: torch.Tensor) -> torch.Tensor:
        return mt @ v

    return apply_dev


def in_neighbour_lists(indices: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Whether ``cols[m]`` is in the neighbour list ``indices[rows[m]]``, for every ``m``.

    A sorted-key lookup (``O((nk + M) log nk)``), so eq. 4.4's ``a_ij`` can be read at the few
    pairs where it is needed without building the ``n x n`` adjacency.

    Args:
        indices: ``(n, k)`` neighbour lists (negative = padding).
        rows, cols: ``(M,)`` pairs to look up.

    Returns:
        ``(M,)`` bool.
    """
    indices, rows, cols = indices.cpu().long(), rows.cpu().long(), cols.cpu().long()
    n = 1 + max(indices.shape[0], int(indices.max()) if indices.numel() else 0, int(cols.max()) if cols.numel() else 0)
    r = torch.arange(indices.shape[0])[:, None].expand_as(indices)
    valid = indices >= 0
    keys = torch.sort(r[valid] * n + indices[valid]).values
    q = rows * n + cols
    if keys.numel() == 0:
        return torch.zeros_like(q, dtype=torch.bool)
    pos = torch.searchsorted(keys, q).clamp(max=keys.numel() - 1)
    return keys[pos] == q


def sparse_row_topk(m: sp.spmatrix, k: int, *, exclude_diagonal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` stored entries of every row of a sparse matrix (absent entries never selected).

    Returns:
        ``(values (n, k), indices (n, k))`` float64 / long; rows with fewer than ``k`` stored
        entries are padded with ``-inf`` / ``-1``.
    """
    m = sp.csr_matrix(m)
    n = m.shape[0]
    counts = np.diff(m.indptr)
    width = max(int(counts.max()) if n else 0, 1)
    vals = np.full((n, width), -np.inf)
    cols = np.full((n, width), -1, dtype=np.int64)
    rows = np.repeat(np.arange(n), counts)
    slot = np.arange(m.nnz) - np.repeat(m.indptr[:-1], counts)
    vals[rows, slot] = m.data
    cols[rows, slot] = m.indices
    if exclude_diagonal:
        vals[cols == np.arange(n)[:, None]] = -np.inf
    vt, ct = torch.from_numpy(vals), torch.from_numpy(cols)
    kk = min(k, width)
    top_v, top_pos = torch.topk(vt, kk, dim=1)
    top_i = ct.gather(1, top_pos)
    top_i[torch.isinf(top_v)] = -1
    if kk < k:
        top_v = torch.cat([top_v, torch.full((n, k - kk), -torch.inf, dtype=top_v.dtype)], 1)
        top_i = torch.cat([top_i, torch.full((n, k - kk), -1, dtype=top_i.dtype)], 1)
    return top_v, top_i


def sparse_rows_to_dense(m: sp.spmatrix, rows: torch.Tensor | np.ndarray | slice, fill: float = 0.0) -> torch.Tensor:
    """Rows of a sparse score matrix as a dense ``(r, n)`` tensor; absent entries get ``fill``.

    Use ``fill`` below every stored score (e.g. ``-inf`` replaced by ``min - 1``) to rank the
    items a sparse method never reached after those it scored.
    """
    sub = sp.csr_matrix(m)[rows]
    out = np.full(sub.shape, fill, dtype=np.float64)
    r = np.repeat(np.arange(sub.shape[0]), np.diff(sub.indptr))
    out[r, sub.indices] = sub.data
    return torch.from_numpy(out)
