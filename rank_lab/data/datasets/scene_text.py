"""Scene-text datasets in their published on-disk formats (no download).

* **LMDB recognition sets** (MJSynth, SynthText crops, IIIT-5K, SVT, IC'03/13/15, SVTP, CUTE as
  packaged by Baek et al., which the Patel thesis uses in Ch. 3 and 4): an LMDB environment
  whose keys are ``num-samples`` (the count, ASCII), ``image-%09d`` (encoded image bytes) and
  ``label-%09d`` (UTF-8 transcription), indices starting at 1. :class:`LmdbTextDataset`.
* **ICDAR'13 / ICDAR'15 localisation ground truth** (``gt_img_<n>.txt``): one word per line,
  either 8 comma-separated corner coordinates ``x1,y1,...,x4,y4,transcription`` (ICDAR'15,
  files often start with a UTF-8 BOM) or 4 numbers ``xmin, ymin, xmax, ymax, "transcription"``
  (ICDAR'13, comma- or space-separated). The transcription ``###`` marks a *don't care* region.
  :func:`read_icdar_gt`, :func:`read_icdar_folder`, :class:`IcdarDetectionDataset`; detections in
  the ``res_img_<n>.txt`` format are read by the same parser (an optional confidence after the
  coordinates is returned).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from rank_lab._validation import check_positive_int
from rank_lab.data.datasets.base import (
    DatasetFolderError,
    check_transform,
    pil_loader,
    require_path,
)
from rank_lab.data.datasets.sources import published

__all__ = [
    "LmdbTextDataset",
    "load_lmdb_words",
    "IcdarAnnotation",
    "read_icdar_gt",
    "read_icdar_folder",
    "IcdarDetectionDataset",
]

_LMDB_LAYOUT = (
    "Expected an LMDB environment (data.mdb) with keys num-samples, image-%09d and label-%09d. "
    + published("scene_text_lmdb")
)
_ENVS: dict[tuple[str, int], Any] = {}


def _open_env(root: Path) -> Any:
    """One read-only LMDB handle per folder and process (``lmdb`` refuses a second ``open``)."""
    # optional dependency (extra "data"), imported where it is used
    import lmdb

    key = (str(root.resolve()), os.getpid())
    if key not in _ENVS:
        try:
            _ENVS[key] = lmdb.open(
                str(root), readonly=True, lock=False, readahead=False, meminit=False, max_readers=64
            )
        except lmdb.Error as exc:
            raise DatasetFolderError(
                f"LMDB scene-text set: {str(root / 'data.mdb')!r} is not a readable LMDB "
                f"environment ({type(exc).__name__}: {exc}). {_LMDB_LAYOUT}"
            ) from exc
    return _ENVS[key]


def _lmdb_error(root: Path, what: str, exc: Exception) -> DatasetFolderError:
    """A read error of an opened environment (truncated or corrupt ``data.mdb``), naming file and
    layout."""
    return DatasetFolderError(
        f"LMDB scene-text set: reading {what} from {str(root / 'data.mdb')!r} failed "
        f"({type(exc).__name__}: {exc}). {_LMDB_LAYOUT}"
    )


class LmdbTextDataset(Dataset):
    """A word-crop recognition set stored in LMDB (the format of Baek et al.'s benchmark packs).

    Args:
        root: the LMDB folder (holding ``data.mdb``).
        transform: applied to the PIL image.
        mode: PIL mode of the returned images (``"L"`` grey, as the thesis' 100x32 inputs).
        max_length: skip samples whose label is longer (Baek et al. use 25); ``None`` keeps all;
            otherwise a positive int.
        charset: if given, skip samples with a character outside it (after ``lowercase``).
        lowercase: lower-case labels (the case-insensitive protocol of the thesis' tables).

    Items are ``(image, label)``; ``.labels`` lists the kept labels and ``.indices`` their LMDB
    indices. Requires the ``lmdb`` package.
    """

    def __init__(
        self,
        root: str | Path,
        transform: Callable[[Any], Any] | None = None,
        mode: str = "L",
        max_length: int | None = None,
        charset: str | None = None,
        lowercase: bool = False,
    ) -> None:
        try:
            # optional dependency (extra "data"), imported where it is used
            import lmdb
        except ImportError as exc:  # pragma: no cover - exercised only without lmdb
            raise ImportError("LmdbTextDataset needs the 'lmdb' package: pip install lmdb") from exc
        root = Path(root)
        if max_length is not None:
            max_length = check_positive_int(max_length, "max_length")
        check_transform(transform)
        require_path(root, "data.mdb", "LMDB scene-text set", _LMDB_LAYOUT)
        self.root, self.transform, self.mode, self.lowercase = root, transform, mode, lowercase
        env = _open_env(root)
        try:
            self._read_labels(env, max_length, charset, lowercase)
        except (lmdb.Error, UnicodeDecodeError) as exc:
            raise _lmdb_error(root, "the labels", exc) from exc

    def _read_labels(
        self, env: Any, max_length: int | None, charset: str | None, lowercase: bool
    ) -> None:
        root = self.root
        with env.begin(write=False) as txn:
            raw = txn.get(b"num-samples")
            if raw is None:
                raise DatasetFolderError(
                    f"LMDB scene-text set: {str(root)!r} has no 'num-samples' key. {_LMDB_LAYOUT}"
                )
            try:
                n = int(raw.decode("ascii").strip())
            except ValueError as exc:
                raise DatasetFolderError(
                    f"LMDB scene-text set: 'num-samples' is not an integer: {raw[:20]!r}"
                ) from exc
            self.indices: list[int] = []
            self.labels: list[str] = []
            allowed = set(charset) if charset is not None else None
            for i in range(1, n + 1):
                lab = txn.get(b"label-%09d" % i)
                if lab is None:
                    raise DatasetFolderError(
                        f"LMDB scene-text set: key label-{i:09d} is missing (num-samples = {n})"
                    )
                text = lab.decode("utf-8")
                if lowercase:
                    text = text.lower()
                if max_length is not None and len(text) > max_length:
                    continue
                if allowed is not None and any(c not in allowed for c in text):
                    continue
                self.indices.append(i)
                self.labels.append(text)

    def _txn_get(self, key: bytes) -> bytes | None:
        # optional dependency (extra "data"), imported where it is used
        import lmdb

        try:
            with _open_env(self.root).begin(write=False) as txn:  # re-opened in DataLoader workers
                return txn.get(key)
        except lmdb.Error as exc:
            raise _lmdb_error(self.root, f"key {key.decode()}", exc) from exc

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple[Any, str]:
        i = self.indices[index]
        buf = self._txn_get(b"image-%09d" % i)
        if buf is None:
            raise DatasetFolderError(f"LMDB scene-text set: key image-{i:09d} is missing")
        try:
            img = Image.open(io.BytesIO(buf)).convert(self.mode)
        except (OSError, ValueError) as exc:  # PIL.UnidentifiedImageError is an OSError
            raise DatasetFolderError(
                f"LMDB scene-text set: image-{i:09d} of {str(self.root / 'data.mdb')!r} "
                f"is not a readable image ({exc})"
            ) from exc
        if self.transform is not None:
            img = self.transform(img)
        return img, self.labels[index]


def load_lmdb_words(
    root: str | Path,
    height: int = 32,
    width: int = 100,
    max_items: int | None = None,
    charset: str | None = None,
    max_length: int | None = 25,
    lowercase: bool = True,
) -> tuple[torch.Tensor, list[str]]:
    """Read an LMDB recognition set into memory as grey ``(N, 1, height, width)`` tensors in
    ``[0, 1]``.

    The images are resized to ``width x height`` (100 x 32 in the thesis, no aspect-ratio
    padding, as in Baek et al.'s default). Filtering as in :class:`LmdbTextDataset`.

    Returns:
        The images and their labels.

    Raises:
        TypeError / ValueError: ``height``, ``width``, ``max_items`` or ``max_length`` not a
        positive
            int (``max_items`` and ``max_length`` may be None).
        DatasetFolderError: see :class:`LmdbTextDataset`; no sample passes the filters.
    """
    height, width = check_positive_int(height, "height"), check_positive_int(width, "width")
    if max_items is not None:
        max_items = check_positive_int(max_items, "max_items")

    ds = LmdbTextDataset(
        root, mode="L", max_length=max_length, charset=charset, lowercase=lowercase
    )
    n = len(ds) if max_items is None else min(len(ds), max_items)
    if n == 0:
        raise DatasetFolderError(f"LMDB scene-text set {str(root)!r}: no sample passes the filters")
    out = torch.empty(n, 1, height, width)
    for i in range(n):
        img, _ = ds[i]
        out[i, 0] = torch.from_numpy(
            np.asarray(img.resize((width, height), Image.BILINEAR), dtype=np.float32) / 255.0
        )
    return out, ds.labels[:n]


@dataclass
class IcdarAnnotation:
    """The words of one ICDAR ground-truth (or result) file.

    Attributes:
        quads: ``(N, 4, 2)`` float64 corner coordinates in pixels (file order of the corners).
        texts: the ``N`` transcriptions (``""`` when absent, e.g. in result files).
        dont_care: ``(N,)`` bool, transcription ``###``.
        scores: ``(N,)`` confidences when the file gives one after the coordinates, else ``None``.
    """

    quads: torch.Tensor
    texts: list[str]
    dont_care: torch.Tensor
    scores: torch.Tensor | None = field(default=None)


_NUM = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _split_line(line: str) -> list[str]:
    if "," in line:
        return [p.strip() for p in line.split(",")]
    return line.split()


def read_icdar_gt(path: str | Path, has_text: bool = True) -> IcdarAnnotation:
    """Parse one ICDAR'13/'15 ground-truth or result file.

    Args:
        path: the ``gt_img_<n>.txt`` (or ``res_img_<n>.txt``) file.
        has_text: whether lines end with a transcription (ground truth) or not (results, which
            may instead end with a confidence).

    Returns:
        An :class:`IcdarAnnotation`. Axis-aligned ICDAR'13 boxes become 4-corner quads
        ``(xmin, ymin), (xmax, ymin), (xmax, ymax), (xmin, ymax)``.

    Raises:
        DatasetFolderError: on a malformed line (naming the file and line number).
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetFolderError(f"ICDAR annotation file {str(p)!r} does not exist")
    text = p.read_bytes().decode("utf-8-sig", errors="replace")
    quads, texts, scores = [], [], []
    for k, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        parts = _split_line(line)
        n_num = 0
        while n_num < len(parts) and n_num < 8 and _NUM.match(parts[n_num]):
            n_num += 1
        if n_num >= 8:
            coords = [float(v) for v in parts[:8]]
            rest = parts[8:]
        elif n_num >= 4:
            x0, y0, x1, y1 = (float(v) for v in parts[:4])
            coords = [x0, y0, x1, y0, x1, y1, x0, y1]
            rest = parts[4:]
        else:
            raise DatasetFolderError(
                f"{p}:{k}: expected 8 (ICDAR'15) or 4 (ICDAR'13) coordinates, got {line[:80]!r}"
            )
        sep = "," if "," in line else " "
        tail = sep.join(rest).strip()
        if has_text:
            texts.append(tail[1:-1] if len(tail) >= 2 and tail[0] == tail[-1] == '"' else tail)
        else:
            texts.append("")
            if tail:
                try:
                    scores.append(float(tail))
                except ValueError as exc:
                    raise DatasetFolderError(f"{p}:{k}: unreadable confidence {tail!r}") from exc
        quads.append(coords)
    q = torch.tensor(quads, dtype=torch.float64).reshape(-1, 4, 2)
    dc = torch.tensor([t == "###" for t in texts], dtype=torch.bool)
    sc = torch.tensor(scores, dtype=torch.float64) if scores and len(scores) == len(quads) else None
    return IcdarAnnotation(q, texts, dc, sc)


def _image_id(name: str) -> str:
    m = re.search(r"(\d+)$", Path(name).stem)
    return m.group(1) if m else Path(name).stem


def read_icdar_folder(folder: str | Path, has_text: bool = True) -> dict[str, IcdarAnnotation]:
    """Read every ``*.txt`` of an ICDAR annotation folder, keyed by image number (``"12"``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetFolderError(f"ICDAR annotation folder {str(folder)!r} does not exist")
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise DatasetFolderError(
            f"ICDAR annotation folder {str(folder)!r} holds no .txt files (expected gt_img_<n>.txt)"
        )
    return {_image_id(f.name): read_icdar_gt(f, has_text) for f in files}


class IcdarDetectionDataset(Dataset):
    """ICDAR'13/'15 localisation set: images ``img_<n>.jpg`` with ``gt_img_<n>.txt`` files.

    Args:
        root: the dataset folder.
        images_dir: sub-folder of the images (e.g. ``ch4_test_images``).
        gt_dir: sub-folder of the ground-truth files (e.g. ``Challenge4_Test_Task1_GT``).
        transform: applied to the PIL image.

    Items are ``(image, IcdarAnnotation)``; ``.ids`` lists the image numbers.
    """

    def __init__(
        self,
        root: str | Path,
        images_dir: str = "images",
        gt_dir: str = "gt",
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        check_transform(transform)
        layout = (
            f"Expected {images_dir}/img_<n>.jpg and {gt_dir}/gt_img_<n>.txt. {published('icdar')}"
        )
        img_root = require_path(root, images_dir, "ICDAR", layout)
        self.annotations = read_icdar_folder(require_path(root, gt_dir, "ICDAR", layout))
        images = {
            _image_id(p.name): p
            for p in sorted(img_root.iterdir())
            if p.suffix.lower() in (".jpg", ".jpeg", ".png")
        }
        missing = sorted(set(self.annotations) - set(images))
        if missing:
            raise DatasetFolderError(
                f"ICDAR: no image for ground-truth file(s) of image(s) {missing[:5]} in "
                f"{str(img_root)!r}. {layout}"
            )
        self.ids = sorted(self.annotations, key=lambda s: (len(s), s))
        self.paths = [images[i] for i in self.ids]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[Any, IcdarAnnotation]:
        img = pil_loader(self.paths[index])
        if self.transform is not None:
            img = self.transform(img)
        return img, self.annotations[self.ids[index]]
