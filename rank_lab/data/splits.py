"""The train/test split object shared by the synthetic and bundled datasets.

:class:`OpenSetSplit` holds an open-set (disjoint classes, the protocol of the Ramzi thesis §3.5.1)
or closed-set split; the small argument checks used by the data generators live here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils.data import TensorDataset

from rank_lab._validation import check_finite
from rank_lab.utils import DeviceLike, get_device

__all__ = ["OpenSetSplit"]


@dataclass(eq=False, repr=False)
class OpenSetSplit:
    """A train/test split for retrieval, open-set by default (Ramzi thesis §2.3.1, Fig. 2.13).

    In the open-set protocol (§3.5.1; digest 000 section 3) the train and test classes are
    disjoint, and every test item queries all the other test items. Class ids are the original
    ones (not re-indexed). ``open_set=False`` marks a closed-set split (same classes on both sides),
    e.g. ``load_digits(open_set=False)``; disjointness is only checked when ``open_set`` is True.

    Attributes:
        x_train: ``(N1, ...)`` floating features or images.
        y_train: ``(N1,)`` long labels, or ``(N1, L)`` hierarchical labels (column 0 = fine).
        x_test: ``(N2, ...)``.
        y_test: ``(N2,)`` or ``(N2, L)``.
        open_set: True when train and test classes (column 0) must be disjoint.
        name: a short name for reprs and result tables.
        class_names: names indexed by (fine) class id, when known.
        extras: anything else the generator returns (latent codes, centres, ...).

    Raises:
        TypeError: non-tensor or integer ``x_*``, floating or bool ``y_*``.
        ValueError: an empty side, NaN or inf in ``x_*``, ``x_*`` and ``y_*`` of different lengths,
            label levels that differ between the sides, or (open set) shared classes.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    open_set: bool = True
    name: str = "split"
    class_names: tuple[str, ...] | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for side in ("train", "test"):
            x, y = getattr(self, f"x_{side}"), getattr(self, f"y_{side}")
            if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
                raise TypeError(f"x_{side} and y_{side} must be tensors")
            if x.ndim < 1 or x.shape[0] == 0:
                raise ValueError(f"x_{side} is empty (shape {tuple(x.shape)})")
            if not x.is_floating_point():
                raise TypeError(f"x_{side} must be floating, got {x.dtype}")
            check_finite(x, f"x_{side}")
            if y.ndim not in (1, 2):
                raise ValueError(f"y_{side} must have shape (N,) or (N, L), got {tuple(y.shape)}")
            if y.shape[0] != x.shape[0]:
                raise ValueError(f"x_{side} has {x.shape[0]} rows but y_{side} has {y.shape[0]}")
            if y.is_floating_point() or y.dtype == torch.bool:
                raise TypeError(f"y_{side} must hold integers, got {y.dtype}")
        if self.y_train.ndim != self.y_test.ndim or self.y_train.shape[1:] != self.y_test.shape[1:]:
            raise ValueError(
                f"y_train {tuple(self.y_train.shape)} and y_test {tuple(self.y_test.shape)} "
                "must have the same number of levels"
            )
        if self.open_set:
            common = set(self.train_classes.tolist()) & set(self.test_classes.tolist())
            if common:
                raise ValueError(
                    f"open-set split: classes {sorted(common)[:10]} are in both train and test"
                )

    @staticmethod
    def _fine(y: torch.Tensor) -> torch.Tensor:
        return y if y.ndim == 1 else y[:, 0]

    @property
    def train_classes(self) -> torch.Tensor:
        """Sorted distinct (fine) class ids of the train split, ``(C1,)``."""
        return torch.unique(self._fine(self.y_train))

    @property
    def test_classes(self) -> torch.Tensor:
        """Sorted distinct (fine) class ids of the test split, ``(C2,)``."""
        return torch.unique(self._fine(self.y_test))

    @property
    def n_classes_train(self) -> int:
        """Number of distinct (fine) classes in the train split."""
        return int(self.train_classes.numel())

    @property
    def n_classes_test(self) -> int:
        """Number of distinct (fine) classes in the test split."""
        return int(self.test_classes.numel())

    @property
    def n_levels(self) -> int:
        """Number of label levels: 1 for ``(N,)`` labels, ``L`` for ``(N, L)``."""
        return 1 if self.y_train.ndim == 1 else int(self.y_train.shape[1])

    def to(self, device: DeviceLike) -> OpenSetSplit:
        """A copy with every tensor (also those in ``extras``) on ``device``."""
        dev = get_device(device)
        extras = {
            k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in self.extras.items()
        }
        return replace(
            self,
            x_train=self.x_train.to(dev),
            y_train=self.y_train.to(dev),
            x_test=self.x_test.to(dev),
            y_test=self.y_test.to(dev),
            extras=extras,
        )

    def train_dataset(self) -> TensorDataset:
        """``TensorDataset(x_train, y_train)`` for a :class:`~torch.utils.data.DataLoader`."""
        return TensorDataset(self.x_train, self.y_train)

    def test_dataset(self) -> TensorDataset:
        """``TensorDataset(x_test, y_test)``."""
        return TensorDataset(self.x_test, self.y_test)

    def __repr__(self) -> str:
        kind = "open-set" if self.open_set else "closed-set"
        return (
            f"OpenSetSplit({self.name!r}, {kind}, levels={self.n_levels}, "
            f"train: x {tuple(self.x_train.shape)} {self.n_classes_train} classes, "
            f"test: x {tuple(self.x_test.shape)} {self.n_classes_test} classes, "
            f"{str(self.x_train.dtype).replace('torch.', '')}, {self.x_train.device})"
        )


def _check_float(
    value: object, name: str, *, positive: bool = False, nonneg: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if nonneg and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _check_seed(seed: object, name: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"{name} must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"{name} must be non-negative, got {seed}")
    return seed
