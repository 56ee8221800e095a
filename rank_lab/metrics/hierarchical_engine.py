"""Former name of :mod:`rank_lab.metrics.hierarchical_route` (the bounded-memory route of the evaluation engine for the hierarchical metrics).

The module was renamed for what it holds (issue 17); every public name of
:mod:`rank_lab.metrics.hierarchical_route` is still importable from here, without a warning. They are
documented (and listed in ``__all__``) only where they are defined: ``hierarchical_route`` there,
``HIERARCHICAL_METRICS`` in :mod:`rank_lab.metrics.hierarchical_positions` and
``hierarchical_chunk_metrics`` in :mod:`rank_lab.metrics.hierarchical_counting` (split from it).
"""

from rank_lab.metrics.hierarchical_counting import (  # noqa: F401 - re-exported under the former module name
    hierarchical_chunk_metrics,
)
from rank_lab.metrics.hierarchical_positions import HIERARCHICAL_METRICS  # noqa: F401 - re-exported, former name
from rank_lab.metrics.hierarchical_route import hierarchical_route  # noqa: F401 - re-exported, former name

__all__: list[str] = []
