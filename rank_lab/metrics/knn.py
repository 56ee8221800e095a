"""Exact k nearest neighbours by inner product: :func:`knn_search` (torch or faiss stage 1).

The neighbours are exact with respect to the canonical score
(:func:`~rank_lab.metrics.exact_scores.canonical_scores`, a fixed pairwise-tree dot product): a
fast stage 1 -- a tiled matmul in the format of ``precision=`` or a flat float32 faiss index
(``backend="faiss"``) -- finds candidates, the bound of
:func:`~rank_lab.metrics.score_bounds.score_bound` guarantees that none is missed, and the
certified search (:func:`~rank_lab.metrics.certified.certified_neighbours`) re-scores them
canonically; the result does not depend on the precision, the backend, the device or the tiling.
The evaluation engine (:mod:`rank_lab.metrics.engine`) uses the same stage 1 for its
neighbour-list route; :func:`knn_search` and :func:`faiss_available` are still importable from there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch

from rank_lab._validation import check_embeddings, check_positive_int
from rank_lab.metrics.certified import certified_neighbours
from rank_lab.metrics.chunking import chunk_rows
from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.score_bounds import PRECISIONS
from rank_lab.utils import DeviceLike, get_device

__all__ = ["knn_search", "faiss_available"]

Backend = Literal["auto", "torch", "faiss"]
Precision = Literal["auto", "exact", "fp32", "bf16", "fp16"]
#: ``knn(queries, gallery, k, exclude_self) -> (scores (Q, k), indices (Q, k))``
KnnFn = Callable[[torch.Tensor, torch.Tensor, int, bool], tuple[torch.Tensor, torch.Tensor]]


def faiss_available() -> bool:
    """Whether the ``faiss`` module can be imported."""
    try:
        import faiss  # noqa: F401  # optional heavy dependency: probed, imported only when used
    except ImportError:
        return False
    return True


def _use_faiss_gpu(faiss_mod: object, device: torch.device) -> bool:
    return device.type == "cuda" and hasattr(faiss_mod, "StandardGpuResources")


def search_tile(n_gallery: int, max_memory_mb: float, chunk_size: int | None) -> int:
    """Queries (and gallery items) per tile of the certified search: about 8 bytes per tile entry.

    Args:
        n_gallery: ``N``, the gallery size (unused by the rule, kept for the callers' symmetry).
        max_memory_mb: memory budget of one tile's scores.
        chunk_size: an explicit tile side (at least 64), or None to derive it from the budget.

    Returns:
        The tile side, a multiple of 64 in ``[64, 8192]`` (or ``max(64, chunk_size)``).

    Raises:
        ValueError / TypeError: ``chunk_size`` not a positive int.
    """
    if chunk_size is not None:
        return max(64, check_positive_int(chunk_size, "chunk_size"))
    side = int(math.sqrt(max(1.0, max_memory_mb) * 2**20 / 8))
    return max(64, min(8192, side // 64 * 64))


def check_precision(precision: object, backend: str) -> str:
    """Check the ``precision=`` option of :func:`knn_search` and the engine against ``backend``.

    Args:
        precision: one of :data:`~rank_lab.metrics.score_bounds.PRECISIONS`.
        backend: ``"auto"``, ``"torch"`` or ``"faiss"`` (faiss searches in float32 only).

    Returns:
        ``precision`` as a str.

    Raises:
        ValueError: an unknown precision, or ``"bf16"`` / ``"fp16"`` with ``backend="faiss"``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if backend == "faiss" and precision in ("bf16", "fp16"):
        raise ValueError(f"precision={precision!r} needs backend='torch' (faiss searches in float32)")
    return str(precision)


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
    working precision, :func:`~rank_lab.metrics.exact_scores.canonical_scores`): the candidates of a
    fast stage (``precision``) are re-scored with it, and the bound of
    :func:`~rank_lab.metrics.score_bounds.score_bound` guarantees that no neighbour is missed, so
    the result does not depend on ``precision``, ``backend``, the device or the chunking.

    Args:
        queries: ``(Q, d)``.
        gallery: ``(N, d)``.
        k: number of neighbours (``<= N``, or ``<= N - 1`` with ``exclude_self``).
        exclude_self: queries are the gallery (``Q == N``); query i never returns item i.
        backend: ``"torch"`` (tiled matmul), ``"faiss"`` (flat float32 index for stage 1) or ``"auto"``
            (torch).
        precision: stage-1 format, one of :data:`~rank_lab.metrics.score_bounds.PRECISIONS`:
            ``"auto"`` (bfloat16 on CPUs with native bfloat16 dot products, float16 on CUDA, else
            exact; exact also for small products, ``Q N d < 2^33``), ``"exact"`` (the working
            precision), ``"fp32"``, ``"bf16"``, ``"fp16"``.
        device: where to compute (default: CUDA when present).
        chunk_size: queries (and gallery items) per tile, at least 64 (default: from ``max_memory_mb``).
        max_memory_mb: memory budget of one tile's scores.
        progress: tqdm bar (default: when there are more than 16 tiles).

    Returns:
        ``(scores (Q, k), indices (Q, k))`` on the compute device, sorted by decreasing canonical
        score, ties by increasing index; scores in the working precision (float32, float64 for
        float64 inputs).

    Note:
        The matmuls run inside :func:`~rank_lab.metrics.exact_scores.exact_matmul`: no TF32 (which
        would silently round the exact route's float32 inputs to 10 bits) and no reduced-precision
        reductions in float16/bfloat16 matmuls (the bound assumes float32 accumulation); the
        caller's settings are restored afterwards.
    """
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}")
    common = torch.promote_types(queries.dtype, gallery.dtype)  # float32 with float64: float64
    common = common if common == torch.float64 else torch.float32
    same = queries is gallery
    queries, gallery = queries.to(common), gallery.to(common)
    if same:
        gallery = queries
    if exclude_self and queries.shape[0] != gallery.shape[0]:
        raise ValueError(f"exclude_self needs queries and gallery of the same length, got {queries.shape[0]} and {gallery.shape[0]}")
    k = check_positive_int(k, "k")
    n_avail = gallery.shape[0] - int(exclude_self)
    if k > n_avail:
        raise ValueError(f"k={k} is larger than the number of gallery items available ({n_avail})")
    if backend not in ("auto", "torch", "faiss"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'faiss', got {backend!r}")
    precision = check_precision(precision, backend)
    dev = get_device(device)
    knn = faiss_knn(dev, chunk_size, max_memory_mb, progress) if backend == "faiss" else None
    lists = certified_neighbours(queries, gallery, k, exclude_self=exclude_self, precision=precision, knn=knn,
                                 device=dev, tile=search_tile(gallery.shape[0], max_memory_mb, chunk_size), progress=progress,
                                 check=False)
    s, i = lists.topk(k)
    return s.to(dev), i.to(dev)


def faiss_knn(dev: torch.device, chunk_size: int | None, max_memory_mb: float, progress: bool | None) -> KnnFn:
    """Stage 1 of the faiss backend: a :data:`KnnFn` over a flat float32 faiss index (GPU on CUDA).

    Args:
        dev: compute device (a CUDA device uses faiss' GPU index when faiss has one).
        chunk_size: queries per search call (default: from ``max_memory_mb``, at most 16384).
        max_memory_mb: memory budget of one call's results.
        progress: tqdm bar (default: when there are more than 8 calls).

    Returns:
        ``knn(queries (Q, d), gallery (N, d), k, exclude_self) -> (scores (Q, k), indices (Q, k))``,
        the top k of float32 inner products sorted by decreasing score (the certified search
        re-scores them canonically, :mod:`rank_lab.metrics.certified`).
    """
    def knn(q: torch.Tensor, g: torch.Tensor, k: int, es: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return _knn_faiss(q, g, k, es, dev, chunk_size, max_memory_mb, progress)

    return knn


def _knn_faiss(q, g, k, exclude_self, dev, chunk_size, max_memory_mb, progress):
    """The top-k of a flat float32 faiss index (stage 1 of the faiss backend)."""
    try:
        import faiss  # optional heavy dependency: imported only for backend='faiss'
    except ImportError as exc:
        raise ImportError("backend='faiss' needs faiss: pip install faiss-cpu (or faiss-gpu on CUDA)") from exc

    gn = np.ascontiguousarray(g.detach().to("cpu", torch.float32).numpy())
    index = faiss.IndexFlatIP(gn.shape[1])
    if _use_faiss_gpu(faiss, dev):
        res = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(res, dev.index or 0, index)
    index.add(gn)
    kk = k + int(exclude_self)
    c = chunk_rows(kk * 4, max_memory_mb, chunk_size)
    c = min(c, 16384)
    n_chunks = math.ceil(q.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    out_s, out_i = [], []
    for start in progress_bar(range(0, q.shape[0], c), n_chunks, show, "knn (faiss)"):
        qn = np.ascontiguousarray(q[start : start + c].detach().to("cpu", torch.float32).numpy())
        vals, idx = index.search(qn, kk)
        vals, idx = torch.from_numpy(vals), torch.from_numpy(idx)
        if exclude_self:
            own = torch.arange(start, start + qn.shape[0])[:, None]
            keep = idx != own
            # drop the query's own column when present, else the last column
            keep[keep.all(1), -1] = False
            vals = vals[keep].view(qn.shape[0], k)
            idx = idx[keep].view(qn.shape[0], k)
        out_s.append(vals)
        out_i.append(idx)
    return torch.cat(out_s), torch.cat(out_i)
