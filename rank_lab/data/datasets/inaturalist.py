"""iNaturalist 2018 with the retrieval split of Smooth-AP (Brown et al., ECCV 2020), used by
ROADMAP,
SupRank and the Ramzi thesis (§3.5.1, chapter 4).

461,939 images of 8,142 species. The retrieval split puts 70 % of the species in train (325,846
images, 5,690 species) and the rest in test (136,093 images, 2,452 species). Expected layout: the
iNat 2018 competition files plus the split files distributed with Smooth-AP::

    root/
      train_val2018/<supercategory>/<category_id>/<image>.jpg     # e.g. train_val2018/Plantae/7172/4ed9...jpg
      train2018.json, val2018.json   # COCO-style: "images" [{id, file_name, ...}], "annotations"
                                     # [{image_id, category_id}], "categories" [{id, name, supercategory,
                                     # kingdom, phylum, class, order, family, genus}]
      categories.json                # optional: the same category list (taxonomy), if not in train2018.json
      Inat_dataset_splits/
        Inaturalist_train_set1.txt   # one image path per line, relative to root
        Inaturalist_test_set1.txt

(the split files may also lie directly in ``root``). As in the Smooth-AP / ROADMAP / SupRank code,
the species id is the ``<category_id>`` folder of each path and the coarse "iNat-base" label the
``<supercategory>`` folder; the full 7-level taxonomy ("iNat-full", thesis §4.4.1) comes from the
``categories`` of ``train2018.json`` (or ``categories.json``). With ``check_json=True`` the species
of each listed image is also checked against the ``annotations`` of the two JSON files.

Labels: species keep their category ids; coarser levels get integer ids from the sorted names
(over the whole taxonomy, or over both split files for the super-categories), so train and test
agree.
"""  # noqa: E501

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.sources import published
from rank_lab.data.datasets.transforms import check_files_exist, check_split, resolve_transform

__all__ = ["load_inaturalist", "INAT_LAYOUT", "INAT_TAXONOMY", "SPLIT_FILES"]

INAT_LAYOUT = (
    "Expected the iNaturalist 2018 layout: train_val2018/<supercategory>/<category_id>/*.jpg, "
    "train2018.json / val2018.json, and the Smooth-AP split files Inat_dataset_splits/"
    "Inaturalist_train_set1.txt and Inaturalist_test_set1.txt (one relative image path per line)."
    " " + published("inaturalist")
)
#: Levels of ``levels="full"``, fine to coarse (column order of the labels).
INAT_TAXONOMY = ("species", "genus", "family", "order", "class", "phylum", "kingdom")
SPLIT_FILES = {"train": "Inaturalist_train_set1.txt", "test": "Inaturalist_test_set1.txt"}


def _split_file(root: Path, split: str) -> Path | None:
    name = SPLIT_FILES[split]
    for p in (root / "Inat_dataset_splits" / name, root / name):
        if p.is_file():
            return p
    return None


def _read_split(path: Path) -> list[tuple[str, str, int]]:
    """``(relative path, supercategory, category_id)`` per line."""
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        parts = line.split("/")
        if len(parts) < 3:
            raise DatasetFolderError(
                f"iNaturalist: line {i} of {str(path)!r} should look like "
                f"'train_val2018/<supercategory>/<category_id>/<image>.jpg', got {line!r}"
            )
        try:
            cid = int(parts[-2])
        except ValueError:
            raise DatasetFolderError(
                f"iNaturalist: line {i} of {str(path)!r}: the folder before the file name must be "
                f"the integer category id, got {parts[-2]!r} in {line!r}"
            ) from None
        rows.append((line, parts[-3], cid))
    if not rows:
        raise DatasetFolderError(f"iNaturalist: {str(path)!r} lists no image")
    return rows


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetFolderError(
            f"iNaturalist: could not read {str(path)!r} as JSON: {exc}"
        ) from exc


def _taxonomy(root: Path) -> dict[int, dict[str, str]]:
    """``{category_id: {level: name}}`` from train2018.json's categories (or categories.json)."""
    sources = [root / "train2018.json", root / "categories.json"]
    for src in sources:
        if not src.is_file():
            continue
        data = _load_json(src)
        cats = data.get("categories", data) if isinstance(data, dict) else data
        if isinstance(cats, list) and cats and all(k in cats[0] for k in INAT_TAXONOMY[1:]):
            return {int(c["id"]): {lvl: str(c[lvl]) for lvl in INAT_TAXONOMY[1:]} for c in cats}
    raise DatasetFolderError(
        "iNaturalist: levels='full' needs the taxonomy (categories with "
        f"{list(INAT_TAXONOMY[1:])}) in {[str(s) for s in sources]}, none found. {INAT_LAYOUT}"
    )


def _check_against_json(root: Path, rows: list[tuple[str, str, int]]) -> None:
    files = [root / "train2018.json", root / "val2018.json"]
    if not all(f.is_file() for f in files):
        raise DatasetFolderError(
            f"iNaturalist: check_json=True needs {[str(f) for f in files]}. {INAT_LAYOUT}"
        )
    cat_of: dict[str, int] = {}
    for f in files:
        data = _load_json(f)
        try:
            fname = {int(im["id"]): im["file_name"] for im in data["images"]}
            for a in data["annotations"]:
                cat_of[fname[int(a["image_id"])]] = int(a["category_id"])
        except (KeyError, TypeError) as exc:
            raise DatasetFolderError(
                f"iNaturalist: {str(f)!r} is not COCO-style (images/annotations): {exc}"
            ) from exc
    absent = [r[0] for r in rows if r[0] not in cat_of]
    if absent:
        raise DatasetFolderError(
            f"iNaturalist: {len(absent)} split paths are in neither JSON file, e.g. {absent[:3]}"
        )
    wrong = [r[0] for r in rows if cat_of[r[0]] != r[2]]
    if wrong:
        raise DatasetFolderError(
            f"iNaturalist: the folder id of {len(wrong)} paths disagrees with the JSON "
            f"category_id, e.g. {wrong[:3]}"
        )


def load_inaturalist(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    *,
    levels: str = "species",
    image_size: int = 224,
    check_files: bool = True,
    check_json: bool = False,
) -> ImageListDataset:
    """Load the Smooth-AP retrieval split of iNaturalist 2018 as an :class:`ImageListDataset`.

    Args:
        root: the iNaturalist 2018 folder (see the module docstring).
        split: ``"train"``, ``"test"`` or ``"all"``.
        transform: a callable, ``None`` or ``"default"``.
        levels: ``"species"`` -> labels ``(N,)``; ``"base"`` -> ``(N, 2)`` (species,
            supercategory), iNat-base; ``"full"`` -> ``(N, 7)`` (species, genus, family, order,
            class, phylum, kingdom), iNat-full (needs the JSON taxonomy).
        image_size: side of the default transform.
        check_files: check that every listed image exists.
        check_json: check each path's species against the JSON annotations (reads both files).

    Returns:
        The dataset in split-file order, with attributes ``split``, ``name`` ("inaturalist"),
        ``level_names`` and ``level_vocab`` (``{level: [names]}``, the id of a name is its index).

    Raises:
        DatasetFolderError: missing split / JSON files, malformed lines, unknown categories.
    """
    check_split(split)
    if levels not in ("species", "base", "full"):
        raise ValueError(f"levels must be 'species', 'base' or 'full', got {levels!r}")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFolderError(
            f"iNaturalist: root folder {str(root)!r} does not exist. {INAT_LAYOUT}"
        )
    wanted = ["train", "test"] if split == "all" else [split]
    rows: list[tuple[str, str, int]] = []
    all_rows: list[tuple[str, str, int]] = []
    for s in ("train", "test"):
        f = _split_file(root, s)
        if f is None:
            if s in wanted:
                raise DatasetFolderError(
                    f"iNaturalist: expected 'Inat_dataset_splits/{SPLIT_FILES[s]}' inside "
                    f"{str(root)!r} but it is missing. {INAT_LAYOUT}"
                )
            continue
        r = _read_split(f)
        all_rows.extend(r)
        if s in wanted:
            rows.extend(r)
    paths = [root / r[0] for r in rows]
    if check_files:
        check_files_exist(paths, "iNaturalist", "the split file(s)")
    if check_json:
        _check_against_json(root, rows)
    vocab: dict[str, list[str]] = {}
    if levels == "species":
        labels: list[Any] = [r[2] for r in rows]
        names = ["species"]
    elif levels == "base":
        vocab["supercategory"] = sorted({r[1] for r in all_rows})
        idx = {n: i for i, n in enumerate(vocab["supercategory"])}
        labels = [[r[2], idx[r[1]]] for r in rows]
        names = ["species", "supercategory"]
    else:
        tax = _taxonomy(root)
        unknown = sorted({r[2] for r in rows} - set(tax))
        if unknown:
            raise DatasetFolderError(
                f"iNaturalist: category ids {unknown[:5]} are not in the taxonomy of train2018.json"
            )
        for lvl in INAT_TAXONOMY[1:]:
            vocab[lvl] = sorted({t[lvl] for t in tax.values()})
        index = {lvl: {n: i for i, n in enumerate(vocab[lvl])} for lvl in INAT_TAXONOMY[1:]}
        labels = [[r[2]] + [index[lvl][tax[r[2]][lvl]] for lvl in INAT_TAXONOMY[1:]] for r in rows]
        names = list(INAT_TAXONOMY)
    ds = ImageListDataset(paths, labels, transform=resolve_transform(transform, split, image_size))
    ds.split = split  # type: ignore[attr-defined]
    ds.name = "inaturalist"  # type: ignore[attr-defined]
    ds.level_names = names  # type: ignore[attr-defined]
    ds.level_vocab = vocab  # type: ignore[attr-defined]
    return ds
