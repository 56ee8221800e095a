"""CIFAR and OOD-set loaders on tiny fixtures written in the real on-disk formats."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from rank_lab.data.datasets.base import DatasetFolderError
from rank_lab.data.datasets.cifar import load_cifar, load_cifar10, load_cifar100, read_cifar_batch
from rank_lab.data.datasets.ood_sets import (
    load_image_folder,
    load_lsun_lmdb,
    load_ood_dataset,
    load_places365,
    load_svhn,
    load_textures,
    load_tiny_imagenet,
)
from rank_lab.fixtures import write_image
from rank_lab.fixtures.ood import (
    cifar_rows,
    write_cifar10,
    write_cifar100,
    write_lsun_lmdb,
    write_pickle,
    write_places365,
    write_svhn,
    write_textures,
    write_tiny_imagenet,
)

_rows = cifar_rows
_dump = write_pickle
_image = functools.partial(write_image, size=(8, 8))


@pytest.fixture
def cifar10_root(tmp_path):
    batches = []
    for i in range(1, 6):  # python-2 style: bytes keys
        data = _rows(2, i)
        if i == 1:
            data[0, 0] = 200  # red, row 0, col 0 of image 0
            data[0, 1024 + 32 * 1 + 2] = 77  # green, row 1, col 2
        batches.append(
            {
                b"batch_label": b"b",
                b"labels": [i % 10, (i + 1) % 10],
                b"data": data,
                b"filenames": [b"a.png", b"b.png"],
            }
        )
    meta = {
        b"label_names": [
            b"airplane",
            b"automobile",
            b"bird",
            b"cat",
            b"deer",
            b"dog",
            b"frog",
            b"horse",
            b"ship",
            b"truck",
        ]
    }
    return write_cifar10(tmp_path, batches, {b"labels": [3, 4, 5], b"data": _rows(3, 9)}, meta)


def test_cifar10_layout_pixels_and_labels(cifar10_root):
    ds = load_cifar10(cifar10_root, "train")
    assert len(ds) == 10 and ds.images.shape == (10, 3, 32, 32) and ds.images.dtype == torch.uint8
    assert ds.images[0, 0, 0, 0] == 200 and ds.images[0, 1, 1, 2] == 77
    assert ds.labels.tolist() == [1, 2, 2, 3, 3, 4, 4, 5, 5, 6]
    assert ds.class_names[0] == "airplane"
    x, y = ds[0]
    assert (
        x.shape == (3, 32, 32)
        and x.dtype == torch.float32
        and x[0, 0, 0] == pytest.approx(200 / 255)
    )
    # the folder itself works too
    test = load_cifar(cifar10_root / "cifar-10-batches-py", "cifar10", "test")
    assert test.labels.tolist() == [3, 4, 5]


def test_cifar_transform_gets_pil_and_dataloader_batches(cifar10_root):
    from torchvision import transforms as T

    ds = load_cifar10(cifar10_root, "train", transform=T.ToTensor())
    x, _ = ds[0]
    assert torch.allclose(x, ds.images[0].float() / 255)
    xb, yb = next(iter(DataLoader(ds, batch_size=4)))
    assert xb.shape == (4, 3, 32, 32) and yb.shape == (4,)


def test_cifar100_fine_coarse_both(tmp_path):
    train, test = (
        {
            "data": _rows(n, n),
            "fine_labels": list(range(n)),
            "coarse_labels": [i // 2 for i in range(n)],
        }
        for n in (4, 2)
    )
    write_cifar100(tmp_path, train, test)
    assert load_cifar100(tmp_path, "train").labels.tolist() == [0, 1, 2, 3]
    coarse = load_cifar100(tmp_path, "train", label="coarse")
    assert coarse.labels.tolist() == [0, 0, 1, 1] and coarse.class_names[0] == "c0"
    both = load_cifar100(tmp_path, "test", label="both")
    assert both.labels.tolist() == [[0, 0], [1, 0]]


def test_cifar_errors(tmp_path, cifar10_root):
    with pytest.raises(DatasetFolderError, match="cifar-10-batches-py"):
        load_cifar10(tmp_path / "nowhere")
    err = None
    try:
        load_cifar10(tmp_path / "nowhere")
    except Exception as e:  # noqa: BLE001 - checking the exception's classes
        err = e
    assert isinstance(err, ValueError) and isinstance(err, FileNotFoundError)
    with pytest.raises(ValueError, match="name"):
        load_cifar(cifar10_root, "cifar1000")
    with pytest.raises(ValueError, match="split"):
        load_cifar10(cifar10_root, "val")
    (cifar10_root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DatasetFolderError, match="data_batch_3"):
        load_cifar10(cifar10_root, "train")


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_cifar_pickle_is_restricted(tmp_path):
    bad = tmp_path / "cifar-10-batches-py"
    bad.mkdir()
    _dump(bad / "test_batch", {"data": _Evil(), "labels": [0]})
    with pytest.raises(DatasetFolderError, match="refusing"):
        load_cifar10(tmp_path, "test")
    _dump(bad / "test_batch", {"data": np.zeros((2, 10), np.uint8), "labels": [0, 1]})
    with pytest.raises(DatasetFolderError, match="3072"):
        load_cifar10(tmp_path, "test")
    _dump(tmp_path / "meta_list", [1, 2])
    with pytest.raises(DatasetFolderError, match="dict"):
        read_cifar_batch(tmp_path / "meta_list")


def test_svhn_mat(tmp_path):
    import scipy.io

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(32, 32, 3, 5), dtype=np.uint8)
    x[3, 7, 2, 4] = 250  # row 3, col 7, blue, image 4
    write_svhn(tmp_path, "test", x, np.array([[1], [10], [3], [10], [9]], dtype=np.uint8))
    ds = load_svhn(tmp_path, "test")
    assert ds.images.shape == (5, 3, 32, 32) and ds.images[4, 2, 3, 7] == 250
    assert ds.labels.tolist() == [1, 0, 3, 0, 9]  # 10 codes the digit 0
    with pytest.raises(DatasetFolderError, match="train_32x32.mat"):
        load_svhn(tmp_path, "train")
    scipy.io.savemat(tmp_path / "extra_32x32.mat", {"X": x})
    with pytest.raises(DatasetFolderError, match="'y'"):
        load_svhn(tmp_path, "extra")


def test_textures_dtd(tmp_path):
    write_textures(
        tmp_path,
        {"banded": "red", "zigzagged": "blue"},
        3,
        {"test1.txt": ["banded/banded_0001.jpg", "zigzagged/zigzagged_0002.jpg"]},
    )
    all_ = load_textures(tmp_path)
    assert (
        len(all_) == 6
        and all_.class_names == ["banded", "zigzagged"]
        and all_.labels.tolist() == [0, 0, 0, 1, 1, 1]
    )
    test = load_textures(tmp_path, "test", partition=1)
    assert [p.name for p in test.paths] == [
        "banded_0001.jpg",
        "zigzagged_0002.jpg",
    ] and test.labels.tolist() == [0, 1]
    img, _ = test[1]
    assert img.size == (8, 8) and img.getpixel((0, 0))[2] > 200
    with pytest.raises(DatasetFolderError, match="val2.txt"):
        load_textures(tmp_path, "val", partition=2)
    with pytest.raises(ValueError, match="partition"):
        load_textures(tmp_path, "test", partition=11)


def test_places365_val_and_train(tmp_path):
    write_places365(
        tmp_path,
        [("Places365_val_00000001.jpg", 165), ("Places365_val_00000002.jpg", 3)],
        ["/a/airfield", "/a/airplane_cabin"],
    )
    ds = load_places365(tmp_path)
    assert ds.labels.tolist() == [165, 3] and ds.class_names[0] == "/a/airfield"
    (tmp_path / "places365_train_standard.txt").write_text("/a/airfield/00000001.jpg 0\n")
    _image(tmp_path / "data_256" / "a" / "airfield" / "00000001.jpg", "green")
    assert load_places365(tmp_path, "train").labels.tolist() == [0]
    with pytest.raises(DatasetFolderError, match="missing"):
        load_places365(tmp_path, small=False)


def test_tiny_imagenet(tmp_path):
    write_tiny_imagenet(
        tmp_path,
        ["n01443537", "n01629819"],
        [("val_0.JPEG", "n01629819"), ("val_1.JPEG", "n01443537")],
        2,
    )
    assert load_tiny_imagenet(tmp_path).labels.tolist() == [1, 0]
    assert load_tiny_imagenet(tmp_path, "test").labels.tolist() == [-1, -1]


def test_lsun_lmdb(tmp_path):
    pytest.importorskip("lmdb")
    write_lsun_lmdb(tmp_path, {"bedroom": "red", "bridge": "blue"}, 2)
    ds = load_lsun_lmdb(tmp_path, "val", categories=("bedroom", "bridge"))
    assert len(ds) == 4 and ds.labels.tolist() == [0, 0, 1, 1]
    img, label = ds[3]
    assert img.getpixel((0, 0)) == (0, 0, 255) and int(label) == 1
    with pytest.raises(DatasetFolderError, match="kitchen_val_lmdb"):
        load_lsun_lmdb(tmp_path, "val", categories=("kitchen",))


def test_folder_ood_sets_by_name(tmp_path):
    _image(tmp_path / "LSUN" / "test" / "0.jpg", "red")
    _image(tmp_path / "LSUN" / "test" / "1.jpg", "red")
    _image(tmp_path / "iSUN" / "iSUN_patches" / "a.jpeg", "red")
    _image(tmp_path / "iNaturalist" / "images" / "x.jpg", "red")
    _image(tmp_path / "imagenet-o" / "n01443537" / "y.JPEG", "red")
    (tmp_path / "iNaturalist" / "images" / "notes.txt").write_text("not an image")
    assert len(load_ood_dataset("LSUN", tmp_path)) == 2
    assert len(load_ood_dataset("iSUN", tmp_path)) == 1
    inat = load_ood_dataset("iNaturalist", tmp_path)
    assert len(inat) == 1 and inat.labels.tolist() == [-1]
    assert len(load_ood_dataset("ImageNet-O", tmp_path)) == 1
    assert load_image_folder(tmp_path / "imagenet-o", labels="folder").class_names == ["n01443537"]
    with pytest.raises(DatasetFolderError, match="SUN: no images"):
        load_ood_dataset("SUN", tmp_path / "LSUN" / "missing")
    with pytest.raises(ValueError, match="unknown OOD dataset"):
        load_ood_dataset("mnist", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFolderError, match="no image files"):
        load_image_folder(tmp_path / "empty")
