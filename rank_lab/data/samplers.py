"""Class-balanced batch sampling for metric learning.

The **m-per-class sampler** of the Ramzi thesis §3.5.1 (and §4.4.1; after NormSoftmax, ref. [66] of
the thesis): every batch of ``B`` items holds ``B / m`` distinct classes with ``m`` items each
(``B = 128``, ``m = 4``, 32 classes on CUB / iNaturalist in the thesis). Rank losses need it: a
random batch over thousands of classes would hold almost no positive pair.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler

from rank_lab._validation import check_labels, check_positive_int

__all__ = ["MPerClassSampler"]


class MPerClassSampler(Sampler[list[int]]):
    """Batch sampler: ``batch_size // m`` distinct classes per batch, ``m`` items of each.

    Ramzi thesis §3.5.1 ("we choose a batch size (e.g. 128) and a number of samples per class
    (e.g. 4). We then randomly sample classes (e.g. 32) to construct our batches").
    Use it as ``DataLoader(dataset, batch_sampler=sampler)``.

    Drawing scheme (one epoch). Each class ``c`` with ``n_c`` items is cut into
    ``max(1, round(n_c / m))`` "slots" of ``m`` items; a batch picks ``batch_size // m`` distinct
    classes with probability proportional to their remaining slots (without replacement), and each
    picked class gives its next ``m`` items from a per-class random permutation (re-shuffled when
    exhausted, so the ``m`` items of a class in a batch are always distinct). With the default
    ``length = N`` every item is seen about once per epoch, big classes in more batches than small
    ones. When the slots run out before the epoch ends (``length > N``, or too few classes left to
    fill a batch) they are refilled. A class with **fewer than m items** gives all its items plus
    ``m - n_c`` drawn again with replacement: the only case where a batch repeats an index.

    Determinism: the draw depends only on ``(seed, epoch)``; call :meth:`set_epoch` before every
    epoch (as with :class:`torch.utils.data.DistributedSampler`), otherwise every epoch repeats
    the same batches.

    Args:
        labels: ``(N,)`` class ids, or ``(N, L)`` hierarchical labels (column 0 = fine is used).
        m: items per class in a batch.
        batch_size: items per batch; must be a multiple of ``m``.
        length: items per epoch (default ``N``); the number of batches is
            ``max(1, length // batch_size)``.
        seed: seed of the draw.

    Raises:
        ValueError: ``batch_size`` not a multiple of ``m``, fewer than ``batch_size // m``
            classes, empty labels, non-positive sizes.
        TypeError: non-integer labels or sizes.
    """

    def __init__(
        self,
        labels: torch.Tensor | np.ndarray | list[int],
        m: int = 4,
        batch_size: int = 32,
        length: int | None = None,
        seed: int = 0,
        *,
        epoch: int = 0,
    ) -> None:
        y = check_labels(labels, name="labels")
        if y.ndim == 2:
            y = y[:, 0]
        self.m = check_positive_int(m, "m")
        self.batch_size = check_positive_int(batch_size, "batch_size")
        if self.batch_size % self.m:
            raise ValueError(f"batch_size={batch_size} must be a multiple of m={m}")
        self.classes_per_batch = self.batch_size // self.m
        self.n_items = int(y.shape[0])
        self.length = self.n_items if length is None else check_positive_int(length, "length")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.seed = int(seed)
        self.set_epoch(epoch)
        y_np = y.cpu().numpy()
        self.classes, inverse = np.unique(y_np, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        counts = np.bincount(inverse, minlength=len(self.classes))
        self._members = np.split(order, np.cumsum(counts)[:-1])  # item indices of each class
        if len(self.classes) < self.classes_per_batch:
            raise ValueError(
                f"batch_size // m = {self.classes_per_batch} distinct classes are needed per batch "
                f"but labels hold only {len(self.classes)} classes; lower batch_size or raise m"
            )
        self._slots = np.maximum(1, np.rint(counts / self.m)).astype(np.int64)

    @property
    def n_classes(self) -> int:
        """Number of distinct classes in ``labels``."""
        return len(self.classes)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose draw :meth:`__iter__` yields (``(seed, epoch)`` fixes it)."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Number of batches per epoch: ``max(1, length // batch_size)``."""
        return max(1, self.length // self.batch_size)

    def _take(self, c: int, rng: np.random.Generator, perms: list, pos: np.ndarray) -> np.ndarray:
        members = self._members[c]
        n_c = len(members)
        if n_c < self.m:  # all items once + the rest with replacement (documented exception)
            extra = rng.choice(members, self.m - n_c, replace=True)
            return np.concatenate([rng.permutation(members), extra])
        if perms[c] is None or pos[c] + self.m > n_c:
            perms[c], pos[c] = rng.permutation(members), 0
        out = perms[c][pos[c] : pos[c] + self.m]
        pos[c] += self.m
        return out

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        n_cls, k = len(self.classes), self.classes_per_batch
        remaining = self._slots.copy()
        perms: list = [None] * n_cls
        pos = np.zeros(n_cls, dtype=np.int64)
        for _ in range(len(self)):
            avail = np.flatnonzero(remaining)
            if len(avail) >= k:
                p = remaining[avail] / remaining[avail].sum()
                chosen = rng.choice(avail, k, replace=False, p=p)
            else:  # too few classes left: take them all, refill the slots, pick the rest
                chosen = avail
                remaining += self._slots
                others = np.setdiff1d(np.arange(n_cls), chosen)
                p = remaining[others] / remaining[others].sum()
                chosen = np.concatenate(
                    [chosen, rng.choice(others, k - len(chosen), replace=False, p=p)]
                )
            remaining[chosen] -= 1
            remaining = np.maximum(remaining, 0)
            batch = np.concatenate([self._take(int(c), rng, perms, pos) for c in chosen])
            yield batch.tolist()

    def __repr__(self) -> str:
        return (
            f"MPerClassSampler(n_items={self.n_items}, n_classes={self.n_classes}, m={self.m}, "
            f"batch_size={self.batch_size}, batches={len(self)}, seed={self.seed}, "
            f"epoch={self.epoch})"
        )
