"""Exact metrics: the per-query definitions, and the evaluation engine that computes them at scale.

Definitions (functions of score matrices, one value per query):

* :mod:`rank_lab.metrics.retrieval` -- AP, R@k, mAP@R, NDCG ... from ``(Q, N)`` scores, and
  worst-case positions by counting (:func:`~rank_lab.metrics.retrieval.positive_positions`).
* :mod:`rank_lab.metrics.hierarchy` -- label hierarchies, relevance functions, hierarchical codes,
  H-AP, ASI, hierarchical NDCG, mistake severity (Ramzi thesis ch. 4).
* Other families, imported explicitly: :mod:`~rank_lab.metrics.ood` (AUROC, FPR95),
  :mod:`~rank_lab.metrics.text` (edit distance), :mod:`~rank_lab.metrics.rotated_iou` (rotated
  IoU), :mod:`~rank_lab.metrics.detection` (the LS-IoU box encoding, ICDAR'15),
  :mod:`~rank_lab.metrics.calibration` (ECE), :mod:`~rank_lab.metrics.classification` (kNN
  classification, on the engine's search).

The engine (:mod:`rank_lab.metrics.engine`): :func:`retrieval_metrics` (embeddings -> figures, by
the canonical score on every route, bit-identical whatever the route, precision or chunking) and
:func:`knn_search` (exact neighbours); a new metric is one :func:`register_metric` call.
"""

from rank_lab.metrics.engine.evaluate import retrieval_metrics
from rank_lab.metrics.engine.formulas.registry import (
    RetrievalMetric,
    list_metrics,
    register_metric,
    unregister_metric,
)
from rank_lab.metrics.engine.search.knn import faiss_available, knn_search
from rank_lab.metrics.hierarchy.metrics import (
    ap_per_level,
    average_set_intersection,
    h_average_precision,
    h_precision_at_k,
    h_rank,
    h_recall_at_k,
    hierarchical_ndcg,
    hierarchical_pr_curve,
    mistake_severity,
    weighted_sum_ap,
)
from rank_lab.metrics.retrieval import (
    ap_at_k,
    average_precision,
    dcg,
    map_at_r,
    ndcg,
    positive_positions,
    precision_at_k,
    precision_recall_curve,
    recall_at_k,
    reciprocal_rank,
    sorted_relevance,
    true_recall_at_k,
    worst_case_order,
)

__all__ = [
    "ap_per_level",
    "average_set_intersection",
    "h_average_precision",
    "h_precision_at_k",
    "h_rank",
    "h_recall_at_k",
    "hierarchical_ndcg",
    "hierarchical_pr_curve",
    "mistake_severity",
    "weighted_sum_ap",
    "RetrievalMetric",
    "list_metrics",
    "register_metric",
    "unregister_metric",
    "ap_at_k",
    "average_precision",
    "dcg",
    "faiss_available",
    "knn_search",
    "map_at_r",
    "ndcg",
    "positive_positions",
    "precision_at_k",
    "precision_recall_curve",
    "recall_at_k",
    "reciprocal_rank",
    "retrieval_metrics",
    "sorted_relevance",
    "true_recall_at_k",
    "worst_case_order",
]
