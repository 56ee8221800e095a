"""PKU VehicleID (Liu et al., CVPR 2016), from its published folder.

Vehicle images from surveillance cameras. The reference split (Tables 5.1 and 5.4 of the Patel
thesis): 110,178 train images of 13,134 vehicles, and three test lists of 800, 1,600 and 2,400
vehicles ("small", "medium", "large"; Table 5.1 counts 40,365 test images of 4,800 vehicles, the
three lists together). Expected layout (the ``VehicleID_V1.0`` archive)::

    root/
      image/0000001.jpg ...                       # one JPEG per image id
      train_test_split/
        train_list.txt                            # "image_name vehicle_id" per line, e.g. "0004523 0002"
        test_list_800.txt
        test_list_1600.txt
        test_list_2400.txt
      attribute/model_attr.txt, color_attr.txt    # optional: "vehicle_id model_id" / "vehicle_id color_id"

Labels are the files' vehicle ids (never re-indexed). ``image_name`` is the file stem (``.jpg`` is
appended unless the name already has an extension). Metric-learning protocol of the thesis
(Table 5.4, as in the official code): each image of a test list queries all the other images of
that list (query excluded), reporting r@1 and r@5.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.sources import published
from rank_lab.data.datasets.transforms import check_files_exist, find_root, resolve_transform

__all__ = [
    "load_vehicleid",
    "read_vehicleid_list",
    "read_vehicleid_attributes",
    "VEHICLEID_SPLITS",
    "VEHICLEID_LAYOUT",
]

VEHICLEID_LAYOUT = (
    "Expected the VehicleID_V1.0 layout: image/<name>.jpg and train_test_split/ with "
    "train_list.txt, test_list_800.txt, test_list_1600.txt, test_list_2400.txt ('image_name "
    "vehicle_id' per line). " + published("vehicleid")
)

#: split name -> list file; ``small`` / ``medium`` / ``large`` are the published names of the three
#: test sets (Liu et al., CVPR 2016: 800, 1,600 and 2,400 vehicles).
VEHICLEID_SPLITS = {
    "train": "train_list.txt",
    "test_800": "test_list_800.txt",
    "test_1600": "test_list_1600.txt",
    "test_2400": "test_list_2400.txt",
    "small": "test_list_800.txt",
    "medium": "test_list_1600.txt",
    "large": "test_list_2400.txt",
}


def read_vehicleid_list(path: str | Path) -> list[tuple[str, int]]:
    """Parse a VehicleID list file into ``(image_name, vehicle_id)`` rows.

    Raises:
        DatasetFolderError: a line without exactly 2 fields or a non-integer vehicle id (the message
            gives the file and the line number), or an empty file.
    """
    path = Path(path)
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise DatasetFolderError(
                f"VehicleID: line {i} of {str(path)!r} has {len(parts)} fields, expected "
                f"'image_name vehicle_id': {line!r}"
            )
        try:
            rows.append((parts[0], int(parts[1])))
        except ValueError:
            raise DatasetFolderError(
                f"VehicleID: line {i} of {str(path)!r} has a non-integer vehicle id: {line!r}"
            ) from None
    if not rows:
        raise DatasetFolderError(f"VehicleID: {str(path)!r} lists no image")
    return rows


def read_vehicleid_attributes(root: str | Path, name: str) -> dict[int, int]:
    """Read ``attribute/<name>_attr.txt`` (``name`` = ``"model"`` or ``"color"``): vehicle id ->
    attribute id.

    Raises:
        ValueError: ``name`` not ``"model"`` or ``"color"``.
        DatasetFolderError: missing or malformed file.
    """
    if name not in ("model", "color"):
        raise ValueError(f"name must be 'model' or 'color', got {name!r}")
    path = Path(root) / "attribute" / f"{name}_attr.txt"
    if not path.is_file():
        raise DatasetFolderError(
            f"VehicleID: expected {str(path)!r} but it is missing. {VEHICLEID_LAYOUT}"
        )
    out = {}
    for vid, attr in read_vehicleid_list(path):
        try:
            out[int(vid)] = attr
        except ValueError:
            raise DatasetFolderError(
                f"VehicleID: non-integer vehicle id {vid!r} in {str(path)!r}"
            ) from None
    return out


def load_vehicleid(
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    *,
    image_size: int = 224,
    check_files: bool = True,
) -> ImageListDataset:
    """Load a PKU VehicleID split as an :class:`ImageListDataset` of ``(image, vehicle_id)``.

    Args:
        root: the ``VehicleID_V1.0`` folder (or its parent).
        split: ``"train"``, ``"test_800"`` / ``"small"``, ``"test_1600"`` / ``"medium"``,
            ``"test_2400"`` / ``"large"``.
        transform: a callable, ``None`` (PIL images) or ``"default"`` (the papers' transform).
        image_size: side of the default transform's output.
        check_files: check that every listed image exists.

    Returns:
        The dataset, with extra attributes ``split``, ``name`` ("vehicleid"), ``image_names``.

    Raises:
        ValueError: unknown split.
        DatasetFolderError: missing folder, list file or images; malformed list file.
    """
    if split not in VEHICLEID_SPLITS:
        raise ValueError(f"split must be one of {sorted(VEHICLEID_SPLITS)}, got {split!r}")
    list_name = VEHICLEID_SPLITS[split]
    root = find_root(
        root, "train_test_split", ("VehicleID_V1.0", "VehicleID"), "VehicleID", VEHICLEID_LAYOUT
    )
    list_path = root / "train_test_split" / list_name
    if not list_path.is_file():
        raise DatasetFolderError(
            f"VehicleID: expected {str(list_path)!r} but it is missing. {VEHICLEID_LAYOUT}"
        )
    if not (root / "image").is_dir():
        raise DatasetFolderError(
            f"VehicleID: expected the folder 'image' inside {str(root)!r}. {VEHICLEID_LAYOUT}"
        )
    rows = read_vehicleid_list(list_path)
    paths = [root / "image" / (name if Path(name).suffix else f"{name}.jpg") for name, _ in rows]
    if check_files:
        check_files_exist(paths, "VehicleID", list_name)
    train_like = "train" if split == "train" else "test"
    ds = ImageListDataset(
        paths,
        [vid for _, vid in rows],
        transform=resolve_transform(transform, train_like, image_size),
    )
    ds.split = split  # type: ignore[attr-defined]
    ds.name = "vehicleid"  # type: ignore[attr-defined]
    ds.image_names = [name for name, _ in rows]  # type: ignore[attr-defined]
    return ds
