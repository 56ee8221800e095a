"""Matrix entries of :mod:`rank_lab.metrics`."""

from __future__ import annotations

import torch

import rank_lab.metrics as M
import rank_lab.metrics.certified as CE
import rank_lab.metrics.chunking as CH
import rank_lab.metrics.counting as CO
import rank_lab.metrics.hierarchy as HY
import rank_lab.metrics.score_bounds as SB

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
       {"queries": "x", "gallery": "x", "k": "k", "backend": "choice", "precision": "choice"},
       legal={"*:int": "integer vectors are cast to float (check_embeddings)"}),
    fn(M.positive_positions, lambda: dict(scores=scores(), positives=targets() > 0, negatives=targets() == 0),
       {"scores": "x"}, rows=(("scores", "positives"), ("scores", "negatives"))),
    fn(M.retrieval_metrics, lambda: dict(embeddings=emb(), labels=labels(), ks=(1, 4), backend="torch"),
       {"embeddings": "x", "labels": "labels", "backend": "choice", "no_positive": "choice", "precision": "choice"},
       rows=(("embeddings", "labels"),), nopos={"labels": lambda: __import__("torch").arange(12)},
       extra={"ks_big": ("ks", lambda: (1, 100), ("ks",)), "ks_zero": ("ks", lambda: (0,), ("ks",))},
       legal={"embeddings:int": "integer vectors are cast to float (check_embeddings)",
              "labels:nopos": "no_positive='skip' (default) leaves such queries out and reports n_skipped; "
                              "here every query lacks one, which raises"}),
    # certified search (issue 19) and the shared helpers of the engine (issue 17)
    fn(CE.certified_neighbours, lambda: dict(queries=emb(5), gallery=emb(12, seed=2), k=3),
       {"queries": "x", "gallery": "x", "k": "k", "precision": "choice", "tile": "posint"},
       legal={"*:int": "integer vectors are cast to float (check_embeddings)"}),
    fn(CE.NeighbourLists, lambda: dict(offsets=torch.tensor([0, 1, 2]), indices=torch.tensor([1, 0]), scores=torch.ones(2),
                                       k=torch.ones(2, dtype=torch.long), precision="fp32", n_rescanned=0, n_candidates=2)),
    fn(SB.canonical_scores, lambda: dict(queries=emb(5), gallery=emb(12, seed=2), rows=torch.tensor([0, 4]),
                                         cols=torch.tensor([1, 11])),
       {"queries": "x", "gallery": "x", "block_elements": "posint"},
       legal={"*:int": "integer vectors are cast to float (check_embeddings)"}),
    fn(SB.score_bound, lambda: dict(q_norm=torch.ones(3), q_red_norm=torch.ones(3), q_res_norm=torch.zeros(3), g_max_norm=1.0,
                                    g_max_red_norm=1.0, g_max_res_norm=0.0, d=8, work=torch.float32, fmt=torch.bfloat16,
                                    out_fmt=torch.bfloat16),
       {"q_norm": "x", "q_res_norm": "x", "g_max_norm": "nonneg", "d": "posint"},
       legal={"*:int": "integer norms are cast to float64"}),
    fn(SB.exact_matmul),
    fn(SB.resolve_precision, lambda: dict(precision="exact", dtype=torch.float32, device=torch.device("cpu")),
       {"precision": "choice"}),
    fn(SB.check_accumulation, lambda: dict(fmt=torch.bfloat16, device=torch.device("cpu"))),
    fn(CH.progress, lambda: dict(iterable=[1, 2], total=2, show=False, desc="chunks")),
    fn(CH.torch_threads, lambda: dict(n=1), {"n": "posint"}),
    fn(CH.chunk_rows, lambda: dict(n_cols=100, max_memory_mb=1.0),
       {"n_cols": "posint", "max_memory_mb": "pos", "chunk_size": "posint"}),
    fn(CO.metrics_from_positions, lambda: dict(pos=torch.tensor([[1, 3]]), valid=torch.tensor([[True, True]]),
                                               n_pos=torch.tensor([2]), ks=(1, 2), wanted={"R@k", "mAP@R"})),
    fn(CO.row_sums, lambda: dict(x=torch.rand(3, 4))),
    fn(HY.check_levels, lambda: dict(levels=levels(), n_levels=2), {"levels": "x", "n_levels": "posint"},
       legal={"levels:ndim-": "a (N,) vector is one query (documented)", "levels:int": "levels are integers",
              "levels:empty": "no query: the (0, N) tensors are returned as they are"}),
    fn(HY.level_weights, lambda: dict(weights=[0.25, 0.75], n_levels=2), {"weights": "x", "n_levels": "posint"}),
]
