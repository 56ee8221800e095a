"""Cars196 (Stanford Cars; Krause et al., 2013), from ``cars_annos.mat``, with the retrieval split.

16,185 images of 196 car models. The metric-learning protocol (Patel thesis, SupRank code): the
**first 98 classes train, the last 98 test** (8,054 / 8,131 images); the ``test`` flag of the
annotations (a classification split) is not used. Expected layout (``car_ims.tgz`` +
``cars_annos.mat``)::

    root/
      cars_annos.mat    # MATLAB struct "annotations" (1 x N) with fields relative_im_path
                        # ('car_ims/000001.jpg'), bbox_x1, bbox_y1, bbox_x2, bbox_y2, class (1..196),
                        # test; and "class_names" (1 x 196)
      car_ims/000001.jpg ...

The file is read with :func:`scipy.io.loadmat`. Labels keep the file's class ids (1..196).
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.sources import published
from rank_lab.data.datasets.transforms import (
    check_files_exist,
    check_split,
    find_root,
    resolve_transform,
)

__all__ = ["load_cars", "read_cars_annos", "CARS_LAYOUT"]

CARS_LAYOUT = (
    "Expected cars_annos.mat (struct 'annotations' with fields 'relative_im_path' and 'class') "
    "next to the car_ims/ folder."
    " " + published("cars196")
)
_N_CLASSES = 196


def _scalar(x: Any) -> Any:
    arr = np.asarray(x).ravel()
    if arr.size == 0:
        raise ValueError("empty field")
    return arr[0]


def read_cars_annos(path: str | Path) -> tuple[list[str], list[int], dict[int, str]]:
    """Read ``cars_annos.mat``: relative image paths, class ids (1-based) and ``{class_id: name}``.

    Raises:
        DatasetFolderError: unreadable file, or no ``annotations`` struct with the two fields.
    """
    # heavy import, paid only on this path
    from scipy.io import loadmat

    path = Path(path)
    try:
        mat = loadmat(str(path))
    except Exception as exc:  # noqa: BLE001 - scipy raises several types for a bad file
        raise DatasetFolderError(
            f"Cars196: could not read {str(path)!r} as a MATLAB file: {exc}"
        ) from exc
    ann = mat.get("annotations")
    fields = getattr(getattr(ann, "dtype", None), "names", None) or ()
    if ann is None or "relative_im_path" not in fields or "class" not in fields:
        raise DatasetFolderError(
            f"Cars196: {str(path)!r} has no 'annotations' struct with fields 'relative_im_path' "
            f"and 'class' (found keys {sorted(k for k in mat if not k.startswith('__'))}, fields "
            f"{list(fields)}). {CARS_LAYOUT}"
        )
    ann = ann.ravel()
    try:
        rel = [str(_scalar(a)) for a in ann["relative_im_path"]]
        cls = [int(_scalar(a)) for a in ann["class"]]
    except (ValueError, TypeError, IndexError) as exc:
        raise DatasetFolderError(f"Cars196: malformed annotations in {str(path)!r}: {exc}") from exc
    names: dict[int, str] = {}
    if "class_names" in mat:
        for i, n in enumerate(np.asarray(mat["class_names"]).ravel(), start=1):
            try:
                names[i] = str(_scalar(n))
            except ValueError:
                names[i] = ""
    return rel, cls, names


def load_cars(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    *,
    image_size: int = 224,
    check_files: bool = True,
) -> ImageListDataset:
    """Load Cars196's retrieval split as an :class:`ImageListDataset`.

    Args:
        root: the folder holding ``cars_annos.mat`` and ``car_ims/`` (or a parent ``cars196``).
        split: ``"train"`` (classes 1-98), ``"test"`` (classes 99-196) or ``"all"``.
        transform: a callable, ``None`` or ``"default"``.
        image_size: side of the default transform.
        check_files: check that every selected image exists.

    Returns:
        The dataset (annotation order), with attributes ``split``, ``name`` ("cars") and
        ``class_names``.

    Raises:
        DatasetFolderError: missing / malformed ``cars_annos.mat``, class ids outside 1..196,
            missing images.
    """
    check_split(split)
    root = find_root(
        root, "cars_annos.mat", ("cars196", "stanford_cars", "CARS196"), "Cars196", CARS_LAYOUT
    )
    rel, cls, names = read_cars_annos(root / "cars_annos.mat")
    bad = [c for c in cls if not 1 <= c <= _N_CLASSES]
    if bad:
        raise DatasetFolderError(
            f"Cars196: class ids {sorted(set(bad))[:5]} are outside 1..{_N_CLASSES}"
        )
    half = _N_CLASSES // 2
    keep = [i for i, c in enumerate(cls) if split == "all" or (split == "train") == (c <= half)]
    if not keep:
        raise DatasetFolderError(f"Cars196: no image of the {split!r} split")
    paths = [root / rel[i] for i in keep]
    if check_files:
        check_files_exist(paths, "Cars196", "cars_annos.mat")
    ds = ImageListDataset(
        paths, [cls[i] for i in keep], transform=resolve_transform(transform, split, image_size)
    )
    ds.split = split  # type: ignore[attr-defined]
    ds.name = "cars"  # type: ignore[attr-defined]
    ds.class_names = names  # type: ignore[attr-defined]
    return ds
