"""Former name of :mod:`rank_lab.metrics.hierarchical_relevance` (label hierarchies, shared levels and the relevance functions).

The module was renamed for what it holds (issue 17); every public name of
:mod:`rank_lab.metrics.hierarchical_relevance` (and of :mod:`rank_lab.metrics.hierarchical_codes`, split
from it) is still importable from here, without a warning. They are documented (and listed in
``__all__``) only there.
"""

from rank_lab.metrics.hierarchical_codes import (  # noqa: F401 - re-exported under the former module name
    lca_distance,
    multilabel_relevance,
    multilabel_relevance_matrix,
    parse_code,
)
from rank_lab.metrics.hierarchical_relevance import (  # noqa: F401 - re-exported under the former module name
    as_hierarchical_labels,
    binary_level_relevance,
    check_levels,
    hap_relevance,
    hierarchy_table,
    level_counts,
    level_relevance,
    level_set,
    level_weights,
    ndcg_gains,
    relevance_table,
    shared_level,
    weighted_ap_relevance,
)

__all__: list[str] = []
