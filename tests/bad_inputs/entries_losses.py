"""Matrix entries of :mod:`rank_lab.losses`."""

from __future__ import annotations

import torch

import rank_lab.losses as L

from .factories import emb, hier_labels, labels, no_positive_targets, scores, targets
from .framework import cls, fn

CAST = "integer embeddings are cast to float (check_embeddings)"
SKIP = ("no_positive='skip' (the default): queries without a positive are left out of the mean; "
        "with none at all the loss raises")
FWD = {"embeddings": "x", "labels": "labels"}
EMB_LEGAL = {"__call__.embeddings:int": CAST}
PAIRS_NOPOS = {"__call__.labels:nopos": "pair losses: a query without positives still has its negative pairs"}
HIER_NOPOS = {"__call__.labels:nopos": "hierarchical relevance: unique fine labels keep their coarse-level positives"}


def _batch():
    return dict(embeddings=emb(12, 4), labels=labels(12, 3))


def _hbatch():
    return dict(embeddings=emb(12, 4), labels=hier_labels(12))


def loss(target, init=None, roles=None, *, hier=False, legal=None, nopos=True, **kw):
    """A loss module: constructor roles, then ``forward(embeddings, labels)`` with the shared variants."""
    lg = {**EMB_LEGAL, **(legal or {})}
    np_ = {"__call__.labels": (lambda: torch.stack([torch.arange(12), torch.arange(12) // 6], 1)) if hier
           else (lambda: torch.arange(12))} if nopos else {}
    return cls(target, init, roles, calls=[("__call__", _hbatch if hier else _batch, FWD)],
               rows=(("__call__.embeddings", "__call__.labels"),), nopos=np_, legal=lg, **kw)


def _scores_targets(**kw):
    return lambda: dict(scores=scores(), targets=targets(), **kw)


ST = {"scores": "x", "targets": "x"}
ST_LEGAL = {"scores:ndim-": "a (N,) score vector is one query", "targets:int": "0/1 integer relevance",
            "scores:int": "integer scores are cast to float"}
DG = lambda: dict(scores=torch.linspace(1, 0, 8), targets=torch.tensor([1, 0, 1, 0, 1, 0, 1, 0]),  # noqa: E731
                  batch_ids=torch.arange(8) % 2)
SAME_P = {"pos_per_batch": [2, 2], "neg_per_batch": [2, 2]}

ENTRIES = [
    loss(L.SmoothAP, {"tau": 0.01}, {"tau": "pos"}),
    loss(L.SupAP, {"tau": 0.01, "rho": 100.0}, {"tau": "pos", "rho": "nonneg", "eps": "prob"}),
    loss(L.SmoothRecallAtK, {"ks": (1, 2, 4)}, {"tau": "pos", "tau_star": "pos"},
         extra={"ks_zero": ("ks", lambda: (0, 2), ("ks",))}),
    loss(L.SupRecallAtK, {"ks": (1, 2, 4)}, {"tau": "pos", "tau_star": "pos", "rho": "nonneg"}),
    loss(L.RecallAtKSurrogate, {"ks": (1, 2, 4)}, {"tau1": "pos", "tau2": "pos", "normalization": "choice"}),
    loss(L.FastAP, {"num_bins": 5}, {"num_bins": "posint"}),
    loss(L.SoftBinAP, {"num_bins": 5}, {"num_bins": "posint", "min_score": "real", "max_score": "real"}),
    loss(L.BlackBoxAP, {}, {"lambda_val": "pos", "margin": "nonneg"}),
    loss(L.ContrastiveLoss, {}, {"pos_margin": "real", "neg_margin": "real", "pair_reduction": "choice"}, legal=PAIRS_NOPOS),
    loss(L.TripletMarginLoss, {}, {"margin": "nonneg", "distance": "choice", "mining": "choice", "triplet_average": "choice"}),
    loss(L.PairDGLoss, {}, {"alpha": "real", "beta": "real", "pair_reduction": "choice"}, legal=PAIRS_NOPOS),
    loss(L.ProxyDGLoss, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "temperature": "pos"}),
    loss(L.NormSoftmaxLoss, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "temperature": "pos"}),
    loss(L.ProxyNCAPlusPlusLoss, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "temperature": "pos",
                                                              "distance": "choice"}),
    loss(L.ROD, lambda: {"rank_loss": L.SupAP(), "dg_loss": L.PairDGLoss()}, {"lam": "prob"}),
    loss(L.SmoothHAP, {}, {"tau": "pos"}, hier=True, legal=HIER_NOPOS),
    loss(L.SupHAP, {}, {"tau": "pos", "rho": "nonneg"}, hier=True, legal=HIER_NOPOS),
    loss(L.SupNDCG, {}, {"tau": "pos", "rho": "nonneg"}, hier=True, legal=HIER_NOPOS),
    loss(L.CSLLoss, {"n_classes": 4, "dim": 4, "n_levels": 2}, {"n_classes": "posint", "dim": "posint", "scale": "pos",
                                                              "level_reduction": "choice"}, hier=True, nopos=False),
    loss(L.SigmaLoss, lambda: {"losses": [L.SmoothAP(), L.SmoothAP(hierarchy_level=1)]}, {}, hier=True,
         ),
    loss(L.ESupConLoss, {"dim": 4, "n_classes": 3}, {"dim": "posint", "n_classes": "posint", "temperature": "pos"}, nopos=False),
    loss(L.SupConLoss, {}, {"temperature": "pos"}),
    cls(L.MetricLoss, {}, {"reduction": "choice", "hierarchy_level": "nonnegint"}),
    cls(L.ListwiseLoss, {}, {"no_positive": "choice"}),
    cls(L.RankLoss, {}, {"impl": "choice"}),
    fn(L.PreparedBatch, lambda: dict(embeddings=emb(3), ref_embeddings=emb(3), labels=labels(3), ref_labels=labels(3),
                                     scores=scores(3, 3), relevance=targets(3, 3), valid=torch.ones(3, 3, dtype=torch.bool),
                                     in_batch=True)),
    fn(L.prepare_batch, _batch, FWD, rows=(("embeddings", "labels"),), legal={"embeddings:int": CAST}),
    fn(L.binary_relevance, lambda: dict(labels=labels(4), ref_labels=labels(6)), {"labels": "labels", "ref_labels": "labels",
                                                                                   "level": "nonnegint"}),
    fn(L.build_loss, {"name": "smooth_ap"}, {"name": "choice"}),
    fn(L.smooth_ap_loss, _scores_targets(), {**ST, "tau": "pos"}, legal={**ST_LEGAL, "targets:nopos": SKIP},
       nopos={"targets": no_positive_targets}),
    fn(L.sup_ap_loss, _scores_targets(), ST, legal={**ST_LEGAL, "targets:nopos": SKIP}, nopos={"targets": no_positive_targets}),
    fn(L.pair_margin_loss, lambda: dict(scores=scores(), relevance=targets(), valid=torch.ones(3, 8, dtype=torch.bool),
                                        pos_margin=0.9, neg_margin=0.6),
       {"scores": "x", "pos_margin": "real", "neg_margin": "real", "pair_reduction": "choice", "reduction": "choice"},
       rows=(("scores", "relevance"),), legal={"scores:ndim-": "a (N,) score vector is one query",
                                                "scores:int": "integer scores are cast to float"}),
    fn(L.decomposability_gap, DG, {"scores": "x", "empty_batch": "choice"}, rows=(("scores", "targets"), ("scores", "batch_ids")),
       nopos={"targets": lambda: torch.zeros(8, dtype=torch.long)},
       legal={"scores:ndim+": "(1, N) scores are one query sharing the partition", "scores:int": "integer scores are cast to float"}),
    fn(L.expected_decomposability_gap, lambda: {"scores": DG()["scores"], "targets": DG()["targets"], "batch_size": 4, "n_draws": 2},
       {"scores": "x", "batch_size": "k", "n_draws": "posint"}, legal={"scores:int": "integer scores are cast to float"}),
    fn(L.calibration_counts, DG, {"scores": "x", "alpha": "real", "beta": "real"}, rows=(("scores", "targets"), ("scores", "batch_ids")),
       legal={"scores:int": "integer scores are cast to float"}),
    fn(L.random_batches, {"n": 8, "batch_size": 4}, {"n": "posint", "batch_size": "k"}),
    fn(L.juxtaposed_batches, SAME_P, rows=(("pos_per_batch", "neg_per_batch"),)),
    fn(L.dg_upper_bound, SAME_P, rows=(("pos_per_batch", "neg_per_batch"),),
       extra={"unequal": ("pos_per_batch", lambda: [3, 1], ("pos_per_batch",)),
              "negative": ("neg_per_batch", lambda: [2, -1], ("neg_per_batch",))}),
    fn(L.dg_calibrated_bound, {"good_pos": [1, 1], "bad_pos": [1, 1], "good_neg": [1, 1], "bad_neg": [1, 1]},
       rows=(("good_pos", "bad_neg"),), extra={"unequal": ("good_pos", lambda: [3, 1], ("good_pos",))}),
    fn(L.worst_case_dg_brute_force, SAME_P, {"max_orderings": "posint"}, rows=(("pos_per_batch", "neg_per_batch"),)),
    fn(L.roadmap_neurips, {}, {"lam": "prob"}),
    fn(L.roadmap_tpami, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "lam": "prob", "temperature": "pos"}),
    fn(L.rod_recall, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "lam": "prob", "temperature": "pos"}),
    fn(L.rod_ndcg, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "lam": "prob", "temperature": "pos"}),
    fn(L.happier, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "lam": "prob", "alpha": "pos"}),
    fn(L.happier_f, {"n_classes": 3, "dim": 4}, {"n_classes": "posint", "dim": "posint", "lam": "prob", "dataset": "choice"}),
    fn(L.sigma_loss, {"base": "smooth_ap", "n_levels": 2}, {"base": "choice", "n_levels": "posint"}),
]
