"""Land-use (remote-sensing scene classification) datasets in their folder-per-class layouts.

The eight datasets of the Gominski thesis' chapter 5 (§5.3, Table 5.4), as they are
distributed (nothing is downloaded): one folder per class holding the images, sometimes below a
top folder of the archive, and for RSI-CB below a level of super-categories::

    UCMerced_LandUse/Images/<class>/*.tif        UCM, 21 classes x 100
    AID/<class>/*.jpg                            AID, 30 classes, 200-400 each (10,000)
    NWPU-RESISC45/<class>/*.jpg                  RESISC45, 45 x 700
    PatternNet/images/<class>/*.jpg              PatternNet, 38 x 800
    RSI-CB256/<category>/<class>/*.tif           RSI-CB (256 version), 35 classes in 6 categories
    RSSCN7/<aGrass ... gParking>/*.jpg           RSSCN7, 7 x 400
    12class_tif/<class>/*.tif                    SIRI-WHU, 12 x 200
    WHU-RS19/<class>/*.jpg                       WHU-RS19, 19 x ~50 (1,005)

A class is every leaf folder that contains images (its folder name is the class name; nested
categories are walked), so renamed top folders and extra nesting levels work. BCS (Brazilian
Coffee Scenes) of Table 5.4 is not used in the thesis' experiments and uses a fold-file layout; it
is not supported. The author's code drops classes with fewer than 5 images (``min_per_class``).

:func:`load_landuse_pool` stacks several datasets (per-dataset class ids kept, classes of different
datasets never merged) for :class:`rank_lab.fewshot.MultiDatasetSampler` and the
leave-one-dataset-out protocol (:meth:`LandUsePool.leave_one_out`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rank_lab._validation import check_positive_int
from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.sources import published
from rank_lab.registry import Registry

__all__ = [
    "LANDUSE_DATASETS",
    "LANDUSE_PUBLISHED_NAMES",
    "LandUseDataset",
    "LandUsePool",
    "load_landuse",
    "load_landuse_pool",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp")

#: name -> (top folders tried below the given root, number of classes of the published dataset).
LANDUSE_DATASETS: Registry[tuple[tuple[str, ...], int]] = Registry(
    "land-use dataset",
    {
        "ucm": (("UCMerced_LandUse/Images", "Images", "UCMerced_LandUse"), 21),
        "aid": (("AID",), 30),
        "resisc45": (("NWPU-RESISC45", "RESISC45"), 45),
        "patternnet": (("PatternNet/images", "images", "PatternNet"), 38),
        "rsicb": (("RSI-CB256", "RSI-CB"), 35),
        "rsscn7": (("RSSCN7",), 7),
        "siriwhu": (
            ("12class_tif", "Google dataset of SIRI-WHU_earth_im_tiff/12class_tif", "SIRI-WHU"),
            12,
        ),
        "whurs19": (("WHU-RS19", "RSDataset"), 19),
    },
)
#: The datasets' published names (spaces removed, lower case) -> their names here: ``"UC Merced"``
#: (the UC Merced Land Use dataset), ``"NWPU-RESISC45"``, ``"RSI-CB256"``, ``"SIRI-WHU"``,
#: ``"WHU-RS19"``.
LANDUSE_PUBLISHED_NAMES: dict[str, str] = {
    "ucmerced": "ucm",
    "nwpu-resisc45": "resisc45",
    "rsi-cb256": "rsicb",
    "siri-whu": "siriwhu",
    "whu-rs19": "whurs19",
}


def _canonical(name: str, arg: str = "name") -> str:
    key = str(name).lower().replace(" ", "")
    key = LANDUSE_PUBLISHED_NAMES.get(key, key)
    if key not in LANDUSE_DATASETS:
        raise ValueError(
            f"unknown land-use dataset {name!r} ({arg}); known: {sorted(LANDUSE_DATASETS)}"
        )
    return key


@dataclass
class LandUseDataset:
    """One land-use dataset.

    Attributes:
        name: canonical name (``"ucm"``, ``"aid"`` ...).
        root: the folder whose leaf sub-folders are the classes.
        paths: image files, class by class (sorted).
        labels: ``(n,)`` class index into ``class_names``.
        class_names: class folder names (relative paths for nested layouts), sorted.
    """

    name: str
    root: Path
    paths: list[Path]
    labels: torch.Tensor
    class_names: list[str]

    def __len__(self) -> int:
        return len(self.paths)

    def dataset(self, transform: Callable[[Any], Any] | None = None) -> ImageListDataset:
        """The images as an :class:`ImageListDataset` of ``(image, class)``."""
        return ImageListDataset(self.paths, self.labels, transform)


def _is_image(p: Path) -> bool:
    return p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS and not p.name.startswith(".")


def _layout(key: str) -> str:
    return (
        "Expected one folder per class holding the images, e.g. "
        f"{LANDUSE_DATASETS[key][0][0]}/<class>/*.jpg. {published('landuse')}"
    )


def _find_root(root: Path, key: str) -> Path:
    if not root.is_dir():
        raise DatasetFolderError(
            f"{key}: root folder {str(root)!r} does not exist or is not a folder. {_layout(key)}"
        )
    for sub in LANDUSE_DATASETS[key][0]:
        if (root / sub).is_dir():
            return root / sub
    return root


def load_landuse(
    root: str | Path, name: str, *, min_per_class: int = 1, strict: bool = False
) -> LandUseDataset:
    """Load a land-use dataset from its folder-per-class layout (module docstring).

    Args:
        root: the dataset folder, or its parent (the archive's top folder names are tried).
        name: ``"ucm"``, ``"aid"``, ``"resisc45"``, ``"patternnet"``, ``"rsicb"``, ``"rsscn7"``,
            ``"siriwhu"``, ``"whurs19"``, or the dataset's published name
            (:data:`LANDUSE_PUBLISHED_NAMES`, e.g. ``"UC Merced"``, ``"NWPU-RESISC45"``; case and
            spaces do not matter).
        min_per_class: drop classes with fewer images (the author's code: 5); a positive int.
        strict: raise (instead of warning) when the number of classes differs from the published
            one.

    Raises:
        ValueError: unknown ``name``.
        DatasetFolderError: missing folder, or no class folder with images.
    """
    key = _canonical(name)
    min_per_class = check_positive_int(min_per_class, "min_per_class")
    base = _find_root(Path(root).expanduser(), key)
    layout = _layout(key)
    classes: dict[str, list[Path]] = {}
    for d in sorted([base, *(p for p in base.rglob("*") if p.is_dir())]):
        imgs = sorted(p for p in d.iterdir() if _is_image(p))
        if imgs:
            if d == base:
                raise DatasetFolderError(
                    f"{key}: images lie directly in {str(base)!r}, not in class folders. {layout}"
                )
            classes[d.relative_to(base).as_posix()] = imgs
    if not classes:
        raise DatasetFolderError(
            f"{key}: no class folder with images ({', '.join(IMAGE_EXTENSIONS)}) under "
            f"{str(base)!r}. {layout}"
        )
    names = {c: c.rsplit("/", 1)[-1] for c in classes}
    if len(set(names.values())) == len(names):  # leaf names are unique: use them
        classes = {names[c]: v for c, v in classes.items()}
    kept = {c: v for c, v in sorted(classes.items()) if len(v) >= min_per_class}
    if not kept:
        raise DatasetFolderError(
            f"{key}: no class has min_per_class={min_per_class} images under {str(base)!r}"
        )
    expected = LANDUSE_DATASETS[key][1]
    if len(classes) != expected:
        msg = (
            f"{key}: found {len(classes)} class folders under {str(base)!r}, the published dataset "
            f"has {expected}"
        )
        if strict:
            raise DatasetFolderError(msg)
        warnings.warn(msg, stacklevel=2)
    paths, labels = [], []
    for i, imgs in enumerate(kept.values()):
        paths += imgs
        labels += [i] * len(imgs)
    return LandUseDataset(key, base, paths, torch.tensor(labels), list(kept))


@dataclass
class LandUsePool:
    """Several land-use datasets stacked for multi-dataset training (thesis §5.4).

    Attributes:
        paths: every image.
        labels: ``(n,)`` class within its dataset.
        dataset_ids: ``(n,)`` index into ``names``.
        names: dataset names.
        class_names: per dataset, its class names.
    """

    paths: list[Path]
    labels: torch.Tensor
    dataset_ids: torch.Tensor
    names: list[str]
    class_names: list[list[str]]

    def __len__(self) -> int:
        return len(self.paths)

    def subset(self, keep: torch.Tensor) -> LandUsePool:
        """Rows where ``keep`` (``(n,)`` bool) is True (dataset ids unchanged)."""
        idx = torch.nonzero(keep).flatten().tolist()
        return LandUsePool(
            [self.paths[i] for i in idx],
            self.labels[keep],
            self.dataset_ids[keep],
            self.names,
            self.class_names,
        )

    def leave_one_out(self, target: str) -> tuple[LandUsePool, LandUsePool]:
        """``(sources, target)``: train on every other dataset, test on ``target`` (§5.4)."""
        key = _canonical(target, "target")
        if key not in self.names:
            raise ValueError(f"target {target!r} is not in the pool {self.names}")
        is_t = self.dataset_ids == self.names.index(key)
        return self.subset(~is_t), self.subset(is_t)

    def dataset(self, transform: Callable[[Any], Any] | None = None) -> ImageListDataset:
        """The images as an :class:`ImageListDataset` of ``(image, class within its dataset)``."""
        return ImageListDataset(self.paths, self.labels, transform)


def load_landuse_pool(
    roots: Mapping[str, str | Path] | str | Path,
    names: Sequence[str] | None = None,
    *,
    min_per_class: int = 5,
    strict: bool = False,
) -> LandUsePool:
    """Load several datasets: ``roots`` maps names to folders, or is one parent folder of them all.

    With a parent folder, ``names`` are looked up below it under their archive folder names (a
    missing one raises :class:`DatasetFolderError`); ``names=None`` takes every known dataset found
    there (at least one).
    """
    min_per_class = check_positive_int(min_per_class, "min_per_class")
    if isinstance(roots, Mapping):
        items = [(_canonical(n, "roots"), Path(p)) for n, p in roots.items()]
    else:
        parent = Path(roots).expanduser()
        if not parent.is_dir():
            raise DatasetFolderError(
                f"land-use pool: {str(parent)!r} does not exist or is not a folder. "
                f"Expected the dataset folders inside it. {published('landuse')}"
            )

        def present(key: str) -> bool:
            return any((parent / sub).is_dir() for sub in LANDUSE_DATASETS[key][0])

        if names is None:
            items = [(key, parent) for key in LANDUSE_DATASETS if present(key)]
            if not items:
                raise DatasetFolderError(
                    f"land-use pool: no known dataset folder inside {str(parent)!r} "
                    f"(expected one of {[v[0][0] for v in LANDUSE_DATASETS.values()]}). "
                    f"{published('landuse')}"
                )
        else:
            items = [(_canonical(n, "names"), parent) for n in names]
            for key, _ in items:
                if not present(key):
                    raise DatasetFolderError(
                        f"{key}: none of {list(LANDUSE_DATASETS[key][0])} found inside "
                        f"{str(parent)!r}. {_layout(key)}"
                    )
    paths: list[Path] = []
    labels, ds_ids, names_out, cls = [], [], [], []
    for i, (key, root) in enumerate(items):
        d = load_landuse(root, key, min_per_class=min_per_class, strict=strict)
        paths += d.paths
        labels.append(d.labels)
        ds_ids.append(torch.full((len(d),), i))
        names_out.append(key)
        cls.append(d.class_names)
    return LandUsePool(paths, torch.cat(labels), torch.cat(ds_ids), names_out, cls)
