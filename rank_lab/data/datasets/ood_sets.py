"""The usual out-of-distribution test sets, from their published on-disk formats (nothing
downloaded).

CIFAR benchmark (Ramzi thesis Tab. 5.1/5.5: near C-100/C-10, TinyImageNet; mid LSUN, Places; far
Textures, SVHN) and ImageNet benchmarks (Tab. 5.6: iNaturalist, SUN, Places, Textures of Huang & Li,
2021; Tab. C.1: OpenImage-O, Textures, iNaturalist, ImageNet-O of Wang et al., 2022). Layouts::

    SVHN         root/{train,test,extra}_32x32.mat       MATLAB: X (32, 32, 3, N) uint8, y (N, 1) in 1..10 (10 = digit 0)
    Textures     root/dtd/images/<class>/<img>.jpg        + dtd/labels/{train,val,test}{1..10}.txt ("class/img.jpg")
    Places365    root/places365_val.txt ("<img> <label>"), root/val_256/<img> (small) or val_large/;
                 root/places365_train_standard.txt ("/a/airfield/00000001.jpg 0"), data_256/ or data_large_standard/
    LSUN (lmdb)  root/<category>_<split>_lmdb/ (the official release; values are encoded images)
    LSUN, LSUN_resize, iSUN (ODIN's crops): root/LSUN/test/*.jpg, root/LSUN_resize/*.jpg, root/iSUN/iSUN_patches/*.jpeg
    TinyImageNet root/tiny-imagenet-200/{wnids.txt, val/val_annotations.txt, val/images/, test/images/}
    iNaturalist, SUN, Places (ImageNet OOD subsets): root/<Name>/images/*.jpg
    OpenImage-O: root/openimage_o/images/*.jpg   ImageNet-O: root/imagenet-o/<wnid>/*.jpg

Folder-of-images sets have no classes: their labels are ``-1``. Items follow
:class:`~rank_lab.data.datasets.base.ImageListDataset` (PIL image through ``transform``) or, for the
array formats (SVHN), :class:`~rank_lab.data.datasets.cifar.ArrayImageDataset`.
"""  # noqa: E501

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset, check_transform
from rank_lab.data.datasets.cifar import ArrayImageDataset, load_cifar
from rank_lab.data.datasets.sources import published, torchvision_download
from rank_lab.data.datasets.transforms import check_split, find_root
from rank_lab.registry import Registry

__all__ = [
    "IMAGE_EXTENSIONS",
    "list_images",
    "load_image_folder",
    "load_svhn",
    "load_textures",
    "load_places365",
    "load_tiny_imagenet",
    "LMDBImageDataset",
    "load_lsun_lmdb",
    "load_ood_dataset",
    "OOD_FOLDERS",
]

Transform = Callable[[Any], Any] | None
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff")

#: Named folder-of-images OOD sets: candidate sub-folders of ``root`` holding the images, in order.
OOD_FOLDERS: Registry[tuple[str, ...]] = Registry(
    "OOD folder set",
    {
        "lsun": ("LSUN/test", "test", "LSUN"),
        "lsun_resize": ("LSUN_resize/LSUN_resize", "LSUN_resize"),
        "isun": ("iSUN/iSUN_patches", "iSUN_patches", "iSUN"),
        "inaturalist": ("iNaturalist/images", "iNaturalist", "images"),
        "sun": ("SUN/images", "SUN", "images"),
        "places": ("Places/images", "Places", "images"),
        "openimage_o": ("openimage_o/images", "openimage_o", "OpenImage-O", "images"),
        "imagenet_o": ("imagenet-o", "ImageNet-O", "imagenet_o"),
    },
)
#: Folder set -> its key in :data:`rank_lab.data.datasets.sources.DATASET_SOURCES`.
_OOD_SOURCES = {
    "lsun": "odin_crops",
    "lsun_resize": "odin_crops",
    "isun": "odin_crops",
    "inaturalist": "imagenet_ood",
    "sun": "imagenet_ood",
    "places": "imagenet_ood",
    "openimage_o": "openimage_o",
    "imagenet_o": "imagenet_o",
}


def list_images(folder: str | Path, recursive: bool = True) -> list[Path]:
    """Sorted image files (by extension, case-insensitive) under ``folder`` (possibly none).

    Raises:
        DatasetFolderError: ``folder`` does not exist or is not a folder.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DatasetFolderError(f"image folder {str(folder)!r} does not exist or is not a folder")
    it = folder.rglob("*") if recursive else folder.iterdir()
    return sorted(p for p in it if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)


def load_image_folder(
    root: str | Path,
    transform: Transform = None,
    *,
    labels: str = "none",
    name: str = "image folder",
) -> ImageListDataset:
    """Every image under ``root`` (recursively, sorted by path).

    Args:
        root: the folder.
        transform: applied to the PIL image.
        labels: ``"none"`` (all ``-1``) or ``"folder"`` (index of the first-level sub-folder, in
            sorted order; ``class_names`` lists them).
        name: dataset name for messages.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFolderError(f"{name}: folder {str(root)!r} does not exist")
    paths = list_images(root)
    if not paths:
        raise DatasetFolderError(
            f"{name}: no image files ({', '.join(IMAGE_EXTENSIONS)}) under {str(root)!r}"
        )
    if labels == "none":
        ds = ImageListDataset(paths, [-1] * len(paths), transform)
        ds.class_names = None  # type: ignore[attr-defined]
    elif labels == "folder":
        rel = [p.relative_to(root).parts for p in paths]
        if any(len(r) < 2 for r in rel):
            raise DatasetFolderError(
                f"{name}: labels='folder' needs every image inside a class sub-folder of "
                f"{str(root)!r}"
            )
        classes = sorted({r[0] for r in rel})
        idx = {c: i for i, c in enumerate(classes)}
        ds = ImageListDataset(paths, [idx[r[0]] for r in rel], transform)
        ds.class_names = classes  # type: ignore[attr-defined]
    else:
        raise ValueError(f"labels must be 'none' or 'folder', got {labels!r}")
    ds.name = name  # type: ignore[attr-defined]
    return ds


def load_svhn(
    root: str | Path, split: str = "test", transform: Transform = None, *, download: bool = False
) -> ArrayImageDataset:
    """SVHN cropped digits (Netzer et al., 2011) from ``<split>_32x32.mat``.

    Labels are mapped ``10 -> 0`` (the file codes digit 0 as 10). ``root`` is the folder with the
    ``.mat`` files; ``download=True`` lets torchvision fetch the split's file into it first.
    """
    # heavy import, paid only on this path
    import scipy.io

    if download:
        torchvision_download("svhn", root, split)

    check_split(split, ("train", "test", "extra"))
    fname = f"{split}_32x32.mat"
    base = find_root(
        root,
        fname,
        ("SVHN", "svhn"),
        "SVHN",
        "Expected root/{train,test,extra}_32x32.mat. " + published("svhn"),
    )
    try:
        mat = scipy.io.loadmat(base / fname)
    except Exception as exc:  # scipy's MatReadError, zlib/struct errors of a truncated file, ...
        raise DatasetFolderError(
            f"SVHN: {str(base / fname)!r} is not a readable MATLAB file "
            f"({type(exc).__name__}: {exc}). Expected root/{{train,test,extra}}_32x32.mat "
            "with variables X (32, 32, 3, N) uint8 and y (N, 1)."
        ) from exc
    if "X" not in mat or "y" not in mat:
        raise DatasetFolderError(f"SVHN: {str(base / fname)!r} lacks the 'X' or 'y' variable")
    x, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1)
    if x.ndim != 4 or x.shape[2] != 3 or x.shape[3] != y.shape[0]:
        raise DatasetFolderError(
            f"SVHN: expected X (H, W, 3, N) and y (N, 1), got {x.shape} and {mat['y'].shape}"
        )
    images = torch.from_numpy(np.ascontiguousarray(np.transpose(x, (3, 2, 0, 1))).astype(np.uint8))
    labels = torch.as_tensor(y.astype(np.int64) % 10)
    return ArrayImageDataset(
        images, labels, transform, class_names=[str(i) for i in range(10)], name="svhn", split=split
    )


def load_textures(
    root: str | Path,
    split: str | None = None,
    transform: Transform = None,
    *,
    partition: int = 1,
    download: bool = False,
) -> ImageListDataset:
    """Describable Textures Dataset (Cimpoi et al., 2014): 5,640 images of 47 texture classes.

    Args:
        root: the folder holding ``dtd/`` (or ``dtd/`` itself).
        split: ``None`` (every image, the usual OOD protocol) or ``"train"|"val"|"test"`` with
            ``partition`` 1..10 from ``labels/<split><partition>.txt`` (``partition`` is checked
            also when ``split`` is None).
        transform: applied to the PIL image.
        download: let torchvision fetch the archive into ``root`` first (``root/dtd/dtd/...``).

    Labels are the indices of the sorted class names (``class_names``).
    """
    if download:
        torchvision_download("textures", root)
    layout = (
        "Expected root/dtd/images/<class>/<image>.jpg (and dtd/labels/<split><k>.txt for a split). "
        + published("textures")
    )
    base = find_root(root, "images", ("dtd", "dtd/dtd"), "Textures", layout)
    images = base / "images"
    classes = sorted(p.name for p in images.iterdir() if p.is_dir())
    if not classes:
        raise DatasetFolderError(f"Textures: no class folders inside {str(images)!r}. {layout}")
    idx = {c: i for i, c in enumerate(classes)}
    if isinstance(partition, bool) or not isinstance(partition, int) or not 1 <= partition <= 10:
        # checked even when unused
        raise ValueError(f"partition must be an int in 1..10, got {partition!r}")
    if split is None:
        paths = [p for c in classes for p in list_images(images / c)]
    else:
        check_split(split, ("train", "val", "test"))
        listing = base / "labels" / f"{split}{partition}.txt"
        if not listing.is_file():
            raise DatasetFolderError(
                f"Textures: expected {str(listing)!r} for split={split!r}. {layout}"
            )
        paths = [images / line.strip() for line in listing.read_text().splitlines() if line.strip()]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise DatasetFolderError(
                f"Textures: {len(missing)} images listed in {listing.name} are missing, e.g. "
                f"{missing[0]}"
            )
    if not paths:
        raise DatasetFolderError(f"Textures: no images found under {str(images)!r}")
    ds = ImageListDataset(paths, [idx[p.parent.name] for p in paths], transform)
    ds.class_names, ds.name = classes, "textures"  # type: ignore[attr-defined]
    return ds


def load_places365(
    root: str | Path,
    split: str = "val",
    transform: Transform = None,
    *,
    small: bool = True,
    download: bool = False,
) -> ImageListDataset:
    """Places365-Standard (Zhou et al., 2017) in torchvision's layout (the CIFAR benchmark uses
    ``val``, small).

    Args:
        root: folder holding ``places365_val.txt`` / ``places365_train_standard.txt`` and the
            images.
        split: ``"val"`` (36,500 images) or ``"train"`` (train-standard).
        small: 256x256 images (``val_256`` / ``data_256``) or the large ones.
        download: let torchvision fetch the file lists and the split's images into ``root`` first.
    """
    check_split(split, ("train", "val"))
    if download:
        torchvision_download("places365", root, split, small=small)
    listing = "places365_val.txt" if split == "val" else "places365_train_standard.txt"
    folder = (
        ("val_256" if small else "val_large")
        if split == "val"
        else ("data_256" if small else "data_large_standard")
    )
    layout = f"Expected root/{listing} and the images in root/{folder}/. {published('places365')}"
    base = find_root(root, listing, ("places365", "Places365"), "Places365", layout)
    paths, labels = [], []
    for i, line in enumerate((base / listing).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise DatasetFolderError(
                f"Places365: line {i} of {listing} should be '<image> <label>', got {line!r}"
            )
        paths.append(base / folder / parts[0].lstrip("/"))
        labels.append(int(parts[1]))
    if not paths:
        raise DatasetFolderError(f"Places365: {listing} is empty")
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise DatasetFolderError(
            f"Places365: {len(missing)} images of {listing} are missing, e.g. {missing[0]}. "
            f"{layout}"
        )
    ds = ImageListDataset(paths, labels, transform)
    cats = base / "categories_places365.txt"
    ds.class_names = (
        [ln.split()[0] for ln in cats.read_text().splitlines() if ln.strip()]
        if cats.is_file()
        else None
    )  # type: ignore[attr-defined]
    ds.name = "places365"  # type: ignore[attr-defined]
    return ds


def load_tiny_imagenet(
    root: str | Path, split: str = "val", transform: Transform = None
) -> ImageListDataset:
    """Tiny ImageNet (200 classes, 64x64). ``split="val"`` uses ``val_annotations.txt`` for labels
    (index in ``wnids.txt``); ``"test"`` has no labels (``-1``), as in the official HEAT code's
    near-OOD set."""
    check_split(split, ("val", "test"))
    layout = (
        "Expected root/tiny-imagenet-200/{wnids.txt, val/val_annotations.txt, val/images/, "
        "test/images/}. " + published("tiny_imagenet")
    )
    base = find_root(root, "wnids.txt", ("tiny-imagenet-200",), "TinyImageNet", layout)
    if split == "test":
        return load_image_folder(base / "test" / "images", transform, name="tiny_imagenet")
    wnids = [w.strip() for w in (base / "wnids.txt").read_text().splitlines() if w.strip()]
    idx = {w: i for i, w in enumerate(wnids)}
    ann = base / "val" / "val_annotations.txt"
    if not ann.is_file():
        raise DatasetFolderError(f"TinyImageNet: {str(ann)!r} is missing. {layout}")
    paths, labels = [], []
    line_format = "'<image>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1>'"
    for i, line in enumerate(ann.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) < 2:
            raise DatasetFolderError(
                f"TinyImageNet: line {i} of {str(ann)!r} is {line[:60]!r}; "
                f"every line should be {line_format}. {layout}"
            )
        if parts[1] not in idx:
            raise DatasetFolderError(
                f"TinyImageNet: class {parts[1]!r} on line {i} of {str(ann)!r} is not in wnids.txt"
            )
        paths.append(base / "val" / "images" / parts[0])
        labels.append(idx[parts[1]])
    if not paths:
        raise DatasetFolderError(
            f"TinyImageNet: {str(ann)!r} lists no image (lines {line_format}). {layout}"
        )
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise DatasetFolderError(
            f"TinyImageNet: {len(missing)} of the {len(paths)} val images listed in "
            f"{str(ann)!r} are missing, e.g. {str(missing[0])!r}. {layout}"
        )
    ds = ImageListDataset(paths, labels, transform)
    ds.class_names, ds.name = wnids, "tiny_imagenet"  # type: ignore[attr-defined]
    return ds


class LMDBImageDataset(Dataset):
    """Images stored as encoded bytes in one or more LMDB databases (the official LSUN release).

    Items are ``(transform(PIL image), label)`` with ``label`` the index of the database. The
    environments are opened lazily (safe with ``DataLoader`` workers). Needs the ``lmdb`` package.
    """

    def __init__(self, db_paths: list[Path], transform: Transform = None) -> None:
        # optional dependency (extra "data"), imported where it is used
        import lmdb

        if isinstance(db_paths, (str, Path)):
            raise TypeError(
                f"db_paths must be a list of LMDB paths, got one path {str(db_paths)!r}"
            )
        check_transform(transform)
        self.db_paths, self.transform, self._envs = [Path(p) for p in db_paths], transform, None
        if not self.db_paths:
            raise ValueError("db_paths is empty")
        self.index: list[tuple[int, bytes]] = []
        for i, p in enumerate(self.db_paths):
            try:
                env = lmdb.open(
                    str(p),
                    readonly=True,
                    lock=False,
                    readahead=False,
                    meminit=False,
                    subdir=p.is_dir(),
                )
                with env.begin(write=False) as txn:
                    self.index.extend(
                        (i, k) for k in txn.cursor().iternext(keys=True, values=False)
                    )
                env.close()
            except lmdb.Error as exc:
                raise DatasetFolderError(
                    f"LSUN: {str(p)!r} is not a readable LMDB database ({type(exc).__name__}: "
                    f"{exc}). Expected root/<category>_<split>_lmdb/ of the official release."
                ) from exc
        if not self.index:
            raise DatasetFolderError(
                f"LSUN: the LMDB databases {[str(p) for p in self.db_paths]} are empty"
            )
        self.labels = torch.as_tensor([i for i, _ in self.index], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, index: int) -> tuple[Any, torch.Tensor]:
        # optional dependency (extra "data"), imported where it is used
        import lmdb

        if self._envs is None:
            self._envs = [
                lmdb.open(
                    str(p),
                    readonly=True,
                    lock=False,
                    readahead=False,
                    meminit=False,
                    subdir=p.is_dir(),
                )
                for p in self.db_paths
            ]
        db, key = self.index[index]
        try:
            with self._envs[db].begin(write=False) as txn:
                buf = txn.get(key)
            img = Image.open(io.BytesIO(buf)).convert("RGB")
        # TypeError: a key that vanished (buf is None)
        except (lmdb.Error, OSError, TypeError) as exc:
            raise DatasetFolderError(
                f"LSUN: item {key!r} of {str(self.db_paths[db])!r} is not a readable "
                f"image ({type(exc).__name__}: {exc})"
            ) from exc
        return (self.transform(img) if self.transform else img), self.labels[index]


LSUN_CATEGORIES = (
    "bedroom",
    "bridge",
    "church_outdoor",
    "classroom",
    "conference_room",
    "dining_room",
    "kitchen",
    "living_room",
    "restaurant",
    "tower",
)


def load_lsun_lmdb(
    root: str | Path,
    split: str = "val",
    transform: Transform = None,
    *,
    categories: tuple[str, ...] = LSUN_CATEGORIES,
) -> LMDBImageDataset:
    """LSUN scenes (Yu et al., 2015) from ``root/<category>_<split>_lmdb`` (``split="test"``:
    ``test_lmdb``)."""
    check_split(split, ("train", "val", "test"))
    root = Path(root).expanduser()
    names = ["test_lmdb"] if split == "test" else [f"{c}_{split}_lmdb" for c in categories]
    missing = [n for n in names if not (root / n).exists()]
    if missing:
        raise DatasetFolderError(
            f"LSUN: expected {missing} inside {str(root)!r} (the official LMDB release). "
            f"{published('lsun_lmdb')}"
        )
    ds = LMDBImageDataset([root / n for n in names], transform)
    ds.class_names = list(categories) if split != "test" else None  # type: ignore[attr-defined]
    return ds


def load_ood_dataset(
    name: str, root: str | Path, transform: Transform = None, **kwargs: Any
) -> Dataset:
    """Load an OOD (or ID) set by name from its on-disk format.

    Names: ``cifar10``, ``cifar100`` (test split unless ``split=``), ``svhn``, ``textures`` (the
    OOD benchmarks' name of DTD; ``dtd``, the dataset's own published name, is the same loader),
    ``places365``, ``tiny_imagenet`` (Tiny ImageNet), ``lsun_lmdb``, and the folder sets of
    :data:`OOD_FOLDERS` (``lsun``, ``lsun_resize``, ``isun``, ``inaturalist``, ``sun``, ``places``,
    ``openimage_o``, ``imagenet_o``). ``kwargs`` go to the loader.
    """
    key = name.lower().replace("-", "_").replace(" ", "_")
    if key in ("cifar10", "cifar100"):
        return load_cifar(root, key, kwargs.pop("split", "test"), transform, **kwargs)
    loaders = {
        "svhn": load_svhn,
        "textures": load_textures,
        "dtd": load_textures,
        "places365": load_places365,
        "tiny_imagenet": load_tiny_imagenet,
        "lsun_lmdb": load_lsun_lmdb,
    }
    if key in loaders:
        return loaders[key](root, transform=transform, **kwargs)
    if key in OOD_FOLDERS:
        base = Path(root).expanduser()
        for sub in (*OOD_FOLDERS[key], "."):
            cand = base / sub
            if cand.is_dir() and list_images(cand):
                return load_image_folder(cand, transform, name=key, **kwargs)
        raise DatasetFolderError(
            f"{name}: no images in {str(base)!r}; expected them in one of its sub-folders "
            f"{list(OOD_FOLDERS[key])}. {published(_OOD_SOURCES[key])}"
        )
    known = sorted({"cifar10", "cifar100", *loaders, *OOD_FOLDERS})
    raise ValueError(f"unknown OOD dataset name {name!r}; known: {known}")
