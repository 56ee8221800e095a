"""The metrics of the engine, from worst-case positions, and their registry.

* :mod:`~rank_lab.metrics.engine.formulas.positions` -- what a route hands to the metrics.
* :mod:`~rank_lab.metrics.engine.formulas.binary` / :mod:`~rank_lab.metrics.engine.formulas.levels`
  -- the built-in binary and hierarchical metrics.
* :mod:`~rank_lab.metrics.engine.formulas.registry` -- one registration per metric.
"""
