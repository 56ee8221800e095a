"""The evaluation engine's entry point: from embeddings and labels to a dict of named retrieval
figures.

:func:`retrieval_metrics` checks its inputs once, normalises the embeddings (cosine similarity),
resolves the metrics asked in the registry (:mod:`rank_lab.metrics.engine.formulas.registry`),
builds one frozen :class:`~rank_lab.metrics.engine.routes.request.MetricsRequest` and hands it to
the cheapest route that serves every metric asked:

* **certified counting** (:mod:`rank_lab.metrics.engine.routes.counting`): every metric, at the
  cost of one pass of stage-1 scores whatever the cut-offs (R@1000 costs what R@1 costs); when the
  queries are the gallery and the metrics read no deeper than ``K``, about half the product (each
  block hands the later queries the items they need from its scores read by column);
* **neighbour lists** (:mod:`rank_lab.metrics.engine.routes.neighbour_lists`): binary metrics that
  read no deeper than ``K = max(k, R)`` (and MRR), cheaper for short lists (queries = gallery: the
  certified search computes each pair once for both orientations), and the route of a flat index
  as stage 1 (``backend="faiss"``, ``knn=``).

Both rank every query's gallery by the **canonical score**
(:mod:`rank_lab.metrics.engine.scores.exact`) with the worst-case tie rule and reduce the ranking to
the same positions, so **no figure depends on the route, the stage-1 precision, the backend, the
chunk size or which other figures were asked**: per-query values are bit-identical. The promise
holds on the CPU; on CUDA the exact route is used unless a reduced precision is asked explicitly
(``docs/decisions.md``, the bound on tensor cores).

**Matmul precision.** Every matmul runs inside
:func:`~rank_lab.metrics.engine.scores.exact.exact_matmul`: no TF32, no reduced-precision split-K
reductions, no autocast (a caller's ``torch.autocast`` block changes nothing); the caller's settings
are restored afterwards.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rank_lab._validation import check_embeddings, check_float, check_labels, check_positive_int
from rank_lab.metrics.engine.formulas.registry import (
    METRICS,
    RetrievalMetric,
    get_metric,
    list_metrics,
)
from rank_lab.metrics.engine.routes.counting import counting_route
from rank_lab.metrics.engine.routes.neighbour_lists import list_length, neighbour_list_route
from rank_lab.metrics.engine.routes.request import MetricsRequest
from rank_lab.metrics.engine.scores.bound import check_products_fit
from rank_lab.metrics.engine.scores.exact import exact_matmul, scale_rows
from rank_lab.metrics.engine.search.index import IndexStage1, KnnFn, faiss_knn
from rank_lab.metrics.engine.search.knn import Backend, Precision, check_search_options
from rank_lab.utils import DeviceLike, get_device
from rank_lab.vocabulary import NoPositive

__all__ = ["retrieval_metrics", "NEIGHBOUR_LIST_MAX_K"]

#: Lists up to this length are cheaper than counting (queries = gallery: one product for both
#: orientations).
NEIGHBOUR_LIST_MAX_K = 16


def normalize_rows(x: torch.Tensor, block_rows: int = 8192) -> torch.Tensor:
    """Rows of ``x`` scaled to unit norm, the same for any positive scaling of a row that the dtype
    represents.

    Each row is first scaled by a power of two so that its largest entry lies in ``[0.5, 1)``
    (exact: no rounding), then divided by its norm (``torch.nn.functional.normalize``): the norm can
    neither overflow (rows with entries near ``1e19`` in float32) nor fall under the ``1e-12`` floor
    (rows near ``1e-13``, subnormal rows). For rows that need no scaling the result is bit-identical
    to ``F.normalize(x)``. All-zero rows stay zero.
    """
    out = torch.empty_like(x)
    for a in range(0, x.shape[0], block_rows):
        xb = x[a : a + block_rows]
        top = xb.abs().amax(1)
        e = torch.frexp(top).exponent
        e = torch.where(top > 0, e, torch.zeros_like(e))
        # unit_rows' scaling, written out per block into a preallocated output (its memory bound)
        out[a : a + block_rows] = F.normalize(scale_rows(xb, -e), dim=1)
    return out


def _warn_degenerate(q: torch.Tensor, g: torch.Tensor, normalize: bool, same: bool) -> None:
    """Warn when queries score 0 against every item (zero rows, or products that all underflow)."""
    info = torch.finfo(q.dtype)
    # half the subnormal spacing: smaller products round to 0
    tau = float(info.tiny) * float(info.eps) / 2
    top_g = float(g.abs().max())
    top_q = q.abs().amax(1).to(torch.float64)
    dead = top_q * top_g <= tau
    if not bool(dead.any()):
        return
    zero = dead & (top_q == 0)
    causes = []
    if top_g == 0:
        causes.append(f"every row of {'embeddings' if same else 'ref_embeddings'} is zero")
    if bool(zero.any()) and top_g > 0:
        causes.append(
            f"{int(zero.sum())} row(s) of embeddings are all zero"
            + (" (their cosine similarity is undefined)" if normalize else "")
        )
    tiny = dead & (top_q > 0)
    if bool(tiny.any()) and top_g > 0:
        causes.append(
            f"{int(tiny.sum())} row(s) of embeddings are so small that every product with the "
            f"gallery underflows {q.dtype} (largest entry {float(top_q[tiny].max()):.3g}, "
            f"gallery's {top_g:.3g}); pass normalize=True or rescale them"
        )
    warnings.warn(
        f"{int(dead.sum())} query(ies) score 0 against every gallery item: {'; '.join(causes)}. "
        "Every item ties with every other, and the worst-case tie rule ranks the irrelevant ones "
        "first.",
        stacklevel=3,
    )


def _check_tree(lab: torch.Tensor, ref_lab: torch.Tensor) -> None:
    """Hierarchical labels must be a tree: each fine label has one path of coarser labels."""
    rows = torch.unique(torch.cat([lab, ref_lab]), dim=0)
    if torch.unique(rows[:, 0]).numel() != rows.shape[0]:
        fine, counts = torch.unique(rows[:, 0], return_counts=True)
        raise ValueError(
            f"labels are not a tree: fine labels {fine[counts > 1][:3].tolist()} appear with "
            "several coarser labels (each column of hierarchical labels must refine the next)"
        )


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
    knn: KnnFn | IndexStage1 | None = None,
    device: DeviceLike = None,
    chunk_size: int | None = None,
    max_memory_mb: float = 256,
    no_positive: NoPositive = "skip",
    progress: bool | None = None,
    per_query: bool = False,
    hierarchical: bool | None = None,
    hap_alpha: float = 1.0,
) -> dict[str, float]:
    """Retrieval figures of an embedding set (the open-set protocol of the Ramzi thesis, §3).

    Every query is ranked against the reference set by cosine similarity (``normalize=True``) or
    inner product -- the canonical score, exact and identical on every route (module docstring);
    its own item is excluded by index when the queries are the reference set. Ties are broken
    against the ranker (worst case, ``docs/decisions.md``).

    Args:
        embeddings: ``(Q, d)`` query embeddings (inputs that require grad are used as if detached).
        labels: ``(Q,)`` integer labels, or ``(Q, L)`` hierarchical labels (fine first): the binary
            metrics use column 0 (the fine level), the hierarchical ones every column.
        ref_embeddings: ``(N, d)`` gallery; ``None`` means the queries themselves.
        ref_labels: ``(N,)`` gallery labels (required with ``ref_embeddings``).
        ks: cut-offs for the ``@k`` metrics; a k larger than the gallery (``N - 1`` items with
            self-exclusion) raises a ``ValueError``, as in :meth:`rank_lab.train.Trainer.evaluate`.
        metrics: names of registered metrics
            (:func:`~rank_lab.metrics.engine.formulas.registry.list_metrics`): ``"R@k"`` (recall
            rate), ``"P@k"``, ``"TR@k"`` (true recall), ``"AP@k"`` (reported as ``mAP@k``),
            ``"mAP@R"``, ``"mAP"`` (full AP), ``"MRR"``, ``"NDCG"`` (binary gains), and the
            hierarchical metrics of the Ramzi thesis ch. 4: ``"H-AP"`` (Eq. 4.3, relevance
            Eq. 4.7 with ``hap_alpha``), ``"ASI"`` (Eq. 4.16), ``"NDCG-h"`` (gains ``2^l - 1``),
            ``"AP@level"`` (reported as ``"AP@level{l}"`` for l = 1..L, Eq. 4.8; l = L is the fine
            AP, l = 1 the coarsest), ``"H-R@k"`` (Eq. 4.4) and ``"MS@k"`` (mean LCA height
            ``L - level`` of the top-k mistakes, pooled over all mistakes of all queries, Eq. 2.10;
            reported with ``"mistakes@k"``, the mean number of mistakes in the top k). (1-D labels
            are L = 1.) :func:`~rank_lab.metrics.engine.formulas.registry.register_metric` adds one.
        normalize: L2-normalise both sets first (cosine similarity; any positive scaling of a row
            gives the same figures, :func:`normalize_rows`).
        exclude_self: default ``True`` when ``ref_embeddings`` is ``None``.
        backend: ``"auto"``, ``"torch"`` or ``"faiss"`` (a flat float32 CPU index as stage 1 of the
            neighbour lists); the values do not depend on it.
        precision: stage-1 format (:func:`~rank_lab.metrics.knn_search`); the values do not depend
            on it.
        knn: a custom flat index ``knn(queries, gallery, k, exclude_self) -> (scores (Q, k), indices
            (Q, k))`` used as stage 1 of the neighbour lists (e.g. the sharded faiss index of
            :mod:`rank_lab.metrics.engine.distributed`); it receives the normalised sets, must
            return the top k of float32 inner products (any summation order) sorted by decreasing
            score, and is called again with larger k until the lists are certified. An
            :class:`~rank_lab.metrics.engine.search.index.IndexStage1` states another arithmetic.
        device: compute device (default: CUDA when present).
        chunk_size, max_memory_mb: query rows per block, or the memory budget that sets it (the
            values do not depend on them).
        no_positive: ``"skip"`` leaves queries without any relevant item out of the means (their
            number is reported as ``"n_skipped"``); ``"raise"`` raises a ``ValueError``.
        progress: tqdm bar (default: on for many blocks).
        per_query: also return the per-query tensors under ``"per_query"`` (for ``"MS@k"``: the
            per-query mean severity, 0 without mistakes, and ``"mistakes@k"``).
        hierarchical: ``True`` adds every hierarchical metric to ``metrics``; ``None``/``False``
            computes those named in ``metrics`` only.
        hap_alpha: alpha of the H-AP relevance (1 for the metric, thesis §4.2.2.2).

    Returns:
        A dict such as
        ``{"R@1": 0.71, "R@10": 0.9, "mAP@R": 0.42, "n_queries": 1000, "n_skipped": 0}``.

    Raises:
        ValueError / TypeError: naming the argument (shapes, non-finite values, complex or meta
        tensors, labels, unknown metrics, ``ks``, options; inner products that could overflow the
        working precision).

    Warns:
        UserWarning: queries whose scores are all 0 (zero rows; products that all underflow).
    """
    same = ref_embeddings is None
    emb = check_embeddings(embeddings, "embeddings").detach()
    lab = check_labels(labels, emb.shape[0], "labels")
    if (ref_embeddings is None) != (ref_labels is None):
        raise ValueError("ref_embeddings and ref_labels must be given together")
    ref = emb if same else check_embeddings(ref_embeddings, "ref_embeddings").detach()
    ref_lab = lab if same else check_labels(ref_labels, ref.shape[0], "ref_labels")
    if ref.shape[1] != emb.shape[1]:
        raise ValueError(
            f"embeddings have d={emb.shape[1]} but ref_embeddings have d={ref.shape[1]}"
        )
    if lab.ndim != ref_lab.ndim:
        raise ValueError(
            f"labels have shape {tuple(lab.shape)} but ref_labels have {tuple(ref_lab.shape)}"
        )
    if lab.ndim == 2 and lab.shape[1] != ref_lab.shape[1]:
        raise ValueError(
            f"labels have {lab.shape[1]} levels but ref_labels have {ref_lab.shape[1]}"
        )
    lab, ref_lab = (lab[:, None], ref_lab[:, None]) if lab.ndim == 1 else (lab, ref_lab)
    lab, ref_lab = lab.cpu(), ref_lab.cpu()
    if isinstance(metrics, str) or not hasattr(metrics, "__iter__"):
        raise TypeError(f"metrics must be a sequence of metric names, got {type(metrics).__name__}")
    names = list(metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        raise ValueError(
            f"unknown metrics {sorted(map(str, unknown))}; choose among {list_metrics()}"
        )
    if hierarchical:
        names += list_metrics(family="hierarchical")
    wanted: tuple[RetrievalMetric, ...] = tuple(dict.fromkeys(get_metric(m) for m in names))
    if exclude_self is not None and not isinstance(exclude_self, bool):
        raise TypeError(f"exclude_self must be a bool or None, got {type(exclude_self).__name__}")
    exclude_self = same if exclude_self is None else exclude_self
    if exclude_self and ref.shape[0] != emb.shape[0]:
        raise ValueError(
            "exclude_self=True needs the queries to be the reference set (same length)"
        )
    if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
        raise TypeError(f"ks must be a sequence of positive ints, got {type(ks).__name__}")
    ks = tuple(sorted({check_positive_int(k, "ks") for k in ks}))
    n_avail = ref.shape[0] - int(exclude_self)
    # one rule with Trainer.evaluate: refuse, never drop (docs/decisions.md)
    if ks and ks[-1] > n_avail:
        raise ValueError(
            f"ks holds k={[k for k in ks if k > n_avail]}, larger than the number of gallery items "
            f"available ({n_avail}); pass ks <= {n_avail}"
        )
    if no_positive not in ("raise", "skip"):
        raise ValueError(f"no_positive must be 'raise' or 'skip', got {no_positive!r}")
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
    if not isinstance(per_query, bool):
        raise TypeError(f"per_query must be a bool, got {type(per_query).__name__}")
    backend, precision, chunk_size, max_memory_mb = check_search_options(
        backend, precision, chunk_size, max_memory_mb, progress
    )
    if knn is not None and not (callable(knn) or isinstance(knn, IndexStage1)):
        raise TypeError(
            "knn must be a callable knn(queries, gallery, k, exclude_self) or None, got "
            f"{type(knn).__name__}"
        )
    hier = any(m.family == "hierarchical" for m in wanted)
    if hier:
        hap_alpha = check_float(hap_alpha, "hap_alpha", low=0.0, low_open=True)
        if lab.shape[1] > 1:
            _check_tree(lab, ref_lab)
    dev = get_device(device)
    work = torch.float64 if torch.float64 in (emb.dtype, ref.dtype) else torch.float32
    with exact_matmul():  # no autocast, no TF32 for anything below (restored on exit)
        q = emb.to(dev, work)
        g = q if same else ref.to(dev, work)
        if normalize:
            q = normalize_rows(q)
            g = q if same else normalize_rows(g)
        q_top = float(q.double().norm(dim=1).max())
        check_products_fit(
            q_top,
            q_top if same else float(g.double().norm(dim=1).max()),
            work,
            ("embeddings", "embeddings" if same else "ref_embeddings"),
        )
        _warn_degenerate(q, g, normalize, same)

    # number of relevant items of each query (same fine label), excluding the query itself
    uniq, ref_inv = torch.unique(ref_lab[:, 0], return_inverse=True)
    counts = torch.bincount(ref_inv, minlength=uniq.numel())
    idx_in = torch.searchsorted(uniq, lab[:, 0].contiguous()).clamp(max=uniq.numel() - 1)
    found = uniq[idx_in] == lab[:, 0]
    n_pos = (
        torch.where(found, counts[idx_in], torch.zeros_like(idx_in)) - int(exclude_self)
    ).clamp(min=0)
    empty = n_pos == 0
    if bool(empty.any()) and no_positive == "raise":
        raise ValueError(
            f"{int(empty.sum())} query(ies) have no relevant item in the reference set "
            f"(first: {int(torch.nonzero(empty)[0])})"
        )
    if bool(empty.all()):
        raise ValueError(
            f"no query has a relevant item: no label of labels occurs among the other items of "
            f"{'labels' if same else 'ref_labels'}, so every metric is undefined"
        )
    index = None
    if knn is not None:
        index = knn if isinstance(knn, IndexStage1) else IndexStage1(knn)
    elif backend == "faiss":
        index = faiss_knn(chunk_size, max_memory_mb, progress)
    req = MetricsRequest(
        q,
        g,
        lab,
        ref_lab,
        exclude_self,
        ks,
        wanted,
        n_pos,
        dev,
        precision,
        index,
        chunk_size,
        max_memory_mb,
        progress,
        float(hap_alpha),
    )
    with exact_matmul():
        per_q = _route(req)(req)

    keep = ~empty
    result: dict[str, float] = {}
    out_per_q: dict[str, torch.Tensor] = {}
    for metric in wanted:
        mine = per_q[metric.name]
        if metric.reduce is not None:
            figures, shown = metric.reduce(mine, keep, ks)
        else:
            figures = {name: float(v[keep].double().mean()) for name, v in mine.items()}
            shown = mine
        result.update(figures)
        out_per_q.update(shown)
    result["n_queries"] = int(keep.sum())
    result["n_skipped"] = int((~keep).sum())
    if per_query:
        result["per_query"] = out_per_q  # type: ignore[assignment]
    return result


def _route(req: MetricsRequest):
    """The cheapest route that serves every metric of ``req`` (module docstring)."""
    if req.hierarchical or "all" in req.depths:
        return counting_route
    if req.index is not None or list_length(req) <= NEIGHBOUR_LIST_MAX_K:
        return neighbour_list_route
    return counting_route
