"""Compiled kernel of truncated diffusion (numba): conjugate gradient on each block of a
block-diagonal system.

Internal module of :mod:`rank_lab.retrieval._diffusion_blocks`. The systems
``(I - alpha S_C) x = y_C`` of the truncation of Iscen et al. 2017 are small (``|C|`` = 1,000 rows,
about 11 entries each) and solved 20 iterations each: run set by set, a system's matrix (~130 KiB)
and vectors (~8 KiB each) stay in the core's caches for all its iterations, where numpy/scipy
products over a whole group stream the group's matrix from memory at every iteration. The kernel
releases the GIL, so Python threads run groups in parallel. Every sum runs in one fixed order per
set: a set's result does not depend on the other sets of its group, on the group or on the thread.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["block_cg"]


@numba.njit(cache=True, nogil=True)
def block_cg(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    b: np.ndarray,
    sizes: np.ndarray,
    width: int,
    iters: int,
    tol: float,
) -> np.ndarray:  # pragma: no cover - compiled
    """Conjugate gradient on ``(I + M) x = b`` for every block of a block-diagonal ``M``
    (``M = -alpha S_C``).

    Block ``k`` holds rows and columns ``k * width .. k * width + sizes[k]`` of ``M``; each block is
    an independent CG run with its own step sizes and stopping test ``||r|| <= tol ||b||``, exactly
    as the columns of :func:`rank_lab.retrieval.diffusion_graph.conjugate_gradient`.

    Args:
        indptr, indices, data: ``M`` in CSR form, ``(B W, B W)`` (columns inside each row's block).
        b: ``(B W,)`` right-hand sides (zero in the padding).
        sizes: ``(B,)`` block sizes (``<= width``).
        width: the padded block width ``W``.
        iters, tol: CG budget.

    Returns:
        ``x (B W,)``, zero in the padding.
    """
    x = np.zeros(b.shape[0])
    tiny = np.finfo(np.float64).tiny
    for k in range(sizes.shape[0]):
        lo = k * width
        s = sizes[k]
        r = b[lo : lo + s].copy()
        p = r.copy()
        ap = np.empty(s)
        rs = 0.0
        for i in range(s):
            rs += r[i] * r[i]
        b_norm = max(np.sqrt(rs), tiny)
        done = np.sqrt(rs) <= tol * b_norm
        for _ in range(iters):
            if done:
                break
            denom = 0.0
            for i in range(s):
                acc = p[i]
                for jj in range(indptr[lo + i], indptr[lo + i + 1]):
                    acc += data[jj] * p[indices[jj] - lo]
                ap[i] = acc
                denom += p[i] * acc
            step = 0.0 if denom <= 0.0 else rs / max(denom, tiny)
            rs_new = 0.0
            for i in range(s):
                x[lo + i] += step * p[i]
                r[i] -= step * ap[i]
                rs_new += r[i] * r[i]
            done = np.sqrt(rs_new) <= tol * b_norm
            beta = 0.0 if done else rs_new / max(rs, tiny)
            for i in range(s):
                p[i] = r[i] + beta * p[i]
            rs = rs_new
    return x
