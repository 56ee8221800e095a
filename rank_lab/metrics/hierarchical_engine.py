"""Former name of :mod:`rank_lab.metrics.hierarchical_route` (the bounded-memory route of the evaluation engine for the hierarchical metrics).

The module was renamed for what it holds (issue 17); every public name of
:mod:`rank_lab.metrics.hierarchical_route` is still importable from here, without a warning. They are
documented (and listed in ``__all__``) only there.
"""

from rank_lab.metrics.hierarchical_route import (  # noqa: F401 - re-exported under the former module name
    HIERARCHICAL_METRICS,
    hierarchical_chunk_metrics,
    hierarchical_route,
)

__all__: list[str] = []
