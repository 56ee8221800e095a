"""The routes of ``retrieval_metrics``: one request in, per-query values out, identical on every
route.

* :mod:`~rank_lab.metrics.engine.routes.request` -- the frozen request.
* :mod:`~rank_lab.metrics.engine.routes.counting` -- certified counting (every metric, any k).
* :mod:`~rank_lab.metrics.engine.routes.neighbour_lists` -- certified neighbour lists (short lists,
  flat-index stage 1).
"""
