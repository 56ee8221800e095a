"""The certified neighbour search: every item reaching the k-th canonical score, from a fast stage
1.

* :mod:`~rank_lab.metrics.engine.search.knn` --
  :func:`~rank_lab.metrics.engine.search.knn.knn_search`.
* :mod:`~rank_lab.metrics.engine.search.certified` -- the neighbour lists (with ties, ordered or as
  sets).
* :mod:`~rank_lab.metrics.engine.search.index` -- a flat index (faiss, ``knn=``) as stage 1.
* ``_tiles`` / ``_rows`` -- the tiled and the whole-row stage 1 (internal).
"""
