"""The evaluation engine: from embeddings and labels to a dict of named retrieval figures.

Two routes, both exact and both in bounded memory (never an ``N x N`` matrix):

* **Neighbour-list route** (metrics R@k, P@k, TR@k, AP@k, mAP@R, MRR): the top-K neighbours of
  every query, K = max(largest k, largest number of relevant items), from faiss (a flat
  inner-product index; a GPU index when faiss has GPU support and the device is CUDA) or from a
  chunked matmul + ``torch.topk``. The list is re-ordered with ties against the ranker; a query
  whose K-th and (K+1)-th neighbours tie (or, for MRR, whose list holds no relevant item) is
  recomputed exactly with the counting route, so the tie rule holds everywhere.
* **Counting route** (needed by the full-list metrics ``"mAP"`` and ``"NDCG"``, and then used for
  all): queries in chunks of rows, the scores against the whole gallery ``(c, N)`` from one matmul,
  and the worst-case position of every relevant item by *counting* rather than sorting the row:
  with the relevant scores sorted, ``position_i = i + #{irrelevant items with score >= s_i}``
  (:func:`positive_positions`). Cost ``O(c N d)`` time and ``O(c N)`` memory per chunk.

``backend="auto"`` takes faiss for the neighbour lists when it is installed, else torch.
The query is excluded from its own ranking by index, never by dropping the first neighbour.

**Hierarchical metrics** (Ramzi thesis ch. 4): with ``(N, L)`` labels (fine first), the names of
:data:`HIERARCHICAL_METRICS` (``"H-AP"``, ``"ASI"``, ``"NDCG-h"``, ``"AP@level"``, ``"H-R@k"``,
``"MS@k"``) are computed by a third chunked route that also counts instead of sorting rows
(:mod:`rank_lab.metrics.hierarchical_engine`); ``hierarchical=True`` adds all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    as_tensor,
    check_embeddings,
    check_finite,
    check_labels,
    check_positive_int,
)
from rank_lab.metrics.hierarchical_engine import HIERARCHICAL_METRICS, hierarchical_route
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "knn_search",
    "retrieval_metrics",
    "positive_positions",
    "faiss_available",
    "KNN_METRICS",
    "ALL_METRICS",
    "HIERARCHICAL_METRICS",
]

#: Metrics computable from a neighbour list of length max(k, R).
KNN_METRICS = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR")
#: Every metric name accepted by :func:`retrieval_metrics`.
ALL_METRICS = (*KNN_METRICS, "mAP", "NDCG", *HIERARCHICAL_METRICS)

Backend = Literal["auto", "torch", "faiss"]
#: ``knn(queries, gallery, k, exclude_self) -> (scores (Q, k), indices (Q, k))``
KnnFn = Callable[[torch.Tensor, torch.Tensor, int, bool], tuple[torch.Tensor, torch.Tensor]]


def faiss_available() -> bool:
    """Whether the ``faiss`` module can be imported."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def _progress(iterable: Iterable, total: int, show: bool, desc: str) -> Iterable:
    if not show:
        return iterable
    from rank_lab._progress import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False)


def _chunk_rows(n_gallery: int, max_memory_mb: float, chunk_size: int | None) -> int:
    if chunk_size is not None:
        return check_positive_int(chunk_size, "chunk_size")
    bytes_per_row = 24 * n_gallery  # scores, masks, counts: about 24 bytes per (query, item)
    return max(1, min(4096, int(max_memory_mb * 2**20 // bytes_per_row)))


def _use_faiss_gpu(faiss_mod: object, device: torch.device) -> bool:
    return device.type == "cuda" and hasattr(faiss_mod, "StandardGpuResources")


def knn_search(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    k: int,
    *,
    exclude_self: bool = False,
    backend: Backend = "auto",
    device: DeviceLike = None,
    chunk_size: int | None = None,
    max_memory_mb: float = 256,
    progress: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest neighbours by inner product (normalise first for cosine similarity).

    Args:
        queries: ``(Q, d)``.
        gallery: ``(N, d)``.
        k: number of neighbours (``<= N``, or ``<= N - 1`` with ``exclude_self``).
        exclude_self: queries are the gallery (``Q == N``); query i never returns item i.
        backend: ``"faiss"``, ``"torch"`` (chunked matmul + top-k) or ``"auto"`` (faiss if installed).
        device: where to compute (default: CUDA when present).
        chunk_size: query rows per chunk (default: from ``max_memory_mb``).
        max_memory_mb: memory budget of one chunk's score block.
        progress: tqdm bar (default: when there are more than 8 chunks).

    Returns:
        ``(scores (Q, k), indices (Q, k))`` sorted by decreasing score, on the compute device.
    """
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}")
    common = torch.promote_types(queries.dtype, gallery.dtype)  # float32 with float64: float64
    queries, gallery = queries.to(common), gallery.to(common)
    if exclude_self and queries.shape[0] != gallery.shape[0]:
        raise ValueError(f"exclude_self needs queries and gallery of the same length, got {queries.shape[0]} and {gallery.shape[0]}")
    k = check_positive_int(k, "k")
    n_avail = gallery.shape[0] - int(exclude_self)
    if k > n_avail:
        raise ValueError(f"k={k} is larger than the number of gallery items available ({n_avail})")
    if backend not in ("auto", "torch", "faiss"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'faiss', got {backend!r}")
    dev = get_device(device)
    if backend == "faiss" or (backend == "auto" and faiss_available()):
        return _knn_faiss(queries, gallery, k, exclude_self, dev, chunk_size, max_memory_mb, progress)
    return _knn_torch(queries, gallery, k, exclude_self, dev, chunk_size, max_memory_mb, progress)


def _knn_torch(q, g, k, exclude_self, dev, chunk_size, max_memory_mb, progress):
    g = g.to(dev)
    c = _chunk_rows(g.shape[0], max_memory_mb, chunk_size)
    n_chunks = math.ceil(q.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    out_s, out_i = [], []
    for start in _progress(range(0, q.shape[0], c), n_chunks, show, "knn"):
        qc = q[start : start + c].to(dev)
        s = qc @ g.T
        if exclude_self:
            rows = torch.arange(qc.shape[0], device=dev)
            s[rows, rows + start] = -torch.inf
        vals, idx = torch.topk(s, k, dim=1)
        out_s.append(vals)
        out_i.append(idx)
    return torch.cat(out_s), torch.cat(out_i)


def _knn_faiss(q, g, k, exclude_self, dev, chunk_size, max_memory_mb, progress):
    try:
        import faiss
    except ImportError as exc:
        raise ImportError("backend='faiss' needs faiss: pip install faiss-cpu (or faiss-gpu on CUDA)") from exc
    import numpy as np

    gn = np.ascontiguousarray(g.detach().to("cpu", torch.float32).numpy())
    index = faiss.IndexFlatIP(gn.shape[1])
    if _use_faiss_gpu(faiss, dev):
        res = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(res, dev.index or 0, index)
    index.add(gn)
    kk = k + int(exclude_self)
    c = _chunk_rows(kk * 4, max_memory_mb, chunk_size) if chunk_size is None else chunk_size
    c = min(c, 16384)
    n_chunks = math.ceil(q.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    out_s, out_i = [], []
    for start in _progress(range(0, q.shape[0], c), n_chunks, show, "knn (faiss)"):
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
    return torch.cat(out_s).to(dev), torch.cat(out_i).to(dev)


def positive_positions(
    scores: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor, max_pos: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Worst-case 1-based positions of the relevant items of each row, by counting.

    Args:
        scores: ``(c, N)``.
        positives: ``(c, N)`` bool, relevant items.
        negatives: ``(c, N)`` bool, irrelevant items (items in neither mask, e.g. the query
            itself, are ignored).
        max_pos: width of the output (default: the largest number of positives in a row).

    Returns:
        ``positions (c, P)`` long, the position of the i-th best relevant item (``i + 1 +
        #{negatives with score >= its score}``), and ``valid (c, P)`` bool (``i < R``).

    Raises:
        ValueError / TypeError: naming the argument (shapes, dtypes, NaN/inf scores).
    """
    scores = as_tensor(scores, "scores")
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"scores must have shape (c, N) with c, N >= 1, got {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be floating, got dtype {scores.dtype}")
    check_finite(scores, "scores")
    for name, m in (("positives", positives), ("negatives", negatives)):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            raise TypeError(f"{name} must be a bool tensor, got {getattr(m, 'dtype', type(m).__name__)}")
        if m.shape != scores.shape:
            raise ValueError(f"{name} has shape {tuple(m.shape)} but scores has shape {tuple(scores.shape)}")
    n_pos = positives.sum(1)
    p = int(n_pos.max()) if max_pos is None else max_pos
    p = max(p, 1)
    neg_inf = torch.tensor(-torch.inf, dtype=scores.dtype, device=scores.device)
    pos_sorted = torch.topk(torch.where(positives, scores, neg_inf), p, dim=1).values  # (c, p) desc
    u = (-pos_sorted).contiguous()  # ascending; padding (-inf scores) becomes +inf at the end
    v = torch.where(negatives, -scores, -neg_inf).contiguous()  # non-negatives -> +inf
    a = torch.searchsorted(u, v, right=False)  # #thresholds t with -t < -v, i.e. t > v
    hist = torch.zeros(scores.shape[0], p + 1, dtype=torch.long, device=scores.device)
    hist.scatter_add_(1, a, negatives.long())
    n_neg_ge = hist.cumsum(1)[:, :p]  # negatives with score >= t_i
    ranks = torch.arange(1, p + 1, device=scores.device)
    valid = ranks[None, :] <= n_pos[:, None]
    return ranks[None, :] + n_neg_ge, valid


def _metrics_from_positions(
    pos: torch.Tensor, valid: torch.Tensor, n_pos: torch.Tensor, ks: Sequence[int], wanted: set[str]
) -> dict[str, torch.Tensor]:
    """Per-query metric values from worst-case positions of the relevant items."""
    posf = pos.to(torch.float64)
    ranks = torch.arange(1, pos.shape[1] + 1, device=pos.device, dtype=torch.float64)[None, :]
    prec = torch.where(valid, ranks / posf, torch.zeros_like(posf))  # precision at each relevant item
    r = n_pos.to(torch.float64).clamp(min=1)
    out: dict[str, torch.Tensor] = {}
    for k in ks:
        in_k = valid & (pos <= k)
        hits = in_k.sum(1).to(torch.float64)
        if "R@k" in wanted:
            out[f"R@{k}"] = (hits > 0).to(torch.float64)
        if "P@k" in wanted:
            out[f"P@{k}"] = hits / k
        if "TR@k" in wanted:
            out[f"TR@{k}"] = hits / r.clamp(max=k)
        if "AP@k" in wanted:
            out[f"mAP@{k}"] = (prec * in_k).sum(1) / r.clamp(max=k)
    if "mAP@R" in wanted:
        out["mAP@R"] = (prec * (pos <= n_pos[:, None])).sum(1) / r
    if "mAP" in wanted:
        out["mAP"] = prec.sum(1) / r
    if "MRR" in wanted:
        out["MRR"] = 1.0 / posf[:, 0]
    if "NDCG" in wanted:
        dcg = torch.where(valid, 1.0 / torch.log2(posf + 1.0), torch.zeros_like(posf)).sum(1)
        idcg = torch.where(valid, 1.0 / torch.log2(ranks + 1.0), torch.zeros_like(posf)).sum(1)
        out["NDCG"] = dcg / idcg.clamp(min=1e-12)
    return out


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
        knn: a custom neighbour search ``knn(queries, gallery, k, exclude_self) -> (scores (Q, k),
            indices (Q, k))`` used for the neighbour-list metrics instead of ``backend`` (e.g. the
            sharded faiss index of :mod:`rank_lab.metrics.distributed_knn`); it receives the
            normalised sets and must follow the contract of :func:`knn_search`.
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
        if knn is None:
            knn_backend = "faiss" if backend == "faiss" or (backend == "auto" and faiss_available()) else "torch"

            def knn(q: torch.Tensor, g: torch.Tensor, k: int, es: bool) -> tuple[torch.Tensor, torch.Tensor]:
                return knn_search(q, g, k, exclude_self=es, backend=knn_backend, device=dev,
                                  chunk_size=chunk_size, max_memory_mb=max_memory_mb, progress=progress)

        per_q = _knn_route(emb, lab, ref, ref_lab, n_pos, ks, wanted, exclude_self, dev, knn)
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
    c = _chunk_rows(ref.shape[0], max_memory_mb, chunk_size)
    n_chunks = math.ceil(emb.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    parts: dict[str, list[torch.Tensor]] = {}
    for start in _progress(range(0, emb.shape[0], c), n_chunks, show, "retrieval metrics"):
        qc = emb[start : start + c].to(dev)
        s = qc @ ref_d.T
        pos = lab[start : start + c].to(dev)[:, None] == ref_lab_d[None, :]
        neg = ~pos
        if exclude_self:
            rows = torch.arange(qc.shape[0], device=dev)
            pos[rows, rows + start] = False
            neg[rows, rows + start] = False
        positions, valid = positive_positions(s, pos, neg)
        vals = _metrics_from_positions(positions, valid, pos.sum(1), ks, wanted)
        for name, v in vals.items():
            parts.setdefault(name, []).append(v)
    return {name: torch.cat(v) for name, v in parts.items()}


def _knn_route(emb, lab, ref, ref_lab, n_pos, ks, wanted, exclude_self, dev, knn):
    n_avail = ref.shape[0] - int(exclude_self)
    k_need = max([*ks, int(n_pos.max()) if n_pos.numel() else 1, 1])
    k_fetch = min(k_need + 1, n_avail)  # one extra neighbour detects ties across the cut
    scores, idx = knn(emb, ref, k_fetch, exclude_self)
    scores, idx = scores.cpu(), idx.cpu()
    rel = ref_lab.cpu()[idx] == lab.cpu()[:, None]
    k_use = min(k_need, k_fetch)
    # queries whose list is cut inside a group of tied scores are recomputed exactly
    tied = torch.zeros(emb.shape[0], dtype=torch.bool)
    if k_fetch > k_use:
        tied = scores[:, k_use - 1] == scores[:, k_use]
    if "MRR" in wanted:  # the first relevant item may lie beyond the list
        tied |= (rel[:, :k_use].sum(1) == 0) & (n_pos.cpu() > 0)
    s_top, rel_top = scores[:, :k_use], rel[:, :k_use]
    neg_top = ~rel_top
    positions, valid = positive_positions(s_top.to(torch.float64), rel_top, neg_top, max_pos=k_use)
    # relevant items beyond the list get a position > k_use; only positions <= max(ks, R) matter
    per_q = _metrics_from_positions(positions, valid, n_pos.cpu(), ks, wanted)
    if bool(tied.any()):
        rows = torch.nonzero(tied).flatten()
        exact = _counting_route_rows(emb, lab, ref, ref_lab, rows, ks, wanted, exclude_self, dev)
        for name in per_q:
            per_q[name][rows] = exact[name].cpu()
    return per_q


def _counting_route_rows(emb, lab, ref, ref_lab, rows, ks, wanted, exclude_self, dev):
    ref_d, ref_lab_d = ref.to(dev), ref_lab.to(dev)
    qc = emb[rows].to(dev)
    s = qc @ ref_d.T
    pos = lab[rows].to(dev)[:, None] == ref_lab_d[None, :]
    neg = ~pos
    if exclude_self:
        r = torch.arange(rows.numel(), device=dev)
        pos[r, rows.to(dev)] = False
        neg[r, rows.to(dev)] = False
    positions, valid = positive_positions(s, pos, neg)
    return _metrics_from_positions(positions, valid, pos.sum(1), ks, wanted)
