"""Exact metrics and the evaluation engine.

* :mod:`rank_lab.metrics.retrieval` -- per-query metrics from ``(Q, N)`` scores (AP, R@k, mAP@R ...).
* :mod:`rank_lab.metrics.engine` -- ``knn_search`` and ``retrieval_metrics`` (embeddings -> dict).
* :mod:`rank_lab.metrics.hierarchical_relevance` -- label hierarchies, shared levels, relevance
  functions; :mod:`rank_lab.metrics.hierarchical_metrics` -- H-AP, ASI, hierarchical NDCG, mistake
  severity on score matrices; :mod:`rank_lab.metrics.hierarchical_route` -- the engine's
  bounded-memory route for them (Ramzi thesis ch. 4). The former module names ``hierarchy``,
  ``hierarchical`` and ``hierarchical_engine`` still import the same names.

Other families live in sibling modules, imported explicitly: :mod:`~rank_lab.metrics.ood`
(AUROC, FPR95), :mod:`~rank_lab.metrics.text` (edit distance), :mod:`~rank_lab.metrics.detection`
(rotated IoU, ICDAR'15), :mod:`~rank_lab.metrics.classification` (kNN classification),
:mod:`~rank_lab.metrics.calibration` (ECE), :mod:`~rank_lab.metrics.distributed_knn`.
"""

from rank_lab.metrics.engine import (
    ALL_METRICS,
    KNN_METRICS,
    faiss_available,
    knn_search,
    positive_positions,
    retrieval_metrics,
)
from rank_lab.metrics.hierarchical_metrics import (
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
    "ALL_METRICS",
    "KNN_METRICS",
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
