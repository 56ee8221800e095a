"""Multi-descriptor diffusion (MD) and constrained MD (cMD): Gominski thesis §4.2.1, eqs. 4.2-4.9.

Given ``Upsilon`` similarity matrices ``S^1 .. S^Upsilon`` over the same ``n`` images (any
descriptor: cosine of global descriptors, a match kernel of local ones ...):

1. per-descriptor kNN graph ``a^v_ij = 1[x_j in NN^v_k1(x_i)]`` (eq. 4.2), symmetrised
   ``A^v <- (A^v + A^v^T)/2`` (eqs. 4.3-4.4, values in {0, 0.5, 1});
2. descriptor-specific diffusion over the top-``k2`` neighbours (eq. 4.5), a simultaneous
   (Jacobi) update of the rows ``s^v_i <- sum_{j in NN^v_k2(i)} a^v_ij (s^v_ij)^alpha s^v_j``,
   i.e. ``S^v <- P^v S^v`` with ``P^v`` sparse (``k2`` non-zeros per row);
3. "matrices S^v are L2-normalized" and merged, ``S = (1/Upsilon) sum_v S^v`` (eq. 4.6);
4. a new kNN graph from the merged ``S`` (same ``k1``), symmetrised, and a second update (eq. 4.7);
   the final ``S`` ranks the base directly (no final cosine, unlike GQE).

cMD adds ``lambda T`` to ``A`` "after eq. 4.4" (eq. 4.9), with ``t_ij = 1[domain(i) != domain(j)]``
(eq. 4.8): since only the ``k2`` propagation neighbours are read, cross-domain neighbours weigh
``{0.5, 1} + lambda`` instead of ``{0.5, 1}``.

**Decision points** (choices the thesis' §4.2.1 leaves open, every one an argument):

* ``include_self`` (default ``False``): whether the item itself may be one of its ``k2``
  propagation neighbours. The thesis does not say; with self included and a large ``alpha`` (the
  reported optimum is 7) the self weight 1 dwarfs ``s_ij^alpha`` and the update collapses to the
  identity, which contradicts the thesis' flat mAP for ``alpha > 4`` (Fig. 4.5), hence the default.
  ``True`` lets the diagonal compete like any entry (the GQE code MD builds on).
* ``knn_self`` (``"keep"``): the ``k1`` graph lists are the top-``k1`` entries of each row as they
  are (self included when it ranks there, as in the GQE code) or ``"exclude"`` the diagonal.
* ``norm`` (``"row"``): row-wise L2 normalisation of each ``S^v`` (rows are feature vectors, as
  in GQE); ``"fro"`` (whole matrix) or ``"none"``.
* ``second_stage_knn`` (``"rows"``): merged-stage neighbours are the top-``k1`` entries of each
  row of the merged ``S``; ``"row_cosine"`` uses the cosine between rows of ``S`` instead.
* ``cmd_stage`` (``"both"``): where ``lambda T`` is added: ``"both"`` stages, ``"merged"`` or
  ``"per_descriptor"`` only.
* ``clamp_negative`` (``True``): ``max(s, 0)`` before the power ``alpha``.
* Asymmetry: after step 2 ``S^v`` is not symmetric; rows are query-side vectors, never
  re-symmetrised.
* Query exclusion at evaluation (the query's own column) is the protocol's job
  (:mod:`rank_lab.retrieval.cross_source`).

**Dense and sparse.** Dense ``(n, n)`` matrices (``mode="dense"``, ``n <= DENSE_LIMIT``) follow the
equations exactly; ``P^v`` is always sparse, so a step costs ``O(n^2 k2)``. ``mode="sparse"``
stores each similarity matrix as its top-``sparse_k`` entries per row (scipy CSR, re-truncated after
every update), which approximates the dense result (absent entries count as 0) and equals it when
``sparse_k >= n`` (tested). Cost ``O(n k2 sparse_k)`` per update; the kNN lists come from faiss /
chunked torch (:func:`rank_lab.retrieval.graph.knn_self`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch

from rank_lab._validation import as_tensor, check_embeddings, check_finite, check_positive_int
from rank_lab.retrieval.graph import (
    DENSE_LIMIT,
    check_dense_ok,
    in_neighbour_lists,
    knn_self,
    sparse_from_knn,
    sparse_row_topk,
)
from rank_lab.retrieval.whitening import l2n
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "md",
    "cmd",
    "md_from_features",
    "similarity_matrix",
    "concat_descriptors",
    "mean_similarity",
]

Norm = Literal["row", "fro", "none"]
SecondStage = Literal["rows", "row_cosine"]
CmdStage = Literal["both", "merged", "per_descriptor"]
KnnSelf = Literal["keep", "exclude"]
Matrix = torch.Tensor | sp.spmatrix


def similarity_matrix(x: torch.Tensor) -> torch.Tensor:
    """Cosine similarity matrix ``S = L2N(X) L2N(X)^T`` (eq. 3.2), ``(n, n)``; refuses
    ``n > DENSE_LIMIT``."""
    x = check_embeddings(x, "x")
    check_dense_ok(x.shape[0], x.shape[0], "similarity_matrix")
    x = l2n(x)
    return x @ x.T


def concat_descriptors(features: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenation of L2-normalised descriptors, re-normalised: ``[x^1; ..; x^U] / sqrt(U)``.

    Its cosine matrix equals the mean of the per-descriptor cosine matrices (the L2-normalised
    concatenation has norm sqrt(V) before re-normalisation): "late fusion" and "concatenation" are
    the same baseline.
    """
    xs = [l2n(check_embeddings(x, f"features[{v}]")) for v, x in enumerate(features)]
    if not xs:
        raise ValueError("features is empty")
    if len({x.shape[0] for x in xs}) != 1:
        raise ValueError(
            f"features must all have the same number of rows, got {[x.shape[0] for x in xs]}"
        )
    return l2n(torch.cat(xs, 1))


def mean_similarity(features: Sequence[torch.Tensor]) -> torch.Tensor:
    """Mean of the cosine matrices of several descriptors (late fusion), ``(n, n)``.

    Args:
        features: ``Upsilon >= 1`` descriptor matrices ``(n, d_v)`` with the same ``n``.

    Raises:
        ValueError: no descriptor, descriptors of different ``n``, or a bad matrix (named
            ``features[v]``).
    """
    xs = [check_embeddings(x, f"features[{v}]") for v, x in enumerate(features)]
    if not xs:
        raise ValueError("features is empty")
    if len({x.shape[0] for x in xs}) != 1:
        raise ValueError(
            f"features must all have the same number of rows, got {[x.shape[0] for x in xs]}"
        )
    return torch.stack([similarity_matrix(x) for x in xs]).mean(0)


def _check_similarities(similarities: Sequence[Matrix]) -> tuple[list[Matrix], bool, int]:
    if isinstance(similarities, (torch.Tensor, sp.spmatrix)):
        similarities = [similarities]
    mats = list(similarities)
    if not mats:
        raise ValueError("similarities is empty")
    is_sparse = [sp.issparse(m) for m in mats]
    if any(is_sparse) and not all(is_sparse):
        raise TypeError("similarities must be all dense tensors or all scipy sparse matrices")
    out: list[Matrix] = []
    n = None
    for v, m in enumerate(mats):
        if not sp.issparse(m):
            m = as_tensor(m, f"similarities[{v}]")
            if not m.is_floating_point():
                m = m.float()
            check_finite(m, f"similarities[{v}]")
        else:
            m = sp.csr_matrix(m, dtype=np.float64)
            if not np.isfinite(m.data).all():
                raise ValueError(f"similarities[{v}] contains NaN or inf values")
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"similarities[{v}] must be square (n, n), got {tuple(m.shape)}")
        if n is not None and m.shape[0] != n:
            raise ValueError(f"similarities[{v}] has n={m.shape[0]} but similarities[0] has n={n}")
        n = m.shape[0]
        out.append(m)
    return out, all(is_sparse), int(n)


def _row_topk(s: Matrix, k: int, exclude_diagonal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k (values, indices) of every row; padding ``-inf`` / ``-1`` in the sparse case."""
    if sp.issparse(s):
        return sparse_row_topk(s, k, exclude_diagonal=exclude_diagonal)
    if exclude_diagonal:
        s = s.clone()
        s.fill_diagonal_(-torch.inf)
    v, i = torch.topk(s, k, dim=1)
    return v.cpu().double(), i.cpu()


def _row_cosine_knn(s: Matrix, k: int, exclude_diagonal: bool, chunk: int = 1024) -> torch.Tensor:
    """kNN by cosine between the rows of ``s`` (decision point 3 above, ``"row_cosine"``)."""
    if not sp.issparse(s):
        r = l2n(s)
        return _row_topk(r @ r.T, k, exclude_diagonal)[1]
    norms = np.sqrt(np.asarray(s.multiply(s).sum(1)).ravel())
    r = sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ s)
    out = []
    for a in range(0, r.shape[0], chunk):
        c = torch.from_numpy((r[a : a + chunk] @ r.T).toarray())
        if exclude_diagonal:
            rows = torch.arange(c.shape[0])
            c[rows, rows + a] = -torch.inf
        out.append(torch.topk(c, min(k, c.shape[1]), dim=1).indices)
    return torch.cat(out)


def _propagate(
    s: Matrix,
    graph_idx: torch.Tensor,
    k2: int,
    alpha: float,
    include_self: bool,
    clamp_negative: bool,
    lam: float,
    domains: torch.Tensor | None,
    sparse_k: int,
    device: torch.device,
) -> Matrix:
    """One update ``s_i <- sum_{j in NN_k2(i)} (a_ij + lam t_ij) (s_ij)^alpha s_j`` (eqs. 4.5 / 4.7,
    4.9)."""
    n = s.shape[0]
    vals, idx = _row_topk(s, k2, exclude_diagonal=not include_self)
    rows = torch.arange(n)[:, None].expand_as(idx)
    keep = idx >= 0
    r, c, sv = rows[keep], idx[keep], vals[keep]
    a = (
        0.5 * in_neighbour_lists(graph_idx, r, c).double()
        + 0.5 * in_neighbour_lists(graph_idx, c, r).double()
    )
    if lam and domains is not None:
        a = a + lam * (domains[r] != domains[c]).double()
    if clamp_negative:
        sv = sv.clamp_min(0)
    elif bool((sv < 0).any()) and float(alpha) != int(alpha):
        raise ValueError("negative similarities with a non-integer alpha: use clamp_negative=True")
    w = a * sv.pow(alpha)
    if sp.issparse(s):
        p = sp.csr_matrix((w.numpy(), (r.numpy(), c.numpy())), shape=(n, n))
        out = sp.csr_matrix(p @ s)
        if sparse_k < n:
            tv, ti = sparse_row_topk(out, sparse_k)
            out = sparse_from_knn(ti, torch.where(ti >= 0, tv, torch.zeros_like(tv)), n)
        return out
    p = (
        torch.sparse_coo_tensor(torch.stack([r, c]), w.to(s.dtype), (n, n), check_invariants=False)
        .coalesce()
        .to(device)
    )
    return torch.sparse.mm(p, s.to(device)).cpu()


def _normalize(s: Matrix, norm: Norm) -> Matrix:
    if norm == "none":
        return s
    if sp.issparse(s):
        if norm == "fro":
            return s / max(float(sp.linalg.norm(s)), 1e-12)
        norms = np.sqrt(np.asarray(s.multiply(s).sum(1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ s)
    if norm == "fro":
        return s / s.norm().clamp_min(1e-12)
    return l2n(s)


def md(
    similarities: Sequence[Matrix] | Matrix,
    k1: int = 15,
    k2: int = 4,
    alpha: float = 7.0,
    *,
    domains: torch.Tensor | Sequence[int] | None = None,
    lam: float = 0.0,
    include_self: bool = False,
    knn_self: KnnSelf = "keep",
    norm: Norm = "row",
    second_stage_knn: SecondStage = "rows",
    cmd_stage: CmdStage = "both",
    clamp_negative: bool = True,
    sparse_k: int | None = None,
    device: DeviceLike = None,
) -> Matrix:
    """Multi-descriptor diffusion (eqs. 4.2-4.7), cMD when ``domains`` and ``lam > 0`` (eqs.
    4.8-4.9).

    Args:
        similarities: ``Upsilon`` similarity matrices ``(n, n)``: dense tensors (dense mode) or
            scipy sparse matrices holding the top entries of each row (sparse mode; see
            :func:`md_from_features`). One matrix = single-descriptor MD. Integer matrices are
            cast to float.
        k1: kNN graph size (thesis optimum 15).
        k2: propagation neighbours, ``k2 <= k1`` (thesis optimum 4).
        alpha: similarity exponent (thesis optimum 7).
        domains: ``(n,)`` integer domain (collection) of every image, for cMD.
        lam: ``lambda`` of eq. 4.9 (0 = MD).
        include_self, knn_self, norm, second_stage_knn, cmd_stage, clamp_negative: the decision
            points of the module docstring.
        sparse_k: entries kept per row after each update in sparse mode (default: the number of
            stored entries per row of the input, at least ``4 k1``).
        device: where the dense products run.

    Returns:
        The diffused ``(n, n)`` similarity (dense tensor, float64 on the CPU) or, in sparse mode, a
        CSR matrix. Rank row ``i`` to answer query ``i`` (exclude ``i`` itself at evaluation).
    """
    mats, is_sparse, n = _check_similarities(similarities)
    k1 = check_positive_int(k1, "k1")
    k2 = check_positive_int(k2, "k2")
    if k2 > k1:
        raise ValueError(f"k2={k2} must be <= k1={k1}")
    if k1 > n:
        raise ValueError(f"k1={k1} is larger than n={n}")
    if not np.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    for name, val, ok in (
        ("knn_self", knn_self, ("keep", "exclude")),
        ("norm", norm, ("row", "fro", "none")),
        ("second_stage_knn", second_stage_knn, ("rows", "row_cosine")),
        ("cmd_stage", cmd_stage, ("both", "merged", "per_descriptor")),
    ):
        if val not in ok:
            raise ValueError(f"{name} must be one of {ok}, got {val!r}")
    dom = None
    if lam:
        if domains is None:
            raise ValueError("lam > 0 (cMD) needs domains")
        dom = as_tensor(domains, "domains").long().cpu()
        if dom.shape != (n,):
            raise ValueError(f"domains must have shape ({n},), got {tuple(dom.shape)}")
    if not is_sparse:
        check_dense_ok(n, n, "md (dense mode)", allow_dense=n <= DENSE_LIMIT)
        mats = [m.detach().cpu().double() for m in mats]
    if sparse_k is None:
        sparse_k = max(4 * k1, max(int(np.diff(m.indptr).max()) for m in mats)) if is_sparse else n
    sparse_k = min(check_positive_int(sparse_k, "sparse_k"), n)
    dev = get_device(device)
    lam_v = lam if cmd_stage in ("both", "per_descriptor") else 0.0
    lam_m = lam if cmd_stage in ("both", "merged") else 0.0

    stage1 = []
    for s in mats:
        g_idx = _row_topk(s, k1, exclude_diagonal=knn_self == "exclude")[1]
        s_new = _propagate(
            s, g_idx, k2, alpha, include_self, clamp_negative, lam_v, dom, sparse_k, dev
        )
        stage1.append(_normalize(s_new, norm))
    if is_sparse:
        merged = sp.csr_matrix(sum(stage1[1:], stage1[0]) / len(stage1))
    else:
        merged = torch.stack(stage1).mean(0)
    if second_stage_knn == "rows":
        g_idx = _row_topk(merged, k1, exclude_diagonal=knn_self == "exclude")[1]
    else:
        g_idx = _row_cosine_knn(merged, k1, exclude_diagonal=knn_self == "exclude")
    return _propagate(
        merged, g_idx, k2, alpha, include_self, clamp_negative, lam_m, dom, sparse_k, dev
    )


def cmd(
    similarities: Sequence[Matrix] | Matrix,
    domains: torch.Tensor | Sequence[int],
    lam: float = 0.1,
    k1: int = 17,
    k2: int = 4,
    alpha: float = 9.0,
    **kwargs: object,
) -> Matrix:
    """Constrained MD (eqs. 4.8-4.9): :func:`md` with ``A <- A + lam T``; thesis optimum (17, 4, 9,
    0.1).

    The thesis' trade-off between absolute and cross-domain scores is around ``lam = 0.5-0.6``
    (Fig. 4.6). Other keyword arguments as in :func:`md`.
    """
    if domains is None:
        raise ValueError("cmd needs domains")
    return md(similarities, k1, k2, alpha, domains=domains, lam=lam, **kwargs)  # type: ignore[arg-type]


def md_from_features(
    features: Sequence[torch.Tensor],
    k1: int = 15,
    k2: int = 4,
    alpha: float = 7.0,
    *,
    mode: Literal["auto", "dense", "sparse"] = "auto",
    sparse_k: int | None = None,
    backend: str = "auto",
    device: DeviceLike = None,
    **kwargs: object,
) -> Matrix:
    """MD / cMD from global descriptors: cosine similarities, dense or top-``sparse_k`` sparse.

    Args:
        features: ``Upsilon`` descriptor matrices ``(n, d_v)`` (L2-normalised here).
        k1, k2, alpha: see :func:`md`.
        mode: ``"dense"`` (exact, ``n <= DENSE_LIMIT``), ``"sparse"`` (faiss / chunked-torch kNN,
            ``sparse_k`` neighbours per row including self), ``"auto"`` (dense up to
            ``DENSE_LIMIT``).
        sparse_k: neighbours kept per row in sparse mode (default ``max(4 k1, 100)``).
        backend, device: kNN search.
        **kwargs: passed to :func:`md` (``domains``, ``lam``, ``include_self`` ...).
    """
    xs = [l2n(check_embeddings(x, f"features[{v}]")).detach().cpu() for v, x in enumerate(features)]
    if not xs:
        raise ValueError("features is empty")
    n = xs[0].shape[0]
    if mode not in ("auto", "dense", "sparse"):
        raise ValueError(f"mode must be 'auto', 'dense' or 'sparse', got {mode!r}")
    if mode == "dense" or (mode == "auto" and n <= DENSE_LIMIT):
        return md([x @ x.T for x in xs], k1, k2, alpha, device=device, **kwargs)  # type: ignore[arg-type]
    sk = min(n, sparse_k if sparse_k is not None else max(4 * k1, 100))
    mats = []
    for x in xs:
        v, i = knn_self(x, sk, include_self=True, backend=backend, device=device)
        mats.append(sparse_from_knn(i, v, n))
    return md(mats, k1, k2, alpha, sparse_k=sk, device=device, **kwargs)  # type: ignore[arg-type]
