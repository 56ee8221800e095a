"""Matrix entries of :mod:`rank_lab.retrieval`."""

from __future__ import annotations

import scipy.sparse as sp
import torch

import rank_lab.retrieval as RT
import rank_lab.retrieval.cross_source as CS
import rank_lab.retrieval.diffusion_graph as DG_
import rank_lab.retrieval.extract as EX
import rank_lab.retrieval.graph as RG
import rank_lab.retrieval.protocols as PR
import rank_lab.retrieval.synthetic as SY
from rank_lab.models import MLPBackbone

from .data_fixtures import fixture
from .factories import emb, images, scores, targets
from .framework import cls, fn

CAST = "integer descriptors are cast to float"


def unit(n=10, d=4, seed=0):
    return torch.nn.functional.normalize(emb(n, d, seed), dim=1)


def _graph():
    return RT.build_graph(unit(10), k=3, backend="torch")


SIMS = lambda: unit(10) @ unit(10).T  # noqa: E731


def knn():
    """``(10, 3)`` scores and neighbour indices of ``unit(10)``."""
    return RG.knn_self(unit(10), 3, backend="torch")


def graph():
    """A symmetric ``(10, 10)`` sparse affinity."""
    s, i = knn()
    return RG.mutual_affinity(s, i, 10, mutual=False)


def with_nan(m):
    m = sp.csr_matrix(m, copy=True)
    m.data[0] = float("nan")
    return m


NAN_GRAPH = {"nan": ("w", lambda: with_nan(graph()), ("w",))}


def positions():
    """``(2, 3)`` 1-based positions and their mask (the second row has 2 positives)."""
    return torch.tensor([[1, 3, 4], [2, 5, 0]]), torch.tensor(
        [[True, True, True], [True, True, False]]
    )


ENTRIES = [
    fn(
        RT.l2n,
        lambda: {"x": emb()},
        {"x": "x", "eps": "pos"},
        legal={
            "x:ndim-": "any shape: normalised along dim",
            "x:ndim+": "any shape: normalised along dim",
        },
    ),
    fn(RT.similarity_matrix, lambda: {"x": emb()}, {"x": "x"}, legal={"x:int": CAST}),
    fn(
        RT.concat_descriptors,
        lambda: {"features": [unit(6), unit(6, seed=1)]},
        {"features": "x"},
        legal={"features:int": CAST},
        extra={
            "rows": ("features", lambda: [unit(6), unit(5, seed=1)], ("features",)),
            "none": ("features", lambda: [], ("features",)),
        },
    ),
    fn(
        RT.mean_similarity,
        lambda: {"features": [unit(6), unit(6, seed=1)]},
        {"features": "x"},
        legal={"features:int": CAST},
        extra={
            "rows": ("features", lambda: [unit(6), unit(5, seed=1)], ("features",)),
            "none": ("features", lambda: [], ("features",)),
        },
    ),
    fn(
        RT.learn_pca_whitening,
        lambda: {"x": emb(20, 4)},
        {"x": "x", "dim": "posint", "power": "nonneg", "shrinkage": "prob"},
        legal={"x:int": CAST},
    ),
    fn(
        RT.learn_lw_whitening,
        lambda: {"x": emb(20, 4), "pairs": torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]])},
        {"x": "x", "ridge": "nonneg", "factor": "choice"},
        legal={"x:int": CAST},
    ),
    fn(
        RT.apply_whitening,
        lambda: {"x": emb(5, 4), "whitening": RT.learn_pca_whitening(emb(20, 4))},
        {"x": "x", "dim": "posint"},
        legal={"x:int": CAST},
    ),
    fn(
        RT.Whitening,
        lambda: {
            "mean": torch.zeros(4),
            "projection": torch.eye(4),
            "eigenvalues": torch.ones(4),
            "kind": "pca",
        },
    ),
    fn(
        RT.alpha_qe,
        lambda: {"queries": unit(5), "gallery": unit(10, seed=2), "backend": "torch"},
        {"queries": "x", "gallery": "x", "n": "k", "alpha": "nonneg", "backend": "choice"},
        legal={"*:int": CAST},
    ),
    fn(
        RT.average_qe,
        lambda: {"queries": unit(5), "gallery": unit(10, seed=2), "backend": "torch"},
        {"queries": "x", "gallery": "x", "n": "k"},
        legal={"*:int": CAST},
    ),
    fn(
        RT.gqe,
        lambda: {"gallery": unit(10), "k1": 3, "k2": 2, "backend": "torch"},
        {"gallery": "x", "k1": "k", "k2": "k", "alpha": "nonneg", "variant": "choice"},
        legal={"*:int": CAST},
    ),
    fn(
        RT.k_reciprocal_rerank,
        lambda: {
            "queries": unit(4),
            "gallery": unit(10, seed=2),
            "k1": 3,
            "k2": 2,
            "backend": "torch",
        },
        {"queries": "x", "gallery": "x", "k1": "k", "k2": "k", "lambda_value": "prob"},
        legal={"*:int": CAST},
    ),
    fn(
        RT.build_graph,
        lambda: {"gallery": unit(10), "k": 3, "backend": "torch"},
        {"gallery": "x", "k": "k", "gamma": "pos"},
        legal={"gallery:int": CAST},
    ),
    fn(
        RT.DiffusionGraph,
        lambda: {
            f.name: getattr(_graph(), f.name)
            for f in __import__("dataclasses").fields(RT.DiffusionGraph)
        },
    ),
    fn(
        RT.diffusion_search,
        lambda: {"graph": _graph(), "queries": unit(3, seed=5), "kq": 3, "truncate": None},
        {"queries": "x", "alpha": "prob", "kq": "k", "iters": "posint"},
        legal={"queries:int": CAST},
    ),
    fn(
        DG_.query_vectors,
        lambda: {"graph": _graph(), "queries": unit(3, seed=5), "kq": 3, "backend": "torch"},
        {"queries": "x", "kq": "k", "gamma": "pos", "backend": "choice"},
        legal={"queries:int": CAST},
        extra={"not_a_graph": ("graph", lambda: unit(10), ("graph",))},
    ),
    fn(
        DG_.diffuse,
        lambda: {"graph": _graph(), "y": torch.rand(3, 10)},
        {"y": "x", "alpha": "prob", "iters": "posint", "tol": "pos", "batch_size": "posint"},
        legal={"y:int": "integer query vectors are cast to the compute dtype"},
        extra={
            "not_a_graph": ("graph", lambda: unit(10), ("graph",)),
            "sparse_nan": ("y", lambda: sp.csr_matrix([[float("nan")] + [0.0] * 9] * 3), ("y",)),
        },
    ),
    fn(
        RT.offline_diffusion,
        lambda: {"graph": _graph(), "kq": 3},
        {"alpha": "prob", "kq": "k", "iters": "posint"},
    ),
    fn(
        RT.conjugate_gradient,
        lambda: {"matvec": lambda v: 2.0 * v, "b": torch.ones(4, 2)},
        {"b": "x", "iters": "posint", "tol": "pos"},
        legal={"b:ndim+": "b may hold several right-hand sides", "b:int": "cast"},
    ),
    fn(
        RT.md,
        lambda: {"similarities": [SIMS(), SIMS()], "k1": 3, "k2": 2},
        {"similarities": "x", "k1": "k", "k2": "k", "alpha": "nonneg"},
        legal={"similarities:int": CAST},
    ),
    fn(
        RT.md_from_features,
        lambda: {"features": [unit(10), unit(10, seed=1)], "k1": 3, "k2": 2, "backend": "torch"},
        {"features": "x", "k1": "k", "k2": "k"},
        legal={"features:int": CAST},
    ),
    fn(
        RT.cmd,
        lambda: {"similarities": [SIMS()], "domains": torch.arange(10) % 2, "k1": 3, "k2": 2},
        {"similarities": "x", "k1": "k"},
        rows=(("similarities", "domains"),),
        legal={"similarities:int": CAST},
    ),
    fn(
        RT.cross_domain_evaluate,
        lambda: {
            "scores": scores(3, 8),
            "positives": targets(3, 8) > 0,
            "query_domains": torch.zeros(3, dtype=torch.long),
            "gallery_domains": torch.arange(8) % 2,
        },
        {"scores": "x"},
        rows=(("scores", "positives"),),
        legal={"scores:int": CAST},
    ),
    fn(
        RT.CrossDomainReport,
        lambda: {"ap": torch.ones(3), "p1": torch.ones(3), "apd": torch.ones(3)},
    ),
    fn(
        RT.grouped_map,
        lambda: {"ap": torch.rand(6), "groups": torch.arange(6) % 2},
        {"ap": "x"},
        rows=(("ap", "groups"),),
        legal={
            "ap:nan": "NaN marks a query without positives: skipped (docstring)",
            "ap:int": CAST,
        },
    ),
    fn(
        RT.multilabel_targets,
        lambda: {"query_labels": [[0], [1]], "gallery_labels": [[0], [1], [0, 1]]},
    ),
    fn(
        RT.revisited_evaluate,
        lambda: {
            "scores": scores(2, 8),
            "gnd": [{"easy": [0], "hard": [1], "junk": []}, {"easy": [2], "hard": [], "junk": [3]}],
            "ks": (1, 2),
        },
        {"scores": "x"},
        extra={"ks_big": ("ks", lambda: (1, 100), ("ks",))},
        legal={
            "scores:int": CAST,
            "ks:ks_big": "revisitop's mP@k scores k_q = min(last positive position, k): "
            "every k >= 1 is defined (docstring)",
        },
    ),
    cls(
        RT.DescriptorNet,
        lambda: {"backbone": MLPBackbone(4, (4,))},
        calls=[("__call__", lambda: {"x": emb(3)}, {"x": "x"})],
    ),
    fn(RT.build_descriptor_net, {"backbone": "tiny_cnn", "pooling": "gem"}, {"pooling": "choice"}),
    fn(
        RT.extract_descriptors,
        lambda: {
            "images": images(2, 3, 16),
            "net": "tiny_cnn",
            "image_size": None,
            "progress": False,
        },
        {"images": "x"},
    ),
    # graph helpers (rank_lab.retrieval.graph)
    fn(
        RG.check_dense_ok,
        {"n_rows": 4, "n_cols": 5, "what": "test"},
        {"n_rows": "nonnegint", "n_cols": "nonnegint"},
        extra={"too_big": ("n_rows", lambda: 10**8, ("allow_dense",))},
    ),
    fn(
        RG.knn_self,
        lambda: {"x": unit(10), "k": 3, "backend": "torch"},
        {"x": "x", "k": "k", "backend": "choice"},
        legal={"x:int": CAST},
    ),
    fn(
        RG.sparse_from_knn,
        lambda: {"indices": knn()[1], "values": knn()[0], "n_cols": 10},
        {"indices": "labels", "values": "x", "n_cols": "posint"},
        rows=(("indices", "values"),),
        legal={"values:int": CAST},
        extra={"column": ("n_cols", lambda: 5, ("n_cols",))},
    ),
    fn(
        RG.symmetrize,
        lambda: {"a": graph()},
        {"how": "choice"},
        extra={
            "nan": ("a", lambda: with_nan(graph()), ("a",)),
            "rect": ("a", lambda: graph()[:4], ("a",)),
        },
    ),
    fn(
        RG.mutual_affinity,
        lambda: {"scores": knn()[0], "indices": knn()[1], "n": 10},
        {"scores": "x", "gamma": "pos", "n": "posint"},
        rows=(("scores", "indices"),),
        legal={"scores:int": CAST},
        extra={"small_n": ("n", lambda: 5, ("n",))},
    ),
    fn(RG.normalize_graph, lambda: {"w": graph()}, extra=NAN_GRAPH),
    cls(
        RG.to_torch_sparse,
        lambda: {"m": graph()},
        calls=[("to_dense", None, None)],
        extra={"nan": ("m", lambda: with_nan(graph()), ("m",))},
    ),
    cls(
        RG.sparse_operator,
        lambda: {"m": graph()},
        calls=[("__call__", lambda: {"v": emb(10, 2)}, {"v": "x"})],
        extra={"nan": ("m", lambda: with_nan(graph()), ("m",))},
    ),
    fn(
        RG.in_neighbour_lists,
        lambda: {
            "indices": knn()[1],
            "rows": torch.tensor([0, 1, 2]),
            "cols": torch.tensor([1, 2, 3]),
        },
        {"indices": "labels", "rows": "labels", "cols": "labels"},
        rows=(("rows", "cols"),),
    ),
    fn(
        RG.sparse_row_topk,
        lambda: {"m": graph(), "k": 2},
        {"k": "k"},
        legal={"k:big": "a k above the widest row pads with -inf / -1 (docstring)"},
        extra={"nan": ("m", lambda: with_nan(graph()), ("m",))},
    ),
    fn(
        RG.sparse_rows_to_dense,
        lambda: {"m": graph(), "rows": torch.tensor([0, 2])},
        {"fill": "real"},
        extra={"nan": ("m", lambda: with_nan(graph()), ("m",))},
    ),
    # protocol helpers
    fn(
        PR.revisited_masks,
        {"gnd": {"easy": [0], "hard": [1], "junk": [2]}, "n_db": 5, "protocol": "medium"},
        {"n_db": "posint", "protocol": "choice"},
        extra={"outside": ("gnd", lambda: {"easy": [7]}, ("gnd",))},
    ),
    fn(
        PR.trapezoid_ap_from_positions,
        lambda: dict(zip(("positions", "valid"), positions(), strict=True)),
        {"positions": "labels", "valid": "labels"},
        rows=(("positions", "valid"),),
        extra={"zero": ("positions", lambda: torch.zeros(2, 3, dtype=torch.long), ("positions",))},
    ),
    fn(
        CS.inter_domain_from_positions,
        lambda: {
            "pos_all": positions()[0],
            "valid_all": positions()[1],
            "pos_cross": positions()[0][:, 1:],
            "valid_cross": positions()[1][:, 1:],
        },
        {
            "pos_all": "labels",
            "valid_all": "labels",
            "pos_cross": "labels",
            "valid_cross": "labels",
        },
        rows=(("pos_all", "valid_all"), ("pos_all", "pos_cross")),
    ),
    # extraction helpers
    fn(EX.list_images, lambda: {"folder": fixture("image_folder")}, {"folder": "path"}),
    fn(
        EX.preprocess_image,
        lambda: {"image": images(1, 3, 8)[0], "image_size": 4, "box": None},
        {"image": "x", "image_size": "posint", "center_crop": "prob"},
        extra={"box": ("box", lambda: [0, 0, float("nan"), 4], ("box",))},
    ),
    # synthetic descriptor sets
    fn(
        SY.DescriptorSet,
        lambda: {
            "features": [unit(6)],
            "labels": torch.arange(6) % 2,
            "domains": torch.arange(6) % 3,
        },
        {"features": "x", "labels": "labels", "domains": "labels"},
        rows=(("labels", "domains"),),
        legal={"features:int": CAST},
        extra={"none": ("features", lambda: [], ("features",))},
    ),
    fn(
        SY.bridged_clusters,
        {"n_classes": 2, "per_stage": 2, "dim": 4},
        {
            "n_classes": "posint",
            "per_stage": "posint",
            "dim": "posint",
            "step": "nonneg",
            "sigma": "nonneg",
            "seed": "nonnegint",
        },
        extra={"dim2": ("dim", lambda: 2, ("dim",))},
    ),
    fn(
        SY.multi_view_descriptors,
        {"n_classes": 2, "per_class": 3, "dim": 4, "n_views": 2},
        {
            "n_classes": "posint",
            "per_class": "posint",
            "dim": "posint",
            "n_views": "posint",
            "good": "nonneg",
            "bad": "nonneg",
            "seed": "nonnegint",
        },
    ),
    fn(
        SY.biased_home_descriptors,
        {"n_classes": 2, "per_class": 3, "dim": 4, "n_views": 2, "n_domains": 2},
        {
            "n_classes": "posint",
            "per_class": "posint",
            "dim": "posint",
            "n_views": "posint",
            "n_domains": "posint",
            "beta": "real",
            "sigma": "nonneg",
            "home": "prob",
            "seed": "nonnegint",
        },
    ),
]
