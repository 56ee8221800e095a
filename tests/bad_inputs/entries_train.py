"""Matrix entries of :mod:`rank_lab.train`."""

from __future__ import annotations

import torch

import rank_lab.train as T
from rank_lab.models import MLPBackbone

from .factories import emb, labels
from .framework import cls, fn

CFG = dict(backbone="mlp", hidden_dims=(8,), embed_dim=4, batch_size=8, m_per_class=4, epochs=1, batches_per_epoch=1,
           eval_ks=(1, 2), progress=False, amp=False, loss="smooth_ap")


def _train():
    return dict(model=None, loss=None, train_data=(emb(16, 6), labels(16, 4)), test_data=(emb(8, 6, seed=3), labels(8, 2)),
                config=dict(CFG))


def _nan_x():
    x = emb(16, 6)
    x[0, 0] = float("nan")
    return (x, labels(16, 4))


def _checkpoint_file() -> str:
    import tempfile

    path = tempfile.mkdtemp(prefix="rank_lab_matrix_") + "/last.pt"
    torch.save({"model": {}, "epoch": 0}, path)
    return path


TRAIN_EXTRA = {
    "nan": ("train_data", _nan_x, ("train_data", "embeddings")),
    "float_labels": ("train_data", lambda: (emb(16, 6), labels(16, 4).double()), ("train_data", "labels")),
    "rows": ("train_data", lambda: (emb(16, 6), labels(15, 4)), ("train_data",)),
    "eval_ks_big": ("test_data", lambda: (emb(2, 6), labels(2, 1)), ("eval_ks",)),
    "bad_config": ("config", lambda: {**CFG, "lr": -1.0}, ("lr",)),
    "unknown_key": ("config", lambda: {**CFG, "lrr": 1.0}, ("lrr",)),
}

ENTRIES = [
    fn(T.TrainConfig, {}, {"epochs": "posint", "batch_size": "posint", "lr": "pos", "optimizer": "choice", "scheduler": "choice",
                           "warmup_epochs": "nonnegint", "eval_every": "nonnegint", "grad_clip": "pos"}),
    fn(T.list_presets),
    cls(T.Trainer, _train, calls=[("fit", None, None)], extra=TRAIN_EXTRA),
    cls(T.DistributedTrainer, lambda: {**_train(), "config": {**CFG, "device": "cpu"}}, {"eval_index": "choice"},
        calls=[("fit", None, None)], extra={k: v for k, v in TRAIN_EXTRA.items() if k not in ("bad_config", "unknown_key")}),
    cls(T.DistributedMPerClassSampler, lambda: dict(labels=labels(24, 6), m=2, batch_size=4, num_replicas=1, rank=0),
        {"labels": "labels", "m": "posint", "batch_size": "posint"}, calls=[("__iter__", None, None)]),
    fn(T.all_gather_with_grad, lambda: {"x": emb(3)}, {"x": "x"},
       legal={f"x:{k}": "rows of any trailing shape (or none) are gathered unchanged, an empty set of rows too"
              for k in ("ndim+", "ndim-", "empty")}),
    fn(T.init_distributed, {"device": "cpu"}, {"backend": "choice"}),
    fn(T.as_dataset, lambda: {"data": (emb(4), labels(4))}, extra={
        "rows": ("data", lambda: (emb(4), labels(3)), ("data",)),
        "not_data": ("data", lambda: [1, 2, 3], ("data",))}),
    fn(T.embed_dataset, lambda: {"model": MLPBackbone(4, (4,)), "data": (emb(4), labels(4))}, {"batch_size": "posint"},
       extra={"nan": ("data", lambda: (torch.full((4, 4), float("nan")), labels(4)), ("data", "embeddings"))}),
    fn(T.relabel, lambda: {"labels": labels(6) * 5}, {"labels": "labels"}),
    fn(T.load_checkpoint, lambda: {"path": _checkpoint_file()}, {"path": "path"}),
    fn(T.lr_at, {"step": 3, "base_lr": 0.1, "total_steps": 10, "warmup_steps": 2},
       {"step": "nonnegint", "base_lr": "pos", "total_steps": "posint", "warmup_steps": "nonnegint", "schedule": "choice", "min_lr": "nonneg"}),
]
