"""Shared pieces of the dataset loaders: a path check with a helpful error, an image-list dataset.

Every loader in :mod:`rank_lab.data.datasets` builds on these so that (1) a wrong folder always
fails the same clear way and (2) every loader returns the same kind of object: a
:class:`torch.utils.data.Dataset` of ``(image, label)`` pairs with ``.paths`` and ``.labels``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset

from rank_lab._validation import as_tensor

__all__ = ["DatasetFolderError", "require_path", "ImageListDataset", "pil_loader"]


class DatasetFolderError(FileNotFoundError, ValueError):
    """A dataset folder is missing or malformed. Both a ``ValueError`` and a
    ``FileNotFoundError``."""


def require_path(root: str | Path, relative: str | Path, dataset: str, layout: str = "") -> Path:
    """Return ``root / relative`` or raise :class:`DatasetFolderError` saying what was expected.

    Args:
        root: the dataset folder given by the user.
        relative: the file or folder the loader needs inside ``root``.
        dataset: the dataset's name, for the message.
        layout: a short description of the expected layout, appended to the message.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetFolderError(
            f"{dataset}: root folder {str(root)!r} does not exist or is not a folder. "
            f"{layout}".strip()
        )
    p = root / relative
    if not p.exists():
        raise DatasetFolderError(
            f"{dataset}: expected {str(relative)!r} inside {str(root)!r} but it is missing. "
            f"{layout}".strip()
        )
    return p


def check_transform(transform: object, name: str = "transform") -> None:
    """Raise ``TypeError`` unless ``transform`` is None or callable (a string such as ``"default"``
    is resolved by the loaders, :func:`~rank_lab.data.datasets.transforms.resolve_transform`)."""
    if transform is not None and not callable(transform):
        raise TypeError(f"{name} must be a callable or None, got {transform!r}")


def pil_loader(path: str | Path) -> Any:
    """Open an image file as an RGB PIL image.

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        DatasetFolderError: the file is not a readable image (named, with PIL's reason).
    """
    with open(path, "rb") as f:
        try:
            img = Image.open(f)
            return img.convert("RGB")
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise DatasetFolderError(
                f"{str(path)!r} is not a readable image ({type(exc).__name__}: {exc})"
            ) from exc


class ImageListDataset(Dataset):
    """A dataset from a list of image paths and integer labels (``(N,)`` or hierarchical
    ``(N, L)``).

    Args:
        paths: image file paths.
        labels: integer labels, one row per path; hierarchical labels are ``(N, L)``, fine first.
        transform: applied to the PIL image (e.g. a torchvision transform).
        loader: opens a path; default :func:`pil_loader`.

    Items are ``(transform(image), label)``, with ``label`` a ``torch.long`` scalar or ``(L,)`` row.
    An empty list (no path, no label) is allowed (e.g. no distractors).

    Raises:
        TypeError: floating or bool ``labels``; a ``transform`` or ``loader`` that is not callable.
        ValueError: ``labels`` not ``(N,)`` / ``(N, L)``, or not one row per path.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        labels: Sequence[int] | torch.Tensor,
        transform: Callable[[Any], Any] | None = None,
        loader: Callable[[str | Path], Any] = pil_loader,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        lab = as_tensor(labels, "labels")
        if lab.is_floating_point() or lab.is_complex() or lab.dtype == torch.bool:
            raise TypeError(f"labels must hold integers, got dtype {lab.dtype}")
        if lab.ndim not in (1, 2):
            raise ValueError(f"labels must have shape (N,) or (N, L), got {tuple(lab.shape)}")
        if lab.shape[0] != len(self.paths):
            raise ValueError(f"labels has {lab.shape[0]} rows but paths has {len(self.paths)}")
        self.labels = lab.long()
        check_transform(transform)
        self.transform = transform
        if not callable(loader):
            raise TypeError(f"loader must be callable, got {type(loader).__name__}")
        self.loader = loader

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Any, torch.Tensor]:
        img = self.loader(self.paths[index])
        if self.transform is not None:
            img = self.transform(img)
        return img, self.labels[index]
