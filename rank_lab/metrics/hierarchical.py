"""Former name of :mod:`rank_lab.metrics.hierarchical_metrics` (the exact hierarchical metrics on (Q, N) score matrices (H-AP, ASI, hierarchical NDCG, mistake severity)).

The module was renamed for what it holds (issue 17); every public name of
:mod:`rank_lab.metrics.hierarchical_metrics` is still importable from here, without a warning. They are
documented (and listed in ``__all__``) only there.
"""

from rank_lab.metrics.hierarchical_metrics import (  # noqa: F401 - re-exported under the former module name
    ap_per_level,
    average_set_intersection,
    h_ap_from_pr_curve,
    h_average_precision,
    h_precision_at_k,
    h_rank,
    h_recall_at_k,
    hierarchical_ndcg,
    hierarchical_pr_curve,
    mistake_levels,
    mistake_severity,
    weighted_sum_ap,
)

__all__: list[str] = []
