"""The kNN affinity graph and the sparse helpers shared by expansion, diffusion and MD.

Graph view of diffusion (Gominski thesis §3.4.2, eqs. 3.2-3.4): the similarity
``s_ij`` (eq. 3.2), the kNN adjacency ``a_ij = 1[x_j in NN_k(x_i)]`` (eq. 3.4), its
symmetrisation ``A* = (A + A^T)/2`` (eq. 4.3, values in {0, 0.5, 1}, eq. 4.4), and the mutual
kNN affinity of Iscen et al. ``w_ij = [s_ij]_+^gamma`` when ``i`` and ``j`` are each in the other's
k nearest neighbours, normalised as ``D^{-1/2} W D^{-1/2}`` (Iscen et al. 2017; cited, not used, by
the thesis).

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

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_float,
    check_inner_products,
    check_int_tensor,
    check_nonneg_int,
    check_positive_int,
    check_sparse,
)
from rank_lab.metrics import knn_search
from rank_lab.utils import DeviceLike, get_device

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
    """Raise ``ValueError`` if a dense ``n_rows x n_cols`` matrix would exceed ``DENSE_LIMIT^2``
    entries.

    An ``(n, n)`` matrix is refused once ``n > DENSE_LIMIT``; a ``(Q, n)`` score block for a few
    queries is fine even for a large gallery.

    Raises:
        TypeError / ValueError: ``n_rows`` or ``n_cols`` not a non-negative int.
    """
    n_rows, n_cols = check_nonneg_int(n_rows, "n_rows"), check_nonneg_int(n_cols, "n_cols")
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
    progress: bool | None = None,
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
        progress: tqdm bar of the search (default: long searches only).

    Returns:
        ``(scores (n, k), indices (n, k))`` on the CPU, sorted by decreasing score.

    ``x`` is searched as data: an input that requires grad is detached (the scores are not
    differentiable).

    Raises:
        ValueError: ``k`` not a positive int or larger than the ``n - 1`` other items (``n`` with
            ``include_self``); rows whose inner products overflow (:func:`check_inner_products`).
    """
    x = check_embeddings(x, "x").detach()
    check_inner_products(x, "x")
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
        s, i = knn_search(
            x,
            x,
            n_other,
            exclude_self=True,
            backend=backend,
            device=device,
            chunk_size=chunk_size,
            progress=progress,
        )
        cols_s.append(s.cpu().to(x.dtype))
        cols_i.append(i.cpu().long())
    return torch.cat(cols_s, 1), torch.cat(cols_i, 1)


def sparse_from_knn(
    indices: torch.Tensor, values: torch.Tensor | None, n_cols: int
) -> sp.csr_matrix:
    """A ``(n, n_cols)`` CSR matrix with ``values[i, t]`` at ``(i, indices[i, t])`` (1 if ``values``
    is None).

    Entries with a negative index (padding) are dropped; repeated entries are summed.

    Args:
        indices: ``(n, k)`` integer column of each entry, in ``[0, n_cols)`` or negative (padding).
        values: ``(n, k)`` finite values (a ``-inf`` or NaN of a padded slot is ignored), or None.
        n_cols: number of columns.

    Raises:
        TypeError / ValueError: non-integer or non-2-D ``indices``, ``values`` of another shape or
            with NaN / inf at a kept entry, an index ``>= n_cols``, ``n_cols`` not a positive int.
    """
    n_cols = check_positive_int(n_cols, "n_cols")
    idx = check_int_tensor(indices, "indices", 2).detach().cpu().numpy()
    n, k = idx.shape
    if idx.size and int(idx.max()) >= n_cols:
        raise ValueError(f"indices holds column {int(idx.max())} but n_cols={n_cols}")
    if values is None:
        vals = np.ones((n, k), dtype=np.float64)
    else:
        vt = as_tensor(values, "values")
        if tuple(vt.shape) != (n, k):
            raise ValueError(f"values has shape {tuple(vt.shape)} but indices has {(n, k)}")
        vals = vt.detach().cpu().double().numpy()
        if not np.isfinite(vals[idx >= 0]).all():
            raise ValueError("values holds NaN or inf at a kept (non-padding) entry")
    rows = np.repeat(np.arange(n), k)
    keep = idx.reshape(-1) >= 0
    m = sp.csr_matrix(
        (vals.reshape(-1)[keep], (rows[keep], idx.reshape(-1)[keep])), shape=(n, n_cols)
    )
    m.sum_duplicates()
    return m


def symmetrize(a: sp.spmatrix, how: Symmetrize = "mean") -> sp.csr_matrix:
    """Symmetrise a square sparse matrix.

    ``"mean"``: ``(A + A^T)/2`` (eq. 4.3 of the Gominski thesis, reciprocal pairs weigh 1, one-way
    pairs 0.5); ``"sum"``: ``A + A^T`` (GQE code); ``"min"``: ``min(A, A^T)`` (mutual neighbours,
    Iscen et al.); ``"max"``: ``max(A, A^T)`` (union); ``"none"``: unchanged.
    """
    a = check_sparse(a, "a")
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
    """The kNN affinity graph of Iscen et al. 2017 (cited by the Gominski thesis §3.4.2).

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

    Raises:
        ValueError: ``gamma`` not a finite number > 0, non-finite ``scores``, ``scores`` and
            ``indices`` of different shapes, an index ``>= n``.
    """
    gamma = check_float(gamma, "gamma", low=0.0, low_open=True)
    n = check_positive_int(n, "n")
    idx = check_int_tensor(indices, "indices", 2)
    if idx.numel() and int(idx.max()) >= n:
        raise ValueError(f"indices holds item {int(idx.max())} but n={n}")
    scores = as_tensor(scores, "scores")
    if not scores.is_floating_point():
        scores = scores.double()
    check_finite(scores, "scores")
    if scores.shape != idx.shape:
        raise ValueError(
            f"scores has shape {tuple(scores.shape)} but indices has {tuple(idx.shape)}"
        )
    w = sparse_from_knn(idx, scores.clamp_min(0).to(torch.float64).pow(gamma), n)
    w = symmetrize(w, "min" if mutual else "max")
    w.setdiag(0)
    w.eliminate_zeros()
    return w


def normalize_graph(w: sp.spmatrix) -> sp.csr_matrix:
    """Symmetric normalisation ``D^{-1/2} W D^{-1/2}`` with ``D = diag(W 1)``; isolated nodes get 0.

    Raises:
        ValueError: ``w`` holds NaN or inf, or is not square.
    """
    w = check_sparse(w, "w")
    if w.shape[0] != w.shape[1]:
        raise ValueError(f"w must be square, got shape {w.shape}")
    deg = np.asarray(w.sum(1)).ravel()
    with np.errstate(divide="ignore"):
        inv = np.where(deg > 0, 1.0 / np.sqrt(deg), 0.0)
    d = sp.diags(inv)
    return sp.csr_matrix(d @ w @ d)


def to_torch_sparse(
    m: sp.spmatrix, device: DeviceLike = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A scipy sparse matrix as a torch sparse CSR tensor on ``device`` (for ``S @ dense``
    products).

    Raises:
        ValueError: ``m`` holds NaN or inf.
    """
    m = check_sparse(m, "m")
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
    m: sp.spmatrix,
    device: DeviceLike = None,
    dtype: torch.dtype = torch.float32,
    *,
    check_inputs: bool = True,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v -> M @ v`` for ``(n, B)`` (or ``(n,)``) floating tensors: scipy on the CPU, torch sparse
    CSR on CUDA.

    torch's CPU sparse-CSR product has a fixed cost of several milliseconds per call, which
    dominates the many small products of CG on truncated graphs; scipy's does not.

    Args:
        m: ``(r, n)`` sparse matrix with finite values (checked once, here).
        device, dtype: where and in which precision the products run.
        check_inputs: check every ``v`` (floating, ``n`` rows, finite: one reduction per call);
            an inner loop whose vectors are known to be finite may pass ``False``.

    Raises:
        ValueError: ``m`` holds NaN or inf; with ``check_inputs``, a ``v`` with another number of
            rows or with NaN / inf (``TypeError`` for a non-floating ``v``).
    """
    m = check_sparse(m, "m")
    n_cols = m.shape[1]

    def check(v: torch.Tensor) -> None:
        if not isinstance(v, torch.Tensor) or not v.is_floating_point():
            raise TypeError(
                f"v must be a floating tensor, got {getattr(v, 'dtype', type(v).__name__)}"
            )
        if v.ndim not in (1, 2) or v.shape[0] != n_cols:
            raise ValueError(
                f"v must have shape ({n_cols},) or ({n_cols}, B), got {tuple(v.shape)}"
            )
        check_finite(v, "v")

    dev = get_device(device)
    if dev.type == "cpu":
        mc = sp.csr_matrix(m, dtype=np.float64 if dtype == torch.float64 else np.float32)

        def apply_cpu(v: torch.Tensor) -> torch.Tensor:
            if check_inputs:
                check(v)
            return torch.from_numpy(np.asarray(mc @ v.detach().cpu().numpy())).to(v.dtype)

        return apply_cpu
    mt = to_torch_sparse(m, dev, dtype)

    def apply_dev(v: torch.Tensor) -> torch.Tensor:
        if check_inputs:
            check(v)
        return mt @ v

    return apply_dev


def in_neighbour_lists(
    indices: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
) -> torch.Tensor:
    """Whether ``cols[m]`` is in the neighbour list ``indices[rows[m]]``, for every ``m``.

    A sorted-key lookup (``O((nk + M) log nk)``), so eq. 4.4's ``a_ij`` can be read at the few
    pairs where it is needed without building the ``n x n`` adjacency.

    Args:
        indices: ``(n, k)`` neighbour lists (negative = padding).
        rows, cols: ``(M,)`` pairs to look up.

    Returns:
        ``(M,)`` bool.

    Raises:
        TypeError / ValueError: non-integer inputs, ``indices`` not 2-D, ``rows`` and ``cols`` not
            of one shape ``(M,)``.
    """
    indices = check_int_tensor(indices, "indices", 2).cpu()
    rows, cols = check_int_tensor(rows, "rows", 1).cpu(), check_int_tensor(cols, "cols", 1).cpu()
    if rows.shape != cols.shape:
        raise ValueError(f"rows has {rows.shape[0]} entries but cols has {cols.shape[0]}")
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= indices.shape[0]):
        raise ValueError(f"rows holds items outside [0, {indices.shape[0]}) (the rows of indices)")
    n = 1 + max(
        indices.shape[0],
        int(indices.max()) if indices.numel() else 0,
        int(cols.max()) if cols.numel() else 0,
    )
    r = torch.arange(indices.shape[0])[:, None].expand_as(indices)
    valid = indices >= 0
    keys = torch.sort(r[valid] * n + indices[valid]).values
    q = rows * n + cols
    if keys.numel() == 0:
        return torch.zeros_like(q, dtype=torch.bool)
    pos = torch.searchsorted(keys, q).clamp(max=keys.numel() - 1)
    return keys[pos] == q


def sparse_row_topk(
    m: sp.spmatrix, k: int, *, exclude_diagonal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` stored entries of every row of a sparse matrix (absent entries never selected).

    Args:
        m: sparse matrix; stored ``-inf`` values (entries masked out) are allowed, NaN / ``+inf``
            not.
        k: entries per row; any ``k >= 1`` (a ``k`` above the widest row only adds padding).
        exclude_diagonal: never select ``(i, i)``.

    Returns:
        ``(values (n, k), indices (n, k))`` float64 / long; rows with fewer than ``k`` stored
        entries are padded with ``-inf`` / ``-1``.
    """
    k = check_positive_int(k, "k")
    m = check_sparse(m, "m", allow_neg_inf=True)
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


def sparse_rows_to_dense(
    m: sp.spmatrix, rows: torch.Tensor | np.ndarray | slice, fill: float = 0.0
) -> torch.Tensor:
    """Rows of a sparse score matrix as a dense ``(r, n)`` tensor; absent entries get ``fill``.

    Use ``fill`` below every stored score (e.g. ``-inf`` replaced by ``min - 1``) to rank the
    items a sparse method never reached after those it scored.

    Raises:
        ValueError: ``m`` holds NaN or inf, or ``fill`` is not finite.
    """
    fill = check_float(fill, "fill")
    if isinstance(rows, torch.Tensor):
        rows = rows.detach().cpu().numpy()
    sub = check_sparse(m, "m")[rows]
    out = np.full(sub.shape, fill, dtype=np.float64)
    r = np.repeat(np.arange(sub.shape[0]), np.diff(sub.indptr))
    out[r, sub.indices] = sub.data
    return torch.from_numpy(out)
