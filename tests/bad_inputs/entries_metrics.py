"""Matrix entries of :mod:`rank_lab.metrics`."""

from __future__ import annotations

import rank_lab.metrics as M

from .factories import emb, labels, levels, no_positive_targets, scores, targets
from .framework import fn

ONE_QUERY = "a (N,) score vector is one query (documented)"
BINARY_INT = "integer 0/1 relevance is binary relevance"
GRADED = "graded relevance: integer values are gains"
ST = {"scores": "x", "targets": "x"}
SG = {"scores": "x", "gains": "x"}
SR = {"scores": "x", "relevance": "x"}
SL = {"scores": "x", "levels": "x"}
LEGAL_ST = {"scores:ndim-": ONE_QUERY, "targets:int": BINARY_INT, "scores:int": "integer scores are cast to float"}
LEGAL_SR = {"scores:ndim-": ONE_QUERY, "relevance:int": GRADED, "scores:int": "integer scores are cast to float"}
LEGAL_SL = {"scores:ndim-": ONE_QUERY, "levels:int": "levels are integers", "scores:int": "integer scores are cast to float"}
LEGAL_SG = {"scores:ndim-": ONE_QUERY, "gains:int": GRADED, "scores:int": "integer scores are cast to float"}
NOPOS = {"targets": no_positive_targets}


def _st(**kw):
    return lambda: dict(scores=scores(), targets=targets(), **kw)


def _sl(**kw):
    return lambda: dict(scores=scores(), levels=levels(), **kw)


def _sr(**kw):
    return lambda: dict(scores=scores(), relevance=levels().float(), **kw)


ENTRIES = [
    fn(M.average_precision, _st(), ST, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.map_at_r, _st(), ST, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.reciprocal_rank, _st(), ST, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.ap_at_k, _st(k=3), {**ST, "k": "k"}, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.recall_at_k, _st(k=3), {**ST, "k": "k"}, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.true_recall_at_k, _st(k=3), {**ST, "k": "k"}, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.precision_at_k, _st(k=3), {**ST, "k": "k"}, legal={**LEGAL_ST, "targets:nopos": "P@k of a query without positives is 0 (defined)"},
       nopos=NOPOS),
    fn(M.precision_recall_curve, _st(), ST, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.worst_case_order, lambda: dict(scores=scores(), relevance=targets()), SR, legal=LEGAL_SR),
    fn(M.sorted_relevance, lambda: dict(scores=scores(), relevance=targets()), SR, legal=LEGAL_SR),
    fn(M.dcg, lambda: dict(scores=scores(), gains=levels().float(), k=3), {**SG, "k": "k"}, legal=LEGAL_SG),
    fn(M.ndcg, lambda: dict(scores=scores(), gains=levels().float(), k=3), {**SG, "k": "k"}, legal=LEGAL_SG,
       nopos={"gains": no_positive_targets}),
    fn(M.h_average_precision, _sr(), SR, legal=LEGAL_SR, nopos={"relevance": no_positive_targets}),
    fn(M.h_rank, _sr(), SR, legal=LEGAL_SR),
    fn(M.hierarchical_pr_curve, _sr(), SR, legal=LEGAL_SR, nopos={"relevance": no_positive_targets}),
    fn(M.h_precision_at_k, _sr(k=3), {**SR, "k": "k"}, legal=LEGAL_SR),
    fn(M.h_recall_at_k, _sr(k=3), {**SR, "k": "k"}, legal=LEGAL_SR, nopos={"relevance": no_positive_targets}),
    fn(M.ap_per_level, _sl(n_levels=2), {**SL, "n_levels": "posint"}, legal=LEGAL_SL),
    fn(M.average_set_intersection, _sl(n_levels=2), {**SL, "n_levels": "posint"}, legal=LEGAL_SL),
    fn(M.hierarchical_ndcg, _sl(k=3), {**SL, "k": "k"}, legal=LEGAL_SL),
    fn(M.mistake_severity, _sl(n_levels=2, k=3), {**SL, "n_levels": "posint", "k": "k"}, legal=LEGAL_SL),
    fn(M.weighted_sum_ap, _sl(n_levels=2, weights=[0.5, 0.5]), {**SL, "n_levels": "posint", "weights": "x"}, legal=LEGAL_SL),
    fn(M.faiss_available),
    fn(M.knn_search, lambda: dict(queries=emb(5), gallery=emb(12, seed=2), k=3, backend="torch"),
       {"queries": "x", "gallery": "x", "k": "k", "backend": "choice"},
       legal={"*:int": "integer vectors are cast to float (check_embeddings)"}),
    fn(M.positive_positions, lambda: dict(scores=scores(), positives=targets() > 0, negatives=targets() == 0),
       {"scores": "x"}, rows=(("scores", "positives"), ("scores", "negatives"))),
    fn(M.retrieval_metrics, lambda: dict(embeddings=emb(), labels=labels(), ks=(1, 4), backend="torch"),
       {"embeddings": "x", "labels": "labels", "backend": "choice", "no_positive": "choice"},
       rows=(("embeddings", "labels"),), nopos={"labels": lambda: __import__("torch").arange(12)},
       extra={"ks_big": ("ks", lambda: (1, 100), ("ks",)), "ks_zero": ("ks", lambda: (0,), ("ks",))},
       legal={"embeddings:int": "integer vectors are cast to float (check_embeddings)",
              "labels:nopos": "no_positive='skip' (default) leaves such queries out and reports n_skipped; "
                              "here every query lacks one, which raises"}),
]
