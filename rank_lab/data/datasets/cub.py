"""CUB-200-2011 (Wah et al., 2011), from its published folder, with the retrieval split.

11,788 bird images of 200 species. The metric-learning protocol (ROADMAP §4, Ramzi thesis Tab. 3.4):
the **first 100 classes train, the last 100 test** (5,864 / 5,924 images); the official
``train_test_split.txt`` (a classification split) is not used. Expected layout (the
``CUB_200_2011`` archive)::

    root/
      images.txt               # "<image_id> <relative path>", e.g. "1 001.Black_footed_Albatross/Black_Footed_Albatross_0046_18.jpg"
      image_class_labels.txt   # "<image_id> <class_id>", class ids 1..200
      classes.txt              # optional: "<class_id> <class name>"
      images/001.Black_footed_Albatross/...jpg

Labels keep the file's class ids (1..200; never re-indexed).
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.sources import published
from rank_lab.data.datasets.transforms import (
    check_files_exist,
    check_split,
    find_root,
    resolve_transform,
)

__all__ = ["load_cub", "CUB_LAYOUT", "CUB_TRAIN_CLASSES"]

CUB_LAYOUT = (
    "Expected the CUB_200_2011 layout: images.txt ('<image_id> <path>'), image_class_labels.txt "
    "('<image_id> <class_id>') and the images/ folder."
    " " + published("cub")
)
#: Classes of the retrieval train split (the test split holds 101..200).
CUB_TRAIN_CLASSES = range(1, 101)


def _read_pairs(path: Path, what: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2:
            raise DatasetFolderError(
                f"CUB: line {i} of {str(path)!r} should be '<image_id> <{what}>', got {line!r}"
            )
        try:
            key = int(parts[0])
        except ValueError:
            raise DatasetFolderError(
                f"CUB: line {i} of {str(path)!r} has a non-integer id: {line!r}"
            ) from None
        out[key] = parts[1].strip()
    if not out:
        raise DatasetFolderError(f"CUB: {str(path)!r} is empty")
    return out


def load_cub(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    *,
    image_size: int = 224,
    check_files: bool = True,
) -> ImageListDataset:
    """Load CUB-200-2011's retrieval split as an :class:`ImageListDataset`.

    Args:
        root: the ``CUB_200_2011`` folder (or its parent).
        split: ``"train"`` (classes 1-100), ``"test"`` (classes 101-200) or ``"all"``.
        transform: a callable, ``None`` or ``"default"`` (papers' train / test transform).
        image_size: side of the default transform (256 for the SOTA CNN runs, Tab. 3.4).
        check_files: check that every selected image exists.

    Returns:
        The dataset (ordered by image id), with attributes ``split``, ``name`` ("cub") and
        ``class_names`` (``{class_id: name}`` when ``classes.txt`` is present).

    Raises:
        DatasetFolderError: missing files, malformed lines, an image id without a class, or a
            class id outside 1..200.
    """
    check_split(split)
    root = find_root(root, "images.txt", ("CUB_200_2011",), "CUB", CUB_LAYOUT)
    for name in ("image_class_labels.txt", "images"):
        if not (root / name).exists():
            raise DatasetFolderError(
                f"CUB: expected {name!r} inside {str(root)!r} but it is missing. {CUB_LAYOUT}"
            )
    images = _read_pairs(root / "images.txt", "relative path")
    classes = _read_pairs(root / "image_class_labels.txt", "class_id")
    missing = sorted(set(images) - set(classes))
    if missing:
        raise DatasetFolderError(
            f"CUB: image ids {missing[:5]} of images.txt have no class in image_class_labels.txt"
        )
    paths, labels = [], []
    for image_id in sorted(images):
        try:
            c = int(classes[image_id])
        except ValueError:
            raise DatasetFolderError(
                f"CUB: image {image_id} has a non-integer class {classes[image_id]!r}"
            ) from None
        if not 1 <= c <= 200:
            raise DatasetFolderError(f"CUB: image {image_id} has class {c}, expected 1..200")
        if split == "all" or (split == "train") == (c in CUB_TRAIN_CLASSES):
            paths.append(root / "images" / images[image_id])
            labels.append(c)
    if not paths:
        raise DatasetFolderError(
            f"CUB: no image of the {split!r} split (classes "
            f"{'1-100' if split == 'train' else '101-200'})"
        )
    if check_files:
        check_files_exist(paths, "CUB", "images.txt")
    ds = ImageListDataset(paths, labels, transform=resolve_transform(transform, split, image_size))
    ds.split = split  # type: ignore[attr-defined]
    ds.name = "cub"  # type: ignore[attr-defined]
    names: dict[int, str] = {}
    if (root / "classes.txt").is_file():
        names = {k: v for k, v in _read_pairs(root / "classes.txt", "class name").items()}
    ds.class_names = names  # type: ignore[attr-defined]
    return ds
