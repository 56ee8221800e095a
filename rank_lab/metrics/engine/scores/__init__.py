"""Scores: the canonical score, the bound of a fast score against it, the stage-1 inputs.

* :mod:`~rank_lab.metrics.engine.scores.exact` -- the canonical score and the matmul guard.
* :mod:`~rank_lab.metrics.engine.scores.bound` -- the reduced-precision bound, precision choice,
  overflow guard.
* :mod:`~rank_lab.metrics.engine.scores._stage1` -- stage-1 inputs with each query's bound,
  thresholds and intervals (internal).
"""
