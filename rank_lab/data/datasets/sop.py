"""Stanford Online Products (SOP; Song et al., CVPR 2016), from its published folder.

120,053 eBay product photos of 22,634 products (fine classes) in 12 categories (coarse classes:
bicycle, cabinet, chair, coffee_maker, fan, kettle, lamp, mug, sofa, stapler, table, toaster). The
reference split (used by the Ramzi thesis §3.5.1, SupRank, ROADMAP): 59,551 train images of 11,318
products, 60,502 test images of 11,316 products. Expected layout (the ``Stanford_Online_Products``
archive)::

    root/
      Ebay_train.txt      # header "image_id class_id super_class_id path", then one image per line
      Ebay_test.txt
      bicycle_final/111085122871_0.JPG   # "path" is relative to root
      ...

Labels keep the files' ids (``class_id`` 1..22,634 and ``super_class_id`` 1..12; never re-indexed).
With ``hierarchical=True`` they are ``(N, 2)``: (product, category), the L = 2 hierarchy of the
thesis chapter 4.
"""

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

__all__ = ["load_sop", "read_sop_list", "SOP_LAYOUT"]

SOP_LAYOUT = (
    "Expected the Stanford_Online_Products layout: Ebay_train.txt and Ebay_test.txt (header "
    "'image_id class_id super_class_id path') next to the category folders (bicycle_final/ ...)."
    " " + published("sop")
)
_HEADER = ["image_id", "class_id", "super_class_id", "path"]


def read_sop_list(path: str | Path) -> list[tuple[int, int, int, str]]:
    """Parse an ``Ebay_*.txt`` file into ``(image_id, class_id, super_class_id, path)`` rows.

    Raises:
        DatasetFolderError: wrong header, a line without 4 fields, or non-integer ids (the message
            gives the file and the line number).
    """
    path = Path(path)
    lines = path.read_text().splitlines()
    if not lines or lines[0].split() != _HEADER:
        raise DatasetFolderError(
            f"SOP: {str(path)!r} must start with the header {' '.join(_HEADER)!r}, got "
            f"{lines[0] if lines else '(empty file)'!r}. {SOP_LAYOUT}"
        )
    rows = []
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4:
            raise DatasetFolderError(
                f"SOP: line {i} of {str(path)!r} has {len(parts)} fields, expected 4: {line!r}"
            )
        try:
            rows.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
        except ValueError:
            raise DatasetFolderError(
                f"SOP: line {i} of {str(path)!r} has non-integer ids: {line!r}"
            ) from None
    if not rows:
        raise DatasetFolderError(f"SOP: {str(path)!r} lists no image")
    return rows


def load_sop(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    *,
    hierarchical: bool = False,
    image_size: int = 224,
    check_files: bool = True,
) -> ImageListDataset:
    """Load SOP's reference ``train`` / ``test`` split (or ``all``) as an :class:`ImageListDataset`.

    Args:
        root: the ``Stanford_Online_Products`` folder (or its parent).
        split: ``"train"`` (Ebay_train.txt), ``"test"`` (Ebay_test.txt) or ``"all"``.
        transform: a callable, ``None`` (PIL images) or ``"default"`` (the papers' train / test
            transform, :func:`~rank_lab.data.datasets.transforms.default_transform`).
        hierarchical: labels ``(N, 2)`` = (class_id, super_class_id) instead of ``(N,)`` class ids.
        image_size: side of the default transform's output.
        check_files: check that every listed image exists (one ``stat`` per image).

    Returns:
        The dataset, with extra attributes ``split``, ``name`` ("sop"), ``level_names`` and
        ``super_class_names`` (``{super_class_id: folder name without "_final"}``).

    Raises:
        DatasetFolderError: missing folder / list file / images, or a malformed list file.
    """
    check_split(split)
    root = find_root(
        root,
        "Ebay_train.txt" if split != "test" else "Ebay_test.txt",
        ("Stanford_Online_Products",),
        "SOP",
        SOP_LAYOUT,
    )
    files = {
        "train": ["Ebay_train.txt"],
        "test": ["Ebay_test.txt"],
        "all": ["Ebay_train.txt", "Ebay_test.txt"],
    }[split]
    rows: list[tuple[int, int, int, str]] = []
    for name in files:
        if not (root / name).is_file():
            raise DatasetFolderError(
                f"SOP: expected {name!r} inside {str(root)!r} but it is missing. {SOP_LAYOUT}"
            )
        rows.extend(read_sop_list(root / name))
    paths = [root / r[3] for r in rows]
    if check_files:
        check_files_exist(paths, "SOP", " + ".join(files))
    labels = [[r[1], r[2]] for r in rows] if hierarchical else [r[1] for r in rows]
    ds = ImageListDataset(paths, labels, transform=resolve_transform(transform, split, image_size))
    ds.split = split  # type: ignore[attr-defined]
    ds.name = "sop"  # type: ignore[attr-defined]
    ds.level_names = ["product", "category"] if hierarchical else ["product"]  # type: ignore[attr-defined]
    names: dict[int, str] = {}
    for r in rows:
        folder = Path(r[3]).parts[0] if len(Path(r[3]).parts) > 1 else ""
        names.setdefault(r[2], folder[: -len("_final")] if folder.endswith("_final") else folder)
    ds.super_class_names = names  # type: ignore[attr-defined]
    return ds
