"""Loaders of SOP, CUB-200-2011, Cars196 and iNaturalist 2018 on tiny fixtures written in the
published on-disk formats (list files, a .mat written with scipy.io.savemat, COCO-style JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rank_lab.data.datasets import DatasetFolderError, ImageListDataset
from rank_lab.data.datasets.cars import load_cars
from rank_lab.data.datasets.cub import load_cub
from rank_lab.data.datasets.inaturalist import load_inaturalist
from rank_lab.data.datasets.retrieval import load_retrieval_dataset
from rank_lab.data.datasets.sop import load_sop
from rank_lab.data.datasets.transforms import IMAGENET_MEAN, IMAGENET_STD, default_transform
from rank_lab.fixtures.retrieval import (
    INAT_LEVELS,
    write_cars,
    write_cub,
    write_inaturalist,
    write_sop,
)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is faster than two contending ones (restored after)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------------------- SOP
SOP_TRAIN = [
    (1, 1, 1, "bicycle_final/111_0.JPG"),
    (2, 1, 1, "bicycle_final/111_1.JPG"),
    (3, 2, 1, "bicycle_final/222_0.JPG"),
    (4, 2, 1, "bicycle_final/222_1.JPG"),
    (5, 3, 2, "chair_final/333_0.JPG"),
    (6, 3, 2, "chair_final/333_1.JPG"),
]
SOP_TEST = [
    (7, 4, 2, "chair_final/444_0.JPG"),
    (8, 4, 2, "chair_final/444_1.JPG"),
    (9, 5, 3, "mug_final/555_0.JPG"),
    (10, 5, 3, "mug_final/555_1.JPG"),
    (11, 5, 3, "mug_final/555_2.JPG"),
]


def _write_sop(root: Path) -> Path:
    return write_sop(root, SOP_TRAIN, SOP_TEST)


def test_sop_counts_labels_and_hierarchy(tmp_path):
    root = _write_sop(tmp_path / "Stanford_Online_Products")
    tr = load_sop(root, "train")
    assert isinstance(tr, ImageListDataset) and len(tr) == 6
    assert tr.labels.tolist() == [1, 1, 2, 2, 3, 3]
    te = load_sop(root, "test", hierarchical=True)
    assert te.labels.tolist() == [[4, 2], [4, 2], [5, 3], [5, 3], [5, 3]]
    assert te.level_names == ["product", "category"]
    assert set(tr.labels.tolist()).isdisjoint(set(te.labels[:, 0].tolist()))
    assert len(load_sop(root, "all")) == 11
    assert load_sop(tmp_path, "train").paths == tr.paths  # parent folder found too
    assert load_sop(root, "all", hierarchical=True).super_class_names == {
        1: "bicycle",
        2: "chair",
        3: "mug",
    }
    assert tr.paths[0] == root / "bicycle_final/111_0.JPG"


def test_sop_items_with_default_and_no_transform(tmp_path):
    root = _write_sop(tmp_path)
    x, y = load_sop(root, "test", image_size=32)[2]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and int(y) == 5
    img, _ = load_sop(root, "test", transform=None)[0]
    assert img.size == (20, 14) and img.mode == "RGB"
    x, _ = load_sop(root, "test", transform=lambda im: torch.tensor(im.size))[0]
    assert x.tolist() == [20, 14]


def test_sop_errors(tmp_path):
    with pytest.raises(DatasetFolderError, match="does not exist"):
        load_sop(tmp_path / "missing")
    with pytest.raises(DatasetFolderError, match="Ebay_train.txt"):
        load_sop(tmp_path)
    root = _write_sop(tmp_path / "sop")
    (root / "Ebay_test.txt").write_text("id class super path\n1 2 3 a.jpg\n")
    with pytest.raises(DatasetFolderError, match="header"):
        load_sop(root, "test")
    (root / "Ebay_test.txt").write_text("image_id class_id super_class_id path\n1 2 3\n")
    with pytest.raises(DatasetFolderError, match="line 2 .* 3 fields"):
        load_sop(root, "test")
    (root / "Ebay_test.txt").write_text("image_id class_id super_class_id path\n1 x 3 a.jpg\n")
    with pytest.raises(DatasetFolderError, match="non-integer"):
        load_sop(root, "test")
    (root / "bicycle_final/111_0.JPG").unlink()
    with pytest.raises(DatasetFolderError, match="1 of the 6 images .* missing"):
        load_sop(root, "train")
    assert len(load_sop(root, "train", check_files=False)) == 6
    with pytest.raises(ValueError, match="split"):
        load_sop(root, "val")
    assert issubclass(DatasetFolderError, FileNotFoundError) and issubclass(
        DatasetFolderError, ValueError
    )


# ---------------------------------------------------------------------------- CUB
CUB_CLASSES = {1: 1, 2: 1, 3: 2, 4: 100, 5: 101, 6: 101, 7: 150, 8: 200}


def _write_cub(root: Path) -> Path:
    return write_cub(root, CUB_CLASSES)


def test_cub_retrieval_split(tmp_path):
    root = _write_cub(tmp_path / "CUB_200_2011")
    tr, te = load_cub(root, "train"), load_cub(root, "test")
    assert tr.labels.tolist() == [1, 1, 2, 100] and te.labels.tolist() == [101, 101, 150, 200]
    assert len(load_cub(tmp_path, "all")) == 8
    assert tr.paths[0] == root / "images/001.Bird_1/Bird_1_0001.jpg"
    assert tr.class_names[100] == "100.Bird_100"
    x, y = load_cub(root, "test", image_size=24)[3]
    assert x.shape == (3, 24, 24) and int(y) == 200


def test_cub_errors(tmp_path):
    root = _write_cub(tmp_path / "c")
    with open(root / "images.txt", "a") as f:
        f.write("9 200.Bird_200/extra.jpg\n")
    with pytest.raises(DatasetFolderError, match=r"image ids \[9\]"):
        load_cub(root)
    root = _write_cub(tmp_path / "d")
    (root / "image_class_labels.txt").write_text(
        "".join(f"{i} {201 if i == 8 else c}\n" for i, c in CUB_CLASSES.items())
    )
    with pytest.raises(DatasetFolderError, match="class 201"):
        load_cub(root, "test")
    root = _write_cub(tmp_path / "e")
    (root / "image_class_labels.txt").unlink()
    with pytest.raises(DatasetFolderError, match="image_class_labels.txt"):
        load_cub(root)
    with pytest.raises(DatasetFolderError, match="images.txt"):
        load_cub(tmp_path / "e" / "images")


# ---------------------------------------------------------------------------- Cars196
CARS_CLASSES = [1, 1, 2, 98, 99, 99, 150, 196, 196]


def _write_cars(root: Path, classes=CARS_CLASSES, fields=("relative_im_path", "class")) -> Path:
    return write_cars(root, classes, fields=fields)


def test_cars_retrieval_split_from_mat(tmp_path):
    root = _write_cars(tmp_path)
    tr, te = load_cars(root, "train"), load_cars(root, "test")
    assert tr.labels.tolist() == [1, 1, 2, 98] and te.labels.tolist() == [99, 99, 150, 196, 196]
    assert [p.name for p in te.paths] == [
        "000005.jpg",
        "000006.jpg",
        "000007.jpg",
        "000008.jpg",
        "000009.jpg",
    ]
    assert tr.class_names[98] == "Make Model 98" and len(tr.class_names) == 196
    assert len(load_cars(root, "all")) == 9
    x, y = load_cars(root, "train", transform=None)[3]
    assert int(y) == 98 and x.size == (20, 14)


def test_cars_errors(tmp_path):
    with pytest.raises(DatasetFolderError, match="cars_annos.mat"):
        load_cars(tmp_path)
    (tmp_path / "cars_annos.mat").write_text("not a mat file")
    with pytest.raises(DatasetFolderError, match="MATLAB"):
        load_cars(tmp_path)
    root = _write_cars(tmp_path / "nofield", fields=("relative_im_path",))
    with pytest.raises(DatasetFolderError, match="'class'"):
        load_cars(root)
    root = _write_cars(tmp_path / "badclass", classes=[1, 197])
    with pytest.raises(DatasetFolderError, match=r"\[197\]"):
        load_cars(root)
    root = _write_cars(tmp_path / "noimg")
    (root / "car_ims/000002.jpg").unlink()
    with pytest.raises(DatasetFolderError, match="missing"):
        load_cars(root, "train")


# ---------------------------------------------------------------------------- iNaturalist 2018
INAT_CATS = [  # id, supercategory, genus, family, order, class, phylum, kingdom
    (10, "Plantae", "Quercus", "Fagaceae", "Fagales", "Magnoliopsida", "Tracheophyta", "Plantae"),
    (11, "Plantae", "Fagus", "Fagaceae", "Fagales", "Magnoliopsida", "Tracheophyta", "Plantae"),
    (20, "Aves", "Parus", "Paridae", "Passeriformes", "Aves", "Chordata", "Animalia"),
    (
        30,
        "Fungi",
        "Amanita",
        "Amanitaceae",
        "Agaricales",
        "Agaricomycetes",
        "Basidiomycota",
        "Fungi",
    ),
]
INAT_TRAIN = [(10, "a"), (10, "b"), (11, "c"), (20, "d")]
INAT_TEST = [(30, "e"), (30, "f")]
LEVELS = INAT_LEVELS


def _write_inat(root: Path, splits_dir: str = "Inat_dataset_splits", taxonomy: bool = True) -> Path:
    return write_inaturalist(
        root, INAT_CATS, INAT_TRAIN, INAT_TEST, splits_dir=splits_dir, taxonomy=taxonomy
    )


def test_inaturalist_levels(tmp_path):
    root = _write_inat(tmp_path)
    tr = load_inaturalist(root, "train")
    assert (
        tr.labels.tolist() == [10, 10, 11, 20]
        and tr.paths[0] == root / "train_val2018/Plantae/10/a.jpg"
    )
    base = load_inaturalist(root, "test", levels="base")
    assert base.level_vocab["supercategory"] == ["Aves", "Fungi", "Plantae"]
    assert base.labels.tolist() == [[30, 1], [30, 1]]
    full = load_inaturalist(root, "train", levels="full", check_json=True)
    assert full.level_names == ["species", *LEVELS]
    assert full.labels.shape == (4, 7)
    # species 10 and 11: different genus, same family / order / ... ; 20 shares nothing with them
    f = full.labels
    assert f[0, 1] != f[2, 1] and torch.equal(f[0, 2:], f[2, 2:])
    assert (f[3, 1:] != f[0, 1:]).all()
    kingdom = dict(zip(full.labels[:, 0].tolist(), full.labels[:, 6].tolist(), strict=True))
    assert full.level_vocab["kingdom"][kingdom[20]] == "Animalia"
    assert len(load_inaturalist(root, "all")) == 6


def test_inaturalist_split_files_at_root_and_items(tmp_path):
    root = _write_inat(tmp_path, splits_dir=".")
    te = load_inaturalist(root, "test", image_size=16)
    x, y = te[1]
    assert x.shape == (3, 16, 16) and int(y) == 30


def test_inaturalist_errors(tmp_path):
    with pytest.raises(DatasetFolderError, match="Inaturalist_train_set1.txt"):
        load_inaturalist(tmp_path)
    root = _write_inat(tmp_path / "notax", taxonomy=False)
    with pytest.raises(DatasetFolderError, match="taxonomy"):
        load_inaturalist(root, levels="full")
    assert len(load_inaturalist(root, levels="base")) == 4  # base needs no JSON
    cats = [
        {"id": c[0], "name": f"sp{c[0]}", **dict(zip(LEVELS, c[2:], strict=True))}
        for c in INAT_CATS
    ]
    # the separate taxonomy file is a fallback
    (root / "categories.json").write_text(json.dumps(cats))
    assert load_inaturalist(root, levels="full").labels.shape == (4, 7)
    root = _write_inat(tmp_path / "bad")
    (root / "Inat_dataset_splits/Inaturalist_test_set1.txt").write_text(
        "train_val2018/Fungi/abc/e.jpg\n"
    )
    with pytest.raises(DatasetFolderError, match="integer category id"):
        load_inaturalist(root, "test")
    (root / "Inat_dataset_splits/Inaturalist_test_set1.txt").write_text("e.jpg\n")
    with pytest.raises(DatasetFolderError, match="line 1"):
        load_inaturalist(root, "test")
    root = _write_inat(tmp_path / "mismatch")
    data = json.loads((root / "val2018.json").read_text())
    data["annotations"][0]["category_id"] = 10
    (root / "val2018.json").write_text(json.dumps(data))
    with pytest.raises(DatasetFolderError, match="disagrees"):
        load_inaturalist(root, "test", check_json=True)
    with pytest.raises(ValueError, match="levels"):
        load_inaturalist(root, levels="genus")


# ---------------------------------------------------------------------------- shared pieces
def test_registry_and_default_transforms(tmp_path):
    root = _write_cub(tmp_path)
    ds = load_retrieval_dataset("cub", root, "test", image_size=16)
    assert len(ds) == 4
    with pytest.raises(ValueError, match="unknown retrieval dataset"):
        load_retrieval_dataset("imagenet", root)
    with pytest.raises(ValueError, match="data folder"):
        load_retrieval_dataset("sop", None)
    img = Image.fromarray(np.full((40, 60, 3), 255, np.uint8))
    test_t = default_transform(False, image_size=32)
    out = test_t(img)
    expected = (1.0 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    torch.testing.assert_close(out.mean(dim=(1, 2)), expected)
    torch.manual_seed(0)
    a = default_transform(True, image_size=32)(
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 60, 3), dtype=np.uint8))
    )
    assert a.shape == (3, 32, 32)


def test_trainer_runs_on_an_image_dataset(tmp_path):
    from rank_lab.train import TrainConfig, Trainer

    root = _write_cub(tmp_path)
    ds = load_cub(root, "all", image_size=16)

    class Pair(torch.nn.Module):
        def forward(self, e, y, *_):
            s = e @ e.T
            pos = (y[:, None] == y[None]) & ~torch.eye(len(y), dtype=torch.bool)
            return (
                torch.relu(0.9 - s)[pos].mean() + torch.relu(s - 0.6)[y[:, None] != y[None]].mean()
            )

    cfg = TrainConfig.from_dict(
        dict(
            backbone="tiny_cnn",
            in_channels=3,
            width=4,
            embed_dim=4,
            batch_size=4,
            m_per_class=2,
            epochs=1,
            eval_ks=(1,),
            progress=False,
        )
    )
    hist = Trainer(None, Pair(), ds, ds, cfg).fit()
    assert hist[-1]["n_batches"] >= 1 and hist[-1]["metrics"]["n_queries"] >= 1
