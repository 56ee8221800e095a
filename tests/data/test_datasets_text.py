"""Tests of rank_lab.data.datasets.scene_text on tiny fixtures written in the real formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rank_lab.data.datasets.base import DatasetFolderError
from rank_lab.data.datasets.scene_text import (
    IcdarDetectionDataset,
    LmdbTextDataset,
    load_lmdb_words,
    read_icdar_folder,
    read_icdar_gt,
)
from rank_lab.fixtures.search import write_icdar, write_lmdb_words
from rank_lab.metrics.detection import icdar15_evaluate

lmdb = pytest.importorskip("lmdb")


write_lmdb = write_lmdb_words  # the layout of Baek et al.'s packs


def test_lmdb_text_dataset_reads_images_and_labels(tmp_path: Path) -> None:
    imgs = [Image.new("RGB", (100, 32), (i * 40, 0, 0)) for i in range(4)]
    labels = ["Hello", "wörld", "a" * 30, "x-y"]
    write_lmdb(tmp_path, list(zip(imgs, labels, strict=True)))
    ds = LmdbTextDataset(tmp_path)
    assert len(ds) == 4 and ds.labels == labels and ds.indices == [1, 2, 3, 4]
    img, lab = ds[1]
    assert lab == "wörld" and img.mode == "L" and img.size == (100, 32)
    assert ds[0][0].getpixel((0, 0)) == Image.new("RGB", (1, 1), (0, 0, 0)).convert("L").getpixel(
        (0, 0)
    )
    # the filters of the benchmark protocol: max length 25, case-insensitive alphanumerics
    f = LmdbTextDataset(
        tmp_path, max_length=25, charset="abcdefghijklmnopqrstuvwxyz0123456789", lowercase=True
    )
    assert f.labels == ["hello"] and f.indices == [1]
    t = LmdbTextDataset(
        tmp_path, transform=lambda im: torch.tensor(np.asarray(im), dtype=torch.float32).mean()
    )
    assert isinstance(t[2][0], torch.Tensor)
    import pickle

    assert pickle.loads(pickle.dumps(ds))[3][1] == "x-y"  # picklable for DataLoader workers
    x, words = load_lmdb_words(tmp_path, height=16, width=40, charset="abcdefghijklmnopqrstuvwxyz")
    assert words == ["hello"] and x.shape == (1, 1, 16, 40) and float(x.max()) <= 1.0


def test_lmdb_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetFolderError, match="data.mdb"):
        LmdbTextDataset(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFolderError, match="data.mdb"):
        LmdbTextDataset(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    write_lmdb(bad, [(Image.new("L", (8, 8)), "ok")], count=3)
    with pytest.raises(DatasetFolderError, match="label-000000002"):
        LmdbTextDataset(bad)
    nokey = tmp_path / "nokey"
    nokey.mkdir()
    env = lmdb.open(str(nokey), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"label-000000001", b"x")
    env.close()
    with pytest.raises(ValueError, match="num-samples"):
        LmdbTextDataset(nokey)


IC15 = (
    "\ufeff377,117,463,117,465,130,378,130,Genaxis "
    "Theatre\r\n493,115,519,115,519,131,493,131,[06]\r\n374,155,409,155,409,170,374,170,###\r\n10,10,60,10,60,30,10,30,a,b\r\n"
)
IC13_TEST = '38, 43, 920, 215, "Tiredness"\n275, 264, 665, 450, "kills"\n'
IC13_TRAIN = '158 128 411 181 "Footpath"\n443 128 501 169 "To"\n'


def test_read_icdar15_file(tmp_path: Path) -> None:
    p = tmp_path / "gt_img_1.txt"
    p.write_bytes(IC15.encode("utf-8"))
    ann = read_icdar_gt(p)
    assert ann.texts == ["Genaxis Theatre", "[06]", "###", "a,b"]  # BOM stripped, commas kept
    assert ann.dont_care.tolist() == [False, False, True, False]
    assert ann.quads.shape == (4, 4, 2)
    assert ann.quads[0].tolist() == [[377, 117], [463, 117], [465, 130], [378, 130]]


def test_read_icdar13_files(tmp_path: Path) -> None:
    (tmp_path / "gt_img_7.txt").write_text(IC13_TEST)
    (tmp_path / "gt_100.txt").write_text(IC13_TRAIN)
    anns = read_icdar_folder(tmp_path)
    assert set(anns) == {"7", "100"}
    a = anns["7"]
    assert a.texts == ["Tiredness", "kills"]
    assert a.quads[0].tolist() == [[38, 43], [920, 43], [920, 215], [38, 215]]
    assert anns["100"].texts == ["Footpath", "To"] and anns["100"].quads[1, 2].tolist() == [
        501,
        169,
    ]


def test_read_results_with_confidence_and_evaluate(tmp_path: Path) -> None:
    gt = tmp_path / "gt_img_1.txt"
    gt.write_text(IC15)
    res = tmp_path / "res_img_1.txt"
    res.write_text(
        "377,117,463,117,465,130,378,130,0.9\n374,155,409,155,409,170,374,170,0.8\n0,200,30,200,30,220,0,220,0.3\n"
    )
    g, d = read_icdar_gt(gt), read_icdar_gt(res, has_text=False)
    assert d.scores is not None and d.scores.tolist() == [0.9, 0.8, 0.3]
    r = icdar15_evaluate([g.quads], [d.quads], [g.dont_care])
    assert r["matched"] == 1 and r["n_gt"] == 3 and r["n_det"] == 2  # one det on '###' ignored


def test_malformed_icdar_files(tmp_path: Path) -> None:
    p = tmp_path / "gt_img_2.txt"
    p.write_text("1,2,3,word\n")
    with pytest.raises(DatasetFolderError, match="gt_img_2.txt:1"):
        read_icdar_gt(p)
    with pytest.raises(DatasetFolderError):
        read_icdar_gt(tmp_path / "missing.txt")
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(DatasetFolderError, match="no .txt"):
        read_icdar_folder(tmp_path / "emptydir")


def test_icdar_detection_dataset(tmp_path: Path) -> None:
    write_icdar(tmp_path, [1, 2, 10], IC15)
    ds = IcdarDetectionDataset(tmp_path)
    assert ds.ids == ["1", "2", "10"] and len(ds) == 3
    img, ann = ds[2]
    assert img.size == (64, 48) and ann.dont_care.sum() == 1
    (tmp_path / "gt" / "gt_img_11.txt").write_text(IC15)
    with pytest.raises(DatasetFolderError, match="no image"):
        IcdarDetectionDataset(tmp_path)
    with pytest.raises(DatasetFolderError, match="ch4_test_images"):
        IcdarDetectionDataset(tmp_path, images_dir="ch4_test_images")
