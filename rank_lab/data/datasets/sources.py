"""Where each dataset is published, and ``download=True`` where torchvision already downloads it.

Every loader of :mod:`rank_lab.data.datasets` reads a dataset in its published layout from a local
folder; when the folder is missing or malformed, its :class:`DatasetFolderError` says what layout
was expected and, through :func:`published`, where the data can be obtained.

For CIFAR-10/100, SVHN, Textures (DTD) and Places365, torchvision's dataset classes fetch the
published archives, check their MD5 sums and extract them into exactly the layout the loaders read:
those loaders take ``download=True``, which calls :func:`torchvision_download` (rank_lab writes no
downloader of its own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import DatasetFolderError

__all__ = ["DATASET_SOURCES", "TORCHVISION_DOWNLOADS", "published", "torchvision_download"]

#: key -> (where the data is published, the reference that introduced it).
DATASET_SOURCES: dict[str, tuple[str, str]] = {
    "sop": ("https://cvgl.stanford.edu/projects/lifted_struct/", "Song et al., CVPR 2016"),
    "cub": ("https://www.vision.caltech.edu/datasets/cub_200_2011/", "Wah et al., 2011"),
    "cars196": (
        "https://ai.stanford.edu/~jkrause/cars/car_dataset.html",
        "Krause et al., 3dRR 2013",
    ),
    "inaturalist": (
        "https://github.com/visipedia/inat_comp/tree/master/2018 (images, JSON) and "
        "https://github.com/Andrew-Brown1/Smooth_AP (retrieval split files)",
        "Van Horn et al., CVPR 2018; Brown et al., ECCV 2020",
    ),
    "vehicleid": ("https://www.pkuml.org/resources/pku-vehicleid.html", "Liu et al., CVPR 2016"),
    "dyml": ("https://github.com/SupetZYK/DynamicMetricLearning", "Sun et al., CVPR 2021"),
    "gldv2": ("https://github.com/cvdfoundation/google-landmark", "Weyand et al., CVPR 2020"),
    "cifar": (
        "https://www.cs.toronto.edu/~kriz/cifar.html (or download=True: torchvision fetches it)",
        "Krizhevsky, 2009",
    ),
    "svhn": (
        "http://ufldl.stanford.edu/housenumbers/ (or download=True: torchvision fetches it)",
        "Netzer et al., 2011",
    ),
    "textures": (
        "https://www.robots.ox.ac.uk/~vgg/data/dtd/ (or download=True: torchvision fetches it)",
        "Cimpoi et al., CVPR 2014",
    ),
    "places365": (
        "http://places2.csail.mit.edu/download.html (or download=True: torchvision fetches it)",
        "Zhou et al., TPAMI 2017",
    ),
    "lsun_lmdb": ("https://github.com/fyu/lsun", "Yu et al., 2015"),
    "odin_crops": (
        "https://github.com/facebookresearch/odin (LSUN, LSUN_resize, iSUN crops)",
        "Liang et al., ICLR 2018",
    ),
    "tiny_imagenet": ("http://cs231n.stanford.edu/tiny-imagenet-200.zip", "Stanford CS231n"),
    "imagenet_ood": (
        "https://github.com/deeplearning-wisc/large_scale_ood (iNaturalist, SUN, Places subsets)",
        "Huang & Li, CVPR 2021",
    ),
    "openimage_o": ("https://github.com/haoqiwang/vim", "Wang et al., CVPR 2022"),
    "imagenet_o": (
        "https://github.com/hendrycks/natural-adv-examples",
        "Hendrycks et al., CVPR 2021",
    ),
    "landuse": (
        "UCM http://weegee.vision.ucmerced.edu/datasets/landuse.html, AID "
        "https://captain-whu.github.io/AID/, NWPU-RESISC45 "
        "https://gcheng-nwpu.github.io/#Datasets, PatternNet "
        "https://sites.google.com/view/zhouwx/dataset, RSI-CB https://github.com/lehaifeng/RSI-CB, "
        "RSSCN7 https://github.com/palewithout/RSSCN7, SIRI-WHU "
        "http://www.lmars.whu.edu.cn/prof_web/zhongyanfei/e-code.html, WHU-RS19 "
        "https://captain-whu.github.io/BED4RS/",
        "the eight land-use datasets of the Gominski thesis, ch. 5",
    ),
    "revisited": ("http://cmp.felk.cvut.cz/revisitop/", "Radenović et al., CVPR 2018"),
    "alegoria": (
        "",
        "not publicly distributed (Gominski thesis §3.2); rank_lab documents an assumed layout",
    ),
    "sf300": (
        "",
        "not publicly distributed (Gominski thesis §5.1); rank_lab documents an assumed layout",
    ),
    "scene_text_lmdb": (
        "https://github.com/clovaai/deep-text-recognition-benchmark",
        "Baek et al., ICCV 2019",
    ),
    "icdar": (
        "https://rrc.cvc.uab.es/ (ICDAR 2013 / 2015 Robust Reading, Challenge 2 and 4)",
        "Karatzas et al., ICDAR 2013, 2015",
    ),
}

#: Loader name -> the torchvision dataset class that ``download=True`` reuses.
TORCHVISION_DOWNLOADS: dict[str, str] = {
    "cifar10": "CIFAR10",
    "cifar100": "CIFAR100",
    "svhn": "SVHN",
    "textures": "DTD",
    "places365": "Places365",
}


#: Loader name -> the ``split`` values :func:`torchvision_download` accepts (None: the default).
_DOWNLOAD_SPLITS: dict[str, tuple[str | None, ...]] = {
    "cifar10": (None, "train", "test"),
    "cifar100": (None, "train", "test"),
    "svhn": (None, "train", "test", "extra"),
    "textures": (None,),
    "places365": (None, "val", "train", "train-standard"),
}


def published(key: str) -> str:
    """One sentence saying where dataset ``key`` is published, for an error message.

    Raises:
        ValueError: for a key not in :data:`DATASET_SOURCES` (the message lists them).
    """
    if key not in DATASET_SOURCES:
        raise ValueError(f"unknown dataset key {key!r}; known: {sorted(DATASET_SOURCES)}")
    url, ref = DATASET_SOURCES[key]
    if not url:
        return f"The data is {ref}."
    return f"Published at {url} ({ref})."


def torchvision_download(
    name: str, root: str | Path, split: str | None = None, **kwargs: Any
) -> Path:
    """Download dataset ``name`` into ``root`` with torchvision (a no-op when it is already there).

    Args:
        name: ``"cifar10"``, ``"cifar100"``, ``"svhn"``, ``"textures"`` or ``"places365"``.
        root: the folder the loader reads (created).
        split: the split to fetch where torchvision downloads per split (SVHN: ``train`` / ``test``
            / ``extra``; Places365: ``val`` / ``train-standard``); CIFAR and DTD come whole.
        **kwargs: passed to the torchvision class (e.g. ``small=True`` for Places365).

    Returns:
        ``root``.

    Raises:
        ValueError: for a dataset torchvision does not download (``name``) or a ``split`` it has
            not.
        DatasetFolderError: when the download or its check fails (e.g. no network); the message
            says where the data is published, to fetch it by hand.
    """
    # heavy import, paid only on this path
    import torchvision.datasets as tvd

    key = str(name).lower()
    if key not in TORCHVISION_DOWNLOADS:
        raise ValueError(
            f"torchvision does not download {name!r} (name); it does: "
            f"{sorted(TORCHVISION_DOWNLOADS)}"
        )
    splits = _DOWNLOAD_SPLITS[key]
    if split not in splits:
        raise ValueError(f"split must be one of {list(splits)} for {key}, got {split!r}")
    root = Path(root).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    cls = getattr(tvd, TORCHVISION_DOWNLOADS[key])
    if key in ("cifar10", "cifar100"):
        args: dict[str, Any] = {"train": split != "test"}
    elif key == "svhn":
        args = {"split": split or "test"}
    elif key == "places365":
        args = {"split": {"train": "train-standard", None: "val"}.get(split, split), "small": True}
    else:
        args = {}
    try:
        cls(str(root), download=True, **{**args, **kwargs})
    except (OSError, RuntimeError) as exc:
        src = "cifar" if key.startswith("cifar") else key
        where = published(src) if src in DATASET_SOURCES else ""
        raise DatasetFolderError(
            f"{name}: torchvision could not download it into {str(root)!r} ({type(exc).__name__}: "
            f"{exc}). Without network, fetch it by hand into that folder. {where}"
        ) from exc
    return root
