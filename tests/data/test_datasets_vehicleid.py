"""Tests of the PKU VehicleID loader on a tiny fixture written in the published format."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rank_lab.data.datasets.base import DatasetFolderError
from rank_lab.data.datasets.vehicleid import (
    VEHICLEID_SPLITS,
    load_vehicleid,
    read_vehicleid_attributes,
    read_vehicleid_list,
)
from rank_lab.fixtures.retrieval import write_vehicleid

TRAIN = [("0000001", 2), ("0000002", 2), ("0000003", 7), ("0000004", 7)]
TEST_800 = [("0000005", 11), ("0000006", 11), ("0000007", 12)]
TEST_1600 = TEST_800 + [("0000008", 13)]
TEST_2400 = TEST_1600 + [("0000009", 14), ("0000010", 14)]


def write_fixture(tmp_path: Path, top: str | None = "VehicleID_V1.0") -> Path:
    root = tmp_path / top if top else tmp_path
    return write_vehicleid(root, TRAIN, {800: TEST_800, 1600: TEST_1600, 2400: TEST_2400})


def test_splits_labels_and_images(tmp_path):
    write_fixture(tmp_path)
    train = load_vehicleid(tmp_path, "train", transform=None)
    assert len(train) == 4 and train.labels.tolist() == [2, 2, 7, 7]
    img, lab = train[2]
    assert img.size == (12, 8) and int(lab) == 7
    assert train.image_names[0] == "0000001" and train.name == "vehicleid"
    for alias, n in (("small", 3), ("medium", 4), ("large", 6), ("test_2400", 6)):
        ds = load_vehicleid(tmp_path, alias, transform=None)
        assert len(ds) == n
    large = load_vehicleid(tmp_path, "large", transform=None)
    assert large.labels.tolist() == [11, 11, 12, 13, 14, 14]
    # the default transform gives normalised tensors
    x, _ = load_vehicleid(tmp_path, "small", image_size=16)[0]
    assert isinstance(x, torch.Tensor) and x.shape == (3, 16, 16)
    assert read_vehicleid_attributes(tmp_path / "VehicleID_V1.0", "model") == {2: 5, 7: 9}
    assert set(VEHICLEID_SPLITS) >= {"train", "small", "medium", "large"}


def test_root_can_be_the_archive_folder(tmp_path):
    root = write_fixture(tmp_path, top=None)
    assert len(load_vehicleid(root, "train", transform=None)) == 4


def test_errors(tmp_path):
    with pytest.raises(DatasetFolderError, match="does not exist"):
        load_vehicleid(tmp_path / "nope")
    with pytest.raises(DatasetFolderError, match="train_test_split"):
        load_vehicleid(tmp_path)
    root = write_fixture(tmp_path)
    with pytest.raises(ValueError, match="split"):
        load_vehicleid(tmp_path, "test")
    (root / "image" / "0000003.jpg").unlink()
    with pytest.raises(DatasetFolderError, match="missing"):
        load_vehicleid(tmp_path, "train")
    assert len(load_vehicleid(tmp_path, "train", transform=None, check_files=False)) == 4
    bad = root / "train_test_split" / "bad.txt"
    bad.write_text("0000001 2\n0000002\n")
    with pytest.raises(DatasetFolderError, match="line 2"):
        read_vehicleid_list(bad)
    bad.write_text("0000001 two\n")
    with pytest.raises(DatasetFolderError, match="non-integer"):
        read_vehicleid_list(bad)
    bad.write_text("\n")
    with pytest.raises(DatasetFolderError, match="no image"):
        read_vehicleid_list(bad)
    (root / "train_test_split" / "test_list_800.txt").unlink()
    with pytest.raises(DatasetFolderError, match="test_list_800"):
        load_vehicleid(tmp_path, "small")
    with pytest.raises(DatasetFolderError, match="color_attr"):
        read_vehicleid_attributes(root, "color")
