"""Exact k nearest neighbours by inner product: :func:`knn_search` (torch or faiss stage 1).

The neighbours are exact with respect to the canonical score
(:func:`~rank_lab.metrics.engine.scores.exact.canonical_scores`, a fixed pairwise-tree dot product):
a fast stage 1 -- a tiled matmul in the format of ``precision=`` or a flat float32 faiss index on
the CPU (``backend="faiss"``) -- finds candidates, the bound of
:func:`~rank_lab.metrics.engine.scores.bound.score_bound` guarantees that none is missed, and the
certified search (:mod:`rank_lab.metrics.engine.search.certified`) re-scores them canonically; the
result does not depend on the precision, the backend, the device or the tiling.
"""

from __future__ import annotations

import importlib
import math
from typing import Literal

import torch

from rank_lab._validation import check_embeddings, check_float, check_positive_int
from rank_lab.metrics.engine.scores.bound import PRECISIONS, check_products_fit
from rank_lab.metrics.engine.scores.exact import exact_matmul
from rank_lab.metrics.engine.search.certified import certified_lists
from rank_lab.metrics.engine.search.index import faiss_knn
from rank_lab.utils import DeviceLike, get_device

__all__ = ["knn_search", "faiss_available"]

Backend = Literal["auto", "torch", "faiss"]
Precision = Literal["auto", "exact", "fp32", "bf16", "fp16"]


def faiss_available() -> bool:
    """Whether the ``faiss`` module can be imported."""
    try:
        importlib.import_module("faiss")  # optional heavy dependency: probed, imported when used
    except ImportError:
        return False
    return True


def search_tile(max_memory_mb: float, chunk_size: int | None) -> int:
    """Queries (and gallery items) per tile of the certified search: about 8 bytes per tile entry.

    Returns:
        The tile side, a multiple of 64 in ``[64, 8192]`` (or ``max(64, chunk_size)``).
    """
    if chunk_size is not None:
        return max(64, int(chunk_size))
    side = int(math.sqrt(max(1.0, max_memory_mb) * 2**20 / 8))
    return max(64, min(8192, side // 64 * 64))


def check_search_options(
    backend: object, precision: object, chunk_size: object, max_memory_mb: object, progress: object
) -> tuple[str, str, int | None, float]:
    """Check the options shared by :func:`knn_search` and the engine, naming the argument.

    Returns:
        ``(backend, precision, chunk_size, max_memory_mb)``.

    Raises:
        ValueError / TypeError: an unknown backend or precision, ``"bf16"`` / ``"fp16"`` with
        ``backend="faiss"`` (faiss searches in float32), a bad chunk size, budget or progress flag.
    """
    if backend not in ("auto", "torch", "faiss"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'faiss', got {backend!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if backend == "faiss" and precision in ("bf16", "fp16"):
        raise ValueError(
            f"precision={precision!r} needs backend='torch' (faiss searches in float32)"
        )
    if chunk_size is not None:
        chunk_size = check_positive_int(chunk_size, "chunk_size")
    max_memory_mb = check_float(max_memory_mb, "max_memory_mb", low=0.0, low_open=True)
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool or None, got {type(progress).__name__}")
    return str(backend), str(precision), chunk_size, float(max_memory_mb)


def knn_search(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    k: int,
    *,
    exclude_self: bool = False,
    backend: Backend = "auto",
    precision: Precision = "auto",
    device: DeviceLike = None,
    chunk_size: int | None = None,
    max_memory_mb: float = 256,
    progress: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest neighbours by inner product (normalise first for cosine similarity).

    "Exact" is with respect to the canonical score (a fixed pairwise-tree dot product in the
    working precision, :func:`~rank_lab.metrics.engine.scores.exact.canonical_scores`): the
    candidates of a fast stage (``precision``) are re-scored with it, and the bound of
    :func:`~rank_lab.metrics.engine.scores.bound.score_bound` guarantees that no neighbour is
    missed, so the result does not depend on ``precision``, ``backend``, the device or the chunking
    (bit for bit on the CPU; on CUDA see ``docs/decisions.md`` for the devices the promise covers).

    Args:
        queries: ``(Q, d)`` (inputs that require grad are used as if detached).
        gallery: ``(N, d)``.
        k: number of neighbours (``<= N``, or ``<= N - 1`` with ``exclude_self``).
        exclude_self: queries are the gallery (``Q == N``); query i never returns item i.
        backend: ``"torch"`` (tiled matmul), ``"faiss"`` (flat float32 CPU index for stage 1) or
            ``"auto"`` (torch).
        precision: stage-1 format, one of :data:`~rank_lab.metrics.engine.scores.bound.PRECISIONS`:
            ``"auto"`` (bfloat16 on CPUs with native bfloat16 dot products, else exact -- exact on
            CUDA; exact also for small products, ``Q N d < 2^33``), ``"exact"`` (the working
            precision), ``"fp32"``, ``"bf16"``, ``"fp16"``.
        device: where to compute (default: CUDA when present).
        chunk_size: queries (and gallery items) per tile, at least 64 (default: from
            ``max_memory_mb``).
        max_memory_mb: memory budget of one tile's scores.
        progress: tqdm bar (default: when there are more than 16 tiles).

    Returns:
        ``(scores (Q, k), indices (Q, k))`` on the compute device, sorted by decreasing canonical
        score, ties by increasing index; scores in the working precision (float32, float64 for
        float64 inputs).

    Raises:
        ValueError / TypeError: naming the argument (shapes, non-finite values, complex or meta
        tensors, ``k``, options, inner products that could overflow the working precision).

    Note:
        The matmuls run inside :func:`~rank_lab.metrics.engine.scores.exact.exact_matmul`: no TF32,
        no reduced-precision reductions, no autocast (a caller's ``torch.autocast`` block changes
        nothing); the caller's settings are restored afterwards.
    """
    same = queries is gallery
    queries = check_embeddings(queries, "queries").detach()
    gallery = queries if same else check_embeddings(gallery, "gallery").detach()
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}")
    if not isinstance(exclude_self, bool):
        raise TypeError(f"exclude_self must be a bool, got {type(exclude_self).__name__}")
    if exclude_self and queries.shape[0] != gallery.shape[0]:
        raise ValueError(
            f"exclude_self needs queries and gallery of the same length, got {queries.shape[0]} "
            f"and {gallery.shape[0]}"
        )
    k = check_positive_int(k, "k")
    n_avail = gallery.shape[0] - int(exclude_self)
    if k > n_avail:
        raise ValueError(f"k={k} is larger than the number of gallery items available ({n_avail})")
    backend, precision, chunk_size, max_memory_mb = check_search_options(
        backend, precision, chunk_size, max_memory_mb, progress
    )
    dev = get_device(device)
    work = torch.float64 if torch.float64 in (queries.dtype, gallery.dtype) else torch.float32
    with exact_matmul():  # no autocast, no TF32 for anything below (restored on exit)
        q = queries.to(dev, work)
        g = q if same else gallery.to(dev, work)
        check_products_fit(
            float(q.double().norm(dim=1).max()),
            float(g.double().norm(dim=1).max()),
            work,
            ("queries", "gallery"),
        )
        index = faiss_knn(chunk_size, max_memory_mb, progress) if backend == "faiss" else None
        kq = torch.full((q.shape[0],), k, dtype=torch.long)
        lists = certified_lists(
            q,
            g,
            kq,
            exclude_self=exclude_self,
            precision=precision,
            device=dev,
            tile=search_tile(max_memory_mb, chunk_size),
            progress=progress,
            index=index,
        )
        s, i = lists.topk(k)
    return s.to(dev), i.to(dev)
