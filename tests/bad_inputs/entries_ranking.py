"""Matrix entries of :mod:`rank_lab.ranking`."""

from __future__ import annotations

import rank_lab.ranking as R

from .factories import scores, targets
from .framework import cls, fn

CAST = "integer scores are cast to float"
ELEMENTWISE = {
    "t:ndim+": "elementwise: any shape",
    "t:ndim-": "elementwise: any shape",
    "t:empty": "elementwise: an empty tensor maps to an empty tensor",
    "t:int": "integer differences are cast to float",
    "t:inf": "a +inf difference saturates the step (legal)",
    "t:-inf": "a -inf difference saturates the step (legal)",
}


def _rows():
    q, k = R.positive_rows(targets())
    return dict(scores=scores(), q_idx=q, k_idx=k)


ENTRIES = [
    cls(
        R.Heaviside,
        {},
        {"zero_value": "prob"},
        calls=[("__call__", lambda: {"t": scores()}, {"t": "x"})],
        legal={f"__call__.{k}": v for k, v in ELEMENTWISE.items()},
    ),
    cls(R.SigmoidStep, {}, {"tau": "pos"}),
    cls(
        R.SupRankStep,
        {},
        {
            "tau": "pos",
            "rho": "nonneg",
            "start": "real",
            "linear_origin": "choice",
            "zero_branch": "choice",
        },
    ),
    cls(R.StepFunction),
    fn(R.default_max_elements, {}),
    fn(
        R.delta_from_epsilon,
        {},
        {"tau": "pos", "eps": "prob"},
    ),
    fn(
        R.h_minus,
        lambda: {"t": scores()},
        {"t": "x", "tau": "pos", "rho": "nonneg"},
        legal=ELEMENTWISE,
    ),
    fn(R.heaviside, lambda: {"t": scores()}, {"t": "x", "zero_value": "prob"}, legal=ELEMENTWISE),
    fn(R.sigmoid_step, lambda: {"t": scores()}, {"t": "x", "tau": "pos"}, legal=ELEMENTWISE),
    fn(R.make_step, {"step": "sigmoid"}, {"step": "choice"}),
    fn(R.exact_rank, lambda: {"scores": scores()}, {"scores": "x"}, legal={"scores:int": CAST}),
    fn(
        R.pairwise_differences,
        lambda: {"scores": scores()},
        {"scores": "x"},
        legal={"scores:int": CAST},
    ),
    fn(
        R.smooth_rank,
        lambda: {"scores": scores()},
        {"scores": "x", "step": "choice", "relation": "choice"},
        legal={"scores:int": CAST},
    ),
    fn(
        R.rank_split,
        lambda: {"scores": scores(), "relevance": targets()},
        {"scores": "x"},
        rows=(("scores", "relevance"),),
        legal={"scores:int": CAST},
    ),
    fn(
        R.positive_rows,
        lambda: {"relevance": targets()},
        {"relevance": "x"},
        legal={"relevance:int": "0/1 relevance"},
    ),
    fn(
        R.retrieval_mask,
        {"n_queries": 3, "n_items": 8},
        {"n_queries": "posint", "n_items": "posint"},
    ),
    fn(
        R.exact_rank_plus_rows,
        lambda: {**_rows(), "relevance": targets()},
        {"scores": "x"},
        legal={"scores:int": CAST},
    ),
    fn(R.row_step_sums, _rows, {"scores": "x", "step": "choice"}, legal={"scores:int": CAST}),
]
