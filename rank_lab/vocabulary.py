"""Words shared across the package: one name and one set of values per concept.

* :data:`NoPositive` -- what a per-query computation does with a query that has no positive in
  its retrieval set (an AP, a recall or a rank loss is undefined there):

  - ``"raise"``: a ``ValueError`` naming the argument that holds the labels or targets;
  - ``"zero"``: the query's value is 0 and it counts in any mean (the metrics of
    :mod:`rank_lab.metrics`, the score-level RS@k of :mod:`rank_lab.losses.recall_at_k`);
  - ``"skip"``: the query is left out of the reduction and gets no gradient (the losses of
    :mod:`rank_lab.losses`, whose ``"mean"`` is over the queries that have a positive).

  Each callable says which of the three it takes (its docstring, and the ``ValueError`` of a word
  it does not take).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["NoPositive"]

#: The policy for a query without positives (see the module docstring).
NoPositive = Literal["raise", "zero", "skip"]
