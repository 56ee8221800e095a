"""Matrix entries of :mod:`rank_lab.losses`."""

from __future__ import annotations

import inspect

import torch

import rank_lab.losses as L

from .factories import emb, hier_labels, labels, no_positive_targets, scores, targets
from .framework import cls, fn

CAST = "integer embeddings are cast to float (check_embeddings)"
SKIP = (
    "no_positive='skip' (the default): queries without a positive are left out of the mean; "
    "with none at all the loss raises"
)
FWD = {"embeddings": "x", "labels": "labels"}
FWD_REFS = {**FWD, "ref_embeddings": "x", "ref_labels": "labels"}
EMB_LEGAL = {"*embeddings:int": CAST}
PAIRS_NOPOS = {
    "*labels:nopos": "pair losses: a query without positives still has its negative pairs"
}
PROXY_REFS = (
    "proxy losses compare embeddings with class proxies: references are checked, not used "
    "(uses_references=False)"
)
HIER_NOPOS = {
    "__call__.labels:nopos": (
        "hierarchical relevance: unique fine labels keep their coarse-level positives"
    )
}


def _batch():
    return dict(embeddings=emb(12, 4), labels=labels(12, 3))


def _hbatch():
    return dict(embeddings=emb(12, 4), labels=hier_labels(12))


def _refs(hier: bool):
    """Queries ``(6, d)`` against a reference set ``(12, d)`` (e.g. a cross-batch memory)."""
    lab = hier_labels if hier else labels
    return lambda: dict(
        embeddings=emb(6, 4, seed=3), labels=lab(6), ref_embeddings=emb(12, 4), ref_labels=lab(12)
    )


def _takes_refs(target) -> bool:
    return "ref_embeddings" in inspect.signature(target.forward).parameters


def loss(target, init=None, roles=None, *, hier=False, legal=None, nopos=True, **kw):
    """A loss module: constructor roles, then the common call of every loss with the same roles and
    rows.

    ``loss(embeddings, labels)`` in-batch (stage ``__call__``) and, for the losses that take a
    reference set, ``loss.forward(embeddings, labels, ref_embeddings, ref_labels)`` (stage
    ``forward``). ``nopos``: in-batch labels that are all distinct; against the references,
    reference labels that no query shares.
    """
    lg = {**EMB_LEGAL, **(legal or {})}
    calls = [("__call__", _hbatch if hier else _batch, FWD)]
    rows = [("__call__.embeddings", "__call__.labels")]
    np_ = {}
    if nopos:
        np_["__call__.labels"] = (
            (lambda: torch.stack([torch.arange(12), torch.arange(12) // 6], 1))
            if hier
            else (lambda: torch.arange(12))
        )
    if _takes_refs(target):
        calls.append(("forward", _refs(hier), FWD_REFS))
        rows += [
            ("forward.embeddings", "forward.labels"),
            ("forward.ref_embeddings", "forward.ref_labels"),
        ]
        if nopos:
            np_["forward.ref_labels"] = (
                (lambda: hier_labels(12) + 100) if hier else (lambda: labels(12) + 100)
            )
    return cls(target, init, roles, calls=calls, rows=tuple(rows), nopos=np_, legal=lg, **kw)


def _scores_targets(**kw):
    return lambda: dict(scores=scores(), targets=targets(), **kw)


ST = {"scores": "x", "targets": "x"}
ST_LEGAL = {
    "scores:ndim-": "a (N,) score vector is one query",
    "targets:int": "0/1 integer relevance",
    "scores:int": "integer scores are cast to float",
}


def DG():
    return dict(
        scores=torch.linspace(1, 0, 8),
        targets=torch.tensor([1, 0, 1, 0, 1, 0, 1, 0]),  # noqa: E731
        batch_ids=torch.arange(8) % 2,
    )


SAME_P = {"pos_per_batch": [2, 2], "neg_per_batch": [2, 2]}

ENTRIES = [
    loss(L.SmoothAP, {"tau": 0.01}, {"tau": "pos"}),
    loss(L.SupAP, {"tau": 0.01, "rho": 100.0}, {"tau": "pos", "rho": "nonneg", "eps": "prob"}),
    loss(
        L.SmoothRecallAtK,
        {"ks": (1, 2, 4)},
        {"tau": "pos", "tau_star": "pos", "normalization": "choice", "query_role": "choice"},
        extra={"ks_zero": ("ks", lambda: (0, 2), ("ks",))},
    ),
    loss(L.SupRecallAtK, {"ks": (1, 2, 4)}, {"tau": "pos", "tau_star": "pos", "rho": "nonneg"}),
    loss(L.FastAP, {"num_bins": 5}, {"num_bins": "posint"}),
    loss(
        L.SoftBinAP,
        {"num_bins": 5},
        {"num_bins": "posint", "min_score": "real", "max_score": "real"},
    ),
    loss(L.BlackBoxAP, {}, {"lambda_val": "pos", "margin": "nonneg"}),
    loss(
        L.ContrastiveLoss,
        {},
        {"pos_margin": "real", "neg_margin": "real", "pair_reduction": "choice"},
        legal=PAIRS_NOPOS,
    ),
    loss(
        L.TripletMarginLoss,
        {},
        {"margin": "nonneg", "distance": "choice", "mining": "choice", "triplet_average": "choice"},
    ),
    loss(
        L.PairDGLoss,
        {},
        {"alpha": "real", "beta": "real", "pair_reduction": "choice"},
        legal=PAIRS_NOPOS,
    ),
    loss(
        L.ProxyDGLoss,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "temperature": "pos"},
        legal={"forward.ref_labels:nopos": PROXY_REFS},
    ),
    loss(
        L.NormSoftmaxLoss,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "temperature": "pos"},
        legal={"forward.ref_labels:nopos": PROXY_REFS},
    ),
    loss(
        L.ProxyNCAPlusPlusLoss,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "temperature": "pos", "distance": "choice"},
        legal={"forward.ref_labels:nopos": PROXY_REFS},
    ),
    loss(L.ROD, lambda: {"rank_loss": L.SupAP(), "dg_loss": L.PairDGLoss()}, {"lam": "prob"}),
    loss(L.SmoothHAP, {}, {"tau": "pos"}, hier=True, legal=HIER_NOPOS),
    loss(L.SupHAP, {}, {"tau": "pos", "rho": "nonneg"}, hier=True, legal=HIER_NOPOS),
    loss(L.SupNDCG, {}, {"tau": "pos", "rho": "nonneg"}, hier=True, legal=HIER_NOPOS),
    loss(
        L.CSLLoss,
        {"n_classes": 4, "dim": 4, "n_levels": 2},
        {"n_classes": "posint", "dim": "posint", "scale": "pos", "level_reduction": "choice"},
        hier=True,
        nopos=False,
    ),
    loss(
        L.SigmaLoss,
        lambda: {"losses": [L.SmoothAP(), L.SmoothAP(hierarchy_level=1)]},
        {},
        hier=True,
    ),
    loss(
        L.ESupConLoss,
        {"dim": 4, "n_classes": 3},
        {"dim": "posint", "n_classes": "posint", "temperature": "pos"},
        nopos=False,
    ),
    loss(L.SupConLoss, {}, {"temperature": "pos"}),
    cls(
        L.MetricLoss,
        {},
        {"reduction": "choice", "query_role": "choice", "hierarchy_level": "nonnegint"},
    ),
    cls(L.ListwiseLoss, {}, {"no_positive": "choice"}),
    cls(L.RankLoss, {}, {"impl": "choice"}),
    fn(
        L.PreparedBatch,
        lambda: dict(
            embeddings=emb(3),
            ref_embeddings=emb(3),
            labels=labels(3),
            ref_labels=labels(3),
            scores=scores(3, 3),
            relevance=targets(3, 3),
            valid=torch.ones(3, 3, dtype=torch.bool),
            in_batch=True,
        ),
    ),
    fn(
        L.prepare_batch,
        _batch,
        FWD,
        rows=(("embeddings", "labels"),),
        legal={"embeddings:int": CAST},
    ),
    fn(
        L.binary_relevance,
        lambda: dict(labels=labels(4), ref_labels=labels(6)),
        {"labels": "labels", "ref_labels": "labels", "level": "nonnegint"},
    ),
    fn(L.build_loss, {"name": "smooth_ap"}, {"name": "choice"}),
    fn(
        L.smooth_ap_loss,
        _scores_targets(),
        {**ST, "tau": "pos"},
        legal={**ST_LEGAL, "targets:nopos": SKIP},
        nopos={"targets": no_positive_targets},
    ),
    fn(
        L.sup_ap_loss,
        _scores_targets(),
        ST,
        legal={**ST_LEGAL, "targets:nopos": SKIP},
        nopos={"targets": no_positive_targets},
    ),
    fn(
        L.pair_margin_loss,
        lambda: dict(
            scores=scores(),
            relevance=targets(),
            valid=torch.ones(3, 8, dtype=torch.bool),
            pos_margin=0.9,
            neg_margin=0.6,
        ),
        {
            "scores": "x",
            "pos_margin": "real",
            "neg_margin": "real",
            "pair_reduction": "choice",
            "reduction": "choice",
        },
        rows=(("scores", "relevance"),),
        legal={
            "scores:ndim-": "a (N,) score vector is one query",
            "scores:int": "integer scores are cast to float",
        },
    ),
    fn(
        L.decomposability_gap,
        DG,
        {"scores": "x", "empty_batch": "choice"},
        rows=(("scores", "targets"), ("scores", "batch_ids")),
        nopos={"targets": lambda: torch.zeros(8, dtype=torch.long)},
        legal={
            "scores:ndim+": "(1, N) scores are one query sharing the partition",
            "scores:int": "integer scores are cast to float",
        },
    ),
    fn(
        L.expected_decomposability_gap,
        lambda: {
            "scores": DG()["scores"],
            "targets": DG()["targets"],
            "batch_size": 4,
            "n_draws": 2,
        },
        {"scores": "x", "batch_size": "k", "n_draws": "posint"},
        legal={"scores:int": "integer scores are cast to float"},
    ),
    fn(
        L.embedding_decomposability_gap,
        lambda: {
            "embeddings": emb(8),
            "labels": torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]),
            "batch_size": 2,
            "n_draws": 2,
        },
        {"embeddings": "x", "labels": "labels", "batch_size": "posint", "n_draws": "posint"},
        rows=(("embeddings", "labels"),),
        legal={"embeddings:int": CAST},
    ),
    fn(
        L.calibration_counts,
        DG,
        {"scores": "x", "alpha": "real", "beta": "real"},
        rows=(("scores", "targets"), ("scores", "batch_ids")),
        legal={"scores:int": "integer scores are cast to float"},
    ),
    fn(L.random_batches, {"n": 8, "batch_size": 4}, {"n": "posint", "batch_size": "k"}),
    fn(L.juxtaposed_batches, SAME_P, rows=(("pos_per_batch", "neg_per_batch"),)),
    fn(
        L.dg_upper_bound,
        SAME_P,
        rows=(("pos_per_batch", "neg_per_batch"),),
        extra={
            "unequal": ("pos_per_batch", lambda: [3, 1], ("pos_per_batch",)),
            "negative": ("neg_per_batch", lambda: [2, -1], ("neg_per_batch",)),
        },
    ),
    fn(
        L.dg_calibrated_bound,
        {"good_pos": [1, 1], "bad_pos": [1, 1], "good_neg": [1, 1], "bad_neg": [1, 1]},
        rows=(("good_pos", "bad_neg"),),
        extra={"unequal": ("good_pos", lambda: [3, 1], ("good_pos",))},
    ),
    fn(
        L.worst_case_dg_brute_force,
        SAME_P,
        {"max_orderings": "posint"},
        rows=(("pos_per_batch", "neg_per_batch"),),
    ),
    fn(L.roadmap_neurips, {}, {"lam": "prob"}),
    fn(
        L.roadmap_tpami,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "lam": "prob", "temperature": "pos"},
    ),
    fn(
        L.rod_recall,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "lam": "prob", "temperature": "pos"},
    ),
    fn(
        L.rod_ndcg,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "lam": "prob", "temperature": "pos"},
    ),
    fn(
        L.happier,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "lam": "prob", "alpha": "pos"},
    ),
    fn(
        L.happier_f,
        {"n_classes": 3, "dim": 4},
        {"n_classes": "posint", "dim": "posint", "lam": "prob", "dataset": "choice"},
    ),
    fn(
        L.sigma_loss, {"base": "smooth_ap", "n_levels": 2}, {"base": "choice", "n_levels": "posint"}
    ),
]

# ------------------------------------------------------------------ losses' modules (issue 16, part
# 2)
import rank_lab.losses.base as LB  # noqa: E402
import rank_lab.losses.blackbox as LBB  # noqa: E402
import rank_lab.losses.contrastive as CC  # noqa: E402
import rank_lab.losses.esupcon as E_  # noqa: E402
import rank_lab.losses.hierarchical as LH  # noqa: E402
import rank_lab.losses.histogram as LHIST  # noqa: E402
import rank_lab.losses.recall as LR  # noqa: E402
import rank_lab.losses.recall_at_k as RK  # noqa: E402
import rank_lab.losses.registry as LREG  # noqa: E402
import rank_lab.losses.simix as SX  # noqa: E402
import rank_lab.losses.supcon as S_  # noqa: E402
from rank_lab.ranking import SigmoidStep, positive_rows  # noqa: E402

Z_LEGAL = {"z:int": "integer features are cast to float (check_embeddings)"}
ZL = {"z": "x", "labels": "labels"}
ZL_ROWS = (("z", "labels"),)
LABEL_RANGE = {"range": ("labels", lambda: labels(12, 3) + 5, ("labels",))}


def _protos(k=3, d=4, seed=7):
    return emb(k, d, seed=seed)


def _rows():
    q, k = positive_rows(targets())
    return dict(
        scores=scores(),
        relevance=targets(),
        valid=torch.ones(3, 8, dtype=torch.bool),
        q_idx=q,
        k_idx=k,
        step=SigmoidStep(0.1),
    )


def _ranks():
    return dict(
        rank=torch.tensor([1.0, 2.5, 1.2, 4.0, 2.0]),
        q_idx=torch.tensor([0, 0, 1, 2, 2]),
        n_queries=3,
        ks=(1, 2),
    )


def _simix_parents():
    return dict(
        parents=torch.tensor([[0, 0], [1, 1], [2, 2], [0, 1]]),
        alphas=torch.tensor([1.0, 1.0, 1.0, 0.3]),
    )


SIMIX_ROWS = (("parents", "alphas"),)
SIMIX_EXTRA = {
    "range": ("parents", lambda: torch.tensor([[0, 0], [1, 1], [2, 2], [0, 9]]), ("parents",)),
    "alpha_above1": ("alphas", lambda: torch.tensor([1.0, 1.0, 1.0, 1.3]), ("alphas",)),
}
SP = {"scores": "x", "positives": "x"}
SP_LEGAL = {
    "scores:ndim-": "a (N,) score vector is one query",
    "scores:int": "integer scores are cast to float",
    "positives:int": "0/1 integer positives",
    "positives:ndim-": "a (N,) positive mask is one query",
    "positives:f64": "0/1 float positives",
}


def _sp(**kw):
    return lambda: dict(scores=scores(), positives=targets(), **kw)


def _throwaway_registered():
    """Register a throwaway loss (once) so that the valid call of ``unregister_loss`` removes it."""
    if "matrix_unregister" not in LREG.list_losses():
        LREG.register_loss("matrix_unregister")(L.SmoothAP)
    return {"name": "matrix_unregister"}


ENTRIES += [
    # base
    fn(
        LB.per_query_mean,
        lambda: dict(
            values=torch.tensor([0.5, 1.0, 0.2, 0.3, 0.9]),
            q_idx=torch.tensor([0, 0, 1, 2, 2]),
            n_queries=3,
        ),
        {"values": "x", "n_queries": "posint"},
        rows=(("values", "q_idx"),),
        extra={
            "q_range": ("q_idx", lambda: torch.tensor([0, 0, 1, 2, 5]), ("q_idx",)),
            "q_float": ("q_idx", lambda: torch.tensor([0.0, 0, 1, 2, 2]), ("q_idx",)),
        },
    ),
    fn(
        LB.reduce_per_query,
        lambda: dict(
            values=torch.tensor([0.5, 1.0, 0.2]),
            keep=torch.tensor([True, False, True]),
            reduction="mean",
        ),
        {"values": "x", "reduction": "choice"},
        rows=(("values", "keep"),),
        extra={"keep_int": ("keep", lambda: torch.tensor([1, 0, 1]), ("keep",))},
    ),
    # blackbox
    fn(
        LBB.normalised_rank,
        lambda: dict(scores=scores()),
        {"scores": "x"},
        legal={"scores:int": "integer scores are cast to float"},
    ),
    fn(
        LBB.blackbox_rank,
        lambda: dict(scores=scores(), lambda_val=4.0),
        {"scores": "x", "lambda_val": "pos"},
        legal={"scores:int": "integer scores are cast to float"},
    ),
    # contrastive classification (Patel thesis ch. 6)
    fn(
        S_.nt_xent_loss,
        lambda: dict(z=emb(12)),
        {"z": "x", "temperature": "pos"},
        legal=Z_LEGAL,
        extra={"odd": ("z", lambda: emb(11), ("z",))},
    ),
    fn(
        S_.supcon_loss,
        lambda: dict(z=emb(12), labels=labels(12)),
        {**ZL, "temperature": "pos", "base_temperature": "pos", "reduction": "choice"},
        rows=ZL_ROWS,
        legal=Z_LEGAL,
        nopos={"labels": lambda: torch.arange(12)},
    ),
    fn(
        CC.cross_entropy_loss,
        lambda: dict(z=emb(12), labels=labels(12), weight=_protos(), bias=torch.zeros(3)),
        {**ZL, "weight": "x", "bias": "x", "temperature": "pos", "reduction": "choice"},
        rows=ZL_ROWS,
        legal={
            **Z_LEGAL,
            "weight:int": "integer weights are cast to float",
            "bias:int": "an integer bias is added as float",
        },
        extra={**LABEL_RANGE, "dim": ("weight", lambda: emb(3, 5), ("weight",))},
    ),
    fn(
        CC.spce_logits,
        lambda: dict(z=emb(12), labels=labels(12), n_classes=3, queries=emb(5, seed=4)),
        {**ZL, "n_classes": "posint", "queries": "x"},
        rows=ZL_ROWS,
        legal={"*:int": "integer vectors are cast to float"},
        extra={**LABEL_RANGE, "dim": ("queries", lambda: emb(5, 3), ("queries",))},
    ),
    fn(
        CC.spce_loss,
        lambda: dict(z=emb(12), labels=labels(12), n_classes=3),
        {**ZL, "n_classes": "posint", "temperature": "pos"},
        rows=ZL_ROWS,
        legal=Z_LEGAL,
        extra=LABEL_RANGE,
    ),
    fn(
        CC.tightness_loss,
        lambda: dict(z=emb(12), labels=labels(12), prototypes=_protos()),
        {**ZL, "prototypes": "x"},
        rows=ZL_ROWS,
        legal={"*:int": "integer vectors are cast to float (check_embeddings)"},
        extra=LABEL_RANGE,
    ),
    fn(
        E_.esupcon_terms,
        lambda: dict(z=emb(12), labels=labels(12), prototypes=_protos()),
        {**ZL, "prototypes": "x", "temperature": "pos"},
        rows=ZL_ROWS,
        legal={"*:int": "integer vectors are cast to float (check_embeddings)"},
        extra=LABEL_RANGE,
    ),
    fn(
        E_.esupcon_loss,
        lambda: dict(z=emb(12), labels=labels(12), prototypes=_protos()),
        {**ZL, "prototypes": "x", "temperature": "pos"},
        rows=ZL_ROWS,
        legal={"*:int": "integer vectors are cast to float (check_embeddings)"},
        extra=LABEL_RANGE,
    ),
    fn(
        E_.smooth_max_ce_supcon,
        lambda: dict(l_ce=torch.tensor([0.5, 1.2, 0.1]), l_supcon=torch.tensor([2.0, 0.3, 0.4])),
        {"l_ce": "x", "l_supcon": "x"},
        rows=(("l_ce", "l_supcon"),),
        legal={
            "*:ndim+": "elementwise: any shape (both the same)",
            "*:int": "integer losses are cast to float",
        },
        extra={"negative": ("l_ce", lambda: torch.tensor([-2.0, 1.2, 0.1]), ("l_ce",))},
    ),
    loss(
        S_.SimCLRLoss,
        {},
        {"temperature": "pos"},
        legal={
            "__call__.labels:nopos": (
                "SimCLR ignores labels (checked): the positive of a view is the other view"
            )
        },
    ),
    # hierarchical
    cls(
        LH.HierarchicalRankLoss, {}, {"relevance": "choice", "alpha": "pos", "level_mode": "choice"}
    ),
    fn(
        LH.weighted_lower_sums,
        _rows,
        {"scores": "x", "weight": "choice", "max_elements": "posint"},
        rows=(("scores", "relevance"), ("q_idx", "k_idx")),
        legal={
            "scores:ndim-": "a (N,) score vector is one query (check_scores_targets)",
            "scores:int": "integer scores are cast to float",
        },
        extra={
            "k_range": ("k_idx", lambda: torch.tensor([0, 3, 1, 12, 2, 5]), ("k_idx",)),
            "step": ("step", lambda: lambda t: t, ("step",)),
        },
    ),
    # histogram
    fn(
        LHIST.triangular_histogram,
        lambda: dict(
            values=scores(), weights=targets(), centres=torch.linspace(-1, 1, 5), width=0.5
        ),
        {"values": "x", "weights": "x", "centres": "x", "width": "pos"},
        rows=(("values", "weights"),),
        legal={
            "values:ndim-": "a (N,) vector is one row (check_scores_targets)",
            "*:int": "integer values are cast to float",
        },
    ),
    # recall
    fn(
        LR.recall_surrogate_from_ranks,
        _ranks,
        {"rank": "x", "n_queries": "posint", "tau_star": "pos", "normalization": "choice"},
        rows=(("rank", "q_idx"),),
        legal={"rank:int": "integer (exact) ranks are cast to float"},
        extra={
            "ks_zero": ("ks", lambda: (0, 2), ("ks",)),
            "ks_frac": ("ks", lambda: (1.5,), ("ks",)),
            "q_range": ("q_idx", lambda: torch.tensor([0, 0, 1, 2, 7]), ("q_idx",)),
        },
    ),
    fn(
        RK.smooth_positive_ranks,
        _sp(),
        {**SP, "tau": "pos"},
        rows=(("scores", "positives"),),
        nopos={"positives": no_positive_targets},
        legal={
            **SP_LEGAL,
            "positives:nopos": "a query without positives has no valid slot (valid is False)",
        },
    ),
    fn(
        RK.recall_at_k_surrogate,
        _sp(ks=(1, 2)),
        {**SP, "tau_star": "pos", "tau": "pos", "normalization": "choice", "no_positive": "choice"},
        rows=(("scores", "positives"),),
        nopos={"positives": no_positive_targets},
        legal=SP_LEGAL,
        extra={"ks_zero": ("ks", lambda: (0, 2), ("ks",))},
    ),
    # SiMix
    fn(
        SX.SiMixBatch,
        lambda: dict(
            scores=torch.eye(3),
            labels=torch.tensor([0, 0, 1]),
            parents=torch.tensor([[0, 0], [1, 1], [2, 2]]),
            alphas=torch.ones(3),
            n_original=3,
        ),
    ),
    fn(SX.same_class_pairs, lambda: dict(labels=labels(12)), {"labels": "labels"}),
    fn(
        SX.simix_parents,
        lambda: dict(labels=labels(6), alphas=torch.tensor([0.2, 0.5, 0.7]), max_virtual=4),
        {"labels": "labels", "alphas": "x", "max_virtual": "nonnegint"},
        legal={"alphas:int": "0/1 integer coefficients are cast to float"},
        extra={"alpha_above1": ("alphas", lambda: torch.tensor([0.2, 0.5, 1.7]), ("alphas",))},
    ),
    fn(
        SX.simix_scores,
        lambda: dict(scores=emb(3, 3), **_simix_parents()),
        {"scores": "x"},
        rows=SIMIX_ROWS,
        legal={"scores:int": "integer scores are cast to float"},
        extra=SIMIX_EXTRA,
    ),
    fn(
        SX.simix,
        lambda: dict(
            embeddings=emb(12),
            labels=labels(12),
            max_virtual=6,
            generator=torch.Generator().manual_seed(0),
            scores=None,
        ),
        {"embeddings": "x", "labels": "labels", "max_virtual": "nonnegint"},
        rows=(("embeddings", "labels"),),
        legal={"embeddings:int": CAST},
        extra={
            "scores_shape": ("scores", lambda: torch.eye(5), ("scores",)),
            "scores_nan": ("scores", lambda: torch.full((12, 12), float("nan")), ("scores",)),
        },
    ),
    fn(
        SX.mixing_matrix,
        lambda: dict(**_simix_parents(), n_original=3),
        {"n_original": "posint", "alphas": "x"},
        rows=SIMIX_ROWS,
        legal={"alphas:int": "0/1 integer coefficients are cast to float"},
        extra=SIMIX_EXTRA,
    ),
    fn(
        SX.mix_embeddings,
        lambda: dict(embeddings=emb(3), **_simix_parents()),
        {"embeddings": "x", "alphas": "x"},
        rows=SIMIX_ROWS,
        legal={"*:int": "integer values are cast to float"},
        extra=SIMIX_EXTRA,
    ),
    # the registry
    fn(LREG.LossInfo, lambda: dict(name="sup_ap", build=L.SupAP)),
    fn(
        LREG.loss_info,
        {"name": "sup_ap"},
        {"name": "choice"},
        extra={"number": ("name", lambda: 5, ("name",))},
    ),
    fn(LREG.list_losses, {"filter": "*ap*"}, extra={"number": ("filter", lambda: 5, ("filter",))}),
    # returns the decorator only
    fn(
        LREG.register_loss,
        {"name": "matrix_throwaway", "needs": ("dim",)},
        extra={
            "needs": ("needs", lambda: ("classes",), ("needs",)),
            "taken": ("name", lambda: "sup_ap", ("name",)),
            "number": ("name", lambda: 5, ("name",)),
        },
    ),
    fn(
        LREG.unregister_loss,
        _throwaway_registered,
        {"name": "choice"},
        extra={"number": ("name", lambda: 5, ("name",))},
    ),
]
