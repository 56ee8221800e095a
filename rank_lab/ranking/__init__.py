"""Rank primitives: step functions (Heaviside, sigmoid, SupRank ``H^-``) and exact / smooth ranks.

* :mod:`rank_lab.ranking.steps` -- Eq. 2.5, 2.8 and 3.4 of the Ramzi thesis.
* :mod:`rank_lab.ranking.ranks` -- exact rank, rank+/rank- split, smooth ranks, the retrieval-set
  mask;
* :mod:`rank_lab.ranking.row_kernel` -- the ``O(Q * P * N)``-memory row kernel used by the rank
  losses of :mod:`rank_lab.losses`.
"""

from rank_lab.ranking.ranks import (
    exact_rank,
    exact_rank_plus_rows,
    pairwise_differences,
    rank_split,
    retrieval_mask,
    smooth_rank,
)
from rank_lab.ranking.row_kernel import default_max_elements, positive_rows, row_step_sums
from rank_lab.ranking.steps import (
    Heaviside,
    SigmoidStep,
    StepFunction,
    SupRankStep,
    delta_from_epsilon,
    h_minus,
    heaviside,
    make_step,
    sigmoid_step,
)

__all__ = [
    "Heaviside",
    "SigmoidStep",
    "StepFunction",
    "SupRankStep",
    "default_max_elements",
    "delta_from_epsilon",
    "exact_rank",
    "exact_rank_plus_rows",
    "h_minus",
    "heaviside",
    "make_step",
    "pairwise_differences",
    "positive_rows",
    "rank_split",
    "retrieval_mask",
    "row_step_sums",
    "sigmoid_step",
    "smooth_rank",
]
