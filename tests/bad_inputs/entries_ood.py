"""Matrix entries of :mod:`rank_lab.ood`."""

from __future__ import annotations

import torch
from torch import nn

import rank_lab.ood as O

from .factories import emb, images, labels
from .framework import cls, fn

CAST = "integer features are cast to float (check_embeddings)"


def head():
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def train():
    z = emb(24, 4)
    return {"features": z, "labels": labels(24, 3), "logits": head()(z).detach()}


def test_data():
    z = emb(6, 4, seed=5)
    return {"features": z, "logits": head()(z).detach()}


def scorer(target, init=None, roles=None, key="features", **kw):
    """fit(train) then score(data); the bad variants hit the scored tensor ``data[key]``."""
    def data():
        return {"data": test_data()[key]}

    return cls(target, init, roles, calls=[("fit", lambda: {"data": train()}, None), ("score", data, {"data": "x"})],
               legal={"score.data:int": CAST, **kw.pop("legal", {})}, **kw)


HEAT_SMALL = dict(epochs=1, hidden_dim=8, n_layers=2, batch_size=8, sgld_steps=2)

ENTRIES = [
    fn(O.avg_pool, lambda: {"fmap": images(2, 3, 4)}, {"fmap": "x"}),
    fn(O.std_pool, lambda: {"fmap": images(2, 3, 4)}, {"fmap": "x"}),
    fn(O.extract_features, lambda: {"model": nn.Sequential(nn.Flatten(), nn.Linear(48, 4)), "data": images(3, 3, 4), "progress": False},
       {"data": "x", "batch_size": "posint"}),
    cls(O.LogitEnergy, lambda: {"weight": torch.randn(3, 4)}, {"weight": "x", "temperature": "pos"},
        calls=[("energy", lambda: {"z": emb(5)}, {"z": "x"})], legal={"energy.z:int": CAST, "weight:int": CAST}),
    cls(O.ClassGaussianEnergy, {}, {"temperature": "pos", "reg": "nonneg", "weights": "choice"},
        calls=[("fit", lambda: {"z": emb(24), "labels": labels(24, 3)}, {"z": "x", "labels": "labels"}),
               ("energy", lambda: {"z": emb(5, seed=3)}, {"z": "x"})],
        rows=(("fit.z", "fit.labels"),), legal={"*z:int": CAST}),
    cls(O.ZeroEnergy, {}, calls=[("fit", lambda: {"z": emb(8)}, {"z": "x"}), ("energy", lambda: {"z": emb(5, seed=3)}, {"z": "x"})],
        legal={"*z:int": CAST}),
    fn(O.sgld, lambda: {"energy_fn": lambda z: (z ** 2).sum(1), "z0": emb(4), "steps": 3}, {"z0": "x", "steps": "nonnegint",
                                                                                           "grad_scale": "nonneg", "schedule": "choice"}),
    fn(O.schedule_values, {"spec": (0.1, 0.01), "steps": 3}, {"steps": "nonnegint", "kind": "choice", "power": "pos"}),
    fn(O.HEATConfig, {}, {"hidden_dim": "posint", "n_layers": "posint", "epochs": "posint", "batch_size": "posint", "lr": "pos",
                          "lam": "nonneg", "sgld_steps": "nonnegint"}),
    cls(O.ResidualMLP, {"in_dim": 4, "hidden_dim": 8, "n_layers": 2}, {"in_dim": "posint", "hidden_dim": "posint", "n_layers": "posint"},
        calls=[("__call__", lambda: {"z": emb(5)}, {"z": "x"})]),
    cls(O.HybridEnergy, lambda: {"prior": O.ClassGaussianEnergy(), "dim": 4, **HEAT_SMALL}, {"dim": "posint"},
        calls=[("fit", lambda: {"z": emb(16), "labels": labels(16, 2), "progress": False, "device": "cpu"}, {"z": "x", "labels": "labels"}),
               ("energy", lambda: {"z": emb(5, seed=3)}, {"z": "x"})],
        rows=(("fit.z", "fit.labels"),), legal={"*z:int": CAST}),
    fn(O.compose_energies, lambda: {"energies": emb(5, 2)}, {"energies": "x", "beta": "real"}, legal={"energies:int": CAST}),
    cls(O.HEAT, lambda: {"components": {"a": O.HybridEnergy(O.ClassGaussianEnergy(), 4, **HEAT_SMALL)}}, {"beta": "real"}),
    cls(O.OODScorer),
    fn(O.as_head, lambda: {"head": (torch.randn(3, 4), torch.zeros(3))}, extra={"bias_shape": ("head", lambda: (torch.randn(3, 4), torch.zeros(2)), ("head",))}),
    scorer(O.MSP, key="logits"),
    scorer(O.MaxLogit, key="logits"),
    scorer(O.EnergyScore, {}, {"temperature": "pos"}, key="logits"),
    scorer(O.ODIN, {"epsilon": 0.0}, {"temperature": "pos", "epsilon": "nonneg"}, key="logits"),
    scorer(O.KLMatching, key="logits"),
    scorer(O.ReAct, lambda: {"head": head()}, {"percentile": "prob"}),
    scorer(O.DICE, lambda: {"head": head()}, {"sparsity": "prob"}),
    scorer(O.Mahalanobis, {}, {"covariance": "choice", "reg": "nonneg"}),
    scorer(O.SSD, {}, {"covariance": "choice", "reg": "nonneg"}),
    scorer(O.GMM, {}, {"weights": "choice", "reg": "nonneg"}),
    scorer(O.KNN, {"k": 3}, {"k": "k", "backend": "choice"}),
    scorer(O.ViM, lambda: {"head": head(), "principal_dim": 2}, {"principal_dim": "posint"}),
    scorer(O.Residual, lambda: {"head": head(), "principal_dim": 2}, {"principal_dim": "posint"}),
    fn(O.kth_neighbour_distance, lambda: {"queries": emb(4), "bank": emb(10, seed=2), "k": 3}, {"queries": "x", "bank": "x", "k": "k"},
       legal={"*:int": CAST}),
    scorer(O.ResFlow, {"n_blocks": 1, "hidden_dim": 8, "epochs": 1, "batch_size": 8}, {"n_blocks": "posint", "epochs": "posint", "lr": "pos",
                                                                                      "coeff": "prob", "reduction": "choice"}),
]
