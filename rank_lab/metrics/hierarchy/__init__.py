"""Hierarchical labels and the metrics that read them (Ramzi thesis ch. 4), on score matrices.

* :mod:`rank_lab.metrics.hierarchy.relevance` -- label hierarchies, shared levels, the relevance
  functions (Eq. 4.7, Property 1, NDCG gains).
* :mod:`rank_lab.metrics.hierarchy.codes` -- hierarchical codes and the multi-label relevance
  (Algorithm 1).
* :mod:`rank_lab.metrics.hierarchy.metrics` -- H-AP, ASI, hierarchical NDCG, mistake severity on
  ``(Q, N)`` score matrices (the definitions; :func:`rank_lab.metrics.retrieval_metrics` computes
  the same metrics at gallery scale).
"""
