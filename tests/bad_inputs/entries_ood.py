"""Matrix entries of :mod:`rank_lab.ood`."""

from __future__ import annotations

import tempfile

import torch
from torch import nn

import rank_lab.ood as O
import rank_lab.ood.resflow as RF
import rank_lab.ood.toy as T

from .factories import emb, images, labels
from .framework import cls, fn

CAST = "integer features are cast to float (check_embeddings)"
SPATIAL = "fmap is (N, C, *spatial) with any number >= 1 of spatial dims (documented)"
BETA_INF = "beta = +inf gives the max of the energies (Eq. 5.7's limit, documented)"
ELEMENTWISE = "an elementwise activation: any shape, an empty tensor included (documented)"


def head():
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def train():
    z = emb(24, 4)
    return {"features": z, "labels": labels(24, 3), "logits": head()(z).detach()}


def test_data():
    z = emb(6, 4, seed=5)
    return {"features": z, "logits": head()(z).detach()}


def feature_sets():
    z, y = emb(6, 4), labels(6, 3)
    head_ = head()
    s = {"features": z, "logits": head_(z).detach(), "labels": y}
    return {
        "train": s,
        "test": dict(s),
        "ood/noise": {"features": z[:3], "logits": s["logits"][:3]},
    }, head_


def save_args():
    sets, head_ = feature_sets()
    return {"root": tempfile.mkdtemp(prefix="rank_lab_matrix_"), "sets": sets, "head": head_}


def saved_folder():
    a = save_args()
    O.save_feature_folder(**a)
    return {"root": a["root"]}


def with_nan_features():
    sets, _ = feature_sets()
    sets["train"]["features"] = sets["train"]["features"].clone()
    sets["train"]["features"][0, 0] = float("nan")
    return sets


def ring_energy(z):
    return (z.pow(2).sum(1) - 1).pow(2)


def scorer(target, init=None, roles=None, key="features", **kw):
    """fit(train) then score(data); the bad variants hit the scored tensor ``data[key]``."""

    def data():
        return {"data": test_data()[key]}

    return cls(
        target,
        init,
        roles,
        calls=[("fit", lambda: {"data": train()}, None), ("score", data, {"data": "x"})],
        legal={"score.data:int": CAST, **kw.pop("legal", {})},
        **kw,
    )


HEAT_SMALL = dict(epochs=1, hidden_dim=8, n_layers=2, batch_size=8, sgld_steps=2)

ENTRIES = [
    fn(
        T.make_split_classes,
        {"n_per_class": 4, "n_ood": 4, "n_classes": 2, "dim": 3},
        {
            "n_per_class": "posint",
            "n_ood": "posint",
            "n_classes": "posint",
            "dim": "posint",
            "radius": "pos",
            "offset": "nonneg",
            "noise": "pos",
            "seed": "nonnegint",
        },
    ),
    fn(O.avg_pool, lambda: {"fmap": images(2, 3, 4)}, {"fmap": "x"}, legal={"fmap:ndim?": SPATIAL}),
    fn(O.std_pool, lambda: {"fmap": images(2, 3, 4)}, {"fmap": "x"}, legal={"fmap:ndim?": SPATIAL}),
    fn(
        O.extract_features,
        lambda: {
            "model": nn.Sequential(nn.Flatten(), nn.Linear(48, 4)),
            "data": images(3, 3, 4),
            "progress": False,
        },
        {"data": "x", "batch_size": "posint"},
    ),
    cls(
        O.LogitEnergy,
        lambda: {"weight": torch.randn(3, 4)},
        {"weight": "x", "temperature": "pos"},
        calls=[("energy", lambda: {"z": emb(5)}, {"z": "x"})],
        legal={"energy.z:int": CAST, "weight:int": CAST},
    ),
    cls(
        O.ClassGaussianEnergy,
        {},
        {"temperature": "pos", "reg": "nonneg", "weights": "choice"},
        calls=[
            (
                "fit",
                lambda: {"z": emb(24), "labels": labels(24, 3)},
                {"z": "x", "labels": "labels"},
            ),
            ("energy", lambda: {"z": emb(5, seed=3)}, {"z": "x"}),
        ],
        rows=(("fit.z", "fit.labels"),),
        legal={"*z:int": CAST},
    ),
    cls(
        O.ZeroEnergy,
        {},
        calls=[
            ("fit", lambda: {"z": emb(8)}, {"z": "x"}),
            ("energy", lambda: {"z": emb(5, seed=3)}, {"z": "x"}),
        ],
        legal={"*z:int": CAST},
    ),
    fn(
        O.sgld,
        lambda: {"energy_fn": lambda z: (z**2).sum(1), "z0": emb(4), "steps": 3},
        {"z0": "x", "steps": "nonnegint", "grad_scale": "nonneg", "schedule": "choice"},
    ),
    fn(
        O.schedule_values,
        {"spec": (0.1, 0.01), "steps": 3},
        {"steps": "nonnegint", "kind": "choice", "power": "pos"},
    ),
    fn(
        O.HEATConfig,
        {},
        {
            "hidden_dim": "posint",
            "n_layers": "posint",
            "epochs": "posint",
            "batch_size": "posint",
            "lr": "pos",
            "lam": "nonneg",
            "sgld_steps": "nonnegint",
        },
    ),
    cls(
        O.ResidualMLP,
        {"in_dim": 4, "hidden_dim": 8, "n_layers": 2},
        {"in_dim": "posint", "hidden_dim": "posint", "n_layers": "posint"},
        calls=[("__call__", lambda: {"z": emb(5)}, {"z": "x"})],
    ),
    cls(
        O.HybridEnergy,
        lambda: {"prior": O.ClassGaussianEnergy(), "dim": 4, **HEAT_SMALL},
        {"dim": "posint"},
        calls=[
            (
                "fit",
                lambda: {"z": emb(16), "labels": labels(16, 2), "device": "cpu"},
                {"z": "x", "labels": "labels"},
            ),
            ("energy", lambda: {"z": emb(5, seed=3)}, {"z": "x"}),
        ],
        rows=(("fit.z", "fit.labels"),),
        legal={"*z:int": CAST},
    ),
    fn(
        O.compose_energies,
        lambda: {"energies": emb(5, 2)},
        {"energies": "x", "beta": "real"},
        legal={"energies:int": CAST, "beta:inf": BETA_INF},
    ),
    cls(
        O.HEAT,
        lambda: {"components": {"a": O.HybridEnergy(O.ClassGaussianEnergy(), 4, **HEAT_SMALL)}},
        {"beta": "real"},
        legal={"beta:inf": BETA_INF},
    ),
    cls(O.OODScorer),
    fn(
        O.as_head,
        lambda: {"head": (torch.randn(3, 4), torch.zeros(3))},
        extra={"bias_shape": ("head", lambda: (torch.randn(3, 4), torch.zeros(2)), ("head",))},
    ),
    scorer(O.MSP, key="logits"),
    scorer(O.MaxLogit, key="logits"),
    scorer(O.EnergyScore, {}, {"temperature": "pos"}, key="logits"),
    scorer(O.ODIN, {"epsilon": 0.0}, {"temperature": "pos", "epsilon": "nonneg"}, key="logits"),
    scorer(O.KLMatching, key="logits"),
    scorer(
        O.ReAct,
        lambda: {"head": head(), "percentile": 90.0},
        {"percentile": "pos"},
        extra={"above100": ("percentile", lambda: 150.0, ("percentile",))},
    ),
    scorer(O.DICE, lambda: {"head": head()}, {"sparsity": "prob"}),
    scorer(O.Mahalanobis, {}, {"covariance": "choice", "reg": "nonneg"}),
    scorer(O.SSD, {}, {"covariance": "choice", "reg": "nonneg"}),
    scorer(O.GMM, {}, {"weights": "choice", "reg": "nonneg"}),
    scorer(O.KNN, {"k": 3}, {"k": "k", "backend": "choice"}),
    scorer(O.ViM, lambda: {"head": head(), "principal_dim": 2}, {"principal_dim": "posint"}),
    scorer(O.Residual, lambda: {"head": head(), "principal_dim": 2}, {"principal_dim": "posint"}),
    fn(
        O.kth_neighbour_distance,
        lambda: {"queries": emb(4), "bank": emb(10, seed=2), "k": 3},
        {"queries": "x", "bank": "x", "k": "k"},
        legal={"*:int": CAST},
    ),
    scorer(
        RF.ResFlow,
        {"n_blocks": 1, "hidden_dim": 8, "epochs": 1, "batch_size": 8},
        {
            "n_blocks": "posint",
            "epochs": "posint",
            "lr": "pos",
            "coeff": "prob",
            "reduction": "choice",
        },
    ),
    fn(
        O.save_feature_folder,
        save_args,
        extra={
            "bad_key": ("sets", lambda: {"val": feature_sets()[0]["train"]}, ("sets",)),
            "nan": ("sets", with_nan_features, ("sets",)),
            "head_shape": ("head", lambda: nn.Linear(3, 3), ("head",)),
        },
    ),
    fn(O.load_feature_folder, saved_folder, {"root": "path"}),
    cls(
        RF.LipSwish,
        calls=[("__call__", lambda: {"x": emb(3, 4)}, {"x": "x"})],
        legal={"__call__.x:ndim?": ELEMENTWISE, "__call__.x:empty": ELEMENTWISE},
    ),
    cls(
        RF.InvertibleResidualBlock,
        {"dim": 4, "hidden_dim": 8},
        {"dim": "posint", "hidden_dim": "posint", "n_layers": "posint", "coeff": "prob"},
        calls=[
            (
                "__call__",
                lambda: {"x": emb(3, 4), "n_terms": 2},
                {"x": "x", "n_terms": "posint", "n_samples": "posint", "logdet": "choice"},
            )
        ],
    ),
    cls(
        RF.ResidualFlow,
        {"dim": 4, "n_classes": 2, "n_blocks": 1, "hidden_dim": 8},
        {"dim": "posint", "n_classes": "posint", "n_blocks": "posint"},
        calls=[("class_log_likelihood", lambda: {"x": emb(3, 4), "n_terms": 2}, {"x": "x"})],
    ),
    cls(
        T.SmallConvNet,
        {"n_classes": 3, "width": 4},
        {"n_classes": "posint", "in_channels": "posint", "width": "posint"},
        calls=[("__call__", lambda: {"x": images(2, 1, 6)}, {"x": "x"})],
    ),
    fn(
        T.energy_grid,
        {"energy_fn": ring_energy, "bounds": (-2.0, 2.0, -2.0, 2.0), "n": 5},
        {"n": "posint"},
        extra={
            "nan": ("energy_fn", lambda: lambda z: z[:, 0] * float("nan"), ("energy_fn",)),
            "bounds": ("bounds", lambda: (1.0, -1.0, -1.0, 1.0), ("bounds",)),
        },
    ),
    fn(T.make_ring_ood, {"n": 5}, {"n": "posint", "kind": "choice", "radius": "pos"}),
    fn(
        T.make_ring_segments,
        {"n_per_class": 5},
        {
            "n_per_class": "posint",
            "n_classes": "posint",
            "radius": "pos",
            "noise": "nonneg",
            "gap": "nonneg",
        },
    ),
    fn(
        T.train_classifier,
        lambda: {
            "model": T.SmallConvNet(3, width=4),
            "x": images(6, 1, 6),
            "y": labels(6, 3),
            "epochs": 1,
            "batch_size": 3,
            "device": "cpu",
        },
        {
            "x": "x",
            "y": "labels",
            "epochs": "posint",
            "batch_size": "posint",
            "lr": "pos",
            "weight_decay": "nonneg",
        },
        rows=(("x", "y"),),
    ),
]
