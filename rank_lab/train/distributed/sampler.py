"""The distributed m-per-class sampler: each rank's share of the global m-per-class batches.

Rank losses must rank the batch of a multi-GPU run as *one* batch (Ramzi thesis Eq. 3.6: the
decomposability gap shrinks as ``B / N`` grows), so the global batch is drawn once, from
``(seed, epoch)`` only, and cut into ``W`` contiguous slices of whole class groups. The slices of
all ranks concatenated in rank order *are* the single-process batch, which makes checkpoints
rank-agnostic (see :mod:`rank_lab.train.distributed`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler

from rank_lab._validation import check_labels, check_positive_int
from rank_lab.data import MPerClassSampler
from rank_lab.train.distributed.env import current_env

__all__ = ["DistributedMPerClassSampler"]


class DistributedMPerClassSampler(Sampler[list[int]]):
    """Each rank's share of the global m-per-class batches (whole class groups per rank).

    The global batch of ``batch_size`` items (``batch_size // m`` classes x ``m`` items, drawn by
    :class:`rank_lab.data.MPerClassSampler` from ``(seed, epoch)``; Ramzi thesis §3.5.1) is cut into
    ``W`` contiguous slices of ``batch_size / W`` items; rank ``r`` yields slice ``r``.

    Invariants (tested): every rank yields ``len(self)`` batches of ``batch_size / W`` indices;
    within a batch a class lives on one rank only, with its ``m`` items; the slices of all ranks
    concatenated in rank order equal the single-process batch; the draw depends only on
    ``(seed, epoch)``, not on ``W``.

    Args:
        labels: ``(N,)`` or ``(N, L)`` (column 0 used) class ids.
        m: items per class.
        batch_size: **global** batch size (all ranks), a multiple of ``m``.
        length: items per epoch (default ``N``), as :class:`~rank_lab.data.MPerClassSampler`.
        seed: seed of the draw.
        num_replicas: ``W`` (default: the process group's world size, 1 without one).
        rank: this rank (default: the process group's rank).
        epoch: initial epoch; call :meth:`set_epoch` before every epoch.

    Raises:
        ValueError: ``batch_size // m`` classes cannot be split evenly over ``W`` ranks, a bad rank.
    """

    def __init__(
        self,
        labels: torch.Tensor | np.ndarray | list[int],
        m: int = 4,
        batch_size: int = 32,
        length: int | None = None,
        seed: int = 0,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        epoch: int = 0,
    ) -> None:
        env = current_env()
        self.num_replicas = check_positive_int(
            env.world_size if num_replicas is None else num_replicas, "num_replicas"
        )
        self.rank = env.rank if rank is None else rank
        if (
            isinstance(self.rank, bool)
            or not isinstance(self.rank, (int, np.integer))
            or not 0 <= self.rank < self.num_replicas
        ):
            raise ValueError(f"rank must be an int in [0, {self.num_replicas}), got {rank!r}")
        y = check_labels(labels, name="labels")
        self._fine = (y if y.ndim == 1 else y[:, 0]).cpu().numpy()
        self.global_sampler = MPerClassSampler(
            y, m=m, batch_size=batch_size, length=length, seed=seed, epoch=epoch
        )
        cpb = self.global_sampler.classes_per_batch
        if cpb % self.num_replicas:
            raise ValueError(
                f"batch_size // m = {cpb} classes per global batch cannot be split over "
                f"{self.num_replicas} ranks: choose batch_size = m * (a multiple of "
                f"{self.num_replicas})"
            )
        self.m, self.batch_size = self.global_sampler.m, self.global_sampler.batch_size
        self.local_batch_size = self.batch_size // self.num_replicas

    @property
    def epoch(self) -> int:
        """The epoch whose draw :meth:`__iter__` yields."""
        return self.global_sampler.epoch

    @property
    def seed(self) -> int:
        """Seed of the draw."""
        return self.global_sampler.seed

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (the same on every rank)."""
        self.global_sampler.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches per epoch, the same on every rank (that of the global sampler)."""
        return len(self.global_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        a, b = self.rank * self.local_batch_size, (self.rank + 1) * self.local_batch_size
        for batch in self.global_sampler:
            groups = self._fine[np.asarray(batch)].reshape(-1, self.m)
            if not (groups == groups[:, :1]).all():  # the cut relies on contiguous class groups
                raise RuntimeError("MPerClassSampler no longer yields contiguous class groups")
            yield batch[a:b]

    def __repr__(self) -> str:
        return (
            f"DistributedMPerClassSampler(rank={self.rank}, num_replicas={self.num_replicas}, "
            f"batch_size={self.batch_size} (local {self.local_batch_size}), m={self.m}, "
            f"batches={len(self)}, seed={self.seed}, epoch={self.epoch})"
        )
