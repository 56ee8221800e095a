"""Default image transforms of the retrieval papers and small helpers shared by the loaders.

Train (Ramzi thesis §3.5.1, [CODE] ``dataset/*.yaml``): resize the shorter side to 256, random
resized crop to 224 with scale in [0.16, 1] ("random crop with size between 40 and 256") and aspect
ratio in [3/4, 4/3], horizontal flip with p = 0.5, ImageNet normalisation. Test: resize 256,
center crop 224. ``image_size`` scales both (256/224 ratio kept), e.g. 256 for CUB in Tab. 3.4.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rank_lab._validation import check_positive_int
from rank_lab.data.datasets.base import DatasetFolderError

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "default_transform",
    "resolve_transform",
    "check_split",
    "find_root",
    "check_files_exist",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def default_transform(
    train: bool, image_size: int = 224, resize: int | None = None
) -> Callable[[Any], Any]:
    """The papers' train / test transform (see the module docstring).

    Args:
        train: augmenting train transform, or deterministic test transform.
        image_size: output side (224 in the papers; 256 for CUB in the SOTA table).
        resize: side of the first resize (default ``round(image_size * 256 / 224)``).

    Returns:
        A ``torchvision.transforms.Compose`` giving ``(3, image_size, image_size)`` float tensors.

    Raises:
        TypeError / ValueError: ``image_size`` or ``resize`` not a positive int.
    """
    # heavy import, paid only on this path
    from torchvision import transforms as T

    image_size = check_positive_int(image_size, "image_size")
    resize = (
        check_positive_int(resize, "resize")
        if resize is not None
        else round(image_size * 256 / 224)
    )
    norm = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if train:
        return T.Compose(
            [
                T.Resize(resize),
                T.RandomResizedCrop(image_size, scale=(0.16, 1.0), ratio=(3 / 4, 4 / 3)),
                T.RandomHorizontalFlip(p=0.5),
                *norm,
            ]
        )
    return T.Compose([T.Resize(resize), T.CenterCrop(image_size), *norm])


def resolve_transform(
    transform: Callable[[Any], Any] | str | None, split: str, image_size: int
) -> Callable[[Any], Any] | None:
    """``"default"`` -> :func:`default_transform` (train augmentation for ``split == "train"``),
    ``None`` -> no transform (PIL images), a callable -> itself.

    ``image_size`` is checked (a positive int) whatever ``transform`` is, so that a loader never
    accepts a bad value silently.

    Raises:
        ValueError: another ``transform``; TypeError / ValueError: a bad ``image_size``.
    """
    image_size = check_positive_int(image_size, "image_size")
    if transform is None or callable(transform):
        return transform
    if transform == "default":
        return default_transform(split == "train", image_size)
    raise ValueError(f"transform must be a callable, None or 'default', got {transform!r}")


def check_split(split: str, allowed: tuple[str, ...] = ("train", "test", "all")) -> str:
    """Validate a ``split`` argument."""
    if split not in allowed:
        raise ValueError(f"split must be one of {list(allowed)}, got {split!r}")
    return split


def find_root(
    root: str | Path, marker: str, subdirs: tuple[str, ...], dataset: str, layout: str
) -> Path:
    """Return ``root`` if ``root/marker`` exists, else ``root/<sub>`` for the first ``sub`` of
    ``subdirs`` holding ``marker`` (the archive's top folder); otherwise raise
    :class:`DatasetFolderError` with the expected ``layout``."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetFolderError(
            f"{dataset}: root folder {str(root)!r} does not exist or is not a folder. {layout}"
        )
    if (root / marker).exists():
        return root
    for sub in subdirs:
        if (root / sub / marker).exists():
            return root / sub
    raise DatasetFolderError(
        f"{dataset}: expected {marker!r} inside {str(root)!r} (or in "
        f"{[str(root / s) for s in subdirs]}) but it is missing. {layout}"
    )


def check_files_exist(paths: list[Path], dataset: str, listed_in: str) -> None:
    """Raise :class:`DatasetFolderError` naming the first missing image files."""
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise DatasetFolderError(
            f"{dataset}: {len(missing)} of the {len(paths)} images listed in {listed_in} are "
            f"missing, e.g. {[str(p) for p in missing[:3]]}"
        )
