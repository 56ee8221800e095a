"""Small real image datasets that ship with installed packages (nothing is downloaded).

* :func:`load_digits`: scikit-learn's bundled digits, 1,797 grey 8x8 images of 10 digits
  (:func:`sklearn.datasets.load_digits`), the offline "real pixels" sanity run of the open-set
  protocol (Ramzi thesis §3.5.1): train on digits 0-4, retrieve among digits 5-9.
* :func:`load_animal_mnist`: the 10,000 28x28 animal silhouettes (10 classes x 1,000) of the
  ``animal_mnist`` package, read straight from the package's data files.

Both return an :class:`~rank_lab.data.splits.OpenSetSplit`: open-set by class (Ramzi thesis
§2.3.1, Fig. 2.13; §3.5.1) or, with ``open_set=False``, a seeded stratified closed-set split.
The split helpers :func:`split_by_classes` and :func:`stratified_split` work on any ``(x, y)``.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from rank_lab._validation import (
    as_tensor,
    check_finite,
    check_float,
    check_labels,
    check_same_length,
)
from rank_lab.data.datasets.base import require_path
from rank_lab.data.splits import OpenSetSplit, check_seed
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "split_by_classes",
    "stratified_split",
    "load_digits",
    "load_animal_mnist",
    "DIGITS_CLASSES",
    "ANIMAL_MNIST_CLASSES",
]

DIGITS_CLASSES: tuple[str, ...] = tuple(str(i) for i in range(10))
#: Label ``i`` of animal_mnist is ``ANIMAL_MNIST_CLASSES[i]`` (alphabetical, as listed in the
#: package description; checked by eye on the silhouettes).
ANIMAL_MNIST_CLASSES: tuple[str, ...] = (
    "bear", "bird", "cat", "cow", "dog", "elephant", "giraffe", "horse", "sheep", "zebra",
)  # fmt: skip


def _class_list(classes: object, name: str) -> list[int]:
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        classes = [classes]
    if isinstance(classes, torch.Tensor):
        classes = classes.flatten().tolist()
    if isinstance(classes, (str, bytes)) or not isinstance(classes, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of class ids, got {type(classes).__name__}")
    out = []
    for c in classes:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise TypeError(f"{name} must hold ints, got {c!r}")
        out.append(int(c))
    if not out:
        raise ValueError(f"{name} is empty")
    if len(set(out)) != len(out):
        raise ValueError(f"{name} has duplicate class ids: {out}")
    return out


def _check_xy(x: object, y: object) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (N, ...)`` finite floating data and ``y (N,)`` / ``(N, L)`` integer labels of one
    length."""
    x = as_tensor(x, "x")
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"x is empty (shape {tuple(x.shape)})")
    if not x.is_floating_point():
        raise TypeError(f"x must be floating, got {x.dtype}")
    check_finite(x, "x")
    y = as_tensor(y, "y")
    if y.ndim >= 1:
        check_same_length(x, y, "x", "y")
    return x, check_labels(y, x.shape[0], "y")


def split_by_classes(
    x: torch.Tensor,
    y: torch.Tensor,
    train_classes: Sequence[int],
    test_classes: Sequence[int] | None = None,
    *,
    name: str = "split",
    class_names: tuple[str, ...] | None = None,
) -> OpenSetSplit:
    """Open-set split by class (Ramzi thesis §2.3.1, Fig. 2.13): disjoint train / test classes.

    Args:
        x: ``(N, ...)`` finite floating data.
        y: ``(N,)`` or ``(N, L)`` integer labels (the split uses column 0).
        train_classes: class ids of the train split.
        test_classes: class ids of the test split; default: every other class present in ``y``.
        name, class_names: stored on the returned split.

    Returns:
        :class:`OpenSetSplit` keeping the original row order and class ids; ``extras`` holds the
        original row indices ``index_train (N1,)`` and ``index_test (N2,)``.

    Raises:
        TypeError: integer ``x`` or floating ``y``.
        ValueError: NaN / inf in ``x``, ``x`` and ``y`` of different lengths, a class id absent
            from ``y``, overlapping class lists, or an empty side.
    """
    x, y = _check_xy(x, y)
    fine = y if y.ndim == 1 else y[:, 0]
    present = set(torch.unique(fine).tolist())
    train = _class_list(train_classes, "train_classes")
    test = (
        sorted(present - set(train))
        if test_classes is None
        else _class_list(test_classes, "test_classes")
    )
    for cls_list, arg in ((train, "train_classes"), (test, "test_classes")):
        missing = sorted(set(cls_list) - present)
        if missing:
            raise ValueError(
                f"{arg} has ids {missing} that do not occur in the labels {sorted(present)}"
            )
    if not test:
        raise ValueError("test_classes is empty: train_classes takes every class")
    overlap = sorted(set(train) & set(test))
    if overlap:
        raise ValueError(f"train_classes and test_classes overlap on {overlap}")
    m_tr = torch.isin(fine, torch.tensor(train, device=fine.device))
    m_te = torch.isin(fine, torch.tensor(test, device=fine.device))
    extras = {
        "index_train": torch.nonzero(m_tr).squeeze(1),
        "index_test": torch.nonzero(m_te).squeeze(1),
    }
    return OpenSetSplit(x[m_tr], y[m_tr], x[m_te], y[m_te], True, name, class_names, extras)


def stratified_split(
    x: torch.Tensor,
    y: torch.Tensor,
    test_fraction: float = 0.5,
    seed: int = 0,
    *,
    name: str = "split",
    class_names: tuple[str, ...] | None = None,
) -> OpenSetSplit:
    """Closed-set split: ``round(test_fraction * n_c)`` random items of every class go to test.

    Every class with at least 2 items keeps at least one item on each side; a class with a single
    item stays in train. Rows keep their original order within each side.

    Args:
        x: ``(N, ...)`` finite floating data; y: ``(N,)`` or ``(N, L)`` labels (stratified on column
            0).
        test_fraction: in (0, 1).
        seed: seeds the per-class permutations (a local generator).

    Returns:
        :class:`OpenSetSplit` with ``open_set=False``; ``extras`` holds the original row indices
        ``index_train (N1,)`` and ``index_test (N2,)``.
    """
    x, y = _check_xy(x, y)
    test_fraction = check_float(
        test_fraction, "test_fraction", low=0.0, high=1.0, low_open=True, high_open=True
    )
    gen = torch.Generator().manual_seed(check_seed(seed))
    fine = (y if y.ndim == 1 else y[:, 0]).cpu()
    is_test = torch.zeros(fine.shape[0], dtype=torch.bool)
    for c in torch.unique(fine).tolist():
        idx = torch.nonzero(fine == c).squeeze(1)
        n_c = idx.numel()
        k = min(max(int(math.floor(test_fraction * n_c + 0.5)), 1), n_c - 1)
        if k > 0:
            is_test[idx[torch.randperm(n_c, generator=gen)[:k]]] = True
    extras = {
        "index_train": torch.nonzero(~is_test).squeeze(1),
        "index_test": torch.nonzero(is_test).squeeze(1),
    }
    is_test = is_test.to(x.device)
    return OpenSetSplit(
        x[~is_test], y[~is_test], x[is_test], y[is_test], False, name, class_names, extras
    )


def _check_test_fraction(test_fraction: object) -> None:
    """Checked even when ``open_set=True`` leaves it unused: a bad value is never accepted
    silently."""
    check_float(test_fraction, "test_fraction", low=0.0, high=1.0, low_open=True, high_open=True)


def _finish(
    images: np.ndarray,
    labels: np.ndarray,
    max_value: float,
    *,
    open_set: bool,
    train_classes: Sequence[int],
    test_classes: Sequence[int] | None,
    test_fraction: float,
    seed: int,
    flatten: bool,
    device: DeviceLike,
    dtype: torch.dtype,
    name: str,
    class_names: tuple[str, ...],
) -> OpenSetSplit:
    """Images ``(N, H, W)`` -> float tensors in [0, 1] ``(N, 1, H, W)`` (or ``(N, H*W)``) +
    split."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch dtype, got {dtype!r}")
    x = torch.from_numpy(np.asarray(images, dtype=np.float64) / max_value).to(dtype)
    x = x.reshape(x.shape[0], -1) if flatten else x[:, None]
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    if open_set:
        out = split_by_classes(
            x, y, train_classes, test_classes, name=name, class_names=class_names
        )
    else:
        if test_classes is not None:
            raise ValueError("test_classes only applies to open_set=True")
        out = stratified_split(x, y, test_fraction, seed, name=name, class_names=class_names)
    return out.to(get_device(device)) if device is not None else out


def load_digits(
    open_set: bool = True,
    train_classes: Sequence[int] = (0, 1, 2, 3, 4),
    seed: int = 0,
    flatten: bool = False,
    *,
    test_classes: Sequence[int] | None = None,
    test_fraction: float = 0.5,
    device: DeviceLike = None,
    dtype: torch.dtype = torch.float32,
) -> OpenSetSplit:
    """scikit-learn's bundled digits (no download) as an open-set or closed-set retrieval split.

    1,797 images of 8x8 pixels with integer intensities 0..16, 10 classes (about 180 each).
    The open-set default (train digits 0-4, test digits 5-9: 901 / 896 images) is the offline
    "real pixels" run of the open-set protocol (Ramzi thesis §3.5.1).

    Args:
        open_set: split by class (default) or, if False, a stratified split of all 10 classes.
        train_classes: digits of the train split (open-set only).
        seed: seeds the closed-set split (the open-set split is deterministic and keeps
            scikit-learn's row order).
        flatten: return ``(N, 64)`` instead of ``(N, 1, 8, 8)``.
        test_classes: digits of the test split (default: the other digits).
        test_fraction: closed-set fraction of every class sent to test, in (0, 1) (checked
            also when ``open_set=True`` does not use it).
        device, dtype: of the returned images.

    Returns:
        :class:`OpenSetSplit` with ``x`` in [0, 1] (pixel / 16) and ``y (N,)`` long digit ids.
    """
    # heavy import, paid only on this path
    from sklearn.datasets import load_digits as _sk_load_digits

    _check_test_fraction(test_fraction)
    bunch = _sk_load_digits()
    return _finish(
        bunch.images, bunch.target, 16.0, open_set=open_set, train_classes=train_classes,
        test_classes=test_classes, test_fraction=test_fraction, seed=seed, flatten=flatten,
        device=device, dtype=dtype, name="digits", class_names=DIGITS_CLASSES,
    )  # fmt: skip


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain numpy arrays and refuses every other global (no code execution)."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")
        if module.startswith("numpy.core"):  # numpy >= 2 renamed numpy.core to numpy._core
            module = module.replace("numpy.core", "numpy._core", 1)
        return super().find_class(module, name)


def _read_pickled_array(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        arr = _NumpyOnlyUnpickler(f).load()
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{str(path)!r} does not hold a numpy array (got {type(arr).__name__})")
    return arr


def _animal_mnist_folder() -> Path:
    spec = importlib.util.find_spec("animal_mnist")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "load_animal_mnist needs the 'animal_mnist' package: `pip install --no-deps "
            "animal-mnist` (rank_lab reads its data files directly, so its tensorflow/pandas "
            "dependencies are not needed), or pass data_dir= to a folder holding "
            "animal_data_version_3.gz and animal_label_version_3.gz"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "Animal_MNIST"


def load_animal_mnist(
    open_set: bool = True,
    train_classes: Sequence[int] = (0, 1, 2, 3, 4),
    seed: int = 0,
    flatten: bool = False,
    *,
    test_classes: Sequence[int] | None = None,
    test_fraction: float = 0.5,
    data_dir: str | Path | None = None,
    device: DeviceLike = None,
    dtype: torch.dtype = torch.float32,
) -> OpenSetSplit:
    """The animal_mnist silhouettes: 10,000 grey 28x28 images, 10 animals x 1,000.

    Reads the package's two gzip-pickled numpy arrays (``animal_data_version_3.gz``: uint8
    ``(10000, 28, 28)``, ``animal_label_version_3.gz``: int ``(10000,)``) with an unpickler that
    only accepts numpy arrays. The package's own loader module imports tensorflow (for MNIST), so
    it is bypassed: only numpy is needed. Class names: :data:`ANIMAL_MNIST_CLASSES`. The default
    open-set split trains on bear, bird, cat, cow, dog and tests on elephant, giraffe, horse,
    sheep, zebra (5,000 / 5,000), a harder open-set stand-in than digits (Ramzi thesis §3.5.1).

    Args:
        open_set, train_classes, seed, flatten, test_classes, test_fraction, device, dtype: as in
            :func:`load_digits`.
        data_dir: a folder with the two ``.gz`` files (default: the installed package's data).

    Returns:
        :class:`OpenSetSplit` with ``x (N, 1, 28, 28)`` (or ``(N, 784)``) in [0, 1] and ``y (N,)``.

    Raises:
        ImportError: ``animal_mnist`` is not installed and no ``data_dir`` is given.
        DatasetFolderError: ``data_dir`` lacks one of the files.
    """
    _check_test_fraction(test_fraction)
    layout = "Expected animal_data_version_3.gz and animal_label_version_3.gz (from animal_mnist)."
    root = _animal_mnist_folder() if data_dir is None else Path(data_dir)
    data_path = require_path(root, "animal_data_version_3.gz", "animal_mnist", layout)
    label_path = require_path(root, "animal_label_version_3.gz", "animal_mnist", layout)
    images, labels = _read_pickled_array(data_path), _read_pickled_array(label_path)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"animal_mnist: expected images (N, H, W) and labels (N,), got {images.shape} and "
            f"{labels.shape}"
        )
    return _finish(
        images, labels, 255.0, open_set=open_set, train_classes=train_classes,
        test_classes=test_classes, test_fraction=test_fraction, seed=seed, flatten=flatten,
        device=device, dtype=dtype, name="animal_mnist", class_names=ANIMAL_MNIST_CLASSES,
    )  # fmt: skip
