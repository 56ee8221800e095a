"""Matrix entries of :mod:`rank_lab.fixtures`, :mod:`rank_lab.data.procedural` and
:mod:`rank_lab.data.landmark_hierarchy`.

The writers write into a fresh scratch folder (tiny images: 4 to 8 pixels); a bad count, size or
seed is refused before anything is written.
"""

from __future__ import annotations

import numpy as np

import rank_lab.data.landmark_hierarchy as LH
import rank_lab.data.procedural as PC
import rank_lab.fixtures as FX
from rank_lab.fixtures import ood, retrieval, search

from .data_fixtures import scratch
from .factories import emb, images
from .framework import cls, fn

#: Roles of every ``<name>_fixture(root, *, n_classes, per_class, size, seed)`` writer.
FIXTURE = {"n_classes": "posint", "per_class": "posint", "size": "posint", "seed": "nonnegint"}
SIZE = {"size": "posint"}

FIXTURE_WRITERS = [
    ood.cifar10_fixture,
    ood.cifar100_fixture,
    ood.svhn_fixture,
    ood.textures_fixture,
    ood.places365_fixture,
    ood.tiny_imagenet_fixture,
    ood.lsun_lmdb_fixture,
    ood.ood_folders_fixture,
    ood.features_fixture,
    retrieval.sop_fixture,
    retrieval.cub_fixture,
    retrieval.cars_fixture,
    retrieval.inaturalist_fixture,
    retrieval.vehicleid_fixture,
    retrieval.dyml_fixture,
    retrieval.gldv2_fixture,
    search.image_folder_fixture,
    search.landuse_fixture,
    search.alegoria_fixture,
    search.alegoria_fewshot_fixture,
    search.revisited_fixture,
    search.sf300_fixture,
    search.lmdb_fixture,
    search.icdar_fixture,
]


def cifar_batch(n: int = 2) -> dict:
    return {"data": ood.cifar_rows(n, 0), "labels": list(range(n))}


def svhn_xy() -> dict:
    return {
        "x": np.zeros((32, 32, 3, 2), dtype=np.uint8),
        "y": np.array([[1], [10]], dtype=np.uint8),
    }


def word_items() -> list:
    from PIL import Image

    return [(Image.new("RGB", (8, 4), (200, 200, 200)), "ab")]


def mapping_file():
    path = scratch() / "mapping.csv"
    path.write_text(
        "keyword,super_category,natural_or_human_made\nlake,Lake,natural\nchurch,Church,human-made\n"
    )
    return path


def RULES():
    return [
        LH.MappingRule("lake", "Lake", "natural"),
        LH.MappingRule("church", "Church", "human-made"),
    ]  # noqa: E731


TEXTS = lambda: ["lake", "church", "small lake"]  # noqa: E731
CATEGORIES = {
    1: "Category:Lake_X",
    2: "church building (1172-1954)",
    3: "Wikimedia category",
    4: "lakes",
}
MULTI = lambda: PC.make_multi_source_images(2, 1, image_size=8)  # noqa: E731


def two_factor_fields() -> dict:
    d = PC.make_two_factor_images(2, 2, image_size=8)
    return {"images": d.images, "shapes": d.shapes, "hues": d.hues, "hue_values": d.hue_values}


def multi_fields() -> dict:
    d = MULTI()
    return {
        "images": d.images,
        "labels": d.labels,
        "domains": d.domains,
        "source_names": d.source_names,
        "attributes": d.attributes,
    }


ENTRIES = [
    *(
        fn(w, lambda: {"root": scratch(), "n_classes": 2, "per_class": 2, "size": 8}, FIXTURE)
        for w in FIXTURE_WRITERS
    ),
    fn(
        FX.write_fixture,
        lambda: {"name": "cub", "root": scratch(), "n_classes": 2, "per_class": 1, "size": 4},
        {"name": "choice", **FIXTURE},
    ),
    fn(FX.fixture_names),
    fn(FX.class_colour, {"label": 3}, extra={"frac": ("label", lambda: 1.5, ("label",))}),
    fn(
        FX.write_image,
        lambda: {"path": scratch() / "a.png", "colour": (1, 2, 3), "size": 4},
        {"colour": "choice", "size": "posint", "noise_seed": "nonnegint"},
        extra={"above255": ("colour", lambda: (1, 2, 300), ("colour",))},
    ),
    # explicit-content writers of the OOD sets
    fn(ood.cifar_rows, {"n": 2, "seed": 0}, {"n": "posint", "seed": "nonnegint"}),
    fn(ood.write_pickle, lambda: {"path": scratch() / "x.pkl", "obj": {"a": 1}}),
    fn(
        ood.write_cifar10,
        lambda: {"root": scratch(), "batches": [cifar_batch()], "test": cifar_batch()},
    ),
    fn(
        ood.write_cifar100,
        lambda: {
            "root": scratch(),
            "train": {**cifar_batch(), "fine_labels": [0, 1], "coarse_labels": [0, 0]},
            "test": {**cifar_batch(), "fine_labels": [0, 1], "coarse_labels": [0, 0]},
        },
    ),
    fn(
        ood.write_svhn,
        lambda: {"root": scratch(), "split": "test", **svhn_xy()},
        {"split": "choice", "x": "x", "y": "labels"},
        rows=(("x", "y"),),
    ),
    fn(
        ood.write_textures,
        lambda: {"root": scratch(), "classes": {"a": (10, 20, 30)}, "per_class": 1, "size": 4},
        {"per_class": "posint", **SIZE},
    ),
    fn(
        ood.write_places365,
        lambda: {"root": scratch(), "val": [("a.jpg", 0)], "categories": ["/c/x"], "size": 4},
        SIZE,
    ),
    fn(
        ood.write_tiny_imagenet,
        lambda: {
            "root": scratch(),
            "wnids": ["n1"],
            "val": [("v.JPEG", "n1")],
            "n_test": 1,
            "size": 4,
        },
        {"n_test": "nonnegint", **SIZE},
    ),
    fn(
        ood.write_lsun_lmdb,
        lambda: {
            "root": scratch(),
            "categories": {"bedroom": (1, 2, 3)},
            "per_category": 1,
            "size": 4,
        },
        {"per_category": "posint", **SIZE},
    ),
    fn(
        ood.write_torchvision_archive,
        lambda: {"url": "http://ufldl.stanford.edu/housenumbers/test_32x32.mat", "root": scratch()},
        {"url": "choice"},
    ),
    # explicit-content writers of the retrieval sets
    fn(
        retrieval.write_sop,
        lambda: {
            "root": scratch(),
            "train": [(1, 1, 1, "bicycle_final/1_0.JPG")],
            "test": [(2, 2, 1, "bicycle_final/2_0.JPG")],
            "size": 4,
        },
        SIZE,
    ),
    fn(
        retrieval.write_cub, lambda: {"root": scratch(), "classes": {1: 1, 2: 101}, "size": 4}, SIZE
    ),
    fn(retrieval.write_cars, lambda: {"root": scratch(), "classes": [1, 99], "size": 4}, SIZE),
    fn(
        retrieval.write_inaturalist,
        lambda: {
            "root": scratch(),
            "categories": [(100, "Plantae", "G", "F", "O", "C", "P", "K")],
            "train": [(100, "a")],
            "test": None,
            "size": 4,
        },
        SIZE,
    ),
    fn(
        retrieval.write_vehicleid,
        lambda: {
            "root": scratch(),
            "train": [("0000001", 1)],
            "tests": {800: [("0000002", 2)]},
            "size": 4,
        },
        SIZE,
    ),
    fn(
        retrieval.write_dyml,
        lambda: {
            "root": scratch(),
            "train": [("a.jpg", 0, 0, 0)],
            "benchmarks": {"fine": {"query": [("q.jpg", 0)]}},
            "size": 4,
        },
        SIZE,
    ),
    fn(
        retrieval.write_gldv2,
        lambda: {"root": scratch(), "train_ids": {"abc1": 7}, "clean": {7: ["abc1"]}, "size": 4},
        SIZE,
    ),
    # explicit-content writers of the image-search, land-use and scene-text sets
    fn(
        search.write_class_folders,
        lambda: {"base": scratch(), "classes": {"a": 1}, "size": 4},
        SIZE,
    ),
    fn(
        search.write_landuse,
        lambda: {"root": scratch(), "folder": "UCM", "classes": {"a": 1}, "size": 4},
        SIZE,
    ),
    fn(
        search.write_alegoria,
        lambda: {
            "root": scratch(),
            "rows": ["image,class,collection", "images/a.png,obj,MRU"],
            "size": (4, 4),
        },
        SIZE,
    ),
    fn(
        search.write_revisited,
        lambda: {
            "root": scratch(),
            "name": "roxford5k",
            "imlist": ["a"],
            "qimlist": ["q"],
            "gnd": [{"easy": [0], "hard": [], "junk": []}],
            "size": (4, 4),
        },
        SIZE,
        rows=(("qimlist", "gnd"),),
    ),
    fn(
        search.write_sf300,
        lambda: {"root": scratch(), "split": "test", "classes": {"c1": 1}, "size": 4},
        SIZE,
    ),
    fn(search.write_lmdb_words, lambda: {"root": scratch(), "items": word_items()}),
    fn(search.write_icdar, lambda: {"root": scratch(), "ids": [1], "size": (64, 48)}, SIZE),
    # procedural multi-source images
    fn(
        PC.MultiSourceImages,
        multi_fields,
        {"images": "x", "labels": "labels", "domains": "labels"},
        rows=(("images", "labels"), ("images", "domains")),
    ),
    fn(
        PC.make_multi_source_images,
        {"n_classes": 2, "per_source": 1, "image_size": 8, "sources": ("colour", "drawing")},
        {
            "n_classes": "posint",
            "per_source": "posint",
            "image_size": "posint",
            "border_prob": "prob",
            "noise": "nonneg",
            "seed": "nonnegint",
            "class_offset": "nonnegint",
        },
        extra={"bogus": ("sources", lambda: ("colour", "bogus"), ("sources",))},
    ),
    fn(
        PC.TwoFactorImages,
        two_factor_fields,
        {"images": "x", "shapes": "labels", "hues": "labels"},
        rows=(("images", "shapes"), ("images", "hues")),
    ),
    fn(
        PC.make_two_factor_images,
        {"n_shapes": 2, "n_hues": 2, "image_size": 8},
        {
            "n_shapes": "posint",
            "n_hues": "posint",
            "per_pair": "posint",
            "image_size": "posint",
            "jitter": "nonneg",
            "noise": "nonneg",
            "seed": "nonnegint",
            "class_offset": "nonnegint",
            "paint": "choice",
        },
    ),
    fn(
        PC.write_image_folder,
        lambda: {"images": images(2, 3, 4), "root": scratch(), "names": ["a.png", "b.png"]},
        {"images": "x"},
        rows=(("images", "names"),),
    ),
    fn(PC.write_alegoria_folder, lambda: {"data": MULTI(), "root": scratch()}),
    # landmark hierarchy pipeline
    fn(
        LH.normalize_category,
        {"text": "Category:Lake_X (1900)"},
        extra={"int": ("text", lambda: 3, ("text",))},
    ),
    fn(LH.is_irrelevant, {"normalized": "lake"}),
    fn(LH.deduplicate, {"normalized": ["a", "b", "a"]}),
    fn(
        LH.embed_categories,
        lambda: {"texts": TEXTS(), "method": "tfidf"},
        {"method": "choice"},
        extra={"empty": ("texts", lambda: [], ("texts",))},
    ),
    fn(
        LH.cluster_categories,
        lambda: {"embeddings": emb(4, 3).numpy(), "k": 2},
        {"embeddings": "x", "k": "k"},
        legal={
            "k:big": "k above the number of categories is capped at it (docstring)",
            "embeddings:int": "integer embeddings are cast to float",
        },
    ),
    fn(
        LH.cluster_report,
        lambda: {"texts": TEXTS(), "clusters": np.array([0, 1, 0])},
        {"max_items": "posint"},
        rows=(("texts", "clusters"),),
    ),
    fn(LH.read_mapping, lambda: {"path": mapping_file()}, {"path": "path"}),
    fn(
        LH.apply_mapping,
        lambda: {"texts": TEXTS(), "clusters": np.array([0, 1, 0]), "rules": RULES()},
        rows=(("texts", "clusters"),),
    ),
    cls(
        LH.MappingRule,
        {"keyword": "lake", "super_category": "Lake", "natural_or_human_made": "natural"},
        {"natural_or_human_made": "choice", "cluster": "nonnegint"},
        calls=[("matches", {"normalized": "small lake", "cluster": 0}, None)],
        extra={"empty": ("keyword", lambda: " ", ("keyword",))},
    ),
    fn(
        LH.build_landmark_hierarchy,
        lambda: {
            "landmark_categories": dict(CATEGORIES),
            "rules": RULES(),
            "k": 2,
            "method": "tfidf",
        },
        {"k": "k", "method": "choice"},
        legal={"k:big": "k above the number of categories is capped at it (docstring)"},
        extra={"empty": ("landmark_categories", lambda: {}, ("landmark_categories",))},
    ),
    cls(
        LH.LandmarkHierarchy,
        lambda: {
            k: getattr(h, k)
            for h in [LH.build_landmark_hierarchy(dict(CATEGORIES), RULES(), k=2, method="tfidf")]
            for k in ("landmarks", "removed", "categories", "clusters", "method", "vocab")
        },
        calls=[("labels", {"landmark_ids": [1, 2]}, None)],
    ),
]
