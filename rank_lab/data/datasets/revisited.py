"""Revisited Oxford / Paris (roxford5k, rparis6k) and the R1M distractors, from a local folder.

The published layout (revisitop, Radenović et al. 2018; Gominski thesis §3.1)::

    <root>/roxford5k/gnd_roxford5k.pkl      # {"imlist": [...], "qimlist": [...], "gnd": [...]}
    <root>/roxford5k/jpg/<name>.jpg         # one file per entry of imlist and qimlist
    <root>/rparis6k/gnd_rparis6k.pkl
    <root>/rparis6k/jpg/<name>.jpg

``imlist`` / ``qimlist`` are image names without extension; ``gnd[i]`` is the ground truth of
query ``i``: ``bbx`` (``[x1, y1, x2, y2]`` in the query image; queries are cropped to it),
``easy``, ``hard``, ``junk`` (indices into ``imlist``). The pickle is read with the standard
:mod:`pickle` module (``encoding="latin1"`` so Python-2 era files load).

R1M distractors: the images under a folder and a text file listing them, one relative path per line
(the ``revisitop1m.txt`` list; a name without an extension gets ``.jpg``). Nothing is downloaded.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rank_lab.data.datasets.base import (
    DatasetFolderError,
    ImageListDataset,
    pil_loader,
    require_path,
)
from rank_lab.data.datasets.sources import published

__all__ = ["RevisitedDataset", "load_revisited", "load_r1m_list", "REVISITED_NAMES"]

REVISITED_NAMES = ("roxford5k", "rparis6k")
_LAYOUT = (
    "Expected <root>/<name>/gnd_<name>.pkl and <root>/<name>/jpg/*.jpg (revisitop layout). "
    + published("revisited")
)


@dataclass
class RevisitedDataset:
    """A revisited Oxford / Paris benchmark.

    Attributes:
        name: ``"roxford5k"`` or ``"rparis6k"``.
        db_paths: ``n_db`` database image files.
        query_paths: ``Q`` query image files.
        query_bboxes: ``(Q, 4)`` query boxes ``[x1, y1, x2, y2]`` (float, pixels).
        gnd: ``Q`` dicts with ``easy``, ``hard``, ``junk`` index arrays (and ``bbx``).
        distractor_paths: R1M image files (empty without distractors).
    """

    name: str
    db_paths: list[Path]
    query_paths: list[Path]
    query_bboxes: np.ndarray
    gnd: list[dict[str, Any]]
    distractor_paths: list[Path] = field(default_factory=list)

    @property
    def n_db(self) -> int:
        return len(self.db_paths)

    @property
    def n_queries(self) -> int:
        return len(self.query_paths)

    def database(self, transform: Callable[[Any], Any] | None = None) -> ImageListDataset:
        """The database images as a dataset (labels = database index)."""
        return ImageListDataset(self.db_paths, torch.arange(self.n_db), transform)

    def queries(
        self, transform: Callable[[Any], Any] | None = None, crop: bool = True
    ) -> ImageListDataset:
        """The query images, cropped to their box (the protocol's convention) unless
        ``crop=False``."""
        boxes = self.query_bboxes
        paths = self.query_paths
        index_of = {str(p): i for i, p in enumerate(paths)}

        def loader(path: str | Path) -> Any:
            img = pil_loader(path)
            box = boxes[index_of[str(path)]]
            if crop and np.isfinite(box).all():
                x1, y1, x2, y2 = box
                img = img.crop((int(round(x1)), int(round(y1)), int(round(x2)), int(round(y2))))
            return img

        return ImageListDataset(paths, torch.arange(self.n_queries), transform, loader=loader)

    def distractors(self, transform: Callable[[Any], Any] | None = None) -> ImageListDataset:
        """The R1M distractors as a dataset (labels = -1)."""
        return ImageListDataset(
            self.distractor_paths, torch.full((len(self.distractor_paths),), -1), transform
        )


def load_r1m_list(
    root: str | Path, list_file: str | Path = "revisitop1m.txt", check_files: bool = False
) -> list[Path]:
    """Read the R1M distractor list: one image path per line, relative to ``root``.

    Args:
        root: the distractor folder.
        list_file: the list, relative to ``root`` (or absolute).
        check_files: verify that every listed image exists (slow for 1M files).
    """
    lst = Path(list_file)
    lst = (
        lst
        if lst.is_absolute()
        else require_path(root, list_file, "R1M", "Expected a text file listing the images.")
    )
    paths = []
    for line in lst.read_text(encoding="utf-8").splitlines():
        name = line.strip()
        if not name:
            continue
        p = Path(root) / name
        if not p.suffix:
            p = p.with_suffix(".jpg")
        paths.append(p)
    if not paths:
        raise DatasetFolderError(f"R1M: the list {str(lst)!r} is empty")
    if check_files:
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise DatasetFolderError(
                f"R1M: {len(missing)} listed images are missing, e.g. {str(missing[0])!r}"
            )
    return paths


def load_revisited(
    root: str | Path,
    name: str = "roxford5k",
    *,
    distractors_root: str | Path | None = None,
    distractors_list: str | Path = "revisitop1m.txt",
    check_files: bool = True,
) -> RevisitedDataset:
    """Load roxford5k / rparis6k (and optionally R1M) from the revisitop folder layout.

    Args:
        root: folder holding ``<name>/gnd_<name>.pkl`` and ``<name>/jpg/``.
        name: ``"roxford5k"`` or ``"rparis6k"``.
        distractors_root: R1M folder (``None``: no distractors).
        distractors_list: the R1M list file inside ``distractors_root``.
        check_files: verify that every database / query image exists.

    Raises:
        DatasetFolderError: missing folder, pickle or images, or a malformed pickle.
    """
    if name not in REVISITED_NAMES:
        raise ValueError(f"name must be one of {REVISITED_NAMES}, got {name!r}")
    pkl = require_path(
        Path(root) / name if (Path(root) / name).is_dir() else root,
        f"gnd_{name}.pkl",
        name,
        _LAYOUT,
    )
    data_dir = pkl.parent
    try:
        with open(pkl, "rb") as f:
            cfg = pickle.load(f, encoding="latin1")
    except Exception as exc:  # noqa: BLE001 - re-raised with the file name
        raise DatasetFolderError(f"{name}: could not read {str(pkl)!r}: {exc}") from exc
    for key in ("imlist", "qimlist", "gnd"):
        if not isinstance(cfg, dict) or key not in cfg:
            raise DatasetFolderError(f"{name}: {str(pkl)!r} has no {key!r} entry. {_LAYOUT}")
    if len(cfg["gnd"]) != len(cfg["qimlist"]):
        raise DatasetFolderError(
            f"{name}: gnd has {len(cfg['gnd'])} entries but qimlist has {len(cfg['qimlist'])}"
        )
    img_dir = require_path(data_dir, "jpg", name, _LAYOUT)

    def path(n: str) -> Path:
        p = img_dir / n
        return p if p.suffix.lower() in (".jpg", ".jpeg", ".png") else p.with_name(p.name + ".jpg")

    db = [path(n) for n in cfg["imlist"]]
    qs = [path(n) for n in cfg["qimlist"]]
    if check_files:
        missing = [p for p in db + qs if not p.is_file()]
        if missing:
            raise DatasetFolderError(
                f"{name}: {len(missing)} images are missing, e.g. {str(missing[0])!r}. {_LAYOUT}"
            )
    n_db = len(db)
    gnd, boxes = [], []
    for i, g in enumerate(cfg["gnd"]):
        entry = {
            k: np.asarray(g.get(k, []), dtype=np.int64).ravel() for k in ("easy", "hard", "junk")
        }
        for k, v in entry.items():
            if v.size and (v.min() < 0 or v.max() >= n_db):
                raise DatasetFolderError(f"{name}: gnd[{i}][{k!r}] has indices outside [0, {n_db})")
        bbx = np.asarray(g.get("bbx", [np.nan] * 4), dtype=np.float64).ravel()
        if bbx.shape != (4,):
            raise DatasetFolderError(
                f"{name}: gnd[{i}]['bbx'] must hold 4 numbers, got {bbx.tolist()}"
            )
        entry["bbx"] = bbx
        gnd.append(entry)
        boxes.append(bbx)
    distractors = (
        [] if distractors_root is None else load_r1m_list(distractors_root, distractors_list)
    )
    return RevisitedDataset(
        name, db, qs, np.stack(boxes) if boxes else np.zeros((0, 4)), gnd, distractors
    )
