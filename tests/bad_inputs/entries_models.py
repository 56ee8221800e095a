"""Matrix entries of :mod:`rank_lab.models`."""

from __future__ import annotations

import torch

import rank_lab.models as MO
import rank_lab.models.backbones as BB
import rank_lab.models.heads as HD
import rank_lab.models.pooling as PL
import rank_lab.models.recall_head as RH
import rank_lab.models.weights as W

from .factories import emb, images, labels
from .framework import cls, fn

MAP = {"x": "x"}
MAP_LEGAL = {"__call__.x:empty": "an empty batch maps to an empty batch of descriptors"}
NET_LEGAL = {"__call__.x:empty": "an empty batch maps to an empty batch of embeddings"}
GREY = "a (B, H, W) input is a batch of grey images when in_channels = 1 (documented in forward)"


def _weights_file() -> str:
    import tempfile

    path = tempfile.mkdtemp(prefix="rank_lab_matrix_") + "/w.pth"
    torch.save(MO.TinyCNN(1, 4).state_dict(), path)
    return path


def _not_module():
    return 3


def fmap():
    return {"x": images(2, 3, 4)}


def pool(target, init=None, roles=None):
    return cls(target, init, roles, calls=[("__call__", fmap, MAP)], legal=MAP_LEGAL)


ENTRIES = [
    pool(MO.GeM, {"p": 3.0}, {"p": "pos", "eps": "pos"}),
    pool(MO.MAC),
    pool(MO.SPoC),
    pool(MO.RMAC, {"levels": 2}, {"levels": "posint", "overlap": "prob", "eps": "pos"}),
    fn(
        MO.rmac_regions,
        {"height": 8, "width": 8},
        {"height": "posint", "width": "posint", "levels": "posint", "overlap": "prob"},
    ),
    fn(MO.build_pooling, {"name": "gem"}, {"name": "choice"}),
    fn(PL.list_poolings, {"filter": "*a*"}, extra={"number": ("filter", lambda: 5, ("filter",))}),
    fn(BB.list_backbones, {"filter": "*"}, extra={"number": ("filter", lambda: 5, ("filter",))}),
    cls(
        MO.MLPBackbone,
        {"input_dim": 6, "hidden_dims": (8,)},
        {"input_dim": "posint"},
        calls=[("__call__", lambda: {"x": emb(3, 6)}, {"x": "x"})],
        legal=NET_LEGAL,
    ),
    cls(
        MO.TinyCNN,
        {"in_channels": 1, "width": 4},
        {"in_channels": "posint", "width": "posint"},
        calls=[("__call__", lambda: {"x": images(2, 1, 8)}, {"x": "x"})],
        legal={**NET_LEGAL, "__call__.x:ndim-": GREY},
    ),
    cls(
        MO.TimmBackbone,
        {"name": "test_resnet", "in_chans": 1},
        {"name": "choice", "in_chans": "posint"},
        calls=[("__call__", lambda: {"x": images(2, 1, 16)}, {"x": "x"})],
        legal=NET_LEGAL,
    ),
    fn(
        MO.build_backbone,
        {"name": "tiny_cnn", "in_channels": 1, "width": 4},
        {"name": "choice", "in_channels": "posint", "width": "posint"},
    ),
    fn(
        MO.freeze_batchnorm,
        lambda: {"module": MO.TinyCNN(1, 4)},
        extra={"not_module": ("module", lambda: 3, ("module",))},
    ),
    fn(
        MO.load_backbone_weights,
        lambda: {"module": MO.TinyCNN(1, 4), "path": _weights_file()},
        {"path": "path"},
    ),
    cls(
        MO.EmbeddingHead,
        {"in_dim": 6, "embed_dim": 4},
        {"in_dim": "posint", "embed_dim": "posint"},
        calls=[("__call__", lambda: {"x": emb(3, 6)}, {"x": "x"})],
        legal=NET_LEGAL,
    ),
    cls(
        MO.EmbeddingModel,
        lambda: dict(backbone=MO.MLPBackbone(6, (8,)), pooling=None, head=MO.EmbeddingHead(8, 4)),
        calls=[("__call__", lambda: {"x": emb(3, 6)}, {"x": "x"})],
        legal=NET_LEGAL,
    ),
    fn(
        MO.ModelConfig,
        {},
        {"backbone": "choice", "pooling": "choice", "gem_p": "pos", "embed_dim": "posint"},
    ),
    fn(
        MO.build_model,
        lambda: {
            "config": {"backbone": "mlp", "input_dim": 6, "hidden_dims": (8,), "embed_dim": 4}
        },
        extra={"bad_type": ("config", lambda: 3, ("config",))},
    ),
    # rank_lab.models.recall_head
    cls(
        RH.RecallHead,
        {"in_dim": 3, "embed_dim": 4},
        {"in_dim": "posint", "embed_dim": "posint", "gem_p": "pos"},
        calls=[("__call__", fmap, MAP)],
        legal=NET_LEGAL,
    ),
    cls(
        RH.RecallEmbedder,
        lambda: {"backbone": MO.TinyCNN(3, 2), "in_dim": 8, "embed_dim": 4},
        {"in_dim": "posint", "embed_dim": "posint"},
        calls=[("__call__", lambda: {"x": images(2, 3, 8)}, MAP)],
        legal=NET_LEGAL,
        extra={"not_module": ("backbone", _not_module, ("backbone",))},
    ),
    # rank_lab.models.weights
    fn(W.WeightsUnavailableError),
    cls(W.WeightsFileError),
    fn(
        W.parse_weights,
        {"weights": "none"},
        {"weights": "path"},
        extra={"not_str": ("weights", lambda: 3, ("weights",))},
    ),
    fn(W.timm_pretrained_name, {"name": "resnet18"}, {"name": "choice"}),
    fn(W.file_sha256, lambda: {"path": _weights_file()}, {"path": "path"}),
    fn(W.file_record, lambda: {"path": _weights_file()}, {"path": "path"}),
    fn(
        W.load_weights_file,
        lambda: {"module": MO.TinyCNN(1, 4), "path": _weights_file()},
        {"path": "path"},
        extra={"not_module": ("module", _not_module, ("module",))},
    ),
    fn(
        W.create_timm_model,
        {"name": "test_resnet", "weights": "none", "num_classes": 0},
        {"name": "choice", "weights": "path"},
    ),
    fn(
        W.check_weights,
        {"weights": "none", "backbone": "resnet18", "fetch": False},
        {"weights": "path"},
        extra={"not_str": ("backbone", lambda: 3, ("backbone",))},
    ),
    fn(
        W.find_weights_record,
        lambda: {"module": MO.TinyCNN(1, 4)},
        extra={"not_module": ("module", _not_module, ("module",))},
    ),
]

# ------------------------------------------------------------------ the prototype (cosine)
# classifier head
Z_LEGAL = {"z:int": "integer features are cast to float (check_embeddings)"}
ZL = {"z": "x", "labels": "labels"}
ZL_ROWS = (("z", "labels"),)
LABEL_RANGE = {"range": ("labels", lambda: labels(12, 3) + 5, ("labels",))}


def _protos(k=3, d=4, seed=7):
    return emb(k, d, seed=seed)


ENTRIES += [
    fn(
        HD.prototype_logits,
        lambda: dict(z=emb(12), prototypes=_protos()),
        {"z": "x", "prototypes": "x", "temperature": "pos"},
        legal={"*:int": "integer vectors are cast to float (check_embeddings)"},
        extra={"dim": ("prototypes", lambda: emb(3, 5), ("prototypes",))},
    ),
    fn(
        HD.class_means,
        lambda: dict(z=emb(12), labels=labels(12), n_classes=3),
        {**ZL, "n_classes": "posint"},
        rows=ZL_ROWS,
        legal=Z_LEGAL,
        extra=LABEL_RANGE,
    ),
    cls(
        HD.PrototypeClassifier,
        {"dim": 4, "n_classes": 3},
        {"dim": "posint", "n_classes": "posint", "temperature": "pos"},
        calls=[("__call__", lambda: dict(z=emb(5)), {"z": "x"})],
        legal={"__call__.z:int": "integer features are cast to float"},
    ),
]
