"""The evaluation engine: from embeddings and labels to a dict of named retrieval figures.

Three routes, all exact and all in bounded memory (never an ``N x N`` matrix):

* **Neighbour-list route** (metrics R@k, P@k, TR@k, AP@k, mAP@R, MRR): the certified neighbour
  lists of :mod:`rank_lab.metrics.certified` -- for every query, every item whose canonical score
  reaches its K-th one, K = max(largest k, the query's number of relevant items), so that the
  items tied with the K-th are all there and the worst-case tie rule holds without any recount.
  Stage 1 runs in the format of ``precision=`` (``"auto"``: bfloat16 on CPUs with native bfloat16
  dot products, float16 on CUDA, else the working precision; see
  :mod:`rank_lab.metrics.score_bounds` for the bound and its derivation); every precision gives
  **bit-identical** per-query values because stage 2 re-scores the candidates with the canonical
  score (a fixed pairwise-tree dot product). A query whose list holds no relevant item gets its
  MRR from an exact count (the first relevant item may lie beyond the list).
* **Counting route** (needed by the full-list metrics ``"mAP"`` and ``"NDCG"``, and then used for
  all): queries in chunks of rows, the scores against the whole gallery ``(c, N)`` from one float32
  (float64) matmul, and the worst-case position of every relevant item by *counting* rather than
  sorting the row (:func:`~rank_lab.metrics.counting.positive_positions`). These metrics rank by the
  matmul's scores: every score matters, so a reduced-precision stage cannot help them.
* **Hierarchical route** (Ramzi thesis ch. 4): with ``(N, L)`` labels (fine first), the names of
  :data:`HIERARCHICAL_METRICS` (``"H-AP"``, ``"ASI"``, ``"NDCG-h"``, ``"AP@level"``, ``"H-R@k"``,
  ``"MS@k"``) are computed by :mod:`rank_lab.metrics.hierarchical_route`; ``hierarchical=True``
  adds all of them.

**Matmul precision.** Every matmul of the engine runs inside
:func:`~rank_lab.metrics.score_bounds.exact_matmul`: TF32 off for float32 matmuls on CUDA (TF32
rounds the inputs to 10 bits and would silently change the exact route's scores), reduced-precision
split-K reductions off for float16/bfloat16 (the bound assumes float32 accumulation), float32
matmul precision ``"highest"``; the caller's settings are restored afterwards.

``backend`` chooses stage 1 of the neighbour lists: ``"torch"`` (tiled matmul) or ``"faiss"`` (a flat
float32 index, lists lengthened until certified); ``"auto"`` is ``"torch"``. The query is excluded
from its own ranking by index, never by dropping the first neighbour.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from rank_lab._validation import (
    check_embeddings,
    check_labels,
    check_positive_int,
)
from rank_lab.metrics.certified import certified_neighbours
from rank_lab.metrics.chunking import chunk_rows
from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.counting import metrics_from_positions, positive_positions
from rank_lab.metrics.hierarchical_route import HIERARCHICAL_METRICS, hierarchical_route
from rank_lab.metrics.score_bounds import PRECISIONS, canonical_scores, exact_matmul, score_bound
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "knn_search",
    "retrieval_metrics",
    "positive_positions",
    "faiss_available",
    "KNN_METRICS",
    "ALL_METRICS",
    "HIERARCHICAL_METRICS",
    "PRECISIONS",
]

#: Metrics computable from a neighbour list of length max(k, R).
KNN_METRICS = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR")
#: Every metric name accepted by :func:`retrieval_metrics`.
ALL_METRICS = (*KNN_METRICS, "mAP", "NDCG", *HIERARCHICAL_METRICS)

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


def _tile(n_gallery: int, max_memory_mb: float, chunk_size: int | None) -> int:
    """Queries (and items) per tile of the certified search: about 8 bytes per tile entry."""
    if chunk_size is not None:
        return max(64, check_positive_int(chunk_size, "chunk_size"))
    side = int(math.sqrt(max(1.0, max_memory_mb) * 2**20 / 8))
    return max(64, min(8192, side // 64 * 64))


def _check_precision(precision: object, backend: str) -> str:
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
    working precision, :func:`~rank_lab.metrics.score_bounds.canonical_scores`): the candidates of a
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
        The matmuls run inside :func:`~rank_lab.metrics.score_bounds.exact_matmul`: no TF32 (which
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
    precision = _check_precision(precision, backend)
    dev = get_device(device)
    knn = _faiss_knn(dev, chunk_size, max_memory_mb, progress) if backend == "faiss" else None
    lists = certified_neighbours(queries, gallery, k, exclude_self=exclude_self, precision=precision, knn=knn,
                                 device=dev, tile=_tile(gallery.shape[0], max_memory_mb, chunk_size), progress=progress,
                                 check=False)
    s, i = lists.topk(k)
    return s.to(dev), i.to(dev)


def _faiss_knn(dev: torch.device, chunk_size: int | None, max_memory_mb: float, progress: bool | None) -> KnnFn:
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


def retrieval_metrics(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    ref_embeddings: torch.Tensor | None = None,
    ref_labels: torch.Tensor | None = None,
    *,
    ks: Sequence[int] = (1, 10, 100),
    metrics: Sequence[str] = ("R@k", "mAP@R"),
    normalize: bool = True,
    exclude_self: bool | None = None,
    backend: Backend = "auto",
    precision: Precision = "auto",
    knn: KnnFn | None = None,
    device: DeviceLike = None,
    chunk_size: int | None = None,
    max_memory_mb: float = 256,
    no_positive: Literal["raise", "skip"] = "skip",
    progress: bool | None = None,
    per_query: bool = False,
    hierarchical: bool | None = None,
    hap_alpha: float = 1.0,
) -> dict[str, float]:
    """Retrieval figures of an embedding set (the open-set protocol of the Ramzi thesis, §3).

    Every query is ranked against the reference set by cosine similarity (``normalize=True``) or
    inner product; its own item is excluded by index when the queries are the reference set.
    Ties are broken against the ranker (worst case, ``docs/decisions.md``).

    Args:
        embeddings: ``(Q, d)`` query embeddings.
        labels: ``(Q,)`` integer labels, or ``(Q, L)`` hierarchical labels (fine first): the binary
            metrics use column 0 (the fine level), the hierarchical ones every column.
        ref_embeddings: ``(N, d)`` gallery; ``None`` means the queries themselves.
        ref_labels: ``(N,)`` gallery labels (required with ``ref_embeddings``).
        ks: cut-offs for the ``@k`` metrics; a k larger than the gallery (``N - 1`` items with
            self-exclusion) raises a ``ValueError``, as in :meth:`rank_lab.train.Trainer.evaluate`.
        metrics: names among :data:`ALL_METRICS`: ``"R@k"`` (recall rate), ``"P@k"``, ``"TR@k"``
            (true recall), ``"AP@k"`` (reported as ``mAP@k``), ``"mAP@R"``, ``"mAP"`` (full AP),
            ``"MRR"``, ``"NDCG"`` (binary gains), and the hierarchical metrics of the Ramzi thesis
            ch. 4: ``"H-AP"`` (Eq. 4.3, relevance Eq. 4.7 with ``hap_alpha``), ``"ASI"`` (Eq. 4.16),
            ``"NDCG-h"`` (gains ``2^l - 1``), ``"AP@level"`` (reported as ``"AP@level{l}"`` for
            l = 1..L, Eq. 4.8; l = L is the fine AP, l = 1 the coarsest), ``"H-R@k"`` (Eq. 4.4) and
            ``"MS@k"`` (mean LCA height ``L - level`` of the top-k mistakes, pooled over all
            mistakes of all queries, Eq. 2.10; reported with ``"mistakes@k"``, the mean number of
            mistakes in the top k). (1-D labels are L = 1.)
        normalize: L2-normalise both sets first (cosine similarity).
        exclude_self: default ``True`` when ``ref_embeddings`` is ``None``.
        backend: ``"auto"``, ``"torch"`` or ``"faiss"`` (see the module docstring).
        precision: stage-1 format of the neighbour-list route (:func:`knn_search`); the values do
            not depend on it. The counting and hierarchical routes always use the working precision.
        knn: a custom flat index ``knn(queries, gallery, k, exclude_self) -> (scores (Q, k), indices
            (Q, k))`` used as stage 1 of the neighbour lists instead of ``backend`` (e.g. the sharded
            faiss index of :mod:`rank_lab.metrics.distributed_knn`); it receives the normalised sets,
            must return the top k of float32 inner products (any summation order) sorted by
            decreasing score, and is called again with larger k until the lists are certified.
        device: compute device (default: CUDA when present).
        chunk_size, max_memory_mb: query rows per chunk, or the memory budget that sets it.
        no_positive: ``"skip"`` leaves queries without any relevant item out of the means (their
            number is reported as ``"n_skipped"``); ``"raise"`` raises a ``ValueError``.
        progress: tqdm bar (default: on for more than 8 chunks).
        per_query: also return the per-query tensors under ``"per_query"`` (for ``"MS@k"``: the
            per-query mean severity, 0 without mistakes, and ``"mistakes@k"``).
        hierarchical: ``True`` adds every hierarchical metric to ``metrics``; ``None``/``False``
            computes those named in ``metrics`` only.
        hap_alpha: alpha of the H-AP relevance (1 for the metric, thesis §4.2.2.2).

    Returns:
        A dict such as ``{"R@1": 0.71, "R@10": 0.9, "mAP@R": 0.42, "n_queries": 1000, "n_skipped": 0}``.

    Note:
        Every matmul runs inside :func:`~rank_lab.metrics.score_bounds.exact_matmul` (no TF32 on
        CUDA, no implicit bfloat16 on the CPU, float32 accumulation for reduced formats), whatever
        the caller's global settings, which are restored afterwards.
    """
    emb = check_embeddings(embeddings, "embeddings")
    lab = check_labels(labels, emb.shape[0], "labels")
    if (ref_embeddings is None) != (ref_labels is None):
        raise ValueError("ref_embeddings and ref_labels must be given together")
    same = ref_embeddings is None
    ref = emb if same else check_embeddings(ref_embeddings, "ref_embeddings")
    ref_lab = lab if same else check_labels(ref_labels, ref.shape[0], "ref_labels")
    if ref.shape[1] != emb.shape[1]:
        raise ValueError(f"embeddings have d={emb.shape[1]} but ref_embeddings have d={ref.shape[1]}")
    if lab.ndim != ref_lab.ndim:
        raise ValueError(f"labels have shape {tuple(lab.shape)} but ref_labels have {tuple(ref_lab.shape)}")
    if lab.ndim == 2 and lab.shape[1] != ref_lab.shape[1]:
        raise ValueError(f"labels have {lab.shape[1]} levels but ref_labels have {ref_lab.shape[1]}")
    if hierarchical:
        metrics = (*metrics, *(m for m in HIERARCHICAL_METRICS if m not in metrics))
    hier_labels = (lab if lab.ndim == 2 else lab[:, None], ref_lab if ref_lab.ndim == 2 else ref_lab[:, None])
    if lab.ndim == 2:
        lab, ref_lab = lab[:, 0], ref_lab[:, 0]
    exclude_self = same if exclude_self is None else bool(exclude_self)
    if exclude_self and ref.shape[0] != emb.shape[0]:
        raise ValueError("exclude_self=True needs the queries to be the reference set (same length)")
    unknown = set(metrics) - set(ALL_METRICS)
    if unknown or not metrics:
        raise ValueError(f"unknown metrics {sorted(unknown)}; choose among {ALL_METRICS}")
    ks = sorted({check_positive_int(k, "ks") for k in ks})
    n_avail = ref.shape[0] - int(exclude_self)
    if ks and ks[-1] > n_avail:  # one rule with Trainer.evaluate: refuse, never drop (docs/decisions.md)
        raise ValueError(f"ks holds k={[k for k in ks if k > n_avail]}, larger than the number of gallery items "
                         f"available ({n_avail}); pass ks <= {n_avail}")
    if no_positive not in ("raise", "skip"):
        raise ValueError(f"no_positive must be 'raise' or 'skip', got {no_positive!r}")
    if backend not in ("auto", "torch", "faiss"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'faiss', got {backend!r}")
    precision = _check_precision(precision, backend)
    wanted = set(metrics) - set(HIERARCHICAL_METRICS)
    hier_wanted = set(metrics) & set(HIERARCHICAL_METRICS)
    if hier_wanted and not hap_alpha > 0:
        raise ValueError(f"hap_alpha must be > 0, got {hap_alpha}")
    dev = get_device(device)
    dtype = torch.float64 if emb.dtype == torch.float64 else torch.float32
    if normalize:
        emb = F.normalize(emb.to(dtype), dim=1)
        ref = emb if same else F.normalize(ref.to(dtype), dim=1)

    # number of relevant items of each query, from label counts (excluding the query itself)
    uniq, ref_inv = torch.unique(ref_lab, return_inverse=True)
    counts = torch.bincount(ref_inv, minlength=uniq.numel())
    idx_in = torch.searchsorted(uniq, lab.contiguous()).clamp(max=uniq.numel() - 1)
    found = uniq[idx_in] == lab
    n_pos = torch.where(found, counts[idx_in], torch.zeros_like(idx_in)) - (int(exclude_self) if exclude_self else 0)
    n_pos = n_pos.clamp(min=0)
    empty = n_pos == 0
    if bool(empty.any()) and no_positive == "raise":
        raise ValueError(f"{int(empty.sum())} query(ies) have no relevant item in the reference set (first: {int(torch.nonzero(empty)[0])})")

    per_q: dict[str, torch.Tensor] = {}
    if not wanted:
        pass
    elif wanted <= set(KNN_METRICS):
        if knn is None and backend == "faiss":
            knn = _faiss_knn(dev, chunk_size, max_memory_mb, progress)
        per_q = _list_route(emb, lab, ref, ref_lab, n_pos, ks, wanted, exclude_self, dev, precision, knn,
                            _tile(ref.shape[0], max_memory_mb, chunk_size), chunk_size, max_memory_mb, progress)
    else:  # full-list metrics ("mAP", "NDCG") need every relevant item's position: counting route
        per_q = _counting_route(emb, lab, ref, ref_lab, ks, wanted, exclude_self, dev, chunk_size, max_memory_mb, progress)
    if hier_wanted:
        hier = hierarchical_route(emb, hier_labels[0], ref, hier_labels[1], ks, hier_wanted, exclude_self, dev,
                                  chunk_size, max_memory_mb, progress, alpha=hap_alpha)
        per_q.update(hier)

    per_q = {name: v.cpu() for name, v in per_q.items()}  # the routes may return tensors on the compute device
    keep = ~empty.cpu()
    if not bool(keep.any()):
        raise ValueError(f"no query has a relevant item: no label of labels occurs among the other items of "
                         f"{'labels' if same else 'ref_labels'}, so every metric is undefined")
    pooled = {name: per_q.pop(name) for name in [n for n in per_q if n.startswith("MS_")]}
    result: dict[str, float] = {name: float(v[keep].double().mean()) for name, v in per_q.items()}
    for k in ks if "MS@k" in hier_wanted else ():
        sev, cnt = pooled[f"MS_sum@{k}"][keep], pooled[f"MS_n@{k}"][keep]
        result[f"MS@{k}"] = float(sev.sum() / cnt.sum()) if float(cnt.sum()) > 0 else 0.0
        result[f"mistakes@{k}"] = float(cnt.mean())
        per_q[f"MS@{k}"] = pooled[f"MS_sum@{k}"] / pooled[f"MS_n@{k}"].clamp(min=1)
        per_q[f"mistakes@{k}"] = pooled[f"MS_n@{k}"]
    result["n_queries"] = int(keep.sum())
    result["n_skipped"] = int((~keep).sum())
    if per_query:
        result["per_query"] = {name: v.cpu() for name, v in per_q.items()}  # type: ignore[assignment]
    return result


def _counting_route(emb, lab, ref, ref_lab, ks, wanted, exclude_self, dev, chunk_size, max_memory_mb, progress):
    ref_d, ref_lab_d = ref.to(dev), ref_lab.to(dev)
    c = chunk_rows(ref.shape[0], max_memory_mb, chunk_size)
    n_chunks = math.ceil(emb.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    parts: dict[str, list[torch.Tensor]] = {}
    for start in progress_bar(range(0, emb.shape[0], c), n_chunks, show, "retrieval metrics"):
        qc = emb[start : start + c].to(dev)
        with exact_matmul():
            s = qc @ ref_d.T
        pos = lab[start : start + c].to(dev)[:, None] == ref_lab_d[None, :]
        neg = ~pos
        if exclude_self:
            rows = torch.arange(qc.shape[0], device=dev)
            pos[rows, rows + start] = False
            neg[rows, rows + start] = False
        positions, valid = positive_positions(s, pos, neg)
        vals = metrics_from_positions(positions, valid, pos.sum(1), ks, wanted)
        for name, v in vals.items():
            parts.setdefault(name, []).append(v)
    return {name: torch.cat(v) for name, v in parts.items()}


def _list_route(emb, lab, ref, ref_lab, n_pos, ks, wanted, exclude_self, dev, precision, knn, tile, chunk_size,
                max_memory_mb, progress):
    """Neighbour-list metrics from the certified lists (every item reaching the K-th canonical score)."""
    kq = n_pos.clamp(min=max(ks) if ks else 1)
    lists = certified_neighbours(emb, ref, kq, exclude_self=exclude_self, precision=precision, knn=knn, device=dev,
                                 tile=tile, progress=progress, check=False)
    rows, lab_c, ref_lab_c = lists.rows, lab.cpu(), ref_lab.cpu()
    rel = ref_lab_c[lists.indices] == lab_c[rows]
    n_q = emb.shape[0]
    # worst-case position of a relevant entry: its rank among the relevant ones + the irrelevant
    # entries up to the end of its group of tied scores (all of which are in the list)
    new_group = torch.ones_like(rel)
    new_group[1:] = (rows[1:] != rows[:-1]) | (lists.scores[1:] != lists.scores[:-1])
    group = torch.cumsum(new_group.long(), 0) - 1
    irr_through = torch.cumsum(torch.bincount(group, weights=(~rel).double()), 0)
    row_start = lists.offsets[:-1]
    irr_before_row = torch.where(row_start > 0, irr_through[group[(row_start - 1).clamp(min=0)]],
                                 torch.zeros(n_q, dtype=torch.float64)) if rel.numel() else torch.zeros(n_q, dtype=torch.float64)
    rel_cum = torch.cumsum(rel.long(), 0)
    rel_before_row = torch.where(row_start > 0, rel_cum[(row_start - 1).clamp(min=0)], torch.zeros_like(row_start))
    rank_rel = rel_cum - rel_before_row[rows]
    position = rank_rel + (irr_through[group] - irr_before_row[rows]).long()
    n_rel = torch.bincount(rows[rel], minlength=n_q)
    width = max(int(n_rel.max()) if n_q else 1, 1)
    pos = torch.full((n_q, width), torch.iinfo(torch.long).max // 4, dtype=torch.long)
    valid = torch.zeros(n_q, width, dtype=torch.bool)
    pos[rows[rel], rank_rel[rel] - 1] = position[rel]
    valid[rows[rel], rank_rel[rel] - 1] = True
    per_q = metrics_from_positions(pos, valid, n_pos.cpu(), ks, wanted)
    if "MRR" in wanted:  # the first relevant item may lie beyond the list: count exactly
        far = torch.nonzero((n_rel == 0) & (n_pos.cpu() > 0)).flatten()
        if far.numel():
            first = _first_relevant_positions(emb, lab, ref, ref_lab, far, exclude_self, dev, chunk_size, max_memory_mb)
            per_q["MRR"][far] = 1.0 / first.to(torch.float64)
    return per_q


def _first_relevant_positions(emb, lab, ref, ref_lab, rows, exclude_self, dev, chunk_size, max_memory_mb):
    """Worst-case position of the best relevant item of each query in ``rows`` (canonical scores).

    ``s*`` = the best canonical score among the query's relevant items; the position is 1 + the
    irrelevant items with canonical score ``>= s*``: certain ones from the float32 (float64) matmul
    and its bound, the ambiguous ones (within the bound of ``s*``) re-scored canonically.
    """
    ref_d, ref_lab_d, emb_d = ref.to(dev), ref_lab.to(dev), emb.to(dev)
    lab_r = lab[rows].to(dev)
    rows_d = rows.to(dev)
    pair_q, pair_g = torch.nonzero(lab_r[:, None] == ref_lab_d[None, :], as_tuple=True)
    if exclude_self:
        keep = pair_g != rows_d[pair_q]
        pair_q, pair_g = pair_q[keep], pair_g[keep]
    sc = canonical_scores(emb_d, ref_d, rows_d[pair_q], pair_g, check=False)
    best = torch.full((rows.numel(),), -torch.inf, dtype=sc.dtype, device=dev).scatter_reduce(0, pair_q, sc, "amax")
    g_norm = float(ref_d.to(torch.float64).norm(dim=1).max())
    qn = emb_d[rows_d].to(torch.float64).norm(dim=1)
    a, _, _ = score_bound(qn, qn, torch.zeros_like(qn), g_norm, g_norm, 0.0, emb.shape[1], emb.dtype, emb.dtype, emb.dtype)
    c = chunk_rows(ref.shape[0], max_memory_mb, chunk_size, bytes_per_item=16)
    out = torch.empty(rows.numel(), dtype=torch.long)
    for s0 in range(0, rows.numel(), c):
        qi = rows_d[s0 : s0 + c]
        with exact_matmul():
            s = emb_d[qi] @ ref_d.T
        irr = lab_r[s0 : s0 + c, None] != ref_lab_d[None, :]
        if exclude_self:
            irr[torch.arange(qi.numel(), device=dev), qi] = False
        b64, a_c = best[s0 : s0 + c].to(torch.float64)[:, None], a[s0 : s0 + c, None]
        s64 = s.to(torch.float64)
        certain = irr & (s64 - a_c >= b64)
        unsure = irr & ~certain & (s64 + a_c >= b64)
        count = certain.sum(1)
        ur, uc = torch.nonzero(unsure, as_tuple=True)
        if ur.numel():
            cs = canonical_scores(emb_d, ref_d, qi[ur], uc, check=False)
            count = count + torch.bincount(ur[cs >= best[s0 + ur]], minlength=qi.numel())
        out[s0 : s0 + c] = (1 + count).cpu()
    return out
