"""Matrix entries of :mod:`rank_lab.fewshot`."""

from __future__ import annotations

import torch

import rank_lab.fewshot as F
import rank_lab.fewshot.synthetic as SY

from .factories import emb, images, labels
from .framework import cls, fn

CAST = "integer vectors are cast to float"
EMPTY_MAP = "an empty batch of feature maps is modulated into an empty batch (documented in film)"
ONE_TASK = "a (1, k, C, H, W) support is one task of k images: the documented (T, k, C, H, W) form"
TINY = dict(backbone="tiny", widths=(4,), encoder_width=4, encoder_depth=2)


def _base():
    lab = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, -1, -1])
    return images(11, 3, 8), lab


def _describe(support):
    return torch.nn.functional.normalize(emb(11, 6), dim=1)


def _support():
    return dict(queries=emb(4), support=emb(12, seed=1), support_labels=labels(12, 3))


SUP = {"queries": "x", "support": "x", "support_labels": "labels"}
SUP_ROWS = (("support", "support_labels"),)

ENTRIES = [
    fn(F.covariance, lambda: {"x": emb(6, 3)}, {"x": "x"}, legal={"x:int": CAST}),
    fn(F.simplecnaps_estimate_cov, lambda: {"x": emb(6, 3)}, {"x": "x"}, legal={"x:int": CAST}),
    fn(F.lambda_k, {"k": 5}, {"k": "posint"}),
    cls(
        F.MahalanobisClassifier,
        {},
        {"shrinkage": "prob", "identity_scale": "nonneg", "one_shot": "choice"},
        calls=[
            (
                "fit",
                lambda: dict(support=emb(12, seed=1), labels=labels(12, 3)),
                {"support": "x", "labels": "labels"},
            ),
            ("logits", lambda: {"queries": emb(4)}, {"queries": "x"}),
        ],
        rows=(("fit.support", "fit.labels"),),
        legal={"*support:int": CAST, "*queries:int": CAST},
    ),
    fn(F.mahalanobis_logits, _support, SUP, rows=SUP_ROWS, legal={"*:int": CAST}),
    fn(
        F.nearest_mean_logits,
        _support,
        {**SUP, "metric": "choice"},
        rows=SUP_ROWS,
        legal={"*:int": CAST},
    ),
    fn(
        F.classify_by_retrieval,
        _support,
        {**SUP, "method": "choice", "knn_k": "k", "vote": "choice"},
        rows=SUP_ROWS,
        legal={"*:int": CAST},
    ),
    fn(F.RuleOptions, {"knn_k": 2, "shortlist": 3}),
    fn(
        F.nearest_class,
        lambda: {
            "classes": torch.arange(3),
            "logits": emb(4, 3),
            "options": F.RuleOptions(shortlist=2),
            **_support(),
        },
    ),
    fn(F.allways_split, lambda: {"labels": labels(12, 3), "k": 2}, {"labels": "labels", "k": "k"}),
    fn(
        F.allways_evaluate,
        lambda: {"embeddings": emb(12), "labels": labels(12, 3), "k": 2, "runs": 2},
        {"embeddings": "x", "labels": "labels", "k": "k", "runs": "posint"},
        rows=(("embeddings", "labels"),),
        legal={"*:int": CAST},
    ),
    fn(
        F.episodic_evaluate,
        lambda: {
            "embeddings": emb(24),
            "labels": labels(24, 3),
            "k": 2,
            "n_way": 2,
            "n_query": 2,
            "episodes": 2,
        },
        {"embeddings": "x", "labels": "labels", "k": "k", "n_way": "posint", "episodes": "posint"},
        rows=(("embeddings", "labels"),),
        legal={"*:int": CAST},
    ),
    fn(
        F.global_class_ids,
        lambda: {"dataset_ids": torch.tensor([0, 0, 1, 1]), "labels": torch.tensor([0, 1, 0, 1])},
        {"dataset_ids": "labels", "labels": "labels"},
        rows=(("dataset_ids", "labels"),),
    ),
    cls(
        F.MultiDatasetSampler,
        lambda: dict(
            dataset_ids=torch.zeros(24, dtype=torch.long),
            labels=labels(24, 4),
            n_classes=2,
            k=2,
            batches=2,
            min_per_class=2,
        ),
        {"n_classes": "posint", "k": "k", "batches": "posint"},
        calls=[("__iter__", None, None)],
        rows=(("dataset_ids", "labels"),),
    ),
    fn(
        F.sample_supports, lambda: {"labels": labels(12, 3), "k": 2}, {"labels": "labels", "k": "k"}
    ),
    fn(
        F.setup_supports,
        lambda: {"setup": "B", "images": _base()[0], "labels": _base()[1], "k": 2},
        {"setup": "choice", "k": "k"},
    ),
    fn(
        F.gather_images,
        lambda: {"images": images(4, 3, 8), "index": [0, 2]},
        extra={"out_of_range": ("index", lambda: [0, 9], ("index",))},
    ),
    fn(
        F.fewshot_retrieval_scores,
        lambda: {
            "describe": _describe,
            "labels": _base()[1],
            "supports": F.setup_supports("B", _base()[0], _base()[1], k=2)[0],
        },
    ),
    # two sources: every query has a cross-source positive (with one source the inter-source
    # measures of rank_lab.retrieval.cross_domain_evaluate are undefined, documented as NaN there)
    fn(
        F.evaluate_fewshot_retrieval,
        lambda: {
            "describe": _describe,
            "images": _base()[0],
            "labels": _base()[1],
            "setup": "C",
            "domains": torch.arange(11) % 2,
        },
        {"setup": "choice"},
    ),
    cls(
        F.Episode,
        lambda: dict(
            target=0,
            support=torch.arange(2),
            batch=torch.arange(6),
            batch_labels=labels(6, 2),
            classes=torch.arange(2),
        ),
    ),
    cls(
        F.EpisodeSampler,
        lambda: dict(labels=labels(24, 4), k=2, m=2, n_classes=2, episodes=2),
        {"labels": "labels", "k": "k", "m": "posint", "n_classes": "posint", "episodes": "posint"},
        calls=[("__iter__", None, None)],
    ),
    fn(
        F.film,
        lambda: {"x": images(2, 3, 4), "gamma": torch.ones(3), "beta": torch.zeros(3)},
        {"x": "x", "gamma": "x", "beta": "x"},
        legal={"x:empty": EMPTY_MAP},
    ),
    cls(
        F.FiLM,
        {},
        calls=[
            (
                "__call__",
                lambda: {"x": images(2, 3, 4), "gamma": torch.ones(3), "beta": torch.zeros(3)},
                {"x": "x", "gamma": "x", "beta": "x"},
            )
        ],
        legal={"__call__.x:empty": EMPTY_MAP},
    ),
    fn(F.identity_film_params, {"channels": [4], "blocks": [1]}),
    fn(
        F.select_film_params,
        lambda: {"params": F.identity_film_params([4], [1]), "index": torch.tensor([0])},
    ),
    fn(
        F.adaptation_parameter_count,
        {"channels": [4], "blocks": [1], "z_dim": 4},
        {"z_dim": "posint"},
    ),
    cls(F.TinyResNetBody, {"widths": (4,)}, {"in_channels": "posint"}),
    fn(F.film_tiny_resnet, {"widths": (4,)}, {"in_channels": "posint", "stem_stride": "posint"}),
    fn(F.film_resnet18, {"source": "torchvision"}, {"source": "choice", "weights": "path"}),
    cls(F.FiLMResNet, lambda: {"body": F.TinyResNetBody(widths=(4,))}),
    cls(
        F.SetEncoder,
        {"width": 4, "depth": 2},
        {"in_channels": "posint", "width": "posint", "depth": "posint"},
        calls=[("__call__", lambda: {"support": images(3, 3, 8)}, {"support": "x"})],
        legal={"__call__.support:ndim+": ONE_TASK},
    ),
    cls(
        F.FiLMLayerNetwork,
        {"channels": 4, "n_blocks": 1, "z_dim": 4},
        {"channels": "posint", "n_blocks": "posint", "z_dim": "posint", "init_std": "nonneg"},
    ),
    cls(
        F.FiLMAdaptationNetwork,
        {"channels": [4], "blocks": [1], "z_dim": 4},
        {"z_dim": "posint", "init_std": "nonneg"},
    ),
    fn(
        F.build_rcnaps,
        TINY,
        {
            "backbone": "choice",
            "encoder_width": "posint",
            "encoder_depth": "posint",
            "gem_p": "pos",
        },
    ),
    cls(
        F.RCNAPS,
        lambda: {
            "extractor": F.film_tiny_resnet(widths=(4,)),
            "encoder_width": 4,
            "encoder_depth": 2,
        },
        {
            "encoder_width": "posint",
            "encoder_depth": "posint",
            "gem_p": "pos",
            "init_std": "nonneg",
        },
    ),
    cls(
        F.ClassSpecificSmoothAP,
        {},
        {"tau": "pos"},
        calls=[
            (
                "__call__",
                lambda: {"embeddings": emb(12), "labels": labels(12, 3), "target": 0},
                {"embeddings": "x", "labels": "labels"},
            )
        ],
        rows=(("__call__.embeddings", "__call__.labels"),),
        legal={"__call__.embeddings:int": CAST},
    ),
    fn(
        F.class_specific_smooth_ap,
        lambda: {"embeddings": emb(12), "labels": labels(12, 3), "target": 0},
        {"embeddings": "x", "labels": "labels", "tau": "pos"},
        rows=(("embeddings", "labels"),),
        legal={"embeddings:int": CAST},
        extra={"absent_target": ("target", lambda: 7, ("target",))},
    ),
    fn(
        F.rcnaps_describe,
        lambda: {"model": F.build_rcnaps(**TINY), "images": images(4, 3, 8)},
        {"batch_size": "posint"},
    ),
    fn(
        F.rcnaps_describe_tasks,
        lambda: {
            "model": F.build_rcnaps(**TINY),
            "images": images(4, 3, 8),
            "supports": images(2, 3, 8)[:, None],
        },
        {"images": "x", "supports": "x", "batch_size": "posint"},
    ),
    fn(
        F.fit_rcnaps,
        lambda: {
            "model": F.build_rcnaps(**TINY),
            "images": _base()[0][:9],
            "labels": _base()[1][:9],
            "episodes": 1,
            "k": 1,
            "m": 2,
            "n_classes": 2,
        },
        {"episodes": "posint", "k": "k", "lr": "pos", "tau": "pos", "mode": "choice"},
        rows=(("images", "labels"),),
    ),
    fn(
        F.fit_multi_dataset,
        lambda: {
            "model": F.build_rcnaps(**TINY),
            "images": images(12, 3, 8),
            "dataset_ids": torch.zeros(12, dtype=torch.long),
            "labels": labels(12, 2),
            "n_classes": 2,
            "k": 3,
            "epochs": 1,
            "batches_per_epoch": 1,
        },
        {"epochs": "posint", "lr": "pos", "k": "k"},
        rows=(("dataset_ids", "labels"),),
    ),
    # rank_lab.fewshot.synthetic
    fn(
        SY.anisotropic_classes,
        {"n_classes": 3, "per_class": 4, "dim": 4},
        {
            "n_classes": "posint",
            "per_class": "posint",
            "dim": "posint",
            "mean_std": "nonneg",
            "floor": "nonneg",
            "scale": "real",
        },
    ),
    fn(
        SY.MultiDataset,
        lambda: {
            "x": emb(6),
            "labels": labels(6, 2),
            "dataset_ids": torch.zeros(6, dtype=torch.long),
            "concepts": labels(6, 2),
        },
        {"x": "x", "labels": "labels", "dataset_ids": "labels"},
        rows=(("x", "labels"), ("x", "concepts")),
        legal={"x:int": CAST},
    ),
    fn(
        SY.make_multi_dataset,
        {
            "n_datasets": 2,
            "n_concepts": 4,
            "classes_per_dataset": 2,
            "per_class": 3,
            "dim": 4,
            "concept_dim": 2,
            "input_dim": 5,
            "nuisance_rank": 2,
        },
        {
            "n_datasets": "posint",
            "n_concepts": "posint",
            "classes_per_dataset": "posint",
            "per_class": "posint",
            "dim": "posint",
            "concept_dim": "posint",
            "input_dim": "posint",
            "nuisance_rank": "nonnegint",
            "noise": "nonneg",
            "concept_std": "nonneg",
            "nuisance_std": "nonneg",
            "style_std": "nonneg",
            "obs_noise": "nonneg",
        },
    ),
]
