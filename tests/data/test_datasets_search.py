"""Image-search data: revisited Oxford/Paris, ALEGORIA-style and SF300-style loaders on tiny
fixtures, the procedural multi-source images, and the resumable descriptor extractor."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rank_lab.data.datasets.alegoria import load_alegoria
from rank_lab.data.datasets.base import DatasetFolderError
from rank_lab.data.datasets.revisited import load_r1m_list, load_revisited
from rank_lab.data.datasets.sf300 import load_sf300
from rank_lab.data.procedural import (
    SOURCES,
    make_multi_source_images,
    make_two_factor_images,
    write_alegoria_folder,
    write_image_folder,
)
from rank_lab.fixtures import write_image
from rank_lab.fixtures.search import write_alegoria, write_revisited, write_sf300
from rank_lab.retrieval.extract import (
    build_descriptor_net,
    extract_descriptors,
    list_images,
    preprocess_image,
)


def _jpg(
    path: Path, size: tuple[int, int] = (20, 16), colour: tuple[int, int, int] = (120, 30, 200)
) -> None:
    write_image(path, colour, size)


# ----------------------------------------------------------------------------- revisited


def _revisited_fixture(root: Path, name: str = "roxford5k") -> Path:
    gnd = [
        {"bbx": [5.0, 4.0, 25.0, 20.0], "easy": [0, 1], "hard": [2], "junk": [3]},
        {"bbx": [0.0, 0.0, 10.0, 10.0], "easy": [], "hard": [4, 5], "junk": []},
    ]
    imlist = [f"all_souls_{i:06d}" for i in range(6)]
    return write_revisited(root, name, imlist, ["all_souls_000013", "radcliffe_000001"], gnd)


def test_revisited_loader(tmp_path: Path) -> None:
    root = _revisited_fixture(tmp_path)
    ds = load_revisited(root, "roxford5k")
    assert ds.n_db == 6 and ds.n_queries == 2
    assert ds.db_paths[0].name == "all_souls_000000.jpg"
    np.testing.assert_array_equal(ds.gnd[0]["easy"], [0, 1])
    np.testing.assert_array_equal(ds.query_bboxes[0], [5, 4, 25, 20])
    img, label = ds.queries()[0]
    assert img.size == (20, 16) and int(label) == 0  # cropped to the box
    img_full, _ = ds.queries(crop=False)[0]
    assert img_full.size == (40, 30)
    assert len(ds.database()) == 6


def test_revisited_r1m_list(tmp_path: Path) -> None:
    root = _revisited_fixture(tmp_path)
    dist = tmp_path / "r1m"
    for rel in ("jpg/0/a.jpg", "jpg/1/b.jpg"):
        _jpg(dist / rel)
    (dist / "revisitop1m.txt").write_text("jpg/0/a\njpg/1/b.jpg\n\n")
    ds = load_revisited(root, "roxford5k", distractors_root=dist)
    assert [p.name for p in ds.distractor_paths] == ["a.jpg", "b.jpg"]
    assert int(ds.distractors()[1][1]) == -1
    with pytest.raises(DatasetFolderError, match="missing"):
        (dist / "revisitop1m.txt").write_text("jpg/0/a\njpg/9/zzz\n")
        load_r1m_list(dist, check_files=True)


def test_revisited_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetFolderError, match="gnd_roxford5k.pkl"):
        load_revisited(tmp_path, "roxford5k")
    with pytest.raises(ValueError, match="name"):
        load_revisited(tmp_path, "holidays")
    root = _revisited_fixture(tmp_path, "rparis6k")
    (root / "rparis6k" / "jpg" / "all_souls_000002.jpg").unlink()
    with pytest.raises(DatasetFolderError, match="missing"):
        load_revisited(root, "rparis6k")
    with open(root / "rparis6k" / "gnd_rparis6k.pkl", "wb") as f:
        pickle.dump({"imlist": ["x"], "qimlist": []}, f)
    with pytest.raises(DatasetFolderError, match="gnd"):
        load_revisited(root, "rparis6k")


# ----------------------------------------------------------------------------- ALEGORIA-style


def _alegoria_fixture(root: Path, rows: list[str]) -> Path:
    return write_alegoria(root, rows)


def test_alegoria_loader(tmp_path: Path) -> None:
    rows = [
        "image,class,collection,scale,illumination,vertical_orientation,color",
        "img/a.jpg,eiffel tower,Internet,0,1,2,0",
        "img/b.jpg,eiffel tower|pantheon paris,Photothèque,3,1,0,1",
        "img/c.jpg,,Lapie,,,,",
        "img/d.jpg,pantheon paris,Lapie,1,,1,2",
    ]
    ds = load_alegoria(_alegoria_fixture(tmp_path, rows))
    assert len(ds) == 4
    assert ds.class_names == ["eiffel tower", "pantheon paris"]
    # annotated first (file order), distractor last
    assert [p.name for p in ds.paths] == ["a.jpg", "b.jpg", "d.jpg", "c.jpg"]
    assert ds.labels.tolist() == [[True, False], [True, True], [False, True], [False, False]]
    assert ds.annotated.tolist() == [True, True, True, False]
    assert ds.collection_names == ["Internet", "Photothèque", "Lapie"]
    assert ds.collections.tolist() == [0, 1, 2, 2]
    assert ds.attributes["scale"].tolist() == [0, 3, 1, -1]
    assert ds.attributes["illumination"].tolist() == [1, 1, -1, -1]
    assert "occlusion" not in ds.attributes
    assert ds.query_index.tolist() == [0, 1, 2]
    assert int(ds.dataset()[3][1]) == -1


def test_alegoria_semicolon_and_errors(tmp_path: Path) -> None:
    ds = load_alegoria(
        _alegoria_fixture(tmp_path / "ok", ["Image;Class;Collection", "x.jpg;a;MRU"])
    )
    assert ds.class_names == ["a"]
    with pytest.raises(DatasetFolderError, match="annotations.csv"):
        load_alegoria(tmp_path / "nowhere")
    bad = _alegoria_fixture(tmp_path / "bad", ["image,class", "x.jpg,a"])
    with pytest.raises(DatasetFolderError, match="collection"):
        load_alegoria(bad)
    code = _alegoria_fixture(tmp_path / "code", ["image,class,collection,scale", "x.jpg,a,MRU,7"])
    with pytest.raises(DatasetFolderError, match="scale=7"):
        load_alegoria(code)
    miss = _alegoria_fixture(tmp_path / "miss", ["image,class,collection", "x.jpg,a,MRU"])
    (miss / "x.jpg").unlink()
    with pytest.raises(DatasetFolderError, match="missing"):
        load_alegoria(miss)
    empty = _alegoria_fixture(tmp_path / "empty", ["image,class,collection", "x.jpg,,MRU"])
    with pytest.raises(DatasetFolderError, match="no annotated"):
        load_alegoria(empty)


# ----------------------------------------------------------------------------- SF300-style


def test_sf300_loader(tmp_path: Path) -> None:
    csv = (
        "image,altitude,omega,phi,orientation,kappa,sun "
        "angle\nc001_0.jpg,1200,0,0,0,12.5,40\nc001_1.jpg,1180,0,-45,1,12.5,41\n"
    )
    write_sf300(tmp_path, "test", {"c001": 2, "c002": 3}, {"c001": csv})
    ds = load_sf300(tmp_path, "test")
    assert len(ds) == 5 and ds.class_names == ["c001", "c002"]
    assert ds.labels.tolist() == [0, 0, 1, 1, 1]
    assert ds.orientation.tolist() == [0, 1, -1, -1, -1]
    assert ds.attributes["sun_angle"][1].item() == 41.0
    assert torch.isnan(ds.attributes["altitude"][4])
    assert int(ds.dataset()[2][1]) == 1
    with pytest.raises(DatasetFolderError, match="train"):
        load_sf300(tmp_path, "train")
    (tmp_path / "bad" / "c1").mkdir(parents=True)
    with pytest.raises(DatasetFolderError, match="no image"):
        load_sf300(tmp_path, "bad")


# ----------------------------------------------------------------------------- procedural


def test_procedural_images() -> None:
    a = make_multi_source_images(
        n_classes=3, per_source=2, sources=SOURCES, image_size=24, border_prob=0.5, seed=3
    )
    b = make_multi_source_images(
        n_classes=3, per_source=2, sources=SOURCES, image_size=24, border_prob=0.5, seed=3
    )
    assert torch.equal(a.images, b.images)
    assert a.images.shape == (3 * len(SOURCES) * 2, 3, 24, 24)
    assert float(a.images.min()) >= 0 and float(a.images.max()) <= 1
    assert a.labels.tolist() == [c for c in range(3) for _ in range(2 * len(SOURCES))]
    assert a.domains.tolist()[:8] == [0, 0, 1, 1, 2, 2, 3, 3]
    grey = a.images[a.domains == SOURCES.index("greyscale")]
    assert torch.equal(grey[:, 0], grey[:, 1]) and torch.equal(grey[:, 1], grey[:, 2])
    for name, hi in (("vertical_orientation", 2), ("scale", 3), ("illumination", 2), ("border", 1)):
        v = a.attributes[name]
        assert int(v.min()) >= 0 and int(v.max()) <= hi
    # another class offset gives other objects
    c = make_multi_source_images(n_classes=3, per_source=2, image_size=24, seed=3, class_offset=99)
    assert not torch.equal(c.images, a.images[a.domains < 3][: len(c)])
    with pytest.raises(ValueError, match="sources"):
        make_multi_source_images(sources=("infrared",))
    assert len(a.subset(torch.tensor([0, 5]))) == 2


def test_procedural_toned_sources_share_their_luminance_and_borders_have_their_width() -> None:
    a = make_multi_source_images(
        n_classes=2,
        per_source=3,
        sources=("greyscale", "cyanotype", "sepia"),
        image_size=50,
        seed=1,
    )
    cyan = a.images[a.domains == 1]
    ink, paper = torch.tensor([0.05, 0.2, 0.42]), torch.tensor([0.88, 0.94, 1.0])
    # every cyanotype pixel lies on the ink -> paper ramp: the same grey level in all three channels
    level = (cyan - ink[None, :, None, None]) / (paper - ink)[None, :, None, None]
    torch.testing.assert_close(level[:, 0], level[:, 1], atol=1e-5, rtol=0)
    torch.testing.assert_close(level[:, 1], level[:, 2], atol=1e-5, rtol=0)
    assert float(level.min()) >= -1e-6 and float(level.max()) <= 1 + 1e-6
    sepia = a.images[a.domains == 2]  # a multiple of the grey level per channel
    torch.testing.assert_close(sepia[:, 1] / 0.85, sepia[:, 0], atol=1e-5, rtol=0)
    # a scan border of 4 % of a 50-pixel side is 2 pixels wide, dark, and crop 0.9 removes it
    b = make_multi_source_images(
        n_classes=1,
        per_source=2,
        sources=("greyscale",),
        image_size=50,
        border_prob=1.0,
        border_width=0.04,
        seed=0,
    )
    assert bool((b.images[:, :, :2] == 0.08).all()) and bool((b.images[:, :, :, -2:] == 0.08).all())
    assert not bool((b.images[:, :, 2:-2, 2:-2] == 0.08).all())
    assert b.attributes["border"].tolist() == [1, 1]
    with pytest.raises(ValueError, match="border_width"):
        make_multi_source_images(border_width=0.0)
    with pytest.raises(ValueError, match="border_width"):
        make_multi_source_images(border_width=0.6)


def test_two_factor_images() -> None:
    d = make_two_factor_images(
        n_shapes=3, n_hues=4, per_pair=2, image_size=16, paint="background", seed=2
    )
    assert d.images.shape == (24, 3, 16, 16) and len(d) == 24
    assert d.shapes.tolist() == [s for s in range(3) for _ in range(8)]
    assert d.hues.tolist() == [h for _ in range(3) for h in range(4) for _ in range(2)]
    assert float(d.images.min()) >= 0 and float(d.images.max()) <= 1
    gaps = torch.diff(torch.sort(d.hue_values).values)  # equally spaced on the colour circle
    torch.testing.assert_close(gaps, torch.full((3,), 0.25), atol=1e-6, rtol=0)
    again = make_two_factor_images(
        n_shapes=3, n_hues=4, per_pair=2, image_size=16, paint="background", seed=2
    )
    assert torch.equal(d.images, again.images)
    # the background corner takes the image's hue: equal hues give (nearly) equal chroma
    corner = d.images[:, :, 0, 0]
    chroma = corner - corner.mean(1, keepdim=True)
    same = chroma[d.hues == 1]
    other = chroma[d.hues == 3]
    assert (
        float((same - same[0]).abs().max())
        < 0.1
        < float((other.mean(0) - same.mean(0)).abs().max())
    )
    # "object" paint: the background is grey, the primitives carry the hue
    o = make_two_factor_images(n_shapes=2, n_hues=2, image_size=16, noise=0.0, seed=2)
    # soft edges reach it
    assert float((o.images[:, :, 0, 0] - o.images[:, :1, 0, 0]).abs().max()) < 1e-3
    other_shapes = make_two_factor_images(
        n_shapes=2, n_hues=2, image_size=16, class_offset=5, seed=2
    )
    assert not torch.equal(
        other_shapes.images,
        make_two_factor_images(n_shapes=2, n_hues=2, image_size=16, seed=2).images,
    )
    with pytest.raises(ValueError, match="paint"):
        make_two_factor_images(paint="both")
    with pytest.raises(ValueError, match="n_hues"):
        make_two_factor_images(n_hues=0)


def test_procedural_alegoria_round_trip(tmp_path: Path) -> None:
    q = make_multi_source_images(n_classes=2, per_source=2, image_size=16, seed=0)
    d = make_multi_source_images(n_classes=1, per_source=2, image_size=16, seed=0, class_offset=7)
    write_alegoria_folder(q, tmp_path, d)
    ds = load_alegoria(tmp_path)
    assert len(ds) == len(q) + len(d)
    assert int(ds.annotated.sum()) == len(q)
    assert ds.collection_names == ["colour", "greyscale", "drawing"]
    assert (
        ds.attributes["vertical_orientation"][: len(q)].tolist()
        == q.attributes["vertical_orientation"].tolist()
    )
    img = np.asarray(Image.open(ds.paths[0])) / 255.0
    np.testing.assert_allclose(img, q.images[0].permute(1, 2, 0).numpy(), atol=1 / 255)


# ----------------------------------------------------------------------------- extractor


@pytest.fixture()
def image_folder(tmp_path: Path) -> Path:
    data = make_multi_source_images(n_classes=3, per_source=2, image_size=20, seed=1)
    write_image_folder(
        data.images, tmp_path / "imgs", [f"sub{i % 2}/im{i:03d}.png" for i in range(len(data))]
    )
    return tmp_path / "imgs"


def test_extract_folder_basic(image_folder: Path) -> None:
    torch.manual_seed(0)
    net = build_descriptor_net("tiny_cnn", "gem")
    paths = list_images(image_folder)
    assert len(paths) == 18 and paths == sorted(paths)
    x = extract_descriptors(image_folder, net, image_size=16, batch_size=5, progress=False)
    assert x.shape == (18, net.backbone.num_features)
    torch.testing.assert_close(x.norm(dim=1), torch.ones(18))
    # same as a manual pass over the preprocessed batch (mean/std normalised)
    from rank_lab.data.datasets.base import pil_loader

    imgs = torch.stack([preprocess_image(pil_loader(p), image_size=16) for p in paths])
    mean = torch.tensor([0.485, 0.456, 0.406])[None, :, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[None, :, None, None]
    with torch.no_grad():
        ref = net.eval()((imgs - mean) / std)
    torch.testing.assert_close(x, ref, atol=1e-5, rtol=0)


def test_extract_multiscale_flip_options(image_folder: Path) -> None:
    torch.manual_seed(0)
    net = build_descriptor_net("tiny_cnn", "mac")
    paths = list_images(image_folder)[:4]
    one = extract_descriptors(paths, net, image_size=16, progress=False)
    ms = extract_descriptors(
        paths, net, image_size=16, scales=(1.0, 0.5), flip=True, progress=False
    )
    assert ms.shape == one.shape and not torch.allclose(ms, one)
    torch.testing.assert_close(ms.norm(dim=1), torch.ones(4))
    # flip invariance by construction: the flipped image gives the same flip-averaged descriptor
    imgs = torch.stack(
        [preprocess_image(Image.open(p).convert("RGB"), image_size=16) for p in paths]
    )
    a = extract_descriptors(imgs, net, image_size=None, flip=True, progress=False)
    b = extract_descriptors(imgs.flip(-1), net, image_size=None, flip=True, progress=False)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # grayscale: a colour image and its luminance give the same descriptor
    lum = (0.299 * imgs[:, 0] + 0.587 * imgs[:, 1] + 0.114 * imgs[:, 2])[:, None].expand(
        -1, 3, -1, -1
    )
    g1 = extract_descriptors(imgs, net, image_size=None, grayscale=True, progress=False)
    g2 = extract_descriptors(lum.contiguous(), net, image_size=None, progress=False)
    torch.testing.assert_close(g1, g2, atol=1e-6, rtol=0)
    # centre crop and keep-aspect resizing
    t = preprocess_image(torch.rand(3, 20, 40), image_size=10, keep_aspect=True, center_crop=0.5)
    assert t.shape == (3, 5, 10)
    t = preprocess_image(torch.rand(3, 20, 40), image_size=None, box=[10, 2, 30, 12])
    assert t.shape == (3, 10, 20)


def test_extract_resumes_after_interruption(image_folder: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = build_descriptor_net("tiny_cnn", "gem")
    full = extract_descriptors(image_folder, net, image_size=16, batch_size=4, progress=False)
    out = tmp_path / "desc.npy"
    calls: list[int] = []

    def stop_after_two(done: int) -> None:
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        extract_descriptors(
            image_folder,
            net,
            image_size=16,
            batch_size=4,
            out_path=out,
            on_batch=stop_after_two,
            progress=False,
        )
    assert (tmp_path / "desc.npy.progress.json").is_file()
    resumed: list[int] = []
    got = extract_descriptors(
        image_folder,
        net,
        image_size=16,
        batch_size=4,
        out_path=out,
        on_batch=resumed.append,
        progress=False,
    )
    assert resumed[0] == 12  # batches 1-2 were not recomputed
    torch.testing.assert_close(got, full)
    assert not (tmp_path / "desc.npy.progress.json").exists()
    # a complete file is loaded, not recomputed; other settings refuse to mix
    again: list[int] = []
    torch.testing.assert_close(
        extract_descriptors(
            image_folder,
            net,
            image_size=16,
            batch_size=4,
            out_path=out,
            on_batch=again.append,
            progress=False,
        ),
        full,
    )
    assert again == []
    with pytest.raises(ValueError, match="resume=False"):
        extract_descriptors(image_folder, net, image_size=12, out_path=out, progress=False)
    redo = extract_descriptors(
        image_folder, net, image_size=12, out_path=out, resume=False, progress=False
    )
    assert redo.shape == full.shape


def test_extract_timm_backbone_and_weights(image_folder: Path, tmp_path: Path) -> None:
    from rank_lab.models.backbones import TimmBackbone

    torch.manual_seed(0)
    bb = TimmBackbone("resnet10t")
    wfile = tmp_path / "w.pth"
    torch.save(bb.model.state_dict(), wfile)
    paths = list_images(image_folder)[:3]
    a = extract_descriptors(paths, build_descriptor_net(bb, "gem"), image_size=32, progress=False)
    torch.manual_seed(123)  # a different random init, then the saved weights
    b = extract_descriptors(
        paths, "resnet10t", pooling="gem", weights=wfile, image_size=32, progress=False
    )
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert a.shape == (3, bb.num_features)


def test_extract_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetFolderError, match="does not exist"):
        extract_descriptors(tmp_path / "none", "tiny_cnn")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFolderError, match="no image"):
        extract_descriptors(tmp_path / "empty", "tiny_cnn")
    with pytest.raises(ValueError, match="scales"):
        extract_descriptors(torch.rand(2, 3, 8, 8), "tiny_cnn", scales=(0.0,))
    with pytest.raises(ValueError, match="boxes"):
        extract_descriptors(torch.rand(2, 3, 8, 8), "tiny_cnn", boxes=[None])
    with pytest.raises(ValueError, match="center_crop"):
        preprocess_image(torch.rand(3, 8, 8), center_crop=1.5)
