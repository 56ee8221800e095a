"""``download=True`` reuses torchvision's downloader, monkeypatched here to serve tiny fixture
archives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision.datasets.svhn as tv_svhn
import torchvision.datasets.utils as tv_utils

from rank_lab.data.datasets import DatasetFolderError
from rank_lab.data.datasets.cifar import load_cifar, load_cifar10
from rank_lab.data.datasets.ood_sets import (
    load_ood_dataset,
    load_places365,
    load_svhn,
    load_textures,
)
from rank_lab.data.datasets.sources import torchvision_download
from rank_lab.fixtures.ood import TORCHVISION_ARCHIVES, write_torchvision_archive


class FakeDownloads:
    """Replaces ``download_url`` (the function every torchvision download goes through) and accepts
    the fixtures' MD5 sums (they are not the published files)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, error: Exception | None = None) -> None:
        self.urls: list[str] = []
        self.error = error
        for module in (tv_utils, tv_svhn):
            monkeypatch.setattr(module, "download_url", self)
        monkeypatch.setattr(tv_utils, "check_md5", lambda fpath, md5, **kw: True)

    def __call__(
        self, url: str, root: str, filename: str | None = None, md5: str | None = None, **kw: object
    ) -> None:
        self.urls.append(url)
        if self.error is not None:
            raise self.error
        write_torchvision_archive(url, root, filename)


def test_cifar_download_extracts_the_published_layout_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeDownloads(monkeypatch)
    with pytest.raises(DatasetFolderError, match="download=True"):  # the hint, before downloading
        load_cifar10(tmp_path)
    ds = load_cifar10(tmp_path, "train", download=True)
    assert fake.urls == ["https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"]
    assert (tmp_path / "cifar-10-batches-py" / "data_batch_5").is_file() and len(ds) == 50
    assert len(load_cifar(tmp_path, "cifar10", "test", download=True)) == 40
    assert len(fake.urls) == 1  # already there: torchvision checks and skips
    c100 = load_cifar(tmp_path, "cifar100", "test", label="both", download=True)
    assert fake.urls[-1].endswith("cifar-100-python.tar.gz") and c100.labels.shape == (40, 2)


def test_svhn_textures_places_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDownloads(monkeypatch)
    svhn = load_svhn(tmp_path / "svhn", "train", download=True)
    assert fake.urls[-1] == "http://ufldl.stanford.edu/housenumbers/train_32x32.mat"
    assert (
        svhn.images.shape == (40, 3, 32, 32)
        and 0 in svhn.labels.tolist()
        and 10 not in svhn.labels.tolist()
    )
    tex = load_textures(tmp_path / "tex", download=True)
    assert (
        fake.urls[-1].endswith("dtd-r1.0.1.tar.gz")
        and (tmp_path / "tex" / "dtd" / "dtd" / "images").is_dir()
    )
    assert (
        len(tex) == 24
        and len(load_ood_dataset("dtd", tmp_path / "tex", split="test", partition=1)) == 6
    )
    places = load_places365(tmp_path / "places", download=True)
    assert [u.rsplit("/", 1)[1] for u in fake.urls[-2:]] == [
        "filelist_places365-standard.tar",
        "val_256.tar",
    ]
    assert len(places) == 24 and torch.bincount(places.labels).tolist() == [4] * 6


def test_offline_download_names_where_the_data_is_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeDownloads(monkeypatch, error=OSError("[Errno -2] Name or service not known"))
    with pytest.raises(DatasetFolderError) as info:
        load_cifar10(tmp_path, download=True)
    msg = str(info.value)
    assert (
        "Name or service not known" in msg and "https://www.cs.toronto.edu/~kriz/cifar.html" in msg
    )
    assert "by hand" in msg
    with pytest.raises(ValueError, match="does not download 'sop'"):
        torchvision_download("sop", tmp_path)


def test_every_archive_torchvision_asks_for_has_a_fixture() -> None:
    import torchvision.datasets as tvd

    names = {
        tvd.CIFAR10.filename,
        tvd.CIFAR100.filename,
        *(v[1] for v in tvd.SVHN.split_list.values() if "extra" not in v[1]),
        tvd.DTD._URL.rsplit("/", 1)[1],
        tvd.Places365._DEVKIT_META["standard"][0],
        tvd.Places365._IMAGES_META[("val", True)][0],
    }
    assert names <= set(TORCHVISION_ARCHIVES)
