"""Exact metrics and the evaluation engine.

* :mod:`rank_lab.metrics.retrieval` -- per-query metrics from ``(Q, N)`` scores (AP, R@k, mAP@R ...).
* :mod:`rank_lab.metrics.engine` -- ``retrieval_metrics`` (embeddings -> dict), through the routes
  of :mod:`rank_lab.metrics.binary_routes` (certified neighbour lists, counting) and
  :mod:`rank_lab.metrics.hierarchical_route`; :mod:`rank_lab.metrics.knn` -- ``knn_search``, exact
  with respect to the canonical score of :mod:`rank_lab.metrics.exact_scores`, found through the
  reduced-precision bound of :mod:`rank_lab.metrics.score_bounds` and the certified search of
  :mod:`rank_lab.metrics.certified`; :mod:`rank_lab.metrics.counting` -- worst-case positions.
* :mod:`rank_lab.metrics.hierarchical_relevance` -- label hierarchies, shared levels, relevance
  functions; :mod:`rank_lab.metrics.hierarchical_codes` -- hierarchical codes and the multi-label
  relevance (Algorithm 1); :mod:`rank_lab.metrics.hierarchical_metrics` -- H-AP, ASI,
  hierarchical NDCG, mistake severity on score matrices; :mod:`rank_lab.metrics.hierarchical_route`
  -- the engine's bounded-memory route for them, with :mod:`rank_lab.metrics.hierarchical_positions`
  (the metrics from the sorted positives) and :mod:`rank_lab.metrics.hierarchical_counting` (the
  counting route on explicit level blocks) (Ramzi thesis ch. 4). The former module names
  ``hierarchy``, ``hierarchical`` and ``hierarchical_engine`` still import the same names.

Other families live in sibling modules, imported explicitly: :mod:`~rank_lab.metrics.ood`
(AUROC, FPR95), :mod:`~rank_lab.metrics.text` (edit distance), :mod:`~rank_lab.metrics.rotated_iou`
(rotated IoU), :mod:`~rank_lab.metrics.detection` (the LS-IoU box encoding, ICDAR'15),
:mod:`~rank_lab.metrics.classification` (kNN classification), :mod:`~rank_lab.metrics.calibration`
(ECE), :mod:`~rank_lab.metrics.distributed_knn`. A split module's former home still imports the
names it used to define (e.g. ``knn_search`` from :mod:`rank_lab.metrics.engine`).
"""

from rank_lab.metrics.counting import positive_positions
from rank_lab.metrics.engine import ALL_METRICS, KNN_METRICS, retrieval_metrics
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
from rank_lab.metrics.knn import faiss_available, knn_search
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
