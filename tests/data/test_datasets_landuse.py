"""Land-use loaders on tiny fixtures written in the datasets' published folder layouts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rank_lab.data.datasets import DatasetFolderError
from rank_lab.data.datasets.landuse import LANDUSE_DATASETS, load_landuse, load_landuse_pool
from rank_lab.fixtures.search import write_class_folders, write_landuse


def _ucm(root: Path) -> Path:
    return write_landuse(
        root, "UCMerced_LandUse/Images", {"agricultural": 3, "airplane": 4, "beach": 5}
    )


def _rsicb(root: Path) -> Path:
    classes = {
        "agricultural land/farmland": 4,
        "agricultural land/green_farmland": 2,
        "transportation/airport_runway": 5,
    }
    return write_landuse(root, "RSI-CB256", classes)


def test_ucm_layout_from_parent_and_dataset_folders(tmp_path):
    _ucm(tmp_path)
    with pytest.warns(UserWarning, match="21"):  # 3 of the 21 published classes
        d = load_landuse(tmp_path, "UC Merced")
    assert d.name == "ucm" and d.class_names == ["agricultural", "airplane", "beach"]
    assert len(d) == 3 + 4 + 5 and d.labels.tolist() == [0] * 3 + [1] * 4 + [2] * 5
    assert all(
        p.parent.name == d.class_names[int(lab)] for p, lab in zip(d.paths, d.labels, strict=True)
    )
    with pytest.warns(UserWarning):
        d2 = load_landuse(tmp_path / "UCMerced_LandUse", "ucm")
    assert d2.paths == d.paths
    with pytest.raises(DatasetFolderError, match="21"):
        load_landuse(tmp_path, "ucm", strict=True)


def test_nested_rsicb_categories_and_min_per_class(tmp_path):
    _rsicb(tmp_path)
    with pytest.warns(UserWarning):
        d = load_landuse(tmp_path, "RSI-CB256", min_per_class=3)
    assert d.class_names == ["airport_runway", "farmland"]  # green_farmland (2 images) dropped
    assert torch.bincount(d.labels).tolist() == [5, 4]


def test_dataset_view_loads_images(tmp_path):
    from torchvision.transforms import ToTensor

    root = tmp_path / "AID"
    write_class_folders(root, {"Airport": 2, "BareLand": 2}, size=10)
    with pytest.warns(UserWarning):
        d = load_landuse(tmp_path, "aid")
    img, lab = d.dataset(ToTensor())[3]
    assert img.shape == (3, 10, 10) and int(lab) == 1


def test_full_class_count_gives_no_warning(tmp_path, recwarn):
    root = tmp_path / "RSSCN7"
    write_class_folders(
        root,
        dict.fromkeys(
            ["aGrass", "bField", "cIndustry", "dRiverLake", "eForest", "fResident", "gParking"], 1
        ),
    )
    d = load_landuse(tmp_path, "rsscn7", strict=True)
    assert len(d.class_names) == 7 == LANDUSE_DATASETS["rsscn7"][1]
    assert not [w for w in recwarn if "class folders" in str(w.message)]


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown land-use dataset"):
        load_landuse(tmp_path, "eurosat")
    with pytest.raises(DatasetFolderError, match="does not exist"):
        load_landuse(tmp_path / "missing", "aid")
    (tmp_path / "AID" / "empty_class").mkdir(parents=True)
    with pytest.raises(DatasetFolderError, match="no class folder"):
        load_landuse(tmp_path, "aid")
    flat = tmp_path / "flat" / "WHU-RS19"
    write_class_folders(flat.parent, {flat.name: 2})  # images directly in the dataset folder
    with pytest.raises(DatasetFolderError, match="directly"):
        load_landuse(tmp_path / "flat", "whurs19")
    with pytest.raises(DatasetFolderError, match="min_per_class"):
        load_landuse(_ucm(tmp_path / "u"), "ucm", min_per_class=50)
    assert issubclass(DatasetFolderError, ValueError) and issubclass(
        DatasetFolderError, FileNotFoundError
    )


def test_pool_and_leave_one_dataset_out(tmp_path):
    _ucm(tmp_path)
    _rsicb(tmp_path)
    with pytest.warns(UserWarning):
        pool = load_landuse_pool(tmp_path, ["ucm", "rsicb"], min_per_class=4)
    assert pool.names == ["ucm", "rsicb"]
    assert pool.class_names == [["airplane", "beach"], ["airport_runway", "farmland"]]
    assert len(pool) == 4 + 5 + 5 + 4 and pool.dataset_ids.tolist() == [0] * 9 + [1] * 9
    src, tgt = pool.leave_one_out("ucm")
    assert set(tgt.dataset_ids.tolist()) == {0} and set(src.dataset_ids.tolist()) == {1}
    assert len(src) + len(tgt) == len(pool) and all(p.suffix == ".tif" for p in tgt.paths)
    with pytest.raises(ValueError, match="not in the pool"):
        pool.leave_one_out("aid")
    with pytest.raises(DatasetFolderError, match="aid"):
        load_landuse_pool(tmp_path, ["ucm", "aid"])
    with pytest.warns(UserWarning):
        # every dataset present below the folder
        found = load_landuse_pool(tmp_path, min_per_class=4)
    assert found.names == ["ucm", "rsicb"] and len(found) == len(pool)
    with pytest.raises(DatasetFolderError, match="no known dataset"):
        load_landuse_pool(tmp_path / "UCMerced_LandUse" / "Images" / "beach")
    with pytest.warns(UserWarning):
        by_map = load_landuse_pool({"ucm": tmp_path / "UCMerced_LandUse"}, min_per_class=1)
    assert len(by_map) == 12
