"""Matrix entries of :mod:`rank_lab.memory` and :mod:`rank_lab.utils`."""

from __future__ import annotations

import rank_lab.losses as L
import rank_lab.memory as MEM
import rank_lab.utils as U

from .factories import emb, labels
from .framework import cls, fn

ENTRIES = [
    cls(MEM.CrossBatchMemory, {"size": 8, "dim": 4}, {"size": "posint", "dim": "posint", "n_levels": "nonnegint"},
        calls=[("enqueue", lambda: dict(embeddings=emb(6), labels=labels(6)), {"embeddings": "x", "labels": "labels"})],
        rows=(("enqueue.embeddings", "enqueue.labels"),), legal={"enqueue.embeddings:int": "integer vectors are cast to float"}),
    cls(MEM.MemoryLoss, lambda: dict(loss=L.SmoothAP(), memory=MEM.CrossBatchMemory(24, 4), activate_after=1),
        {"batch_weight": "nonneg", "memory_weight": "nonneg", "activate_after": "nonnegint"},
        calls=[("__call__", lambda: dict(embeddings=emb(12), labels=labels(12)), {"embeddings": "x", "labels": "labels"})],
        rows=(("__call__.embeddings", "__call__.labels"),), legal={"__call__.embeddings:int": "integer vectors are cast to float"}),
    fn(U.get_device, {"device": "cpu"}, {"device": "choice"}),
    fn(U.seed_everything, {"seed": 0}, {"seed": "nonnegint"}),
]
