r"""Exact scores: the canonical score and the matmul settings the exact route needs.

The certified neighbour search (:mod:`rank_lab.metrics.certified`) ranks by one score definition,
the **canonical score** (:func:`canonical_scores`); the bound between it and a fast matmul is in
:mod:`rank_lab.metrics.score_bounds`.

**Canonical score.** For ``q, g`` in ``R^d`` stored in the working precision (float32, or float64
for float64 inputs) with unit roundoff ``u`` (``2^-24``, ``2^-53``)::

    s(q, g) = T(fl(q_1 g_1), ..., fl(q_d g_d), 0, ..., 0)      (zero-padded to D = 2^h >= d)
    T(v) = T(v[:D/2] + v[D/2:]),  T(v) = v for D = 1            (a fixed pairwise tree)

Every operation is one elementwise IEEE product or sum, so ``s`` is a function of ``(q, g)`` alone:
it does not depend on the matrix shapes, the kernels, the threads or the device that evaluate it
(a GEMM's per-element result does). Its distance to the real inner product (Higham, *Accuracy and
Stability of Numerical Algorithms*, §3.1 and §4.2, pairwise summation) is::

    |s - q.g| <= gamma_{h+1} sum_i |q_i g_i| <= gamma_{h+1} ||q|| ||g||,   gamma_n = n u / (1 - n u).

**Matmul settings.** The bound of :func:`rank_lab.metrics.score_bounds.score_bound` assumes float32
accumulation with one rounding per addition and no reduced-precision split-K reduction.
:func:`exact_matmul` pins that and forbids TF32 (and the CPU's implicit bfloat16) for the float32
matmuls of the exact route: ``fp32_precision = "ieee"`` for CUDA and oneDNN matmuls,
``allow_fp16_reduced_precision_reduction`` and ``allow_bf16_reduced_precision_reduction`` off, the
CPU fp16 reduced-precision reduction off; the previous settings are restored on exit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_positive_int,
)
from rank_lab.metrics.chunking import torch_threads

__all__ = ["canonical_scores", "exact_matmul"]


def tree_depth(d: int) -> int:
    """Depth ``h`` of the canonical score's pairwise tree: ``D = 2^h >= d`` leaves (module docstring).

    ``gamma_{h+1}`` bounds the canonical score's rounding error (Higham §4.2, pairwise summation).

    Args:
        d: the dimension (>= 1; unchecked, an internal helper).

    Returns:
        ``ceil(log2 d)``, 0 for ``d = 1``.
    """
    return max(0, math.ceil(math.log2(d))) if d > 1 else 0


def _fp32_precision_backends() -> list[object]:
    """The backends with the ``fp32_precision`` API of recent torch (empty for older versions)."""
    out = []
    for mod in (torch.backends.cuda.matmul, getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)):
        if mod is not None:
            try:
                mod.fp32_precision  # noqa: B018 - probing the attribute
            except (AttributeError, RuntimeError):
                continue
            out.append(mod)
    return out


@contextmanager
def exact_matmul() -> Iterator[None]:
    """Pin the matmul settings the bounds assume; restore the previous ones on exit.

    Inside: float32 matmuls in IEEE float32 (no TF32 on CUDA or oneDNN, no implicit bfloat16 on
    the CPU: ``fp32_precision = "ieee"``, or ``set_float32_matmul_precision("highest")`` on torch
    versions without that API), and no reduced-precision reductions in float16 / bfloat16 matmuls
    (``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction`` and
    ``allow_bf16_reduced_precision_reduction`` off, the CPU fp16 one too), so that their partial
    sums stay in float32 as :func:`rank_lab.metrics.score_bounds.score_bound` assumes.
    """
    cm = torch.backends.cuda.matmul
    new_api = _fp32_precision_backends()
    saved_new = [(m, m.fp32_precision) for m in new_api]
    saved_prec = None if new_api else torch.get_float32_matmul_precision()
    flags = ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
    saved = {name: getattr(cm, name) for name in flags}
    cpu_get = getattr(torch._C, "_get_cpu_allow_fp16_reduced_precision_reduction", None)
    cpu_set = getattr(torch._C, "_set_cpu_allow_fp16_reduced_precision_reduction", None)
    saved_cpu = cpu_get() if cpu_get is not None else None
    try:
        if new_api:
            for m in new_api:
                m.fp32_precision = "ieee"
        else:  # pragma: no cover - torch without the fp32_precision API
            torch.set_float32_matmul_precision("highest")
        for name in flags:
            setattr(cm, name, False)
        if cpu_set is not None:
            cpu_set(False)
        yield
    finally:
        for m, value in saved_new:
            m.fp32_precision = value
        if saved_prec is not None:  # pragma: no cover - torch without the fp32_precision API
            torch.set_float32_matmul_precision(saved_prec)
        for name, value in saved.items():
            setattr(cm, name, value)
        if cpu_set is not None and saved_cpu is not None:
            cpu_set(saved_cpu)


def canonical_scores(queries: torch.Tensor, gallery: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                     *, block_elements: int = 2**20, check: bool = True) -> torch.Tensor:
    """The canonical score ``s(queries[rows[m]], gallery[cols[m]])`` of every pair m (module docstring).

    Args:
        queries: ``(Q, d)`` float32 or float64 (other floating types are promoted to float32).
        gallery: ``(N, d)``; the pair is computed in the promoted dtype of both.
        rows, cols: ``(M,)`` integer indices into ``queries`` and ``gallery``.
        block_elements: pairs are processed in blocks of about this many products.
        check: validate the inputs (``False``: for callers that already did; the indices must be
            long tensors on the inputs' device, the inputs finite and of one working dtype).

    Returns:
        ``(M,)`` in the working dtype, on the inputs' device: the fixed pairwise-tree sum of the
        rounded elementwise products, bit-identical whatever the batch, device or thread count.

    Raises:
        ValueError / TypeError: naming the argument (shapes, non-finite values, indices out of range).
    """
    if check:
        queries = check_embeddings(queries, "queries")
        gallery = check_embeddings(gallery, "gallery")
        if queries.shape[1] != gallery.shape[1]:
            raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}")
        work = torch.float64 if torch.float64 in (queries.dtype, gallery.dtype) else torch.float32
        queries, gallery = queries.to(work), gallery.to(work)
        block_elements = check_positive_int(block_elements, "block_elements")
        idx = []
        for name, ix, n in (("rows", rows, queries.shape[0]), ("cols", cols, gallery.shape[0])):
            ix = as_tensor(ix, name)
            if ix.ndim != 1 or ix.is_floating_point() or ix.dtype == torch.bool:
                raise TypeError(f"{name} must be a 1-D integer tensor, got {ix.dtype} of shape {tuple(ix.shape)}")
            if ix.numel() and (int(ix.min()) < 0 or int(ix.max()) >= n):
                raise ValueError(f"{name} holds indices outside [0, {n})")
            idx.append(ix.long().to(queries.device))
        rows, cols = idx
        if rows.shape != cols.shape:
            raise ValueError(f"rows has {rows.numel()} entries but cols has {cols.numel()}")
    work = queries.dtype
    d = queries.shape[1]
    width = 1 << tree_depth(d)
    out = torch.empty(rows.shape[0], dtype=work, device=queries.device)
    step = max(1, block_elements // width)

    def block(a: int) -> None:
        p = queries[rows[a : a + step]] * gallery[cols[a : a + step]]  # elementwise, rounded once
        if width > d:
            p = F.pad(p, (0, width - d))
        h = width // 2
        while h >= 1:
            p[:, :h] += p[:, h : 2 * h]
            h //= 2
        out[a : a + step] = p[:, 0]

    starts = list(range(0, rows.shape[0], step))
    threads = torch.get_num_threads()
    if queries.device.type != "cpu" or threads == 1 or len(starts) < 4:
        for a in starts:
            block(a)
        return out
    with torch_threads(1), ThreadPoolExecutor(max_workers=threads) as pool:  # elementwise: any split is exact
        list(pool.map(block, starts))
    return out
