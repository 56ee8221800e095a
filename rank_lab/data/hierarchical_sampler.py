"""Hierarchical batch sampling: a few super-classes per batch (Ramzi thesis §3.5.1 / §4.4.1, SOP).

On SOP the thesis (and ROADMAP / SupRank / HAPPIER) uses the "hard" sampling of FastAP (Cakir et
al., CVPR 2019, ``[173]`` of the thesis): every batch holds the images of **two super-classes**
(e.g. bikes and coffee makers), several fine classes of each with 4 images per class. Batches are
harder ("it is harder to tell two bikes apart than a bike and a sofa") and every query has
partially relevant items (same super-class, other product) in its batch, which a hierarchical
loss needs. Official configuration (pytorch-metric-learning ``HierarchicalSampler`` in the HAPPIER
code): ``batch_size=256, samples_per_class=4, super_classes_per_batch=2,
batches_per_super_tuple=4`` (5 in some configs), ``inner_label=0`` (fine), ``outer_label=1``.

Drawing scheme (one epoch): for every combination of ``super_classes_per_batch`` distinct
super-classes, ``batches_per_super_tuple`` batches; each super-class fills ``batch_size /
super_classes_per_batch`` slots with ``samples_per_class`` images of each of several of its fine
classes (drawn without replacement when it has enough, otherwise with replacement; likewise the
images of a class). The batches of the epoch are then shuffled. ``max_batches`` caps the epoch
(a random subset of the batches); with more than 100,000 combinations (e.g. genera as
super-classes) it is required and every batch draws its super-classes at random. Deterministic given
``(seed, epoch)``; call :meth:`set_epoch`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler

from rank_lab._validation import check_labels, check_positive_int

__all__ = ["HierarchicalSampler"]

_MAX_TUPLES = 100_000


class HierarchicalSampler(Sampler[list[int]]):
    """Batch sampler with ``super_classes_per_batch`` super-classes per batch (see the module
    docstring).

    Args:
        labels: ``(N, L)`` hierarchical labels, fine first.
        batch_size: items per batch (a multiple of ``super_classes_per_batch * samples_per_class``).
        samples_per_class: images per fine class in a batch (4).
        super_classes_per_batch: super-classes per batch (2).
        batches_per_super_tuple: batches per combination of super-classes per epoch (4).
        inner_level: label column of the classes (0 = fine).
        outer_level: label column of the super-classes (1 = the parent level; -1 = the coarsest).
        max_batches: at most this many batches per epoch (None: all combinations).
        seed: seed of the draw.

    Raises:
        ValueError: labels not ``(N, L >= 2)``, fewer super-classes than
            ``super_classes_per_batch``, a batch size that does not split into super-classes and
            classes.
    """

    def __init__(
        self,
        labels: torch.Tensor | np.ndarray,
        batch_size: int = 256,
        samples_per_class: int = 4,
        super_classes_per_batch: int = 2,
        batches_per_super_tuple: int = 4,
        inner_level: int = 0,
        outer_level: int = 1,
        max_batches: int | None = None,
        seed: int = 0,
        *,
        epoch: int = 0,
    ) -> None:
        y = check_labels(labels, name="labels")
        if y.ndim != 2 or y.shape[1] < 2:
            raise ValueError(
                f"labels must be (N, L >= 2) hierarchical labels, got shape {tuple(y.shape)}"
            )
        n_levels = y.shape[1]
        inner, outer = int(inner_level) % n_levels, int(outer_level) % n_levels
        if not inner < outer:
            raise ValueError(
                f"inner_level ({inner_level}) must be a finer column than outer_level "
                f"({outer_level})"
            )
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.m = check_positive_int(samples_per_class, "samples_per_class")
        self.k = check_positive_int(super_classes_per_batch, "super_classes_per_batch")
        self.per_tuple = check_positive_int(batches_per_super_tuple, "batches_per_super_tuple")
        if self.batch_size % (self.k * self.m):
            raise ValueError(
                f"batch_size={batch_size} must be a multiple of super_classes_per_batch * "
                f"samples_per_class = {self.k * self.m}"
            )
        self.classes_per_super = self.batch_size // (self.k * self.m)
        self.max_batches = (
            None if max_batches is None else check_positive_int(max_batches, "max_batches")
        )
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.seed = int(seed)
        self.set_epoch(epoch)
        fine, sup = y[:, inner].cpu().numpy(), y[:, outer].cpu().numpy()
        self.super_classes = np.unique(sup)
        if len(self.super_classes) < self.k:
            raise ValueError(
                f"{self.k} super-classes are needed per batch but labels hold "
                f"{len(self.super_classes)}"
            )
        self._classes: dict[int, list[np.ndarray]] = {}
        for s in self.super_classes:
            idx = np.flatnonzero(sup == s)
            cls = np.unique(fine[idx])
            self._classes[int(s)] = [idx[fine[idx] == c] for c in cls]
        self.n_items = int(y.shape[0])
        self.n_tuples = math.comb(len(self.super_classes), self.k)
        if self.n_tuples > _MAX_TUPLES and self.max_batches is None:
            raise ValueError(
                f"{self.n_tuples} combinations of super-classes: pass max_batches (the batches "
                "then use random combinations)"
            )

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose draw :meth:`__iter__` yields."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = int(epoch)

    def __len__(self) -> int:
        n = self.n_tuples * self.per_tuple
        return n if self.max_batches is None else min(n, self.max_batches)

    def _half(self, s: int, rng: np.random.Generator) -> np.ndarray:
        members = self._classes[s]
        replace = len(members) < self.classes_per_super
        picked = rng.choice(len(members), self.classes_per_super, replace=replace)
        out = []
        for c in picked:
            items = members[int(c)]
            out.append(rng.choice(items, self.m, replace=len(items) < self.m))
        return np.concatenate(out)

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        supers = [int(s) for s in self.super_classes]
        if self.n_tuples > _MAX_TUPLES:  # too many combinations: a random one per batch
            tuples = [tuple(rng.choice(supers, self.k, replace=False)) for _ in range(len(self))]
        else:
            every = [
                t for t in itertools.combinations(supers, self.k) for _ in range(self.per_tuple)
            ]
            tuples = [every[int(i)] for i in rng.permutation(len(every))[: len(self)]]
        for tup in tuples:
            yield np.concatenate([self._half(int(s), rng) for s in tup]).tolist()

    def __repr__(self) -> str:
        return (
            f"HierarchicalSampler(n_items={self.n_items}, super_classes={len(self.super_classes)}, "
            f"batch_size={self.batch_size}, samples_per_class={self.m}, "
            f"super_classes_per_batch={self.k}, batches={len(self)}, seed={self.seed}, "
            f"epoch={self.epoch})"
        )
