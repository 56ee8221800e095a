"""Exact k-NN and retrieval metrics on a faiss index spread over several GPUs (or CPU shards).

A gallery of millions of 512-d embeddings (iNaturalist, Google Landmarks) outgrows one GPU's
memory, and its queries outgrow one GPU's time. faiss offers two layouts of a flat (exact)
inner-product index, both used here:

* **shards** (``mode="shard"``, :class:`faiss.IndexShards`): gallery rows split into ``G``
  consecutive blocks, one per GPU; every query searches every block and the ``G`` top-k lists are
  merged (ids offset by the block start). Memory per GPU ``N d / G``.
* **replicas** (``mode="replicate"``, :class:`faiss.IndexReplicas`): every GPU holds the whole
  gallery and answers a share of the queries. Memory per GPU ``N d``; the faster layout when it
  fits.

Placement falls back cleanly: several GPUs visible to faiss -> shards / replicas over them; one
-> a single GPU index; none (or ``faiss-cpu``) -> a CPU index, optionally split into
``cpu_shards`` shards (threaded; this is also how the merge logic is tested without GPUs); faiss
not installed -> the chunked torch route of :func:`rank_lab.metrics.retrieval_metrics`.

:func:`sharded_retrieval_metrics` uses the index as stage 1 of the engine's certified neighbour
lists (:mod:`rank_lab.metrics.engine.search.certified`: lists lengthened until certified, candidates
re-scored with the canonical score, worst-case ties; ``docs/decisions.md``), so its numbers equal
:func:`rank_lab.metrics.retrieval_metrics`. A GPU index computes its products with cuBLAS in a
math mode that is not ours to pin (TF32 rounds the inputs to 10 bits, tensor cores truncate): it
is certified under that model (:class:`~rank_lab.metrics.engine.search.index.IndexStage1`,
``input_unit = 2^-11``, tensor-core accumulation), so its candidate lists are longer, never wrong.
The index is built once per call, and the faiss resources of a GPU once per process
(:func:`~rank_lab.metrics.engine.search.index.gpu_resources`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from rank_lab._validation import check_embeddings, check_positive_int
from rank_lab.metrics.engine.evaluate import retrieval_metrics
from rank_lab.metrics.engine.formulas.registry import get_metric
from rank_lab.metrics.engine.search.index import IndexStage1, gpu_resources
from rank_lab.metrics.engine.search.knn import faiss_available
from rank_lab.utils import DeviceLike
from rank_lab.vocabulary import NoPositive

__all__ = [
    "faiss_gpu_count",
    "ShardedIndex",
    "build_index",
    "sharded_knn_search",
    "sharded_retrieval_metrics",
]

Mode = Literal["shard", "replicate"]


def faiss_gpu_count() -> int:
    """Number of GPUs faiss can use (0 with ``faiss-cpu`` or without faiss)."""
    if not faiss_available():
        return 0
    import faiss  # optional heavy dependency (faiss-cpu / faiss-gpu): imported only when used

    if not hasattr(faiss, "StandardGpuResources"):
        return 0
    return int(faiss.get_num_gpus())


@dataclass
class ShardedIndex:
    """A flat inner-product faiss index and where it lives.

    Attributes:
        index: the faiss index (search with ``index.search(x, k)``).
        placement: ``"gpu-shards"``, ``"gpu-replicas"``, ``"gpu"``, ``"cpu-shards"``,
            ``"cpu-replicas"`` or ``"cpu"``.
        n_parts: number of GPUs / CPU sub-indexes.
        keep: objects that must outlive the index (sub-indexes, GPU resources).
    """

    index: Any
    placement: str
    n_parts: int
    keep: list[Any] = field(default_factory=list)


def build_index(
    gallery: torch.Tensor, *, n_gpus: int | None = None, mode: Mode = "shard", cpu_shards: int = 1
) -> ShardedIndex:
    """A flat inner-product index of ``gallery (N, d)`` over ``n_gpus`` GPUs, one GPU or the CPU.

    Args:
        gallery: ``(N, d)`` embeddings (normalise first for cosine similarity).
        n_gpus: GPUs to use (``None``: all that faiss sees; more than visible are clamped with a
            warning; 0 forces the CPU).
        mode: ``"shard"`` (split the rows) or ``"replicate"`` (copy the gallery, split the queries).
        cpu_shards: on the CPU, the number of sub-indexes (1 = a plain ``IndexFlatIP``).

    Returns:
        A :class:`ShardedIndex`.

    Raises:
        ImportError: faiss is not installed.
        ValueError: bad ``mode``, ``cpu_shards`` or ``n_gpus``.
    """
    import faiss  # optional heavy dependency (faiss-cpu / faiss-gpu): imported only when used

    g = check_embeddings(gallery, "gallery")
    if mode not in ("shard", "replicate"):
        raise ValueError(f"mode must be 'shard' or 'replicate', got {mode!r}")
    cpu_shards = check_positive_int(cpu_shards, "cpu_shards")
    avail = faiss_gpu_count()
    if n_gpus is None:
        n_gpus = avail
    elif isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 0:
        raise ValueError(f"n_gpus must be a non-negative int or None, got {n_gpus!r}")
    elif n_gpus > avail:
        warnings.warn(f"n_gpus={n_gpus} but faiss sees {avail} GPU(s): using {avail}", stacklevel=2)
        n_gpus = avail
    x = np.ascontiguousarray(g.detach().to("cpu", torch.float32).numpy())
    d = x.shape[1]
    if n_gpus >= 2:
        co = faiss.GpuMultipleClonerOptions()
        co.shard = mode == "shard"
        index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatIP(d), co=co, ngpu=n_gpus)
        index.add(x)
        return ShardedIndex(index, "gpu-shards" if co.shard else "gpu-replicas", n_gpus)
    if n_gpus == 1:
        res = gpu_resources(0)
        index = faiss.index_cpu_to_gpu(res, 0, faiss.IndexFlatIP(d))
        index.add(x)
        return ShardedIndex(index, "gpu", 1, [res])
    if cpu_shards == 1:
        index = faiss.IndexFlatIP(d)
        index.add(x)
        return ShardedIndex(index, "cpu", 1)
    subs = [faiss.IndexFlatIP(d) for _ in range(cpu_shards)]
    if mode == "shard":
        index = faiss.IndexShards(d, True, True)  # threaded, successive ids across the shards
        for s in subs:
            index.add_shard(s)
    else:
        index = faiss.IndexReplicas(d, True)
        for s in subs:
            index.addIndex(s)
    index.add(x)
    return ShardedIndex(
        index, f"cpu-{'shards' if mode == 'shard' else 'replicas'}", cpu_shards, subs
    )


def sharded_knn_search(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    k: int,
    *,
    exclude_self: bool = False,
    n_gpus: int | None = None,
    mode: Mode = "shard",
    cpu_shards: int = 1,
    chunk_size: int = 16384,
    index: ShardedIndex | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact inner-product k-NN with :func:`build_index` (same contract as
    :func:`rank_lab.metrics.knn_search`).

    Args:
        queries: ``(Q, d)``; gallery: ``(N, d)``.
        k: neighbours (``<= N``, or ``<= N - 1`` with ``exclude_self``).
        exclude_self: queries are the gallery; query i never returns item i (removed by index).
        n_gpus, mode, cpu_shards: placement, see :func:`build_index`.
        chunk_size: queries per ``search`` call.
        index: a prebuilt index of ``gallery`` (then the placement arguments are ignored).

    Returns:
        ``(scores (Q, k) float32, indices (Q, k) long)`` on the CPU, by decreasing score.
    """
    q = check_embeddings(queries, "queries").detach()
    g = check_embeddings(gallery, "gallery").detach()
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"queries have d={q.shape[1]} but gallery has d={g.shape[1]}")
    if exclude_self and q.shape[0] != g.shape[0]:
        raise ValueError(
            f"exclude_self needs queries and gallery of the same length, got {q.shape[0]} and "
            f"{g.shape[0]}"
        )
    k = check_positive_int(k, "k")
    if k > g.shape[0] - int(exclude_self):
        raise ValueError(
            f"k={k} is larger than the number of gallery items available "
            f"({g.shape[0] - int(exclude_self)})"
        )
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    idx = (
        index
        if index is not None
        else build_index(g, n_gpus=n_gpus, mode=mode, cpu_shards=cpu_shards)
    )
    kk = k + int(exclude_self)
    out_s, out_i = [], []
    for start in range(0, q.shape[0], chunk_size):
        qn = np.ascontiguousarray(
            q[start : start + chunk_size].detach().to("cpu", torch.float32).numpy()
        )
        vals, ids = idx.index.search(qn, kk)
        vals, ids = torch.from_numpy(vals), torch.from_numpy(ids).long()
        if exclude_self:  # drop the query's own column when present, else the last column
            keep = ids != torch.arange(start, start + qn.shape[0])[:, None]
            keep[keep.all(1), -1] = False
            vals, ids = vals[keep].view(-1, k), ids[keep].view(-1, k)
        out_s.append(vals)
        out_i.append(ids)
    return torch.cat(out_s), torch.cat(out_i)


def sharded_retrieval_metrics(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    ref_embeddings: torch.Tensor | None = None,
    ref_labels: torch.Tensor | None = None,
    *,
    ks: Sequence[int] = (1, 10, 100),
    metrics: Sequence[str] = ("R@k", "mAP@R"),
    normalize: bool = True,
    n_gpus: int | None = None,
    mode: Mode = "shard",
    cpu_shards: int = 1,
    device: DeviceLike = None,
    no_positive: NoPositive = "skip",
) -> dict[str, float]:
    """:func:`rank_lab.metrics.retrieval_metrics` with the neighbour lists from a sharded faiss
    index.

    Neighbour-list metrics (R@k, P@k, TR@k, AP@k, mAP@R, MRR) use :func:`sharded_knn_search`;
    full-list metrics (mAP, NDCG) and a missing faiss fall back to the engine (torch on
    ``device``). The result (keys, values, ``n_queries``, ``n_skipped``) is the engine's.

    Args:
        embeddings, labels, ref_embeddings, ref_labels, ks, metrics, normalize, no_positive: as
            :func:`rank_lab.metrics.retrieval_metrics` (queries = gallery when no refs are given).
        n_gpus, mode, cpu_shards: index placement (:func:`build_index`).
        device: device of the exact re-computation of tied queries and of the fallbacks.

    Returns:
        ``{"R@1": ..., "mAP@R": ..., "n_queries": Q, "n_skipped": 0}``.
    """
    if isinstance(metrics, str) or not hasattr(metrics, "__iter__"):
        raise TypeError(f"metrics must be a sequence of metric names, got {type(metrics).__name__}")
    lists_serve = all(
        get_metric(m).family == "binary" and get_metric(m).depth != "all" for m in metrics
    )
    if not lists_serve or not faiss_available():
        return retrieval_metrics(
            embeddings,
            labels,
            ref_embeddings,
            ref_labels,
            ks=ks,
            metrics=metrics,
            normalize=normalize,
            backend="torch",
            device=device,
            no_positive=no_positive,
        )
    built: dict[int, ShardedIndex] = {}  # the gallery's index, built at the first call and reused

    def knn(
        q: torch.Tensor, g: torch.Tensor, k: int, exclude_self: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if id(g) not in built:
            built.clear()
            built[id(g)] = build_index(g, n_gpus=n_gpus, mode=mode, cpu_shards=cpu_shards)
        return sharded_knn_search(q, g, k, exclude_self=exclude_self, index=built[id(g)])

    on_gpu = faiss_gpu_count() > 0 and n_gpus != 0
    stage1 = IndexStage1(knn, input_unit=2.0**-11 if on_gpu else 0.0, tensor_cores=on_gpu)
    return retrieval_metrics(
        embeddings,
        labels,
        ref_embeddings,
        ref_labels,
        ks=ks,
        metrics=metrics,
        normalize=normalize,
        knn=stage1,
        device=device,
        no_positive=no_positive,
    )
