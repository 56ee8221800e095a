"""Matrix entries of the dataset loaders (:mod:`rank_lab.data.datasets`).

Every valid call reads a tiny fixture in the dataset's published layout, written once per session
by :func:`.data_fixtures.fixture`; role ``path`` gives the missing-folder variant (a
``DatasetFolderError`` naming the path and the layout).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import torch

from rank_lab.data.datasets import (
    alegoria,
    base,
    cars,
    cifar,
    cub,
    dyml,
    hierarchical_labels,
    inaturalist,
    landuse,
    ood_sets,
    retrieval,
    revisited,
    scene_text,
    sf300,
    sop,
    sources,
    transforms,
    vehicleid,
)

from .data_fixtures import MISSING, fixture, scratch
from .framework import cls, fn

#: Roles shared by the loaders: a missing root, a bogus split or transform, a bad image size.
LOADER = {"root": "path", "split": "choice", "transform": "choice", "image_size": "posint"}
ARRAY = {"root": "path", "split": "choice", "transform": "choice"}  # loaders without image_size


def fields(obj: object) -> dict:
    """The constructor arguments of a dataclass instance (to rebuild it in a valid call)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def one_image() -> Path:
    return next(p for p in sorted(fixture("image_folder").rglob("*.jpg")))


@functools.cache
def r1m_folder() -> Path:
    """A distractor folder with its ``revisitop1m.txt`` list (two entries, one without
    extension)."""
    root = scratch()
    (root / "revisitop1m.txt").write_text("a/img1.jpg\nb/img2\n")
    return root


@functools.cache
def dtd_download_root() -> Path:
    """A folder holding what ``torchvision.datasets.DTD(download=True)`` extracts (``dtd/dtd/``): it
    checks the folder exists and downloads nothing."""
    from rank_lab.fixtures.ood import textures_fixture

    root = scratch()
    textures_fixture(root / "dtd", n_classes=2, per_class=3, size=8)
    return root


def dyml_levels(value: float = 50.0) -> dict:
    return {lvl: {"mAP": value, "ASI": value, "R@1": value} for lvl in dyml.DYML_LEVELS}


ENTRIES = [
    # base / transforms / sources
    fn(base.pil_loader, lambda: {"path": one_image()}, {"path": "path"}),
    fn(
        transforms.default_transform,
        {"train": False, "image_size": 8},
        {"image_size": "posint", "resize": "posint"},
    ),
    fn(
        transforms.resolve_transform,
        {"transform": "default", "split": "test", "image_size": 8},
        {"transform": "choice", "image_size": "posint"},
    ),
    fn(transforms.check_split, {"split": "train"}, {"split": "choice"}),
    fn(
        transforms.find_root,
        lambda: {
            "root": fixture("sop"),
            "marker": "Ebay_train.txt",
            "subdirs": ("Stanford_Online_Products",),
            "dataset": "SOP",
            "layout": "Expected Ebay_train.txt.",
        },
        {"root": "path"},
    ),
    fn(
        transforms.check_files_exist,
        lambda: {"paths": [one_image()], "dataset": "test", "listed_in": "a list"},
        extra={"missing": ("paths", lambda: [Path(MISSING) / "a.jpg"], ("paths", MISSING))},
    ),
    fn(sources.published, {"key": "sop"}, {"key": "choice"}),
    fn(
        sources.torchvision_download,
        lambda: {"name": "textures", "root": dtd_download_root()},
        {"name": "choice", "split": "choice"},
    ),
    # retrieval datasets
    fn(sop.load_sop, lambda: {"root": fixture("sop"), "transform": None}, LOADER),
    fn(sop.read_sop_list, lambda: {"path": fixture("sop") / "Ebay_train.txt"}, {"path": "path"}),
    fn(cub.load_cub, lambda: {"root": fixture("cub"), "transform": None}, LOADER),
    fn(cars.load_cars, lambda: {"root": fixture("cars196"), "transform": None}, LOADER),
    fn(
        cars.read_cars_annos,
        lambda: {"path": fixture("cars196") / "cars_annos.mat"},
        {"path": "path"},
    ),
    fn(
        inaturalist.load_inaturalist,
        lambda: {"root": fixture("inaturalist"), "transform": None},
        {**LOADER, "levels": "choice"},
    ),
    fn(vehicleid.load_vehicleid, lambda: {"root": fixture("vehicleid"), "transform": None}, LOADER),
    fn(
        vehicleid.read_vehicleid_list,
        lambda: {"path": fixture("vehicleid") / "train_test_split" / "train_list.txt"},
        {"path": "path"},
    ),
    fn(
        vehicleid.read_vehicleid_attributes,
        lambda: {"root": fixture("vehicleid"), "name": "model"},
        {"root": "path", "name": "choice"},
    ),
    fn(
        dyml.load_dyml,
        lambda: {
            "root": fixture("dyml"),
            "split": "query",
            "level": "fine",
            "variant": "vehicle",
            "transform": None,
        },
        {**LOADER, "level": "choice", "variant": "choice"},
    ),
    fn(
        dyml.read_dyml_csv,
        lambda: {
            "path": fixture("dyml") / "dyml_vehicle" / "train" / "label.csv",
            "header": ("fname", "coarse_id", "middle_id", "fine_id"),
        },
        {"path": "path"},
    ),
    fn(
        dyml.dyml_average,
        lambda: {"per_level": dyml_levels(), "metrics": ("mAP", "ASI", "R@1")},
        extra={
            "nan": (
                "per_level",
                lambda: {**dyml_levels(), "fine": {"mAP": math.nan, "ASI": 1.0, "R@1": 1.0}},
                ("per_level",),
            ),
            "missing": ("per_level", lambda: {"fine": dyml_levels()["fine"]}, ("per_level",)),
            "metric": ("metrics", lambda: ("mAP", "NDCG"), ("metrics",)),
        },
    ),
    fn(
        hierarchical_labels.load_gldv2_hierarchical,
        lambda: {"root": fixture("gldv2"), "transform": None},
        LOADER,
    ),
    fn(
        hierarchical_labels.read_gldv2_hierarchy,
        lambda: {"path": fixture("gldv2") / "train_label_to_hierarchical.csv"},
        {"path": "path"},
    ),
    fn(
        hierarchical_labels.load_hierarchical_dataset,
        lambda: {"name": "gldv2", "root": fixture("gldv2"), "transform": None},
        {"name": "choice", **LOADER},
    ),
    fn(
        retrieval.load_retrieval_dataset,
        lambda: {"name": "sop", "root": fixture("sop"), "transform": None},
        {"name": "choice", **LOADER},
    ),
    # OOD sets
    cls(
        cifar.ArrayImageDataset,
        lambda: {"images": torch.zeros(3, 3, 4, 4, dtype=torch.uint8), "labels": torch.arange(3)},
        {"images": "x", "labels": "labels", "transform": "choice"},
        calls=[("__getitem__", {"index": 0}, None)],
        rows=(("images", "labels"),),
    ),
    fn(
        cifar.load_cifar,
        lambda: {"root": fixture("cifar10")},
        {**ARRAY, "name": "choice", "label": "choice"},
    ),
    fn(cifar.load_cifar10, lambda: {"root": fixture("cifar10")}, ARRAY),
    fn(cifar.load_cifar100, lambda: {"root": fixture("cifar100")}, {**ARRAY, "label": "choice"}),
    fn(
        cifar.read_cifar_batch,
        lambda: {"path": fixture("cifar10") / "cifar-10-batches-py" / "test_batch"},
        {"path": "path"},
    ),
    fn(ood_sets.list_images, lambda: {"folder": fixture("image_folder")}, {"folder": "path"}),
    fn(
        ood_sets.load_image_folder,
        lambda: {"root": fixture("image_folder"), "labels": "folder"},
        {"root": "path", "transform": "choice", "labels": "choice"},
    ),
    fn(ood_sets.load_svhn, lambda: {"root": fixture("svhn")}, ARRAY),
    fn(
        ood_sets.load_textures,
        lambda: {"root": fixture("textures"), "split": "train", "partition": 1},
        {**ARRAY, "partition": "posint"},
        extra={"partition_11": ("partition", lambda: 11, ("partition",))},
    ),
    fn(ood_sets.load_places365, lambda: {"root": fixture("places365")}, ARRAY),
    fn(ood_sets.load_tiny_imagenet, lambda: {"root": fixture("tiny_imagenet")}, ARRAY),
    cls(
        ood_sets.LMDBImageDataset,
        lambda: {"db_paths": [fixture("lsun_lmdb") / "bedroom_val_lmdb"]},
        {"transform": "choice"},
        calls=[("__getitem__", {"index": 0}, None)],
        extra={
            "missing": ("db_paths", lambda: [Path(MISSING)], ("db_paths", MISSING)),
            "one": (
                "db_paths",
                lambda: str(fixture("lsun_lmdb") / "bedroom_val_lmdb"),
                ("db_paths",),
            ),
            "none": ("db_paths", lambda: [], ("db_paths",)),
        },
    ),
    fn(ood_sets.load_lsun_lmdb, lambda: {"root": fixture("lsun_lmdb")}, ARRAY),
    fn(
        ood_sets.load_ood_dataset,
        lambda: {"name": "svhn", "root": fixture("svhn")},
        {"name": "choice", "root": "path", "transform": "choice"},
    ),
    # image search and land use
    fn(alegoria.load_alegoria, lambda: {"root": fixture("alegoria")}, {"root": "path"}),
    fn(alegoria.AlegoriaDataset, lambda: fields(alegoria.load_alegoria(fixture("alegoria")))),
    fn(
        revisited.load_revisited,
        lambda: {"root": fixture("revisited"), "name": "rparis6k"},
        {"root": "path", "name": "choice"},
    ),
    fn(revisited.load_r1m_list, lambda: {"root": r1m_folder()}, {"root": "path"}),
    fn(revisited.RevisitedDataset, lambda: fields(revisited.load_revisited(fixture("revisited")))),
    fn(
        sf300.load_sf300,
        lambda: {"root": fixture("sf300"), "split": "test"},
        {"root": "path", "split": "choice"},
    ),
    fn(sf300.SF300Dataset, lambda: fields(sf300.load_sf300(fixture("sf300")))),
    fn(
        landuse.load_landuse,
        lambda: {"root": fixture("landuse"), "name": "ucm"},
        {"root": "path", "name": "choice", "min_per_class": "posint"},
    ),
    fn(
        landuse.load_landuse_pool,
        lambda: {"roots": fixture("landuse"), "names": None},
        {"roots": "path", "min_per_class": "posint"},
        extra={"names": ("names", lambda: ["ucm", "bogus"], ("names",))},
    ),
    fn(landuse.LandUseDataset, lambda: fields(landuse.load_landuse(fixture("landuse"), "aid"))),
    cls(
        landuse.LandUsePool,
        lambda: fields(landuse.load_landuse_pool(fixture("landuse"))),
        calls=[("leave_one_out", {"target": "aid"}, {"target": "choice"})],
    ),
    # scene text
    cls(
        scene_text.LmdbTextDataset,
        lambda: {"root": fixture("lmdb") / "train"},
        {"root": "path", "transform": "choice", "max_length": "posint"},
        calls=[("__getitem__", {"index": 0}, None)],
    ),
    fn(
        scene_text.load_lmdb_words,
        lambda: {"root": fixture("lmdb") / "test", "height": 8, "width": 16, "max_items": 2},
        {
            "root": "path",
            "height": "posint",
            "width": "posint",
            "max_items": "posint",
            "max_length": "posint",
        },
    ),
    fn(
        scene_text.read_icdar_gt,
        lambda: {"path": fixture("icdar") / "gt" / "gt_img_1.txt"},
        {"path": "path"},
    ),
    fn(
        scene_text.read_icdar_folder,
        lambda: {"folder": fixture("icdar") / "gt"},
        {"folder": "path"},
    ),
    fn(
        scene_text.IcdarAnnotation,
        lambda: fields(scene_text.read_icdar_gt(fixture("icdar") / "gt" / "gt_img_1.txt")),
    ),
    cls(
        scene_text.IcdarDetectionDataset,
        lambda: {"root": fixture("icdar")},
        {"root": "path", "transform": "choice"},
        calls=[("__len__", None, None)],
    ),
]
