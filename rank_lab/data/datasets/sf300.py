"""SF300-style aerial folders (Gominski thesis §5.1; its protocol §5.2).

SF300 is not distributed with the thesis; the thesis says each class is a square ground footprint
with several 512x512 vertical / oblique images and that the image parameters "were propagated to
the smaller images and stored in a .csv file for each class". The assumed layout::

    <root>/<split>/<class_id>/<image>.jpg          # split = "train" or "test"
    <root>/<split>/<class_id>/<any name>.csv       # optional, one per class

The per-class csv (comma- or semicolon-separated, header row, names case-insensitive) has an
``image`` column (file name inside the class folder) and any of ``altitude``, ``omega``, ``phi``,
``orientation``, ``kappa``, ``sun_angle`` (or ``sun angle``). ``orientation`` (0 = vertical,
1-4 = the four 45-degree obliques, 5 = other) is the "domain" of the thesis' SF300 report
(Table 5.3). Missing values are NaN (orientation -1).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset, require_path
from rank_lab.data.datasets.sources import published

__all__ = ["SF300Dataset", "load_sf300", "SF300_ATTRIBUTES"]

SF300_ATTRIBUTES = ("altitude", "omega", "phi", "orientation", "kappa", "sun_angle")
_EXTS = (".jpg", ".jpeg", ".png")
_LAYOUT = (
    "Expected <root>/<split>/<class>/*.jpg with an optional per-class .csv (see "
    "rank_lab.data.datasets.sf300). " + published("sf300")
)


@dataclass
class SF300Dataset:
    """One split of an SF300-style folder.

    Attributes:
        paths: image files, class by class.
        labels: ``(n,)`` class index into ``class_names``.
        class_names: class folder names, sorted.
        attributes: ``{name: (n,) float64}`` (NaN = unknown).
    """

    paths: list[Path]
    labels: torch.Tensor
    class_names: list[str]
    attributes: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def orientation(self) -> torch.Tensor:
        """``(n,)`` long orientation code, the thesis' SF300 "domain" (-1 = unknown)."""
        o = self.attributes["orientation"]
        return torch.where(torch.isnan(o), torch.full_like(o, -1), o).long()

    def dataset(self, transform: Callable[[Any], Any] | None = None) -> ImageListDataset:
        """The images as an :class:`ImageListDataset` of ``(image, class)``."""
        return ImageListDataset(self.paths, self.labels, transform)


def _read_csv(path: Path) -> dict[str, dict[str, float]]:
    text = path.read_text(encoding="utf-8-sig")
    try:
        dialect = csv.Sniffer().sniff(text.splitlines()[0] if text else "", delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.DictReader(text.splitlines(), dialect=dialect)
    if reader.fieldnames is None:
        return {}
    cols = {c.strip().lower().replace(" ", "_"): c for c in reader.fieldnames}
    if "image" not in cols:
        raise DatasetFolderError(
            f"SF300: {str(path)!r} has no 'image' column (columns: {reader.fieldnames})"
        )
    out = {}
    for row in reader:
        vals = {}
        for a in SF300_ATTRIBUTES:
            v = (row.get(cols[a], "") or "").strip() if a in cols else ""
            try:
                vals[a] = float(v) if v else float("nan")
            except ValueError as exc:
                raise DatasetFolderError(
                    f"SF300: {str(path)!r}: {a}={v!r} is not a number"
                ) from exc
        out[Path(row[cols["image"]].strip()).name] = vals
    return out


def load_sf300(root: str | Path, split: str = "test") -> SF300Dataset:
    """Load one split of an SF300-style folder (layout in the module docstring).

    ``split`` is ``"train"``, ``"test"`` (the assumed layout) or the name of another sub-folder of
    ``root``.

    Raises:
        ValueError: ``split`` is neither ``"train"`` / ``"test"`` nor a folder inside ``root``.
        DatasetFolderError: missing root or ``train`` / ``test`` folder, no class folder or no
            image.
    """
    if (
        split not in ("train", "test")
        and Path(root).is_dir()
        and not (Path(root) / str(split)).is_dir()
    ):
        raise ValueError(
            f"split must be 'train', 'test' or a folder inside {str(root)!r}, got {split!r}"
        )
    split_dir = require_path(root, split, "SF300", _LAYOUT)
    class_dirs = sorted(p for p in split_dir.iterdir() if p.is_dir())
    if not class_dirs:
        raise DatasetFolderError(f"SF300: no class folder inside {str(split_dir)!r}. {_LAYOUT}")
    paths, labels = [], []
    attrs: dict[str, list[float]] = {a: [] for a in SF300_ATTRIBUTES}
    names = []
    for ci, cdir in enumerate(class_dirs):
        names.append(cdir.name)
        table: dict[str, dict[str, float]] = {}
        for c in sorted(cdir.glob("*.csv")):
            table.update(_read_csv(c))
        imgs = sorted(p for p in cdir.iterdir() if p.suffix.lower() in _EXTS)
        for p in imgs:
            paths.append(p)
            labels.append(ci)
            row = table.get(p.name, {})
            for a in SF300_ATTRIBUTES:
                attrs[a].append(row.get(a, float("nan")))
    if not paths:
        raise DatasetFolderError(f"SF300: no image (.jpg/.png) under {str(split_dir)!r}. {_LAYOUT}")
    return SF300Dataset(
        paths,
        torch.tensor(labels),
        names,
        {a: torch.tensor(v, dtype=torch.float64) for a, v in attrs.items()},
    )
