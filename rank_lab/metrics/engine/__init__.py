"""The evaluation engine: exact retrieval metrics and neighbours at gallery scale, in bounded
memory.

Floors (each imports only the ones above it; ``docs/architecture.md``, metrics section):

* :mod:`~rank_lab.metrics.engine._blocks` -- blocks of rows, threads, reused buffers.
* :mod:`~rank_lab.metrics.engine.scores` -- the canonical score every route ranks by
  (:mod:`~rank_lab.metrics.engine.scores.exact`), the rigorous bound of a fast score against it
  (:mod:`~rank_lab.metrics.engine.scores.bound`) and the stage-1 inputs that carry it.
* :mod:`~rank_lab.metrics.engine.search` (the certified neighbour search, ``knn_search``) and
  :mod:`~rank_lab.metrics.engine.formulas` (the metrics from worst-case positions, and their
  registry).
* :mod:`~rank_lab.metrics.engine.routes` -- the request and the two routes (certified counting,
  neighbour lists).
* :mod:`~rank_lab.metrics.engine.evaluate` -- ``retrieval_metrics``; then
  :mod:`~rank_lab.metrics.engine.distributed` (sharded faiss indexes).
"""
