"""The evaluation engine: from embeddings and labels to a dict of named retrieval figures.

Three routes, all exact and all in bounded memory (never an ``N x N`` matrix); the first two are
in :mod:`rank_lab.metrics.binary_routes`, the third in :mod:`rank_lab.metrics.hierarchical_route`:

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
  :data:`~rank_lab.metrics.hierarchical_positions.HIERARCHICAL_METRICS` (``"H-AP"``, ``"ASI"``,
  ``"NDCG-h"``, ``"AP@level"``, ``"H-R@k"``, ``"MS@k"``) are computed by
  :mod:`rank_lab.metrics.hierarchical_route`; ``hierarchical=True`` adds all of them.

**Matmul precision.** Every matmul of the engine runs inside
:func:`~rank_lab.metrics.exact_scores.exact_matmul`: TF32 off for float32 matmuls on CUDA (TF32
rounds the inputs to 10 bits and would silently change the exact route's scores), reduced-precision
split-K reductions off for float16/bfloat16 (the bound assumes float32 accumulation), float32
matmul precision ``"highest"``; the caller's settings are restored afterwards.

``backend`` chooses stage 1 of the neighbour lists: ``"torch"`` (tiled matmul) or ``"faiss"`` (a flat
float32 index, lists lengthened until certified); ``"auto"`` is ``"torch"``. The query is excluded
from its own ranking by index, never by dropping the first neighbour. The same search gives the
neighbours themselves: :func:`~rank_lab.metrics.knn.knn_search` (still importable from here, as
``faiss_available``, ``positive_positions`` and ``PRECISIONS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from rank_lab._validation import (
    check_embeddings,
    check_labels,
    check_positive_int,
)
from rank_lab.metrics.binary_routes import counting_route, neighbour_list_route
from rank_lab.metrics.counting import positive_positions  # noqa: F401 - still importable from here (decisions, issue 17)
from rank_lab.metrics.hierarchical_positions import HIERARCHICAL_METRICS
from rank_lab.metrics.hierarchical_route import hierarchical_route
from rank_lab.metrics.knn import (  # noqa: F401 - knn_search, faiss_available were defined here: still importable
    Backend,
    KnnFn,
    Precision,
    check_precision,
    faiss_available,
    faiss_knn,
    knn_search,
    search_tile,
)
from rank_lab.metrics.score_bounds import PRECISIONS  # noqa: F401 - still importable from here
from rank_lab.utils import DeviceLike, get_device

__all__ = ["retrieval_metrics", "KNN_METRICS", "ALL_METRICS"]

#: Metrics computable from a neighbour list of length max(k, R).
KNN_METRICS = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR")
#: Every metric name accepted by :func:`retrieval_metrics`.
ALL_METRICS = (*KNN_METRICS, "mAP", "NDCG", *HIERARCHICAL_METRICS)


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
        precision: stage-1 format of the neighbour-list route (:func:`~rank_lab.metrics.knn.knn_search`); the values do
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
        Every matmul runs inside :func:`~rank_lab.metrics.exact_scores.exact_matmul` (no TF32 on
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
    precision = check_precision(precision, backend)
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
            knn = faiss_knn(dev, chunk_size, max_memory_mb, progress)
        per_q = neighbour_list_route(emb, lab, ref, ref_lab, n_pos, ks, wanted, exclude_self, dev, precision, knn,
                            search_tile(ref.shape[0], max_memory_mb, chunk_size), chunk_size, max_memory_mb, progress)
    else:  # full-list metrics ("mAP", "NDCG") need every relevant item's position: counting route
        per_q = counting_route(emb, lab, ref, ref_lab, ks, wanted, exclude_self, dev, chunk_size, max_memory_mb, progress)
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
