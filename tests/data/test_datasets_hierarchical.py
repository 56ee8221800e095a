"""Hierarchical labels of the real datasets on tiny fixtures written in their published formats
(SOP lists, iNat 2018 JSON taxonomy, DyML csv files with the glued header, H-GLDv2 csv files), the
hierarchical entry point, and the super-class batch sampler."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rank_lab.data.datasets import DatasetFolderError
from rank_lab.data.datasets.dyml import dyml_average, load_dyml, read_dyml_csv
from rank_lab.data.datasets.hierarchical_labels import (
    HIERARCHICAL_DATASETS,
    load_gldv2_hierarchical,
    load_hierarchical_dataset,
)
from rank_lab.data.hierarchical_sampler import HierarchicalSampler
from rank_lab.fixtures.retrieval import write_dyml, write_gldv2, write_inaturalist, write_sop
from rank_lab.metrics.hierarchy.relevance import shared_level


# ---------------------------------------------------------------------------- SOP and iNat
def test_sop_and_inat_through_the_hierarchical_entry_point(tmp_path):
    sop = tmp_path / "Stanford_Online_Products"
    rows = [
        (1, 1, 1, "bicycle_final/1_0.JPG"),
        (2, 1, 1, "bicycle_final/1_1.JPG"),
        (3, 2, 1, "bicycle_final/2_0.JPG"),
        (4, 3, 2, "chair_final/3_0.JPG"),
    ]
    write_sop(sop, rows, [])
    ds = load_hierarchical_dataset("sop", tmp_path, "train", transform=None)
    assert ds.labels.tolist() == [[1, 1], [1, 1], [2, 1], [3, 2]] and ds.level_names == [
        "product",
        "category",
    ]
    assert shared_level(ds.labels[:1], ds.labels).tolist() == [[2, 2, 1, 0]]

    inat = tmp_path / "inat"
    cats = [
        (10, "Plantae", "Quercus", "Fagaceae"),
        (11, "Plantae", "Fagus", "Fagaceae"),
        (20, "Aves", "Parus", "Paridae"),
    ]
    tax = {
        10: ("Fagales", "Magnoliopsida", "Tracheophyta", "Plantae"),
        11: ("Fagales", "Magnoliopsida", "Tracheophyta", "Plantae"),
        20: ("Passeriformes", "Aves", "Chordata", "Animalia"),
    }
    write_inaturalist(
        inat, [(*c, *tax[c[0]]) for c in cats], [(c[0], str(i)) for i, c in enumerate(cats)], None
    )
    base = load_hierarchical_dataset("inat_base", inat, "train", transform=None)
    assert base.labels.shape == (3, 2) and shared_level(base.labels[:1], base.labels).tolist() == [
        [2, 1, 0]
    ]
    full = load_hierarchical_dataset("inat-full", inat, "train", transform=None)
    assert full.labels.shape == (3, 7) and full.level_names[-1] == "kingdom"
    # Quercus vs Fagus: same family .. kingdom (5 levels), different genus; Parus: nothing shared
    assert shared_level(full.labels[:1], full.labels).tolist() == [[7, 5, 0]]
    with pytest.raises(ValueError, match="unknown hierarchical dataset"):
        load_hierarchical_dataset("cub", tmp_path)
    assert HIERARCHICAL_DATASETS["inat_full"][0] == 7


# ---------------------------------------------------------------------------- DyML
def _write_dyml(root: Path, glued: bool = True) -> Path:
    # coarse, middle, fine
    train = [
        ("0.jpg", 1, 10, 100),
        ("1.jpg", 1, 10, 100),
        ("2.jpg", 1, 11, 101),
        ("3.jpg", 2, 20, 200),
    ]
    bmk = {
        level: {"query": [("0.jpg", 5)], "gallery": [("0.jpg", 5), ("1.jpg", 6)]}
        for level in ("fine", "middle", "coarse")
    }
    return write_dyml(root, train, bmk, glued=glued)


@pytest.mark.parametrize("glued", [True, False])
def test_dyml_train_keeps_every_record_fine_first(tmp_path, glued):
    root = _write_dyml(tmp_path / "dyml_vehicle", glued)
    ds = load_dyml(root, "train", transform=None)
    assert len(ds) == 4  # the record glued to the header is kept (HAPPIER's pandas reader drops it)
    assert ds.labels.tolist() == [[100, 10, 1], [100, 10, 1], [101, 11, 1], [200, 20, 2]]
    assert ds.paths[0] == root / "train" / "imgs" / "0.jpg"
    same = load_hierarchical_dataset("dyml_vehicle", tmp_path, "train", transform=None)
    assert torch.equal(same.labels, ds.labels)


def test_dyml_benchmarks_and_protocol(tmp_path):
    root = _write_dyml(tmp_path / "dyml_animal")
    q = load_dyml(tmp_path, "query", level="middle", variant="animal", transform=None)
    g = load_dyml(root, "gallery", level="middle", transform=None)
    assert (
        q.labels.tolist() == [5] and g.labels.tolist() == [5, 6] and g.benchmark_level == "middle"
    )
    assert g.paths[1] == root / "bmk_middle" / "gallery" / "1.jpg"
    per = {
        lvl: {"mAP": v, "ASI": v, "R@1": 1.0}
        for lvl, v in (("fine", 0.2), ("middle", 0.4), ("coarse", 0.6))
    }
    assert dyml_average(per) == pytest.approx({"mAP": 0.4, "ASI": 0.4, "R@1": 1.0})
    with pytest.raises(ValueError, match="sub-benchmarks"):
        dyml_average({"fine": per["fine"]})
    with pytest.raises(ValueError, match="level"):
        load_dyml(root, "query")


def test_dyml_errors(tmp_path):
    root = _write_dyml(tmp_path / "d")
    (root / "train" / "label.csv").write_text("name, a, b, c\n0.jpg, 1, 2, 3\n")
    with pytest.raises(DatasetFolderError, match="header"):
        load_dyml(root, "train")
    (root / "train" / "label.csv").write_text(
        "fname, coarse_id, middle_id, fine_id\n0.jpg, 1, x, 3\n"
    )
    with pytest.raises(DatasetFolderError, match="non-integer"):
        read_dyml_csv(root / "train" / "label.csv", ("fname", "coarse_id", "middle_id", "fine_id"))
    (root / "train" / "label.csv").write_text(
        "fname, coarse_id, middle_id, fine_id\n9.jpg, 1, 2, 3\n"
    )
    with pytest.raises(DatasetFolderError, match="missing"):
        load_dyml(root, "train")
    with pytest.raises(DatasetFolderError, match="missing"):
        load_dyml(root, "all_in_one")
    with pytest.raises(DatasetFolderError, match="does not exist"):
        load_dyml(tmp_path / "nope")
    with pytest.raises(ValueError, match="split"):
        load_dyml(root, "test")


# ---------------------------------------------------------------------------- H-GLDv2
def _write_gldv2(root: Path, meta: str = "") -> Path:
    # landmark 5 has no hierarchical label
    ids = {"00a1": 7, "00a2": 7, "01b3": 8, "02c4": 9, "03d5": 5}
    return write_gldv2(root, ids, {7: ["00a1", "00a2"], 8: ["01b3"], 5: ["03d5"]}, meta=meta)


@pytest.mark.parametrize("meta", ["", "metadata"])
def test_gldv2_hierarchical_labels(tmp_path, meta):
    root = _write_gldv2(tmp_path / "gldv2", meta)
    # clean list: 00a1, 00a2, 01b3 (+03d5 dropped)
    tr = load_gldv2_hierarchical(root, "train", transform=None)
    assert tr.level_vocab["hierarchical_label"] == [
        "Castle",
        "Christian religious building",
        "Lake",
        "Waterfall",
    ]
    assert tr.level_vocab["natural_or_human_made"] == ["human-made", "natural"]
    assert tr.labels.tolist() == [[7, 2, 1], [7, 2, 1], [8, 1, 0]] and tr.n_dropped == 1
    assert tr.paths[0] == root / "train" / "0" / "0" / "a" / "00a1.jpg"
    full = load_gldv2_hierarchical(root, "train", transform=None, clean=False)
    assert len(full) == 4 and full.labels[-1].tolist() == [9, 0, 0]
    idx = load_hierarchical_dataset("gldv2", root, "index", transform=None)
    assert idx.labels.tolist() == [[1, 3, 1], [2, 2, 1]]  # same ids for "Lake" in train and index


def test_gldv2_errors(tmp_path):
    with pytest.raises(DatasetFolderError, match="does not exist"):
        load_gldv2_hierarchical(tmp_path / "none")
    root = _write_gldv2(tmp_path / "g")
    (root / "train_label_to_hierarchical.csv").write_text("landmark_id,category\n7,x\n")
    with pytest.raises(DatasetFolderError, match="columns"):
        load_gldv2_hierarchical(root)
    (root / "index_label_to_hierarchical.csv").unlink()
    with pytest.raises(DatasetFolderError, match="index_label_to_hierarchical"):
        load_gldv2_hierarchical(root, "index")
    with pytest.raises(ValueError, match="split"):
        load_gldv2_hierarchical(root, "test")


# ---------------------------------------------------------------------------- sampler
def _tree(n_super: int = 5, per_super: int = 6, per_class: int = 5) -> torch.Tensor:
    fine = torch.arange(n_super * per_super).repeat_interleave(per_class)
    return torch.stack([fine, fine // per_super], 1)


def test_hierarchical_sampler_batches_hold_two_super_classes():
    lab = _tree()
    s = HierarchicalSampler(
        lab,
        batch_size=24,
        samples_per_class=4,
        super_classes_per_batch=2,
        batches_per_super_tuple=3,
        seed=1,
    )
    batches = list(s)
    assert len(batches) == len(s) == 10 * 3  # C(5, 2) combinations x 3
    pairs = set()
    for b in batches:
        assert len(b) == 24 and len(set(b)) == 24  # enough classes and images: no repeat
        sup = lab[b, 1]
        assert torch.unique(sup).numel() == 2 and (sup == sup[0]).sum() == 12
        fine, counts = torch.unique(lab[b, 0], return_counts=True)
        assert (counts == 4).all() and fine.numel() == 6
        pairs.add(tuple(sorted(torch.unique(sup).tolist())))
    assert len(pairs) == 10  # every combination of super-classes appears
    assert list(s) == batches  # deterministic for a given epoch
    s.set_epoch(1)
    assert list(s) != batches


def test_hierarchical_sampler_small_classes_caps_and_errors():
    lab = _tree(n_super=3, per_super=2, per_class=2)  # 2 classes of 2 images per super-class
    s = HierarchicalSampler(lab, batch_size=16, samples_per_class=4, max_batches=4, seed=0)
    batches = list(s)
    assert len(batches) == 4 and all(len(b) == 16 for b in batches)  # drawn with replacement
    big = _tree(n_super=500, per_super=1, per_class=4)
    with pytest.raises(ValueError, match="max_batches"):
        HierarchicalSampler(big, batch_size=8, samples_per_class=4)
    capped = HierarchicalSampler(big, batch_size=8, samples_per_class=4, max_batches=5)
    assert len(list(capped)) == 5
    with pytest.raises(ValueError, match="hierarchical"):
        HierarchicalSampler(torch.arange(10), batch_size=8)
    with pytest.raises(ValueError, match="multiple"):
        HierarchicalSampler(lab, batch_size=10, samples_per_class=4)
    with pytest.raises(ValueError, match="super-classes"):
        HierarchicalSampler(lab, batch_size=32, samples_per_class=4, super_classes_per_batch=4)
    with pytest.raises(ValueError, match="finer"):
        HierarchicalSampler(lab, inner_level=1, outer_level=0)
