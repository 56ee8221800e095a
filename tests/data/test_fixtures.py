"""Every fixture of rank_lab.data.fixtures loads through its loader, with the counts it promises."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rank_lab.data.datasets.alegoria import load_alegoria
from rank_lab.data.datasets.cifar import load_cifar
from rank_lab.data.datasets.dyml import DYML_LEVELS, load_dyml
from rank_lab.data.datasets.hierarchical_labels import (
    load_gldv2_hierarchical,
    load_hierarchical_dataset,
)
from rank_lab.data.datasets.landuse import load_landuse_pool
from rank_lab.data.datasets.ood_sets import (
    OOD_FOLDERS,
    load_lsun_lmdb,
    load_ood_dataset,
    load_places365,
    load_svhn,
    load_textures,
    load_tiny_imagenet,
)
from rank_lab.data.datasets.retrieval import load_retrieval_dataset
from rank_lab.data.datasets.revisited import load_revisited
from rank_lab.data.datasets.scene_text import IcdarDetectionDataset, load_lmdb_words
from rank_lab.data.datasets.sf300 import load_sf300
from rank_lab.data.fixtures import ALIASES, FIXTURES, fixture_names, write_fixture
from rank_lab.ood import load_feature_folder

N, M = 4, 3  # classes per split, images per class


@pytest.mark.parametrize("name", ["sop", "cub", "cars196", "inaturalist", "vehicleid"])
def test_retrieval_fixtures_give_disjoint_balanced_splits(tmp_path: Path, name: str) -> None:
    root = write_fixture(name, tmp_path, n_classes=N, per_class=M, size=24)
    test = "test_800" if name == "vehicleid" else "test"
    tr, te = load_retrieval_dataset(name, root, "train", image_size=24), load_retrieval_dataset(name, root, test)
    assert len(tr) == N * M and torch.bincount(tr.labels).max() == M
    assert len(set(tr.labels.tolist())) == N and set(tr.labels.tolist()).isdisjoint(te.labels.tolist())
    x, _ = tr[0]
    assert x.shape == (3, 24, 24)
    img, _ = load_retrieval_dataset(name, root, "train", transform=None)[0]
    assert img.size == (24, 24)


@pytest.mark.parametrize("name", ["sop", "inat_base", "inat_full", "dyml_vehicle", "dyml_animal", "dyml_product"])
def test_hierarchical_fixtures(tmp_path: Path, name: str) -> None:
    root = write_fixture(name, tmp_path, n_classes=N, per_class=M)
    tr = load_hierarchical_dataset(name, root, "train", transform=None)
    levels = {"sop": 2, "inat_base": 2, "inat_full": 7}.get(name, 3)
    assert tr.labels.shape == (N * M, levels) and len(set(tr.labels[:, 0].tolist())) == N
    assert len(set(tr.labels[:, 1].tolist())) > 1  # several coarse classes
    if name.startswith("dyml"):
        for level in DYML_LEVELS:
            q = load_dyml(root, "query", level=level, variant=name.split("_")[1], transform=None)
            g = load_dyml(root, "gallery", level=level, variant=name.split("_")[1], transform=None)
            assert len(q) == N and len(g) == N * (M - 1) and set(q.labels.tolist()) == set(g.labels.tolist())
    else:
        assert len(load_hierarchical_dataset(name, root, "test", transform=None)) == N * M


def test_gldv2_fixture(tmp_path: Path) -> None:
    tr = load_gldv2_hierarchical(write_fixture("gldv2", tmp_path, per_class=M), "train", transform=None)
    assert tr.labels.shape == (3 * M, 3) and tr.n_dropped == 0


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_fixtures(tmp_path: Path, name: str) -> None:
    root = write_fixture(name, tmp_path, n_classes=N, per_class=5)
    tr, te = load_cifar(root, name, "train"), load_cifar(root, name, "test")
    assert torch.bincount(tr.labels).tolist() == [5] * N and torch.bincount(te.labels).tolist() == [5] * N
    # class colours: the mean image of class 0 differs from that of class 1
    means = [tr.images[tr.labels == k].float().mean((0, 2, 3)) for k in range(2)]
    assert (means[0] - means[1]).abs().max() > 20


def test_ood_fixtures(tmp_path: Path) -> None:
    svhn = load_svhn(write_fixture("svhn", tmp_path / "svhn", n_classes=N, per_class=M), "train")
    assert svhn.labels.tolist() == [k for k in range(N) for _ in range(M)]
    tex = write_fixture("textures", tmp_path / "dtd", n_classes=N, per_class=M)
    assert len(load_textures(tex)) == N * M and len(load_textures(tex, "test", partition=10)) == N
    assert len(load_places365(write_fixture("places365", tmp_path / "p", n_classes=N, per_class=M))) == N * M
    tiny = write_fixture("tiny_imagenet", tmp_path / "t", n_classes=N, per_class=M)
    assert torch.bincount(load_tiny_imagenet(tiny).labels).tolist() == [M] * N
    assert len(load_tiny_imagenet(tiny, "test")) == M
    assert len(load_lsun_lmdb(write_fixture("lsun_lmdb", tmp_path / "l", per_class=2))) == 20
    folders = write_fixture("ood_folders", tmp_path / "f", per_class=2)
    for name in OOD_FOLDERS:
        assert len(load_ood_dataset(name, folders)) == 2


def test_features_fixture_is_a_valid_feature_folder(tmp_path: Path) -> None:
    feats, head = load_feature_folder(write_fixture("features", tmp_path, n_classes=3, per_class=10, size=8))
    assert set(feats) == {"train", "test", "shifted", "uniform"}
    assert feats["train"]["features"].shape == (30, 8) and head.weight.shape == (3, 8)
    acc = (head(feats["test"]["features"]).argmax(1) == feats["test"]["labels"]).float().mean()
    assert acc > 0.95  # the head separates the clusters


def test_search_and_landuse_fixtures(tmp_path: Path) -> None:
    with pytest.warns(UserWarning):  # fewer classes than the published datasets
        pool = load_landuse_pool(write_fixture("landuse", tmp_path / "lu", n_classes=N), min_per_class=5)
    assert pool.names == ["ucm", "aid", "resisc45"] and len(pool) == 3 * N * 5
    src, tgt = pool.leave_one_out("ucm")
    assert len(tgt) == N * 5 and all(p.suffix == ".tif" for p in tgt.paths)
    ale = load_alegoria(write_fixture("alegoria", tmp_path / "a", n_classes=N, per_class=M))
    assert len(ale.class_names) == N and (~ale.annotated).sum() > 0 and len(ale.collection_names) == 3
    few = write_fixture("alegoria_fewshot", tmp_path / "fs", n_classes=N, per_class=M)
    assert len(load_alegoria(few / "alegoria").class_names) == N
    assert sorted(p.name for p in (few / "train").iterdir()) == [f"class_{k:02d}" for k in range(N)]
    rev = write_fixture("revisited", tmp_path / "r", n_classes=N, per_class=M)
    for name in ("roxford5k", "rparis6k"):
        ds = load_revisited(rev, name)
        assert ds.n_queries == N and ds.n_db == N * M
    sf = write_fixture("sf300", tmp_path / "s", n_classes=N, per_class=M)
    ds = load_sf300(sf, "test")
    assert len(ds) == N * M and ds.orientation.tolist()[:3] == [0, 1, 2]


def test_text_fixtures(tmp_path: Path) -> None:
    pytest.importorskip("lmdb")
    root = write_fixture("lmdb", tmp_path / "lmdb", n_classes=2, per_class=3, size=16)
    x, words = load_lmdb_words(root / "train", 16, 64, charset="abcdefghij0123", max_length=12)
    assert x.shape == (6, 1, 16, 64) and len(words) == 6 and all(3 <= len(w) <= 6 for w in words)
    assert len(load_lmdb_words(root / "test", 16, 64)[1]) == 6
    ds = IcdarDetectionDataset(write_fixture("icdar", tmp_path / "icdar", n_classes=3))
    img, ann = ds[0]
    assert len(ds) == 3 and img.size == (640, 480) and ann.dont_care.sum() == 1


def test_names_and_errors(tmp_path: Path) -> None:
    names = fixture_names()
    assert {"sop", "inat_base", "dyml_product", "cifar10", "features", "landuse", "alegoria", "lmdb"} <= set(names)
    assert set(ALIASES.values()) <= set(FIXTURES)
    with pytest.raises(ValueError, match="unknown fixture 'imagenet'.*known"):
        write_fixture("imagenet", tmp_path)
    with pytest.raises(ValueError, match="per_class"):
        write_fixture("sop", tmp_path, per_class=0)
