"""Every loader's error says what layout it expected and where the data is published."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rank_lab.data.datasets import DatasetFolderError
from rank_lab.data.datasets.alegoria import load_alegoria
from rank_lab.data.datasets.cars import load_cars
from rank_lab.data.datasets.cifar import load_cifar
from rank_lab.data.datasets.cub import load_cub
from rank_lab.data.datasets.dyml import load_dyml
from rank_lab.data.datasets.hierarchical_labels import load_gldv2_hierarchical
from rank_lab.data.datasets.inaturalist import load_inaturalist
from rank_lab.data.datasets.landuse import load_landuse, load_landuse_pool
from rank_lab.data.datasets.ood_sets import (
    load_lsun_lmdb,
    load_ood_dataset,
    load_places365,
    load_svhn,
    load_textures,
    load_tiny_imagenet,
)
from rank_lab.data.datasets.revisited import load_revisited
from rank_lab.data.datasets.scene_text import IcdarDetectionDataset, LmdbTextDataset
from rank_lab.data.datasets.sf300 import load_sf300
from rank_lab.data.datasets.sop import load_sop
from rank_lab.data.datasets.sources import DATASET_SOURCES, published
from rank_lab.data.datasets.vehicleid import load_vehicleid

CASES: list[tuple[str, Callable[[Path], Any]]] = [
    ("sop", lambda r: load_sop(r, "train")),
    ("cub", lambda r: load_cub(r, "train")),
    ("cars196", lambda r: load_cars(r, "train")),
    ("inaturalist", lambda r: load_inaturalist(r, "train")),
    ("vehicleid", lambda r: load_vehicleid(r, "train")),
    ("dyml", lambda r: load_dyml(r, "train")),
    ("gldv2", lambda r: load_gldv2_hierarchical(r, "train")),
    ("cifar", lambda r: load_cifar(r, "cifar10", "train")),
    ("cifar", lambda r: load_cifar(r, "cifar100", "test")),
    ("svhn", lambda r: load_svhn(r)),
    ("textures", lambda r: load_textures(r)),
    ("places365", lambda r: load_places365(r)),
    ("tiny_imagenet", lambda r: load_tiny_imagenet(r)),
    ("lsun_lmdb", lambda r: load_lsun_lmdb(r)),
    ("odin_crops", lambda r: load_ood_dataset("isun", r)),
    ("imagenet_ood", lambda r: load_ood_dataset("sun", r)),
    ("openimage_o", lambda r: load_ood_dataset("openimage_o", r)),
    ("imagenet_o", lambda r: load_ood_dataset("imagenet_o", r)),
    ("landuse", lambda r: load_landuse(r, "ucm")),
    ("landuse", lambda r: load_landuse_pool(r)),
    ("revisited", lambda r: load_revisited(r, "roxford5k")),
    ("alegoria", lambda r: load_alegoria(r)),
    ("sf300", lambda r: load_sf300(r)),
    ("scene_text_lmdb", lambda r: LmdbTextDataset(r)),
    ("icdar", lambda r: IcdarDetectionDataset(r)),
]


@pytest.mark.parametrize("missing", [False, True], ids=["empty-folder", "no-folder"])
@pytest.mark.parametrize(("key", "load"), CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_errors_name_the_layout_and_where_the_data_is_published(
    tmp_path: Path, key: str, load: Callable[[Path], Any], missing: bool
) -> None:
    root = tmp_path / ("absent" if missing else "empty")
    if not missing:
        root.mkdir()
    with pytest.raises(DatasetFolderError) as info:
        load(root)
    msg = str(info.value)
    assert published(key) in msg
    assert "Expected" in msg or "expected" in msg


def test_every_source_is_used_and_phrased() -> None:
    used = {k for k, _ in CASES}
    assert used == set(DATASET_SOURCES)
    assert published("sop") == (
        "Published at https://cvgl.stanford.edu/projects/lifted_struct/ (Song et al., CVPR 2016)."
    )
    assert published("alegoria").startswith("The data is not publicly distributed")
    with pytest.raises(ValueError, match="unknown dataset key 'nope'"):
        published("nope")
