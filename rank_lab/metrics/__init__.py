"""Exact metrics and the evaluation engine.

* :mod:`rank_lab.metrics.retrieval` -- per-query metrics from ``(Q, N)`` scores (AP, R@k, mAP@R ...).
* :mod:`rank_lab.metrics.engine` -- ``knn_search`` and ``retrieval_metrics`` (embeddings -> dict).

Other families live in sibling modules, imported explicitly (``rank_lab.metrics.ood`` ...).
"""

from rank_lab.metrics.engine import (
    ALL_METRICS,
    KNN_METRICS,
    faiss_available,
    knn_search,
    positive_positions,
    retrieval_metrics,
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
