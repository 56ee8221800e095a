r"""The canonical score -- the one score every route of the engine ranks by -- and the matmul guard.

**Canonical score.** For ``q, g`` in ``R^d`` stored in the working precision (float32, or float64
for float64 inputs) with unit roundoff ``u`` (``2^-24``, ``2^-53``)::

    s(q, g) = T(fl(q_1 g_1), ..., fl(q_d g_d), 0, ..., 0)      (zero-padded to D = 2^h >= d)
    T(v) = T(v[:D/2] + v[D/2:]),  T(v) = v for D = 1            (a fixed pairwise tree)

Every operation is one elementwise IEEE product or sum with gradual underflow (subnormal numbers
kept), so ``s`` is a function of ``(q, g)`` alone: it does not depend on the matrix shapes, the
kernels, the threads or the device that evaluate it (a GEMM's per-element result does).

**Its distance to the real inner product** (Higham, *Accuracy and Stability of Numerical
Algorithms*, §2.2 and §4.2). With gradual underflow a product is ``fl(x) = x (1 + d) + e`` with
``|d| <= u``, ``|e| <= tau / 2`` (``tau`` the subnormal spacing, ``2^-149`` in float32, ``2^-1074``
in float64) and ``d e = 0``; a sum is ``fl(a + b) = (a + b)(1 + d)`` exactly (sums of subnormals
are exact). Through the ``h`` levels of the tree each product's error is multiplied by at most
``(1 + u)^h``, so::

    |s - q.g| <= gamma_{h+1} sum_i |q_i g_i| + (1 + gamma_h) d tau / 2
              <= gamma_{h+1} ||q|| ||g|| + mu_w,      gamma_n = n u / (1 - n u),  mu_w = (1 + gamma_h) d tau / 2.

The absolute term ``mu_w`` is what products that underflow (entries around ``1e-25`` in float32)
add; :mod:`rank_lab.metrics.engine.scores.bound` carries it.

**Matmul guard.** The bound of a fast matmul (:mod:`~rank_lab.metrics.engine.scores.bound`) assumes
float32 accumulation with one rounding per addition, no TF32, no reduced-precision split-K
reduction and no autocast. :func:`exact_matmul` pins all of that, and gradual underflow on the
calling CPU thread, for the duration of a block; the previous settings are restored on exit.
"""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import torch
import torch.nn.functional as F

from rank_lab._validation import as_tensor, check_embeddings, check_positive_int
from rank_lab.metrics.engine._blocks import torch_threads

__all__ = ["canonical_scores", "exact_matmul"]


def scale_rows(x: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """``x * 2^exponent`` row by row, rounded once (kernel).

    ``torch.ldexp`` forms ``2^e`` in the dtype of ``x``, which overflows for the exponents that
    bring subnormal rows to the unit range (``2^139`` in float32). Growing rows are scaled in two
    halves, each a representable power of two (no rounding at all); shrinking ones in one step (one
    rounding, ``2^-e`` is representable down to the smallest subnormal).

    Args:
        x: ``(N, d)`` floating.
        exponent: ``(N,)`` integer exponents.
    """
    e = exponent.to(x.device, torch.long)
    if e.numel() and bool((e == 0).all()):
        return x.clone()
    half = torch.div(e, 2, rounding_mode="floor")
    grow = torch.ldexp(torch.ldexp(x, half.to(x.dtype)[:, None]), (e - half).to(x.dtype)[:, None])
    if bool((e >= 0).all()):
        return grow
    shrink = torch.ldexp(x, torch.minimum(e, torch.zeros_like(e)).to(x.dtype)[:, None])
    return torch.where((e >= 0)[:, None], grow, shrink)


def tree_depth(d: int) -> int:
    """Depth ``h`` of the canonical score's pairwise tree: ``D = 2^h >= d`` leaves (module
    docstring).

    Returns:
        ``ceil(log2 d)``, 0 for ``d = 1``.
    """
    return max(0, math.ceil(math.log2(d))) if d > 1 else 0


def _fp32_precision_backends() -> list[object]:
    """The backends with the ``fp32_precision`` API of recent torch (empty for older versions)."""
    out = []
    for mod in (
        torch.backends.cuda.matmul,
        getattr(getattr(torch.backends, "mkldnn", None), "matmul", None),
    ):
        if mod is not None:
            try:
                mod.fp32_precision  # noqa: B018 - probing the attribute
            except (AttributeError, RuntimeError):
                continue
            out.append(mod)
    return out


def _flushes_subnormals() -> bool:
    """Whether this CPU thread flushes subnormal results to zero
    (``torch.set_flush_denormal(True)``)."""
    return float(torch.tensor([2.0**-126]) * 0.5) == 0.0


@contextmanager
def exact_matmul() -> Iterator[None]:
    """Pin the matmul settings the bounds assume; restore the previous ones on exit.

    Inside: float32 matmuls in IEEE float32 (no TF32 on CUDA or oneDNN, no implicit bfloat16 on
    the CPU: ``fp32_precision = "ieee"``, or ``set_float32_matmul_precision("highest")`` on torch
    versions without that API); no reduced-precision reductions in float16 / bfloat16 matmuls
    (``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction`` and
    ``allow_bf16_reduced_precision_reduction`` off, the CPU fp16 one too), so that their partial
    sums stay in float32 as :func:`~rank_lab.metrics.engine.scores.bound.score_bound` assumes;
    **autocast off** on the CPU and on CUDA (a caller's ``torch.autocast`` block would otherwise
    recast the products to bfloat16 / float16); subnormal numbers kept on this CPU thread (the
    canonical score's definition).
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
    flushing = _flushes_subnormals()
    try:
        with ExitStack() as stack:
            for device_type in ("cpu", "cuda"):
                stack.enter_context(torch.autocast(device_type, enabled=False))
            if new_api:
                for m in new_api:
                    m.fp32_precision = "ieee"
            else:  # pragma: no cover - torch without the fp32_precision API
                torch.set_float32_matmul_precision("highest")
            for name in flags:
                setattr(cm, name, False)
            if cpu_set is not None:
                cpu_set(False)
            if flushing:
                torch.set_flush_denormal(False)
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
        if flushing:
            torch.set_flush_denormal(True)


def canonical_pairs(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    block_elements: int = 2**20,
) -> torch.Tensor:
    """The canonical score of every pair ``(queries[rows[m]], gallery[cols[m]])`` (kernel,
    unchecked).

    ``queries`` and ``gallery`` are finite, of one working dtype (float32 / float64) and on one
    device; ``rows`` and ``cols`` are long index tensors on that device. The products and sums run
    elementwise (any split of the pairs gives the same bits), on the CPU in blocks spread over
    threads with gradual underflow.

    Returns:
        ``(M,)`` in the working dtype, on the inputs' device.
    """
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
    with exact_matmul():
        if queries.device.type != "cpu" or threads == 1 or len(starts) < 4:
            for a in starts:
                block(a)
            return out

        def work_block(a: int) -> None:
            torch.set_flush_denormal(False)  # per thread: the definition keeps subnormals
            block(a)

        # elementwise: any split is exact
        with torch_threads(1), ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(work_block, starts))
    return out


def canonical_scores(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    *,
    block_elements: int = 2**20,
) -> torch.Tensor:
    """The canonical score ``s(queries[rows[m]], gallery[cols[m]])`` of every pair m (module
    docstring).

    Args:
        queries: ``(Q, d)`` float32 or float64 (other floating types are promoted to float32).
        gallery: ``(N, d)``; the pair is computed in the promoted dtype of both.
        rows, cols: ``(M,)`` integer indices into ``queries`` and ``gallery``.
        block_elements: pairs are processed in blocks of about this many products.

    Returns:
        ``(M,)`` in the working dtype, on the inputs' device: the fixed pairwise-tree sum of the
        rounded elementwise products, bit-identical whatever the batch, device or thread count.

    Raises:
        ValueError / TypeError: naming the argument (shapes, non-finite values, indices out of
        range).
    """
    queries = check_embeddings(queries, "queries").detach()
    gallery = check_embeddings(gallery, "gallery").detach()
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}")
    if queries.device != gallery.device:
        raise ValueError(f"queries are on {queries.device} but gallery is on {gallery.device}")
    work = torch.float64 if torch.float64 in (queries.dtype, gallery.dtype) else torch.float32
    queries, gallery = queries.to(work), gallery.to(work)
    block_elements = check_positive_int(block_elements, "block_elements")
    idx = []
    for name, ix, n in (("rows", rows, queries.shape[0]), ("cols", cols, gallery.shape[0])):
        ix = as_tensor(ix, name)
        if ix.ndim != 1 or ix.is_floating_point() or ix.dtype == torch.bool:
            raise TypeError(
                f"{name} must be a 1-D integer tensor, got {ix.dtype} of shape {tuple(ix.shape)}"
            )
        if ix.numel() and (int(ix.min()) < 0 or int(ix.max()) >= n):
            raise ValueError(f"{name} holds indices outside [0, {n})")
        idx.append(ix.long().to(queries.device))
    if idx[0].shape != idx[1].shape:
        raise ValueError(f"rows has {idx[0].numel()} entries but cols has {idx[1].numel()}")
    return canonical_pairs(queries, gallery, idx[0], idx[1], block_elements)
