"""Hierarchical labels of the real datasets (Ramzi thesis §4.4.1; SupRank §VI-VII), one entry point.

:func:`load_hierarchical_dataset` returns a dataset whose ``.labels`` are ``(N, L)``, fine first:

=====================  ==  ===========================================  ======================================
name                   L   levels (fine -> coarse)                      loader
=====================  ==  ===========================================  ======================================
``sop``                2   product, category                            :func:`~rank_lab.data.datasets.sop.load_sop`
``inat_base``          2   species, supercategory (Plantae, Aves ...)   :func:`~rank_lab.data.datasets.inaturalist.load_inaturalist`
``inat_full``          7   species, genus, family, order, class,        same, taxonomy from ``train2018.json``'s
                           phylum, kingdom                              ``categories``
``dyml_vehicle`` ...   3   fine, middle, coarse                         :func:`~rank_lab.data.datasets.dyml.load_dyml`
``gldv2``              3   landmark, super-category (78),               :func:`load_gldv2_hierarchical`
                           natural vs human-made
=====================  ==  ===========================================  ======================================

**H-GLDv2** (the hierarchical Google Landmarks v2 of the thesis §4.3 / SupRank §VI). Published
files (github.com/cvdfoundation/google-landmark, dataset version 2.1, May 2023 addition), read from
``root`` or ``root/metadata``::

    train.csv                         id,url,landmark_id
    train_clean.csv                   landmark_id,images          (space-separated image ids; clean=True)
    train_label_to_hierarchical.csv   landmark_id,category,supercategory,hierarchical_label,natural_or_human_made
    index_image_to_landmark.csv       id,landmark_id
    index_label_to_hierarchical.csv   same columns as the train file (index landmark ids differ from train ones)
    train/<a>/<b>/<c>/<id>.jpg, index/<a>/<b>/<c>/<id>.jpg      (a, b, c = first three characters of id)

Assumptions (documented because the papers do not spell them out): the level-2 label is the
``hierarchical_label`` column (the 78 manually grouped super-categories; ``supercategory`` holds
the raw scraped Wikimedia "instance of" strings, about 5.7k of them), level 3 is
``natural_or_human_made``; string labels get integer ids from their sorted names over every
hierarchical file present, so train and index agree; images of landmarks without a hierarchical
row (no scraped category, about a third of GLDv2) are dropped (``n_dropped``).
"""  # noqa: E501

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.dyml import load_dyml
from rank_lab.data.datasets.inaturalist import load_inaturalist
from rank_lab.data.datasets.sop import load_sop
from rank_lab.data.datasets.sources import published
from rank_lab.data.datasets.transforms import check_files_exist, resolve_transform
from rank_lab.registry import Registry

__all__ = [
    "load_hierarchical_dataset",
    "load_gldv2_hierarchical",
    "read_gldv2_hierarchy",
    "HIERARCHICAL_DATASETS",
    "GLDV2_LAYOUT",
]

#: name -> (number of levels, level names fine -> coarse).
HIERARCHICAL_DATASETS: Registry[tuple[int, tuple[str, ...]]] = Registry(
    "hierarchical dataset",
    {
        "sop": (2, ("product", "category")),
        "inat_base": (2, ("species", "supercategory")),
        "inat_full": (7, ("species", "genus", "family", "order", "class", "phylum", "kingdom")),
        "dyml_vehicle": (3, ("fine", "middle", "coarse")),
        "dyml_animal": (3, ("fine", "middle", "coarse")),
        "dyml_product": (3, ("fine", "middle", "coarse")),
        "gldv2": (3, ("landmark", "hierarchical_label", "natural_or_human_made")),
    },
)
GLDV2_LAYOUT = (
    "Expected the GLDv2 metadata (in root or root/metadata): train.csv (id,url,landmark_id) or "
    "train_clean.csv (landmark_id,images), index_image_to_landmark.csv (id,landmark_id), and "
    "<split>_label_to_hierarchical.csv "
    "(landmark_id,category,supercategory,hierarchical_label,natural_or_human_made); images in "
    "<split>/a/b/c/<id>.jpg. " + published("gldv2")
)
_HIER_FIELDS = (
    "landmark_id",
    "category",
    "supercategory",
    "hierarchical_label",
    "natural_or_human_made",
)


def _meta(root: Path, name: str) -> Path | None:
    for p in (root / name, root / "metadata" / name):
        if p.is_file():
            return p
    return None


def _read_csv(path: Path, fields: tuple[str, ...]) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or any(c not in reader.fieldnames for c in fields):
            raise DatasetFolderError(
                f"GLDv2: {str(path)!r} must have the columns {list(fields)}, got "
                f"{reader.fieldnames}. {GLDV2_LAYOUT}"
            )
        return list(reader)


def read_gldv2_hierarchy(path: str | Path) -> dict[int, tuple[str, str]]:
    """``{landmark_id: (hierarchical_label, natural_or_human_made)}`` from a
    ``*_label_to_hierarchical.csv``."""
    out: dict[int, tuple[str, str]] = {}
    for i, row in enumerate(_read_csv(Path(path), _HIER_FIELDS), start=2):
        try:
            lid = int(row["landmark_id"])
        except ValueError:
            raise DatasetFolderError(
                f"GLDv2: line {i} of {str(path)!r} has a non-integer landmark_id "
                f"{row['landmark_id']!r}"
            ) from None
        out[lid] = (row["hierarchical_label"].strip(), row["natural_or_human_made"].strip())
    if not out:
        raise DatasetFolderError(f"GLDv2: {str(path)!r} lists no landmark")
    return out


def _image_rows(root: Path, split: str, clean: bool) -> list[tuple[str, int]]:
    if split == "index":
        path = _meta(root, "index_image_to_landmark.csv")
        if path is None:
            raise DatasetFolderError(
                f"GLDv2: index_image_to_landmark.csv is missing in {str(root)!r}. {GLDV2_LAYOUT}"
            )
        return [(r["id"], int(r["landmark_id"])) for r in _read_csv(path, ("id", "landmark_id"))]
    if clean:
        path = _meta(root, "train_clean.csv")
        if path is None:
            raise DatasetFolderError(
                f"GLDv2: train_clean.csv is missing in {str(root)!r} (or pass clean=False). "
                f"{GLDV2_LAYOUT}"
            )
        return [
            (img, int(r["landmark_id"]))
            for r in _read_csv(path, ("landmark_id", "images"))
            for img in r["images"].split()
        ]
    path = _meta(root, "train.csv")
    if path is None:
        raise DatasetFolderError(f"GLDv2: train.csv is missing in {str(root)!r}. {GLDV2_LAYOUT}")
    return [(r["id"], int(r["landmark_id"])) for r in _read_csv(path, ("id", "landmark_id"))]


def load_gldv2_hierarchical(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    *,
    clean: bool = True,
    image_size: int = 224,
    check_files: bool = True,
) -> ImageListDataset:
    """Load the train or index set of H-GLDv2 with ``(N, 3)`` labels (see the module docstring).

    Args:
        root: the GLDv2 folder.
        split: ``"train"`` or ``"index"``.
        transform: a callable, ``None`` or ``"default"``.
        clean: train only: the images of ``train_clean.csv`` (the 1.5M "cleaned" GLDv2) instead of
            ``train.csv``.
        image_size: side of the default transform.
        check_files: check that every image exists.

    Returns:
        The dataset with attributes ``split``, ``name`` ("gldv2"), ``level_names``, ``level_vocab``
        (``{"hierarchical_label": [...], "natural_or_human_made": [...]}``) and ``n_dropped``.
    """
    if split not in ("train", "index"):
        raise ValueError(f"split must be 'train' or 'index', got {split!r}")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFolderError(f"GLDv2: root folder {str(root)!r} does not exist. {GLDV2_LAYOUT}")
    hier_path = _meta(root, f"{split}_label_to_hierarchical.csv")
    if hier_path is None:
        raise DatasetFolderError(
            f"GLDv2: {split}_label_to_hierarchical.csv is missing in {str(root)!r}. {GLDV2_LAYOUT}"
        )
    hier = read_gldv2_hierarchy(hier_path)
    names = set(hier.values())
    for other in ("train", "index"):  # ids from the names of every hierarchical file: splits agree
        p = _meta(root, f"{other}_label_to_hierarchical.csv")
        if other != split and p is not None:
            names |= set(read_gldv2_hierarchy(p).values())
    vocab = {
        "hierarchical_label": sorted({n[0] for n in names}),
        "natural_or_human_made": sorted({n[1] for n in names}),
    }
    idx = {k: {n: i for i, n in enumerate(v)} for k, v in vocab.items()}
    rows = _image_rows(root, split, clean)
    kept = [(img, lid) for img, lid in rows if lid in hier]
    if not kept:
        raise DatasetFolderError(
            f"GLDv2: no {split} image has a landmark listed in {str(hier_path)!r}"
        )
    paths = [root / split / img[0] / img[1] / img[2] / f"{img}.jpg" for img, _ in kept]
    if check_files:
        check_files_exist(paths, "GLDv2", f"the {split} list")
    labels = [
        [lid, idx["hierarchical_label"][hier[lid][0]], idx["natural_or_human_made"][hier[lid][1]]]
        for _, lid in kept
    ]
    ds = ImageListDataset(
        paths,
        labels,
        transform=resolve_transform(transform, "train" if split == "train" else "test", image_size),
    )
    ds.split = split  # type: ignore[attr-defined]
    ds.name = "gldv2"  # type: ignore[attr-defined]
    ds.level_names = list(HIERARCHICAL_DATASETS["gldv2"][1])  # type: ignore[attr-defined]
    ds.level_vocab = vocab  # type: ignore[attr-defined]
    ds.n_dropped = len(rows) - len(kept)  # type: ignore[attr-defined]
    return ds


def load_hierarchical_dataset(
    name: str,
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    **kwargs: Any,
) -> ImageListDataset:
    """Load ``split`` of a hierarchical dataset by name (see the table of the module docstring).

    ``split`` is passed to the loader: ``"train"`` / ``"test"`` for SOP and iNat, ``"train"`` /
    ``"query"`` / ``"gallery"`` / ``"all_in_one"`` for DyML (with ``level=``), ``"train"`` /
    ``"index"`` for GLDv2. Keyword arguments go to the loader.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    key = str(name).lower().replace("-", "_")
    if key not in HIERARCHICAL_DATASETS:
        raise ValueError(
            f"unknown hierarchical dataset name {name!r}; known: {sorted(HIERARCHICAL_DATASETS)}"
        )
    if root is None:
        raise ValueError(f"dataset {name!r} needs a data folder (root / data_dir), got None")
    if key == "sop":
        return load_sop(root, split, transform, hierarchical=True, **kwargs)
    if key.startswith("inat"):
        return load_inaturalist(root, split, transform, levels=key.split("_")[1], **kwargs)
    if key.startswith("dyml"):
        return load_dyml(root, split, transform, variant=key.split("_")[1], **kwargs)
    return load_gldv2_hierarchical(root, split, transform, **kwargs)
