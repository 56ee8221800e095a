"""An ALEGORIA-style cross-source benchmark folder (Gominski thesis §3.2).

The ALEGORIA images are not distributed with the thesis and no annotation-file format is
published, so this loader reads **an assumed layout** that carries exactly what the thesis'
protocol needs (class labels, several classes per image, the collection used as domain, the seven
attributes of Table 3.9, the non-annotated distractors)::

    <root>/annotations.csv
    <root>/<relative image paths listed in the csv>

``annotations.csv`` (comma- or semicolon-separated, header row, column names case-insensitive):

* ``image`` (required): image path relative to ``root``.
* ``class`` (required): class name; several classes separated by ``|`` (images showing several
  objects, whose positives are the images sharing *one of* them); empty = a distractor.
* ``collection`` (required): the source collection = the domain of the inter-domain measures
  (``MRU``, ``Lapie``, ``Photothèque``, ``Internet``, ``Henrard``, ``Combier``).
* optional attribute columns with the integer codes of Table 3.9: ``scale`` (0-3),
  ``illumination`` (0-2), ``vertical_orientation`` (0-2), ``representation`` (0-4),
  ``occlusion`` (0-2), ``alterations`` (0-2), ``color`` (0-3). Empty = unknown (-1).

Annotated images are the queries and, with the distractors, the base (thesis §3.4 protocol).
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

__all__ = ["AlegoriaDataset", "load_alegoria", "ALEGORIA_ATTRIBUTES", "ALEGORIA_COLLECTIONS"]

#: Attribute columns and their number of values (Table 3.9 of the thesis).
ALEGORIA_ATTRIBUTES: dict[str, int] = {
    "scale": 4,
    "illumination": 3,
    "vertical_orientation": 3,
    "representation": 5,
    "occlusion": 3,
    "alterations": 3,
    "color": 4,
}
#: The collections of the thesis' tables (Combier, 7 annotated images, is not reported there).
ALEGORIA_COLLECTIONS = ("MRU", "Lapie", "Photothèque", "Internet", "Henrard", "Combier")
_LAYOUT = (
    "Expected <root>/annotations.csv with columns image, class, collection[, scale, illumination, "
    "vertical_orientation, representation, occlusion, alterations, color] and the listed images "
    "(see rank_lab.data.datasets.alegoria)."
    " " + published("alegoria")
)


@dataclass
class AlegoriaDataset:
    """An ALEGORIA-style benchmark.

    Attributes:
        paths: ``n`` image files (annotated first, in file order, then distractors).
        class_names: the ``C`` class names, sorted.
        labels: ``(n, C)`` bool multi-hot class membership (all False for distractors).
        collections: ``(n,)`` collection index into ``collection_names``.
        collection_names: collection names in order of first appearance.
        attributes: ``{name: (n,) long}`` Table 3.9 codes, -1 = unknown.
        annotated: ``(n,)`` bool, the queries.
    """

    paths: list[Path]
    class_names: list[str]
    labels: torch.Tensor
    collections: torch.Tensor
    collection_names: list[str]
    attributes: dict[str, torch.Tensor]
    annotated: torch.Tensor

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def query_index(self) -> torch.Tensor:
        """Indices of the annotated images (the queries)."""
        return torch.nonzero(self.annotated).flatten()

    def dataset(self, transform: Callable[[Any], Any] | None = None) -> ImageListDataset:
        """All images as a dataset; the label is the first class (-1 for distractors)."""
        first = torch.where(
            self.labels.any(1), self.labels.float().argmax(1), torch.full((len(self),), -1)
        )
        return ImageListDataset(self.paths, first, transform)


def _norm(name: str) -> str:
    return name.strip().lower().replace(" ", "_").replace("-", "_")


def load_alegoria(
    root: str | Path, annotations: str = "annotations.csv", *, check_files: bool = True
) -> AlegoriaDataset:
    """Load an ALEGORIA-style folder (layout in the module docstring).

    Args:
        root: the benchmark folder.
        annotations: the annotation file inside ``root``.
        check_files: verify that every listed image exists.

    Raises:
        DatasetFolderError: missing folder / file / columns / images, or bad attribute codes.
    """
    ann = require_path(root, annotations, "ALEGORIA", _LAYOUT)
    text = ann.read_text(encoding="utf-8-sig")
    try:
        dialect = csv.Sniffer().sniff(text.splitlines()[0] if text else "", delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.DictReader(text.splitlines(), dialect=dialect)
    if reader.fieldnames is None:
        raise DatasetFolderError(f"ALEGORIA: {str(ann)!r} is empty. {_LAYOUT}")
    cols = {_norm(c): c for c in reader.fieldnames}
    for need in ("image", "class", "collection"):
        if need not in cols:
            raise DatasetFolderError(
                f"ALEGORIA: {str(ann)!r} has no {need!r} column (columns: {reader.fieldnames}). "
                f"{_LAYOUT}"
            )
    rows = list(reader)
    if not rows:
        raise DatasetFolderError(f"ALEGORIA: {str(ann)!r} lists no image")
    entries = []
    for r in rows:
        classes = [c.strip() for c in (r[cols["class"]] or "").split("|") if c.strip()]
        entries.append((classes, r))
    # annotated first, distractors after (stable)
    entries = [e for e in entries if e[0]] + [e for e in entries if not e[0]]
    class_names = sorted({c for cl, _ in entries for c in cl})
    if not class_names:
        raise DatasetFolderError(
            f"ALEGORIA: {str(ann)!r} has no annotated image (every 'class' is empty)"
        )
    cidx = {c: i for i, c in enumerate(class_names)}
    coll_names: list[str] = []
    paths, coll, labels = [], [], torch.zeros(len(entries), len(class_names), dtype=torch.bool)
    attrs = {
        a: torch.full((len(entries),), -1, dtype=torch.long)
        for a in ALEGORIA_ATTRIBUTES
        if a in cols
    }
    for i, (classes, r) in enumerate(entries):
        p = Path(root) / r[cols["image"]].strip()
        paths.append(p)
        for c in classes:
            labels[i, cidx[c]] = True
        cname = (r[cols["collection"]] or "").strip() or "unknown"
        if cname not in coll_names:
            coll_names.append(cname)
        coll.append(coll_names.index(cname))
        for a in attrs:
            v = (r[cols[a]] or "").strip()
            if v:
                try:
                    code = int(float(v))
                except ValueError as exc:
                    raise DatasetFolderError(
                        f"ALEGORIA: row {i} ({p.name}): {a}={v!r} is not an integer code"
                    ) from exc
                if not 0 <= code < ALEGORIA_ATTRIBUTES[a]:
                    raise DatasetFolderError(
                        f"ALEGORIA: row {i} ({p.name}): {a}={code} outside [0, "
                        f"{ALEGORIA_ATTRIBUTES[a]})"
                    )
                attrs[a][i] = code
    if check_files:
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise DatasetFolderError(
                f"ALEGORIA: {len(missing)} listed images are missing, e.g. {str(missing[0])!r}"
            )
    return AlegoriaDataset(
        paths, class_names, labels, torch.tensor(coll), coll_names, attrs, labels.any(1)
    )
