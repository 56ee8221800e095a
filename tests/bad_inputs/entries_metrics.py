"""Matrix entries of :mod:`rank_lab.metrics`."""

from __future__ import annotations

import torch

import rank_lab.metrics as M
import rank_lab.metrics.calibration as CAL
import rank_lab.metrics.classification as CLS
import rank_lab.metrics.detection as DET
import rank_lab.metrics.engine.distributed as DKNN
import rank_lab.metrics.engine.formulas.positions as PO
import rank_lab.metrics.engine.formulas.registry as REG
import rank_lab.metrics.engine.scores.bound as SB
import rank_lab.metrics.engine.scores.exact as EX
import rank_lab.metrics.engine.search.certified as CE
import rank_lab.metrics.engine.search.index as IDX
import rank_lab.metrics.hierarchy.codes as HC
import rank_lab.metrics.hierarchy.metrics as HM
import rank_lab.metrics.hierarchy.relevance as HY
import rank_lab.metrics.ood as OOD
import rank_lab.metrics.rotated_iou as RI
import rank_lab.metrics.text as TXT

from .factories import emb, hier_labels, labels, levels, no_positive_targets, scores, targets
from .framework import fn

ONE_QUERY = "a (N,) score vector is one query (documented)"
BINARY_INT = "integer 0/1 relevance is binary relevance"
GRADED = "graded relevance: integer values are gains"
ST = {"scores": "x", "targets": "x"}
SG = {"scores": "x", "gains": "x"}
SR = {"scores": "x", "relevance": "x"}
SL = {"scores": "x", "levels": "x"}
LEGAL_ST = {
    "scores:ndim-": ONE_QUERY,
    "targets:int": BINARY_INT,
    "scores:int": "integer scores are cast to float",
}
LEGAL_SR = {
    "scores:ndim-": ONE_QUERY,
    "relevance:int": GRADED,
    "scores:int": "integer scores are cast to float",
}
LEGAL_SL = {
    "scores:ndim-": ONE_QUERY,
    "levels:int": "levels are integers",
    "scores:int": "integer scores are cast to float",
}
LEGAL_SG = {
    "scores:ndim-": ONE_QUERY,
    "gains:int": GRADED,
    "scores:int": "integer scores are cast to float",
}
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
    fn(
        M.precision_at_k,
        _st(k=3),
        {**ST, "k": "k"},
        legal={**LEGAL_ST, "targets:nopos": "P@k of a query without positives is 0 (defined)"},
        nopos=NOPOS,
    ),
    fn(M.precision_recall_curve, _st(), ST, legal=LEGAL_ST, nopos=NOPOS),
    fn(M.worst_case_order, lambda: dict(scores=scores(), relevance=targets()), SR, legal=LEGAL_SR),
    fn(M.sorted_relevance, lambda: dict(scores=scores(), relevance=targets()), SR, legal=LEGAL_SR),
    fn(
        M.dcg,
        lambda: dict(scores=scores(), gains=levels().float(), k=3),
        {**SG, "k": "k"},
        legal=LEGAL_SG,
    ),
    fn(
        M.ndcg,
        lambda: dict(scores=scores(), gains=levels().float(), k=3),
        {**SG, "k": "k"},
        legal=LEGAL_SG,
        nopos={"gains": no_positive_targets},
    ),
    fn(M.h_average_precision, _sr(), SR, legal=LEGAL_SR, nopos={"relevance": no_positive_targets}),
    fn(M.h_rank, _sr(), SR, legal=LEGAL_SR),
    fn(
        M.hierarchical_pr_curve, _sr(), SR, legal=LEGAL_SR, nopos={"relevance": no_positive_targets}
    ),
    fn(M.h_precision_at_k, _sr(k=3), {**SR, "k": "k"}, legal=LEGAL_SR),
    fn(
        M.h_recall_at_k,
        _sr(k=3),
        {**SR, "k": "k"},
        legal=LEGAL_SR,
        nopos={"relevance": no_positive_targets},
    ),
    fn(M.ap_per_level, _sl(n_levels=2), {**SL, "n_levels": "posint"}, legal=LEGAL_SL),
    fn(M.average_set_intersection, _sl(n_levels=2), {**SL, "n_levels": "posint"}, legal=LEGAL_SL),
    fn(M.hierarchical_ndcg, _sl(k=3), {**SL, "k": "k"}, legal=LEGAL_SL),
    fn(
        M.mistake_severity,
        _sl(n_levels=2, k=3),
        {**SL, "n_levels": "posint", "k": "k"},
        legal=LEGAL_SL,
    ),
    fn(
        M.weighted_sum_ap,
        _sl(n_levels=2, weights=[0.5, 0.5]),
        {**SL, "n_levels": "posint", "weights": "x"},
        legal=LEGAL_SL,
    ),
    fn(M.faiss_available),
    fn(
        M.knn_search,
        lambda: dict(queries=emb(5), gallery=emb(12, seed=2), k=3, backend="torch"),
        {"queries": "x", "gallery": "x", "k": "k", "backend": "choice", "precision": "choice"},
        legal={"*:int": "integer vectors are cast to float (check_embeddings)"},
    ),
    fn(
        M.positive_positions,
        lambda: dict(scores=scores(), positives=targets() > 0, negatives=targets() == 0),
        {"scores": "x"},
        rows=(("scores", "positives"), ("scores", "negatives")),
    ),
    fn(
        M.retrieval_metrics,
        lambda: dict(embeddings=emb(), labels=labels(), ks=(1, 4), backend="torch"),
        {
            "embeddings": "x",
            "labels": "labels",
            "backend": "choice",
            "no_positive": "choice",
            "precision": "choice",
        },
        rows=(("embeddings", "labels"),),
        nopos={"labels": lambda: __import__("torch").arange(12)},
        extra={
            "ks_big": ("ks", lambda: (1, 100), ("ks",)),
            "ks_zero": ("ks", lambda: (0,), ("ks",)),
        },
        legal={
            "embeddings:int": "integer vectors are cast to float (check_embeddings)",
            "labels:nopos": "no_positive='skip' (default) leaves such queries out and reports "
            "n_skipped; here every query lacks one, which raises",
        },
    ),
    # certified search (issue 19) and the shared helpers of the engine (issue 17)
    fn(
        CE.certified_neighbours,
        lambda: dict(queries=emb(5), gallery=emb(12, seed=2), k=3),
        {"queries": "x", "gallery": "x", "k": "k", "precision": "choice", "tile": "posint"},
        legal={"*:int": "integer vectors are cast to float (check_embeddings)"},
    ),
    fn(
        CE.NeighbourLists,
        lambda: dict(
            offsets=torch.tensor([0, 1, 2]),
            indices=torch.tensor([1, 0]),
            scores=torch.ones(2),
            k=torch.ones(2, dtype=torch.long),
            precision="fp32",
            n_rescanned=0,
            n_candidates=2,
        ),
    ),
    fn(
        EX.canonical_scores,
        lambda: dict(
            queries=emb(5),
            gallery=emb(12, seed=2),
            rows=torch.tensor([0, 4]),
            cols=torch.tensor([1, 11]),
        ),
        {"queries": "x", "gallery": "x", "block_elements": "posint"},
        legal={"*:int": "integer vectors are cast to float (check_embeddings)"},
    ),
    fn(
        SB.score_bound,
        lambda: dict(
            q_norm=torch.ones(3),
            q_red_norm=torch.ones(3),
            q_res_norm=torch.zeros(3),
            g_max_norm=1.0,
            g_max_red_norm=1.0,
            g_max_res_norm=0.0,
            d=8,
            work=torch.float32,
            fmt=torch.bfloat16,
            out_fmt=torch.bfloat16,
        ),
        {"q_norm": "x", "q_res_norm": "x", "g_max_norm": "nonneg", "d": "posint"},
        legal={"*:int": "integer norms are cast to float64"},
    ),
    fn(EX.exact_matmul),
    fn(
        SB.resolve_precision,
        lambda: dict(precision="exact", dtype=torch.float32, device=torch.device("cpu")),
        {"precision": "choice"},
    ),
    fn(SB.check_accumulation, lambda: dict(fmt=torch.bfloat16, device=torch.device("cpu"))),
    fn(
        SB.check_products_fit,
        lambda: dict(q_max_norm=1.0, g_max_norm=1.0, work=torch.float32, names=("a", "b")),
        extra={"overflow": ("q_max_norm", lambda: 1e39, ("a", "b"))},
    ),
    fn(IDX.IndexStage1, lambda: dict(search=lambda q, g, k, es: (None, None))),
    fn(
        PO.BinaryPositions,
        lambda: dict(
            pos=torch.tensor([[1, 3]]), valid=torch.tensor([[True, True]]), n_pos=torch.tensor([2])
        ),
    ),
    fn(
        PO.LevelPositions,
        lambda: dict(
            lv=torch.tensor([[2, 1]]),
            valid=torch.tensor([[True, True]]),
            ge=torch.tensor([[0, 1]]),
            keys=torch.tensor([[0.9, 0.5]], dtype=torch.float64),
            counts=torch.tensor([[1, 1, 1]]),
            n_levels=2,
            alpha=1.0,
        ),
    ),
    fn(PO.row_sums, lambda: dict(x=torch.rand(3, 4))),
    fn(
        REG.RetrievalMetric,
        lambda: dict(name="RP", family="binary", depth="R", compute=lambda p, ks: {}),
        extra={
            "family": ("family", lambda: "graded", ("family",)),
            "depth": ("depth", lambda: 3, ("depth",)),
            "compute": ("compute", lambda: 3, ("compute",)),
        },
    ),
    fn(
        REG.register_metric,
        lambda: dict(metric=REG.get_metric("R@k"), replace=True),
        extra={
            "taken": ("replace", lambda: False, ("R@k",)),
            "not_a_metric": ("metric", lambda: "R@k", ("metric",)),
        },
    ),
    fn(REG.get_metric, {"name": "R@k"}, extra={"unknown": ("name", lambda: "R@0", ("R@0",))}),
    fn(REG.list_metrics, {"family": "binary"}),
    fn(
        REG.unregister_metric,
        lambda: dict(
            name=REG.register_metric(
                REG.RetrievalMetric("_entry", "binary", "k", lambda p, ks: {}), replace=True
            ).name
        ),
        extra={"unknown": ("name", lambda: "R@0", ("R@0",))},
    ),
    fn(
        HY.check_levels,
        lambda: dict(levels=levels(), n_levels=2),
        {"levels": "x", "n_levels": "posint"},
        legal={
            "levels:ndim-": "a (N,) vector is one query (documented)",
            "levels:int": "levels are integers",
        },
        extra={"above_L": ("levels", lambda: levels() + 1, ("levels",))},
    ),
    fn(
        HY.level_weights,
        lambda: dict(weights=[0.25, 0.75], n_levels=2),
        {"weights": "x", "n_levels": "posint"},
    ),
]

CAST = "integer vectors are cast to float (check_embeddings)"


# ----------------------------------------------------------------------------- calibration
def _probs():
    """Softmax rows whose top-1 confidences fill both bins of ``n_bins=2`` (an empty bin is NaN by
    definition: its mean confidence is undefined, documented in :class:`ReliabilityDiagram`)."""
    return torch.tensor([[0.4, 0.35, 0.25], [0.9, 0.05, 0.05], [0.2, 0.3, 0.5], [0.1, 0.7, 0.2]])


def _logits():
    return torch.tensor([[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [0.2, 0.1, 0.4], [1.0, 0.9, -0.5]])


PT = {"probs": "x", "targets": "labels", "n_bins": "posint"}
TARGETS_RANGE = {"targets_range": ("targets", lambda: torch.tensor([0, 1, 3, 1]), ("targets",))}


def _diagram():
    return CAL.reliability_diagram(_probs(), torch.tensor([0, 1, 2, 1]), n_bins=2)


# ----------------------------------------------------------------------------- classification
def _pt(n=6, **kw):
    return lambda: dict(
        predictions=torch.tensor([0, 1, 2, 1, 0, 2])[:n],
        targets=torch.tensor([0, 1, 1, 1, 2, 2])[:n],
        **kw,
    )


PT_ROLES = {"predictions": "labels", "targets": "labels"}
PT_ROWS = (("predictions", "targets"),)
NEG_PRED = {
    "negative": ("predictions", lambda: torch.tensor([0, -1, 2, 1, 0, 2]), ("predictions",))
}
OBS = lambda: torch.tensor([0, 0, 1, 1, 2, 2])  # noqa: E731


# ----------------------------------------------------------------------------- detection
def _boxes(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = torch.rand(n, 5, generator=g, dtype=torch.float64)
    b[:, 2:4] += 0.5
    return b


def _quads(n=3, seed=0):
    return RI.boxes_to_polygons(_boxes(n, seed))


ELEMENTWISE_BOXES = {
    "boxes:ndim+": "(..., 5): any leading shape",
    "boxes:ndim-": "a (5,) row is one box",
    "boxes:empty": "an empty batch of boxes maps to an empty batch",
    "boxes:int": "integer boxes are cast to float",
}
PQ = {"p": "x", "q": "x"}
PQ_LEGAL = {"*:int": "integer vertices are cast to float"}
B12 = {"boxes1": "x", "boxes2": "x"}
EMPTY_MATRIX = (
    "no polygon on one side: an empty (0, M) / (N, 0) IoU matrix (an image without detections)"
)


def _icdar():
    return dict(
        gt=[_quads(2), _quads(1, 3)],
        det=[_quads(2, 1), _quads(2, 4)],
        gt_dont_care=[torch.tensor([False, True]), torch.tensor([False])],
    )


# ----------------------------------------------------------------------------- hierarchy
LEVELS_LEGAL = {"levels:ndim-": "a (N,) vector is one query", "levels:int": "levels are integers"}


def _lv():
    return levels(3, 8, 2)


ENTRIES += [
    # calibration
    fn(
        CAL.ReliabilityDiagram,
        lambda: dict(
            edges=torch.linspace(0, 1, 3),
            confidence=torch.tensor([0.3, 0.8]),
            accuracy=torch.tensor([0.5, 1.0]),
            counts=torch.tensor([2, 2]),
            ece=0.1,
        ),
    ),
    fn(
        CAL.reliability_diagram,
        lambda: dict(probs=_probs(), targets=torch.tensor([0, 1, 2, 1]), n_bins=2),
        PT,
        rows=(("probs", "targets"),),
        extra=TARGETS_RANGE,
    ),
    fn(
        CAL.expected_calibration_error,
        lambda: dict(probs=_probs(), targets=torch.tensor([0, 1, 2, 1]), n_bins=2),
        PT,
        rows=(("probs", "targets"),),
        extra=TARGETS_RANGE,
    ),
    fn(
        CAL.negative_log_likelihood,
        lambda: dict(logits=_logits(), targets=torch.tensor([0, 1, 2, 1]), temperature=1.5),
        {"logits": "x", "targets": "labels", "temperature": "pos"},
        rows=(("logits", "targets"),),
        extra=TARGETS_RANGE,
    ),
    fn(
        CAL.fit_temperature,
        lambda: dict(
            logits=_logits(), targets=torch.tensor([0, 1, 2, 1]), max_iter=20, bounds=(0.01, 100.0)
        ),
        {"logits": "x", "targets": "labels", "init": "pos", "max_iter": "posint"},
        rows=(("logits", "targets"),),
        extra={**TARGETS_RANGE, "bounds_order": ("bounds", lambda: (10.0, 1.0), ("bounds",))},
    ),
    fn(
        CAL.holdout_split,
        {"n": 10, "fraction": 0.2},
        {"n": "posint", "fraction": "prob", "seed": "nonnegint"},
    ),
    fn(
        CAL.plot_reliability_diagram,
        lambda: dict(diagram=_diagram()),
        extra={"not_a_diagram": ("diagram", lambda: {"ece": 0.1}, ("diagram",))},
    ),
    # classification
    fn(
        CLS.KNNPrediction,
        lambda: dict(
            labels=torch.tensor([0, 1]),
            confidence=torch.tensor([0.9, 0.8]),
            class_scores=torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
            neighbor_indices=torch.tensor([[0], [1]]),
            neighbor_scores=torch.tensor([[0.9], [0.8]]),
        ),
    ),
    fn(
        CLS.knn_classify,
        lambda: dict(
            queries=emb(5),
            gallery=emb(12, seed=2),
            gallery_labels=labels(12),
            k=3,
            n_classes=3,
            backend="torch",
        ),
        {
            "queries": "x",
            "gallery": "x",
            "gallery_labels": "labels",
            "k": "k",
            "vote": "choice",
            "temperature": "pos",
            "n_classes": "posint",
            "confidence": "choice",
            "backend": "choice",
        },
        rows=(("gallery", "gallery_labels"),),
        legal={"*:int": CAST},
        extra={
            "dim": ("queries", lambda: emb(5, 3), ("queries", "gallery")),
            "negative": ("gallery_labels", lambda: labels(12) - 1, ("gallery_labels",)),
            "too_few": ("n_classes", lambda: 2, ("n_classes",)),
        },
    ),
    fn(
        CLS.aggregate_observations,
        lambda: dict(
            predictions=torch.tensor([0, 1, 2, 1, 0, 2]),
            confidence=torch.rand(6, generator=torch.Generator().manual_seed(0)),
            observation_ids=OBS(),
            class_scores=torch.rand(6, 3, generator=torch.Generator().manual_seed(1)),
            rule="mean_scores",
        ),
        {
            "predictions": "labels",
            "confidence": "x",
            "observation_ids": "labels",
            "class_scores": "x",
            "rule": "choice",
        },
        rows=(
            ("predictions", "confidence"),
            ("predictions", "observation_ids"),
            ("predictions", "class_scores"),
        ),
        legal={
            "confidence:int": "integer confidences are cast to float",
            "class_scores:int": "integer class scores are cast to float",
        },
    ),
    fn(CLS.accuracy, _pt(), PT_ROLES, rows=PT_ROWS),
    fn(
        CLS.confusion_matrix,
        _pt(n_classes=3),
        {**PT_ROLES, "n_classes": "posint"},
        rows=PT_ROWS,
        extra={**NEG_PRED, "too_few": ("n_classes", lambda: 2, ("n_classes",))},
    ),
    fn(
        CLS.per_class_f1,
        _pt(labels=torch.tensor([0, 1, 2])),
        {**PT_ROLES, "labels": "labels"},
        rows=PT_ROWS,
    ),
    fn(
        CLS.macro_f1,
        _pt(labels=torch.tensor([0, 1, 2])),
        {**PT_ROLES, "labels": "labels"},
        rows=PT_ROWS,
    ),
    fn(CLS.per_class_accuracy, _pt(), PT_ROLES, rows=PT_ROWS),
    fn(
        CLS.observation_level,
        lambda: dict(
            predictions=torch.tensor([0, 0, 1, 1, 2, 2]),
            targets=torch.tensor([0, 0, 1, 1, 1, 1]),
            observation_ids=OBS(),
        ),
        {**PT_ROLES, "observation_ids": "labels"},
        rows=(*PT_ROWS, ("predictions", "observation_ids")),
    ),
    fn(
        CLS.classification_metrics,
        lambda: dict(
            predictions=torch.tensor([0, 0, 1, 1, 2, 2]),
            targets=torch.tensor([0, 0, 1, 1, 1, 1]),
            observation_ids=OBS(),
        ),
        {**PT_ROLES, "observation_ids": "labels"},
        rows=(*PT_ROWS, ("predictions", "observation_ids")),
    ),
    # detection
    fn(RI.boxes_to_polygons, lambda: dict(boxes=_boxes()), {"boxes": "x"}, legal=ELEMENTWISE_BOXES),
    fn(
        RI.polygon_area,
        lambda: dict(poly=_quads()),
        {"poly": "x"},
        legal={
            "poly:ndim+": "(..., K, 2): any leading shape",
            "poly:ndim-": "a (K, 2) polygon is one polygon",
            "poly:empty": "no polygon: an empty result",
            "poly:int": "integer vertices are cast to float",
        },
    ),
    fn(
        RI.convex_intersection_area,
        lambda: dict(p=_quads(), q=_quads(seed=1)),
        PQ,
        rows=(("p", "q"),),
        legal=PQ_LEGAL,
    ),
    fn(
        RI.polygon_iou,
        lambda: dict(p=_quads(), q=_quads(seed=1)),
        PQ,
        rows=(("p", "q"),),
        legal=PQ_LEGAL,
        extra={
            "nonconvex": (
                "p",
                lambda: torch.tensor([[[0.0, 0], [2, 0], [0.5, 0.5], [0, 2]]]).repeat(3, 1, 1),
                ("p",),
            )
        },
    ),
    fn(
        RI.polygon_iou_matrix,
        lambda: dict(p=_quads(), q=_quads(2, 1)),
        {**PQ, "chunk_size": "posint"},
        legal={**PQ_LEGAL, "*:empty": EMPTY_MATRIX},
    ),
    fn(
        RI.rotated_iou,
        lambda: dict(boxes1=_boxes(), boxes2=_boxes(seed=1)),
        B12,
        rows=(("boxes1", "boxes2"),),
        legal={"*:int": "integer boxes are cast to float"},
        extra={
            "negative_size": (
                "boxes1",
                lambda: _boxes() * torch.tensor([1, 1, -1, 1, 1.0], dtype=torch.float64),
                ("boxes1",),
            )
        },
    ),
    fn(
        RI.rotated_iou_matrix,
        lambda: dict(boxes1=_boxes(), boxes2=_boxes(2, 1)),
        {**B12, "chunk_size": "posint"},
        legal={"*:int": "integer boxes are cast to float", "*:empty": EMPTY_MATRIX},
    ),
    fn(
        DET.encode_box6,
        lambda: dict(boxes=_boxes(), image_size=(4.0, 3.0)),
        {"boxes": "x"},
        legal=ELEMENTWISE_BOXES,
        extra={
            "zero_size": ("image_size", lambda: (0.0, 3.0), ("image_size",)),
            "nan_size": ("image_size", lambda: (float("nan"), 3.0), ("image_size",)),
        },
    ),
    fn(
        DET.decode_box6,
        lambda: dict(enc=DET.encode_box6(_boxes()), image_size=(4.0, 3.0)),
        {"enc": "x", "min_size": "pos"},
        legal={
            "enc:ndim+": "(..., 6): any leading shape",
            "enc:ndim-": "a (6,) row is one box",
            "enc:empty": "an empty batch maps to an empty batch",
            "enc:int": "integer encodings are cast to float",
        },
        extra={"zero_size": ("image_size", lambda: (0.0, 3.0), ("image_size",))},
    ),
    fn(
        DET.match_detections,
        lambda: dict(
            iou=torch.tensor([[0.7, 0.2, 0.6], [0.1, 0.8, 0.3]]),
            gt_ignore=torch.tensor([False, False]),
            det_ignore=torch.tensor([False, False, True]),
        ),
        {"iou": "x", "threshold": "prob", "matching": "choice"},
        rows=(("iou", "gt_ignore"),),
        legal={"iou:int": "integer IoU values (0/1) are cast to float"},
        extra={
            "det_ignore_shape": ("det_ignore", lambda: torch.tensor([False, True]), ("det_ignore",))
        },
    ),
    fn(
        DET.icdar15_evaluate,
        _icdar,
        {
            "gt": "x",
            "det": "x",
            "iou_threshold": "prob",
            "area_precision_threshold": "prob",
            "matching": "choice",
        },
        rows=(("gt", "det"), ("gt", "gt_dont_care")),
        legal={
            "gt:empty": (
                "an image without ground truth (its recall is 1, the official script's convention)"
            ),
            "det:empty": "an image without detections",
            "*:int": "integer coordinates are cast to float",
        },
    ),
    # hierarchy
    fn(HY.as_hierarchical_labels, lambda: dict(labels=hier_labels(6)), {"labels": "labels"}),
    fn(
        HY.hierarchy_table,
        lambda: dict(labels=hier_labels(6)),
        {"labels": "labels"},
        extra={
            "not_a_tree": ("labels", lambda: torch.tensor([[0, 0], [0, 1], [1, 1]]), ("labels",))
        },
    ),
    fn(
        HY.shared_level,
        lambda: dict(labels=hier_labels(4), ref_labels=hier_labels(6)),
        {"labels": "labels", "ref_labels": "labels", "mode": "choice"},
        extra={
            "levels_differ": (
                "ref_labels",
                lambda: torch.zeros(6, 3, dtype=torch.long),
                ("ref_labels",),
            )
        },
    ),
    fn(
        HY.level_counts,
        lambda: dict(levels=_lv(), n_levels=2),
        {"levels": "x", "n_levels": "posint"},
        legal=LEVELS_LEGAL,
        extra={"above_L": ("levels", lambda: _lv() + 1, ("levels",))},
    ),
    fn(
        HY.level_set,
        lambda: dict(levels=_lv(), level=1),
        {"levels": "x", "level": "nonnegint"},
        legal=LEVELS_LEGAL,
    ),
    fn(
        HY.relevance_table,
        lambda: dict(counts=HY.level_counts(_lv(), 2), n_levels=2),
        {"counts": "x", "n_levels": "posint", "kind": "choice", "alpha": "pos"},
        legal={"counts:int": "counts are integers"},
    ),
    fn(
        HY.level_relevance,
        lambda: dict(levels=_lv(), n_levels=2),
        {"levels": "x", "n_levels": "posint", "kind": "choice", "alpha": "pos"},
        legal=LEVELS_LEGAL,
    ),
    fn(
        HY.hap_relevance,
        lambda: dict(levels=_lv(), n_levels=2),
        {"levels": "x", "n_levels": "posint", "alpha": "pos"},
        legal=LEVELS_LEGAL,
    ),
    fn(
        HY.weighted_ap_relevance,
        lambda: dict(levels=_lv(), n_levels=2, weights=[0.5, 0.5]),
        {"levels": "x", "n_levels": "posint", "weights": "x"},
        legal=LEVELS_LEGAL,
    ),
    fn(HY.ndcg_gains, lambda: dict(levels=_lv()), {"levels": "x"}, legal=LEVELS_LEGAL),
    fn(
        HY.binary_level_relevance,
        lambda: dict(levels=_lv(), n_levels=2),
        {"levels": "x", "n_levels": "posint"},
        legal=LEVELS_LEGAL,
    ),
    fn(
        HC.parse_code,
        {"code": "01.03.05"},
        extra={
            "number": ("code", lambda: 5, ("code",)),
            "hole": ("code", lambda: "01..05", ("code",)),
        },
    ),
    fn(
        HC.lca_distance,
        {"a": "01.03.05", "b": "01.04.05", "n_levels": 3},
        {"n_levels": "posint"},
        extra={"depths": ("b", lambda: "01.04", ("b",))},
    ),
    fn(
        HC.multilabel_relevance,
        {"query_codes": ["01.03", "02.01"], "item_codes": ["01.03"], "n_levels": 2},
        {"n_levels": "posint"},
        extra={"no_codes": ("item_codes", lambda: [], ("item_codes",))},
    ),
    fn(
        HC.multilabel_relevance_matrix,
        {
            "query_sets": [["01.03"], ["02.01"]],
            "item_sets": [["01.03"], ["01.02", "02.01"]],
            "n_levels": 2,
        },
        {"n_levels": "posint"},
        extra={
            "no_query": ("query_sets", lambda: [], ("query_sets",)),
            "no_item": ("item_sets", lambda: [], ("item_sets",)),
        },
    ),
    # hierarchical
    fn(HM.h_ap_from_pr_curve, _sr(), SR, legal=LEGAL_SR, nopos={"relevance": no_positive_targets}),
    fn(
        HM.mistake_levels,
        _sl(n_levels=2, k=3),
        {**SL, "n_levels": "posint", "k": "k"},
        legal=LEGAL_SL,
    ),
    # ood metrics
    *[
        fn(
            f,
            lambda: dict(
                scores_in=torch.tensor([0.1, 0.4, 0.2, 0.3]),
                scores_out=torch.tensor([0.5, 0.35, 0.9]),
            ),
            {"scores_in": "x", "scores_out": "x", **extra_roles},
            legal={"*:int": "integer scores are cast to float"},
        )
        for f, extra_roles in [
            (OOD.auroc, {"ties": "choice"}),
            (OOD.fpr_at_tpr, {"tpr": "prob", "method": "choice"}),
            (OOD.aupr_in, {}),
            (OOD.aupr_out, {}),
            (OOD.ood_metrics, {"tpr": "prob", "fpr_method": "choice"}),
        ]
    ],
    fn(
        OOD.evaluate_ood,
        lambda: dict(
            scores_in=torch.tensor([0.1, 0.4, 0.2, 0.3]),
            scores_out={"a": torch.tensor([0.5, 0.9]), "b": torch.tensor([0.2, 0.6])},
        ),
        {"scores_in": "x", "tpr": "prob", "fpr_method": "choice"},
        legal={"*:int": "integer scores are cast to float"},
        extra={
            "empty": ("scores_out", lambda: {}, ("scores_out",)),
            "nan": (
                "scores_out",
                lambda: {"a": torch.tensor([float("nan"), 1.0])},
                ("scores_out",),
            ),
            "not_mapping": ("scores_out", lambda: torch.tensor([0.5, 0.9]), ("scores_out",)),
        },
    ),
    # text
    fn(
        TXT.encode_strings,
        {"strings": ["ab", "", "cde"], "pad": -1},
        extra={
            "pad": ("pad", lambda: 0, ("pad",)),
            "one_str": ("strings", lambda: "abc", ("strings",)),
            "not_str": ("strings", lambda: ["a", 3], ("strings",)),
        },
    ),
    fn(
        TXT.normalize_text,
        {"text": "Ab-C"},
        {"mode": "choice"},
        extra={"not_str": ("text", lambda: 3, ("text",))},
    ),
    fn(
        TXT.edit_distance,
        {"a": ["kitten", "ab"], "b": ["sitting", ""], "pad": -1},
        rows=(("a", "b"),),
        extra={
            "not_str": ("a", lambda: ["kitten", 3], ("a",)),
            "float_codes": ("a", lambda: torch.ones(2, 3), ("a",)),
            "pad": ("pad", lambda: 0, ("pad",)),
        },
    ),
    fn(
        TXT.levenshtein_reference,
        {"a": "kitten", "b": "sitting"},
        extra={"not_str": ("a", lambda: 3, ("a",))},
    ),
    *[
        fn(
            f,
            {"preds": ["abc", "Ab", ""], "targets": ["abd", "ab", "x"]},
            {"normalize": "choice"},
            rows=(("preds", "targets"),),
            extra={
                "not_str": ("preds", lambda: ["a", 3, "b"], ("preds",)),
                "empty": ("preds", lambda: [], ("preds",)),
            },
        )
        for f in (
            TXT.normalized_edit_distance,
            TXT.ned_score,
            TXT.total_edit_distance,
            TXT.word_accuracy,
            TXT.text_recognition_metrics,
        )
    ],
    # distributed kNN
    fn(DKNN.faiss_gpu_count),
    fn(DKNN.ShardedIndex, {"index": None, "placement": "cpu", "n_parts": 1}),
    fn(
        DKNN.build_index,
        lambda: dict(gallery=emb(12), cpu_shards=2),
        {"gallery": "x", "n_gpus": "nonnegint", "mode": "choice", "cpu_shards": "posint"},
        legal={"gallery:int": CAST},
    ),
    fn(
        DKNN.sharded_knn_search,
        lambda: dict(queries=emb(5), gallery=emb(12, seed=2), k=3, cpu_shards=2),
        {
            "queries": "x",
            "gallery": "x",
            "k": "k",
            "mode": "choice",
            "cpu_shards": "posint",
            "chunk_size": "posint",
        },
        legal={"*:int": CAST},
        extra={"dim": ("queries", lambda: emb(5, 3), ("queries", "gallery"))},
    ),
    fn(
        DKNN.sharded_retrieval_metrics,
        lambda: dict(embeddings=emb(), labels=labels(), ks=(1, 4), cpu_shards=2),
        {
            "embeddings": "x",
            "labels": "labels",
            "mode": "choice",
            "no_positive": "choice",
            "cpu_shards": "posint",
        },
        rows=(("embeddings", "labels"),),
        nopos={"labels": lambda: torch.arange(12)},
        extra={
            "ks_big": ("ks", lambda: (1, 100), ("ks",)),
            "ks_zero": ("ks", lambda: (0,), ("ks",)),
        },
        legal={
            "embeddings:int": CAST,
            "labels:nopos": "no_positive='skip' (default) leaves such queries out and reports "
            "n_skipped; here every query lacks one, which raises",
        },
    ),
]
