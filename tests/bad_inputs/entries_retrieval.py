"""Matrix entries of :mod:`rank_lab.retrieval`."""

from __future__ import annotations

import torch

import rank_lab.retrieval as RT
from rank_lab.models import MLPBackbone

from .factories import emb, images, scores, targets
from .framework import cls, fn

CAST = "integer descriptors are cast to float"


def unit(n=10, d=4, seed=0):
    return torch.nn.functional.normalize(emb(n, d, seed), dim=1)


def _graph():
    return RT.build_graph(unit(10), k=3, backend="torch")


SIMS = lambda: unit(10) @ unit(10).T  # noqa: E731

ENTRIES = [
    fn(RT.l2n, lambda: {"x": emb()}, {"x": "x", "eps": "pos"}, legal={"x:ndim-": "any shape: normalised along dim",
                                                                    "x:ndim+": "any shape: normalised along dim"}),
    fn(RT.similarity_matrix, lambda: {"x": emb()}, {"x": "x"}, legal={"x:int": CAST}),
    fn(RT.concat_descriptors, lambda: {"features": [unit(6), unit(6, seed=1)]}, {"features": "x"}, legal={"features:int": CAST},
       extra={"rows": ("features", lambda: [unit(6), unit(5, seed=1)], ("features",)),
              "none": ("features", lambda: [], ("features",))}),
    fn(RT.mean_similarity, lambda: {"features": [unit(6), unit(6, seed=1)]}, {"features": "x"}, legal={"features:int": CAST},
       extra={"rows": ("features", lambda: [unit(6), unit(5, seed=1)], ("features",)),
              "none": ("features", lambda: [], ("features",))}),
    fn(RT.learn_pca_whitening, lambda: {"x": emb(20, 4)}, {"x": "x", "dim": "posint", "power": "nonneg", "shrinkage": "prob"},
       legal={"x:int": CAST}),
    fn(RT.learn_lw_whitening, lambda: {"x": emb(20, 4), "pairs": torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]])},
       {"x": "x", "ridge": "nonneg", "factor": "choice"}, legal={"x:int": CAST}),
    fn(RT.apply_whitening, lambda: {"x": emb(5, 4), "whitening": RT.learn_pca_whitening(emb(20, 4))}, {"x": "x", "dim": "posint"},
       legal={"x:int": CAST}),
    fn(RT.Whitening, lambda: {"mean": torch.zeros(4), "projection": torch.eye(4), "eigenvalues": torch.ones(4), "kind": "pca"}),
    fn(RT.alpha_qe, lambda: {"queries": unit(5), "gallery": unit(10, seed=2), "backend": "torch"},
       {"queries": "x", "gallery": "x", "n": "k", "alpha": "nonneg", "backend": "choice"}, legal={"*:int": CAST}),
    fn(RT.average_qe, lambda: {"queries": unit(5), "gallery": unit(10, seed=2), "backend": "torch"},
       {"queries": "x", "gallery": "x", "n": "k"}, legal={"*:int": CAST}),
    fn(RT.gqe, lambda: {"gallery": unit(10), "k1": 3, "k2": 2, "backend": "torch"},
       {"gallery": "x", "k1": "k", "k2": "k", "alpha": "nonneg", "variant": "choice"}, legal={"*:int": CAST}),
    fn(RT.k_reciprocal_rerank, lambda: {"queries": unit(4), "gallery": unit(10, seed=2), "k1": 3, "k2": 2, "backend": "torch"},
       {"queries": "x", "gallery": "x", "k1": "k", "k2": "k", "lambda_value": "prob"}, legal={"*:int": CAST}),
    fn(RT.build_graph, lambda: {"gallery": unit(10), "k": 3, "backend": "torch"}, {"gallery": "x", "k": "k", "gamma": "pos"},
       legal={"gallery:int": CAST}),
    fn(RT.DiffusionGraph, lambda: {f.name: getattr(_graph(), f.name) for f in __import__("dataclasses").fields(RT.DiffusionGraph)}),
    fn(RT.diffusion_search, lambda: {"graph": _graph(), "queries": unit(3, seed=5), "kq": 3, "truncate": None},
       {"queries": "x", "alpha": "prob", "kq": "k", "iters": "posint"}, legal={"queries:int": CAST}),
    fn(RT.offline_diffusion, lambda: {"graph": _graph(), "kq": 3}, {"alpha": "prob", "kq": "k", "iters": "posint"}),
    fn(RT.conjugate_gradient, lambda: {"matvec": lambda v: 2.0 * v, "b": torch.ones(4, 2)}, {"b": "x", "iters": "posint", "tol": "pos"},
       legal={"b:ndim+": "b may hold several right-hand sides", "b:int": "cast"}),
    fn(RT.md, lambda: {"similarities": [SIMS(), SIMS()], "k1": 3, "k2": 2}, {"similarities": "x", "k1": "k", "k2": "k", "alpha": "nonneg"},
       legal={"similarities:int": CAST}),
    fn(RT.md_from_features, lambda: {"features": [unit(10), unit(10, seed=1)], "k1": 3, "k2": 2, "backend": "torch"},
       {"features": "x", "k1": "k", "k2": "k"}, legal={"features:int": CAST}),
    fn(RT.cmd, lambda: {"similarities": [SIMS()], "domains": torch.arange(10) % 2, "k1": 3, "k2": 2}, {"similarities": "x", "k1": "k"},
       rows=(("similarities", "domains"),), legal={"similarities:int": CAST}),
    fn(RT.cross_domain_evaluate, lambda: {"scores": scores(3, 8), "positives": targets(3, 8) > 0, "query_domains": torch.zeros(3, dtype=torch.long),
                                          "gallery_domains": torch.arange(8) % 2}, {"scores": "x"}, rows=(("scores", "positives"),),
       legal={"scores:int": CAST}),
    fn(RT.CrossDomainReport, lambda: {"ap": torch.ones(3), "p1": torch.ones(3), "apd": torch.ones(3)}),
    fn(RT.grouped_map, lambda: {"ap": torch.rand(6), "groups": torch.arange(6) % 2}, {"ap": "x"}, rows=(("ap", "groups"),),
       legal={"ap:nan": "NaN marks a query without positives: skipped (docstring)", "ap:int": CAST}),
    fn(RT.mean_ci, lambda: {"values": [0.5, 0.6, 0.7]}, {"values": "x", "level": "prob"},
       legal={"values:int": "integer results are cast to float"}),
    fn(RT.multilabel_targets, lambda: {"query_labels": [[0], [1]], "gallery_labels": [[0], [1], [0, 1]]}),
    fn(RT.revisited_evaluate, lambda: {"scores": scores(2, 8), "gnd": [{"easy": [0], "hard": [1], "junk": []}, {"easy": [2], "hard": [], "junk": [3]}],
                                       "ks": (1, 2)}, {"scores": "x"}, extra={"ks_big": ("ks", lambda: (1, 100), ("ks",))},
       legal={"scores:int": CAST, "ks:ks_big": "revisitop's mP@k scores k_q = min(last positive position, k): "
              "every k >= 1 is defined (docstring)"}),
    cls(RT.DescriptorNet, lambda: {"backbone": MLPBackbone(4, (4,))}, calls=[("__call__", lambda: {"x": emb(3)}, {"x": "x"})]),
    fn(RT.build_descriptor_net, {"backbone": "tiny_cnn", "pooling": "gem"}, {"pooling": "choice"}),
    fn(RT.extract_descriptors, lambda: {"images": images(2, 3, 16), "net": "tiny_cnn", "image_size": None, "progress": False},
       {"images": "x"}),
]
