"""CIFAR-10 and CIFAR-100 (Krizhevsky, 2009) from their "python version" archives.

Expected layouts (the extracted ``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz``)::

    root/cifar-10-batches-py/        data_batch_1 ... data_batch_5, test_batch, batches.meta
    root/cifar-100-python/           train, test, meta

Each batch file is a pickled dict with ``data`` (uint8 ``(N, 3072)``: the 1024 red, then green,
then blue values of a 32x32 image, row-major), ``labels`` (CIFAR-10) or ``fine_labels`` and
``coarse_labels`` (CIFAR-100), and ``filenames``. The files were written by Python 2, so keys may be
bytes; both are accepted. Unpickling is restricted to numpy arrays and plain containers (a
malicious file cannot run code).

``root`` may be the parent folder or the ``cifar-*`` folder itself. Images are kept in memory as a
uint8 tensor ``(N, 3, 32, 32)``; :class:`ArrayImageDataset` serves them (shared with SVHN).
"""

from __future__ import annotations

import importlib.util
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from rank_lab._validation import as_tensor, check_real
from rank_lab.data.datasets.base import DatasetFolderError, check_transform
from rank_lab.data.datasets.sources import published, torchvision_download
from rank_lab.data.datasets.transforms import check_split, find_root

__all__ = [
    "ArrayImageDataset",
    "load_cifar",
    "load_cifar10",
    "load_cifar100",
    "read_cifar_batch",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
]

#: Per-channel statistics of the training sets (the usual normalisation constants).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)

_LAYOUTS = {
    "cifar10": (
        "cifar-10-batches-py",
        "Expected root/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}. "
        + published("cifar"),
    ),
    "cifar100": (
        "cifar-100-python",
        "Expected root/cifar-100-python/{train, test, meta}. " + published("cifar"),
    ),
}


_HAS_NUMPY_CORE_RENAMED = importlib.util.find_spec("numpy._core") is not None


class _SafeUnpickler(pickle.Unpickler):
    """Accepts numpy arrays (and their dtypes/scalars) plus plain containers; refuses other
    globals."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("copy_reg", "_reconstructor"),
        ("copyreg", "_reconstructor"),
        ("__builtin__", "object"),
        ("builtins", "object"),
        ("_codecs", "encode"),  # protocol-2 pickles written by Python 3 encode bytes with it
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")
        # numpy >= 2 renamed numpy.core
        if module.startswith("numpy.core") and _HAS_NUMPY_CORE_RENAMED:
            module = module.replace("numpy.core", "numpy._core", 1)
        if module == "copy_reg":
            module = "copyreg"
        if module == "__builtin__":
            module = "builtins"
        return super().find_class(module, name)


def read_cifar_batch(path: str | Path) -> dict[str, Any]:
    """Read one CIFAR pickle (a batch or a ``meta`` file) into a dict with ``str`` keys.

    Bytes values of name lists (``label_names`` ...) are decoded to ``str``.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            obj = _SafeUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise DatasetFolderError(
            f"CIFAR: {str(path)!r} is not a valid CIFAR pickle ({exc})"
        ) from exc
    if not isinstance(obj, dict):
        raise DatasetFolderError(
            f"CIFAR: {str(path)!r} should hold a dict, got {type(obj).__name__}"
        )
    out: dict[str, Any] = {}
    for k, v in obj.items():
        key = k.decode("latin1") if isinstance(k, bytes) else str(k)
        if isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode("latin1") for s in v]
        out[key] = v
    return out


def _images_from_rows(data: Any, path: Path) -> torch.Tensor:
    arr = np.asarray(data)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != 3072:
        raise DatasetFolderError(
            f"CIFAR: 'data' in {str(path)!r} should be uint8 (N, 3072), got {arr.dtype} {arr.shape}"
        )
    return torch.from_numpy(arr.reshape(-1, 3, 32, 32).copy())


class ArrayImageDataset(Dataset):
    """In-memory images ``(N, C, H, W)`` uint8 with labels; items ``(image, label)``.

    Without ``transform`` the image is a float tensor ``(C, H, W)`` in ``[0, 1]``; with one, the
    transform receives a PIL image (torchvision's convention, so ``transforms.ToTensor()`` etc.
    work). Attributes: ``images``, ``labels`` (``(N,)`` or ``(N, L)`` long), ``class_names``,
    ``name``, ``split``.

    Raises:
        ValueError: ``images`` not a non-empty uint8 ``(N, 1 or 3, H, W)`` tensor, ``labels`` not
            ``(N,)`` / ``(N, L)`` with one row per image.
        TypeError: floating or bool ``labels``, a non-callable ``transform``.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        transform: Callable[[Any], Any] | None = None,
        *,
        class_names: list[str] | None = None,
        name: str = "",
        split: str = "",
    ) -> None:
        if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.dtype != torch.uint8:
            shape = (
                tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            )
            raise ValueError(
                f"images must be uint8 (N, C, H, W), got {getattr(images, 'dtype', '')} {shape}"
            )
        if images.shape[0] == 0 or images.shape[2] == 0 or images.shape[3] == 0:
            raise ValueError(f"images is empty (shape {tuple(images.shape)})")
        if images.shape[1] not in (1, 3):
            raise ValueError(f"images must have 1 or 3 channels, got {images.shape[1]}")
        check_real(images, "images")  # a meta tensor has no pixels
        labels = as_tensor(labels, "labels")
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise TypeError(f"labels must hold integers, got dtype {labels.dtype}")
        if labels.ndim not in (1, 2):
            raise ValueError(f"labels must have shape (N,) or (N, L), got {tuple(labels.shape)}")
        labels = labels.long()
        if labels.shape[0] != images.shape[0]:
            raise ValueError(f"labels has {labels.shape[0]} rows but images has {images.shape[0]}")
        check_transform(transform)
        self.images, self.labels, self.transform = images, labels, transform
        self.class_names, self.name, self.split = class_names, name, split

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __getitem__(self, index: int) -> tuple[Any, torch.Tensor]:
        img = self.images[index]
        if self.transform is None:
            return img.float().div(255.0), self.labels[index]

        arr = img.permute(1, 2, 0).numpy()
        pil = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
        return self.transform(pil), self.labels[index]


def load_cifar(
    root: str | Path,
    name: str = "cifar10",
    split: str = "train",
    transform: Callable[[Any], Any] | None = None,
    *,
    label: str = "fine",
    download: bool = False,
) -> ArrayImageDataset:
    """Load CIFAR-10 or CIFAR-100 from the python-pickle archive.

    Args:
        root: the folder holding ``cifar-10-batches-py`` / ``cifar-100-python`` (or that folder).
        name: ``"cifar10"`` or ``"cifar100"``.
        split: ``"train"`` (50,000 images) or ``"test"`` (10,000).
        transform: applied to a PIL image; ``None`` gives float tensors in ``[0, 1]``.
        label: CIFAR-100 only: ``"fine"`` (100 classes), ``"coarse"`` (20 super-classes) or
            ``"both"`` (``(N, 2)`` labels, fine first, the project's hierarchical convention).
        download: let torchvision fetch and extract the archive into ``root`` first (a no-op when
            it is there; :func:`~rank_lab.data.datasets.sources.torchvision_download`).

    Returns:
        :class:`ArrayImageDataset` with ``images (N, 3, 32, 32)`` uint8 and ``labels``;
        ``class_names`` from the meta file when present.

    Raises:
        DatasetFolderError: a missing folder/file or a malformed pickle.
    """
    if name not in _LAYOUTS:
        raise ValueError(f"name must be 'cifar10' or 'cifar100', got {name!r}")
    check_split(split, ("train", "test"))
    if label not in ("fine", "coarse", "both"):
        raise ValueError(f"label must be 'fine', 'coarse' or 'both', got {label!r}")
    if download:
        torchvision_download(name, root, split)
    folder, layout = _LAYOUTS[name]
    marker = "test_batch" if name == "cifar10" else "test"
    base = find_root(root, marker, (folder,), name.upper().replace("CIFAR", "CIFAR-"), layout)
    if name == "cifar10":
        files = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    else:
        files = [split]
    images, fine, coarse = [], [], []
    for fname in files:
        path = base / fname
        if not path.is_file():
            raise DatasetFolderError(
                f"{name}: expected {fname!r} inside {str(base)!r} but it is missing. {layout}"
            )
        batch = read_cifar_batch(path)
        key = "labels" if name == "cifar10" else "fine_labels"
        if "data" not in batch or key not in batch:
            raise DatasetFolderError(f"{name}: {str(path)!r} lacks the 'data' or {key!r} entry")
        imgs = _images_from_rows(batch["data"], path)
        labs = torch.as_tensor(np.asarray(batch[key]), dtype=torch.long)
        if labs.shape != (imgs.shape[0],):
            raise DatasetFolderError(
                f"{name}: {str(path)!r} has {imgs.shape[0]} images but {labs.numel()} labels"
            )
        images.append(imgs)
        fine.append(labs)
        if name == "cifar100":
            if "coarse_labels" not in batch:
                raise DatasetFolderError(f"{name}: {str(path)!r} lacks 'coarse_labels'")
            coarse.append(torch.as_tensor(np.asarray(batch["coarse_labels"]), dtype=torch.long))
    meta_name = "batches.meta" if name == "cifar10" else "meta"
    class_names = None
    if (base / meta_name).is_file():
        meta = read_cifar_batch(base / meta_name)
        names_key = (
            "label_names"
            if name == "cifar10"
            else ("coarse_label_names" if label == "coarse" else "fine_label_names")
        )
        class_names = meta.get(names_key)
    y = torch.cat(fine)
    if name == "cifar100" and label != "fine":
        yc = torch.cat(coarse)
        y = yc if label == "coarse" else torch.stack([y, yc], 1)
    return ArrayImageDataset(
        torch.cat(images), y, transform, class_names=class_names, name=name, split=split
    )


def load_cifar10(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | None = None,
    *,
    download: bool = False,
) -> ArrayImageDataset:
    """:func:`load_cifar` with ``name="cifar10"``."""
    return load_cifar(root, "cifar10", split, transform, download=download)


def load_cifar100(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | None = None,
    *,
    label: str = "fine",
    download: bool = False,
) -> ArrayImageDataset:
    """:func:`load_cifar` with ``name="cifar100"``."""
    return load_cifar(root, "cifar100", split, transform, label=label, download=download)
