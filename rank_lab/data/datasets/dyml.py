"""DyML-Vehicle / -Animal / -Product (Sun et al., "Dynamic Metric Learning", CVPR 2021), 3 levels.

The Dynamic Metric Learning benchmarks used in the Ramzi thesis §4.4.1 (Tab. 4.2) and SupRank
Tab. VIII. Each dataset has 3 semantic levels: DyML-V vehicle id -> model -> body type; DyML-A
species -> one of 47 order/family/genus groups -> one of 5 classes; DyML-P (a subset of
iMaterialist-2019) product -> its product-tree levels. The training set carries the 3 labels of
every image; the test set is made of 3 sub-benchmarks, one per level (fine, middle, coarse), each a
query and a gallery with a single label, on which binary metrics are computed and then averaged
(:func:`dyml_average`). H-AP and NDCG cannot be computed there (the test tree is not given).

Published layout (the archives of github.com/SupetZYK/DynamicMetricLearning), one folder per
dataset (``dyml_vehicle``, ``dyml_animal``, ``dyml_product``)::

    root/
      train/label.csv           # "fname, coarse_id, middle_id, fine_id", then "0.jpg, 3, 17, 2051" ...
      train/imgs/<fname>
      bmk_fine/query.csv        # "fname, labels", then "0.jpg, 12" ...
      bmk_fine/query/<fname>
      bmk_fine/gallery.csv, bmk_fine/gallery/<fname>
      bmk_middle/..., bmk_coarse/...
      mini-bmk_all_in_one/label.csv, mini-bmk_all_in_one/imgs/   # DyML-P: a 3-level test set

Format notes. Fields are separated by ``", "``. In the published files the header line has no line
break before the first record (``"fname, coarse_id, middle_id, fine_id0.jpg, 3, 17, 2051"``): the
official DyML loader recovers the first record from it (``split('_id')[-1]``), while the HAPPIER
loader's ``pandas.read_csv`` drops it. This loader accepts both the glued and a separate header
line and keeps every record. Labels keep the files' ids; the training labels are returned
**fine to coarse** ``(N, 3)`` (the file order is coarse, middle, fine).
"""  # noqa: E501

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.sources import published
from rank_lab.data.datasets.transforms import check_files_exist, resolve_transform

__all__ = [
    "load_dyml",
    "read_dyml_csv",
    "dyml_average",
    "DYML_LAYOUT",
    "DYML_VARIANTS",
    "DYML_LEVELS",
]

DYML_VARIANTS = ("vehicle", "animal", "product")
#: Test sub-benchmarks, fine to coarse.
DYML_LEVELS = ("fine", "middle", "coarse")
DYML_LAYOUT = (
    "Expected the DyML layout: train/label.csv ('fname, coarse_id, middle_id, fine_id') with "
    "train/imgs/, and bmk_<fine|middle|coarse>/<query|gallery>.csv ('fname, labels') with "
    "bmk_<level>/<query|gallery>/ (DyML-P: mini-bmk_all_in_one/label.csv + imgs/)."
    " " + published("dyml")
)
_TRAIN_HEADER = ("fname", "coarse_id", "middle_id", "fine_id")
_BMK_HEADER = ("fname", "labels")


def read_dyml_csv(path: str | Path, header: tuple[str, ...]) -> list[tuple[str, list[int]]]:
    """Parse a DyML csv into ``(fname, [int fields])`` records (header glued to line 1 or not).

    Raises:
        DatasetFolderError: missing file, unexpected header, wrong field count, non-integer ids.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetFolderError(f"DyML: expected {str(path)!r} but it is missing. {DYML_LAYOUT}")
    lines = path.read_text().splitlines()
    first = re.sub(r"\s", "", lines[0]) if lines else ""
    head = ",".join(header)
    if not first.startswith(head):
        raise DatasetFolderError(
            f"DyML: {str(path)!r} must start with the header {', '.join(header)!r}, got "
            f"{lines[0] if lines else '(empty file)'!r}"
        )
    rest = first[len(head) :]
    records = ([rest] if rest else []) + lines[1:]
    out = []
    for i, line in enumerate(records, start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(header):
            raise DatasetFolderError(
                f"DyML: record {i} of {str(path)!r} has {len(parts)} fields, expected "
                f"{len(header)}: {line!r}"
            )
        try:
            out.append((parts[0], [int(p) for p in parts[1:]]))
        except ValueError:
            raise DatasetFolderError(
                f"DyML: record {i} of {str(path)!r} has non-integer labels: {line!r}"
            ) from None
    if not out:
        raise DatasetFolderError(f"DyML: {str(path)!r} lists no image")
    return out


def _resolve_root(root: str | Path, variant: str | None) -> Path:
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFolderError(f"DyML: root folder {str(root)!r} does not exist. {DYML_LAYOUT}")
    if variant is not None:
        if variant not in DYML_VARIANTS:
            raise ValueError(f"variant must be one of {DYML_VARIANTS}, got {variant!r}")
        for name in (f"dyml_{variant}", f"DyML-{variant}", variant):
            if (root / name).is_dir():
                return root / name
    return root


def load_dyml(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    *,
    level: str | None = None,
    variant: str | None = None,
    image_size: int = 224,
    check_files: bool = True,
) -> ImageListDataset:
    """Load a DyML split as an :class:`ImageListDataset`.

    Args:
        root: a DyML dataset folder (or its parent with ``variant``).
        split: ``"train"`` (labels ``(N, 3)`` fine, middle, coarse), ``"query"`` / ``"gallery"`` of
            the ``level`` sub-benchmark (labels ``(N,)``), or ``"all_in_one"`` (DyML-P's 3-level
            test set ``mini-bmk_all_in_one``, labels ``(N, 3)``).
        transform: a callable, ``None`` or ``"default"``.
        level: ``"fine"``, ``"middle"`` or ``"coarse"`` for ``"query"`` / ``"gallery"``.
        variant: ``"vehicle"``, ``"animal"`` or ``"product"`` to pick ``root/dyml_<variant>``.
        image_size: side of the default transform.
        check_files: check that every listed image exists.

    Returns:
        The dataset with attributes ``split``, ``name`` ("dyml"), ``level_names``,
        ``benchmark_level``.
    """
    base = _resolve_root(root, variant)
    if split in ("train", "all_in_one"):
        folder = "train" if split == "train" else "mini-bmk_all_in_one"
        rows = read_dyml_csv(base / folder / "label.csv", _TRAIN_HEADER)
        paths = [base / folder / "imgs" / r[0] for r in rows]
        labels: list[Any] = [[r[1][2], r[1][1], r[1][0]] for r in rows]  # fine, middle, coarse
        names = list(DYML_LEVELS)
    elif split in ("query", "gallery"):
        if level not in DYML_LEVELS:
            raise ValueError(f"split={split!r} needs level in {DYML_LEVELS}, got {level!r}")
        folder = f"bmk_{level}"
        rows = read_dyml_csv(base / folder / f"{split}.csv", _BMK_HEADER)
        paths = [base / folder / split / r[0] for r in rows]
        labels = [r[1][0] for r in rows]
        names = [level]
    else:
        raise ValueError(
            f"split must be 'train', 'query', 'gallery' or 'all_in_one', got {split!r}"
        )
    if check_files:
        check_files_exist(paths, "DyML", f"{folder}")
    ds = ImageListDataset(
        paths,
        labels,
        transform=resolve_transform(transform, "train" if split == "train" else "test", image_size),
    )
    ds.split = split  # type: ignore[attr-defined]
    ds.name = "dyml"  # type: ignore[attr-defined]
    ds.level_names = names  # type: ignore[attr-defined]
    ds.benchmark_level = level  # type: ignore[attr-defined]
    return ds


def dyml_average(
    per_level: Mapping[str, Mapping[str, float]], metrics: tuple[str, ...] = ("mAP", "ASI", "R@1")
) -> dict[str, float]:
    """The DyML protocol (thesis §4.4.1): the mean over the fine / middle / coarse sub-benchmarks.

    Args:
        per_level:
            ``{"fine": {"mAP": ..., "ASI": ..., "R@1": ...}, "middle": {...}, "coarse": {...}}``
            (e.g. from :func:`rank_lab.metrics.retrieval_metrics` on each query/gallery pair with
            ``metrics=("R@k", "mAP", "ASI")``; with 1-D labels ASI is the binary one).
        metrics: names to average.

    Returns:
        ``{name: mean over the levels}``.

    Raises:
        ValueError: a missing sub-benchmark or metric (``per_level`` / ``metrics``), or a NaN / inf
            value in ``per_level``.
    """
    missing = [lvl for lvl in DYML_LEVELS if lvl not in per_level]
    if missing:
        raise ValueError(f"per_level misses the sub-benchmarks {missing}")
    if isinstance(metrics, str):
        raise TypeError(f"metrics must be a sequence of metric names, got the string {metrics!r}")
    out = {}
    for m in metrics:
        vals = [float(per_level[lvl][m]) for lvl in DYML_LEVELS if m in per_level[lvl]]
        if len(vals) != len(DYML_LEVELS):
            raise ValueError(
                f"metric {m!r} (metrics) is missing for some sub-benchmark of per_level"
            )
        if not all(math.isfinite(v) for v in vals):
            raise ValueError(f"per_level holds a NaN or inf {m!r}: {vals}")
        out[m] = sum(vals) / len(vals)
    return out
