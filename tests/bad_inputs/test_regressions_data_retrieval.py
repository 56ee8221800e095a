"""Regression tests of the bad-input fixes in :mod:`rank_lab.data` and :mod:`rank_lab.retrieval`
(issue 16): one direct test per defect class, where the matrix's variant alone would not show the
rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rank_lab.data import (
    ImageListDataset,
    OpenSetSplit,
    load_digits,
    split_by_classes,
    stratified_split,
)
from rank_lab.models import MLPBackbone
from rank_lab.retrieval import (
    DescriptorNet,
    extract_descriptors,
    grouped_map,
    l2n,
    revisited_evaluate,
)
from rank_lab.stats import mean_ci

NAN = float("nan")


def _nan_at_0(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[0] = NAN
    return x


# ----------------------------------------------------------------------------- data
def test_splits_refuse_non_finite_data_and_name_both_sides_of_a_length_mismatch() -> None:
    x, y = torch.randn(12, 4), torch.arange(12) % 4
    for split in (lambda a, b: split_by_classes(a, b, (0, 1)), lambda a, b: stratified_split(a, b)):
        with pytest.raises(ValueError, match=r"^x contains 1 NaN"):
            split(_nan_at_0(x), y)  # was a silent NaN in the train side
        with pytest.raises(ValueError, match=r"^x has 4 rows but y has 12"):
            split(x[0], y)  # was "y has 12 rows but the embeddings have 4"
        with pytest.raises(TypeError, match=r"^x must be floating"):
            split(x.long(), y)
    with pytest.raises(ValueError, match="x_train contains"):
        OpenSetSplit(_nan_at_0(x[:6]), y[:6], x[6:], y[6:] + 4)
    with pytest.raises(ValueError, match=r"^x_test has 5 rows but y_test has 6"):
        OpenSetSplit(x[:6], y[:6], x[6:11], y[6:] + 4)


def test_test_fraction_is_checked_even_when_the_open_set_split_ignores_it() -> None:
    for bad in (-0.5, 1.5, NAN):
        with pytest.raises(ValueError, match="test_fraction"):
            load_digits(open_set=True, test_fraction=bad)


def test_image_list_labels_must_be_integers_and_an_empty_list_stays_legal() -> None:
    with pytest.raises(TypeError, match="labels must hold integers"):
        ImageListDataset(["a.png", "b.png"], [0.5, 1.5])  # was truncated to [0, 1] silently
    with pytest.raises(ValueError, match="labels must have shape"):
        ImageListDataset(["a.png"], torch.zeros(1, 1, 1, dtype=torch.long))
    # e.g. no R1M distractors
    assert len(ImageListDataset([], torch.zeros(0, dtype=torch.long))) == 0


# ----------------------------------------------------------------------------- retrieval
def test_l2n_eps_must_be_a_finite_positive_number() -> None:
    x = torch.randn(3, 4)
    for bad in (0.0, -1.0, NAN, math.inf):  # inf divided every row to 0, NaN gave NaN rows
        with pytest.raises(ValueError, match="eps"):
            l2n(x, eps=bad)
    torch.testing.assert_close(l2n(torch.zeros(1, 2), eps=1e-3), torch.zeros(1, 2))


def test_grouped_map_skips_nan_ap_but_refuses_inf_and_casts_integers() -> None:
    groups = torch.tensor([0, 0, 1])
    # documented rule
    assert grouped_map(torch.tensor([0.5, NAN, 1.0]), groups) == {"0": 50.0, "1": 100.0}
    for bad in (math.inf, -math.inf, 1.5):
        with pytest.raises(ValueError, match="ap must hold APs in"):
            grouped_map(torch.tensor([0.5, bad, 1.0]), groups)
    # was a mean() dtype error
    assert grouped_map(torch.tensor([1, 0, 1]), groups) == {"0": 50.0, "1": 100.0}


def test_mean_ci_wants_one_dimension_of_runs() -> None:
    with pytest.raises(ValueError, match=r"values must have shape \(n,\)"):
        mean_ci([[0.5, 0.6, 0.7]])  # was flattened silently
    assert mean_ci([1, 2, 3]) == pytest.approx(mean_ci([1.0, 2.0, 3.0]))


def test_revisited_mp_at_k_beyond_the_database_is_the_protocols_k_q() -> None:
    # hand-worked (tests/retrieval/test_protocols.py): hard protocol, last positive at position 2 ->
    # k_q = 2 for any k >= 2
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5]])
    gnd = [{"easy": [0], "hard": [3], "junk": [1]}]
    res = revisited_evaluate(scores, gnd, ks=(2, 5, 100))["hard"]
    assert res["mP@2"] == res["mP@5"] == res["mP@100"] == pytest.approx(50.0)


def test_descriptor_net_checks_its_batch_and_accepts_float64() -> None:
    torch.manual_seed(0)
    net = DescriptorNet(MLPBackbone(4, (4,)))
    x = torch.randn(3, 4)
    # was "mat1 and mat2 must have the same dtype"
    torch.testing.assert_close(net(x.double()), net(x))
    with pytest.raises(TypeError, match="x must be a floating tensor"):
        net(x.long())
    with pytest.raises(ValueError, match=r"x is empty \(shape \(0, 4\)"):
        net(x[:0])  # was an obscure reshape error
    with pytest.raises(ValueError, match="x contains 4 NaN or inf"):
        net(torch.cat([x[:2], torch.full((1, 4), math.inf)]))
    with pytest.raises(TypeError, match="images tensor must be floating"):
        extract_descriptors(
            torch.ones(2, 3, 8, 8, dtype=torch.long), "tiny_cnn", image_size=None, progress=False
        )
    with pytest.raises(ValueError, match="images contains"):
        extract_descriptors(
            _nan_at_0(torch.rand(2, 3, 8, 8)), "tiny_cnn", image_size=None, progress=False
        )


def test_graph_helpers_refuse_non_finite_values_and_name_their_arguments() -> None:
    import scipy.sparse as sp

    from rank_lab.retrieval.graph import (
        knn_self,
        mutual_affinity,
        sparse_operator,
        sparse_rows_to_dense,
    )

    x = torch.nn.functional.normalize(
        torch.randn(10, 4, generator=torch.Generator().manual_seed(0)), dim=1
    )
    s, i = knn_self(x, 3, backend="torch")
    for bad in (NAN, math.inf):  # NaN gave a NaN gamma stored in the graph, inf a 0/1 graph
        with pytest.raises(ValueError, match="gamma"):
            mutual_affinity(s, i, 10, gamma=bad)
    w = mutual_affinity(s, i, 10)
    op = sparse_operator(w)
    with pytest.raises(ValueError, match="v contains"):
        op(_nan_at_0(torch.ones(10, 2)))
    torch.testing.assert_close(
        sparse_operator(w, check_inputs=False)(torch.ones(10, 2)), op(torch.ones(10, 2))
    )
    bad_w = sp.csr_matrix(w, copy=True)
    bad_w.data[0] = NAN
    with pytest.raises(ValueError, match="m holds 1 NaN"):
        sparse_operator(bad_w)
    # rows given as a torch tensor (the documented type) used to fail inside scipy's indexing
    torch.testing.assert_close(
        sparse_rows_to_dense(w, torch.tensor([0, 2])), torch.from_numpy(w.toarray()[[0, 2]])
    )


def test_trapezoid_ap_ignores_any_padding_value() -> None:
    from rank_lab.retrieval.protocols import trapezoid_ap_from_positions

    valid = torch.tensor([[True, True, False]])
    a = trapezoid_ap_from_positions(torch.tensor([[2, 5, 1]]), valid)
    b = trapezoid_ap_from_positions(torch.tensor([[2, 5, 10**6]]), valid)
    # a padded slot used to give 0 * inf = NaN
    assert torch.equal(a, b) and not torch.isnan(a).any()
    # hand-worked: positions 2 and 5 -> (1/2) [((0/1) + (1/2))/2 + ((1/4) + (2/5))/2]
    assert float(a) == pytest.approx(0.5 * ((0 + 0.5) / 2 + (0.25 + 0.4) / 2))


# ----------------------------------------------------------------------------- dataset loaders
def test_loaders_check_image_size_and_transform_whatever_the_transform(tmp_path) -> None:
    from rank_lab.data.datasets.sop import load_sop
    from rank_lab.data.datasets.transforms import default_transform
    from rank_lab.fixtures import write_fixture

    root = write_fixture("sop", tmp_path, n_classes=2, per_class=1, size=4)
    with pytest.raises(TypeError, match="image_size"):
        default_transform(False, image_size=1.5)  # was int(1.5) = 1, a 1-pixel crop
    with pytest.raises(ValueError, match="image_size"):
        load_sop(root, transform=None, image_size=0)  # was ignored without the default transform
    with pytest.raises(ValueError, match="transform"):
        load_sop(root, transform="bogus")
    assert len(load_sop(root, transform=None)) == 2


def test_loader_helpers_refuse_what_they_used_to_accept_silently(tmp_path) -> None:
    from rank_lab.data.datasets import DatasetFolderError
    from rank_lab.data.datasets.base import pil_loader
    from rank_lab.data.datasets.cifar import ArrayImageDataset
    from rank_lab.data.datasets.dyml import dyml_average
    from rank_lab.data.datasets.landuse import load_landuse
    from rank_lab.data.datasets.ood_sets import LMDBImageDataset, list_images, load_textures
    from rank_lab.data.datasets.sources import torchvision_download
    from rank_lab.fixtures import write_fixture

    with pytest.raises(DatasetFolderError, match="does not exist"):
        list_images(tmp_path / "nope")  # was an empty list
    with pytest.raises(TypeError, match="db_paths must be a list"):
        LMDBImageDataset(str(tmp_path))  # was split into one "path" per character
    tex = write_fixture("textures", tmp_path / "tex", n_classes=2, per_class=3, size=4)
    with pytest.raises(ValueError, match="partition"):
        load_textures(tex, partition=11)  # checked also without a split
    land = write_fixture("landuse", tmp_path / "land", n_classes=2, per_class=5, size=4)
    with pytest.raises(ValueError, match="min_per_class"):
        load_landuse(land, "ucm", min_per_class=0)
    levels = {lvl: {"mAP": 50.0} for lvl in ("fine", "middle", "coarse")}
    assert dyml_average(levels, ("mAP",)) == {"mAP": 50.0}
    with pytest.raises(ValueError, match="per_level holds a NaN"):
        dyml_average({**levels, "fine": {"mAP": NAN}}, ("mAP",))  # was a NaN average
    with pytest.raises(ValueError, match="split must be one of"):
        torchvision_download("textures", tmp_path, split="test")  # DTD comes whole: was ignored
    with pytest.raises(TypeError, match="labels must hold integers"):
        ArrayImageDataset(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.tensor([0.5, 1.5]))
    with pytest.raises(TypeError, match="transform must be a callable"):
        ArrayImageDataset(
            torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.tensor([0, 1]), "default"
        )
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(DatasetFolderError, match="bad.jpg.*is not a readable image"):
        pil_loader(bad)


def test_sf300_split_is_train_test_or_an_existing_folder(tmp_path) -> None:
    from rank_lab.data.datasets import DatasetFolderError
    from rank_lab.data.datasets.sf300 import load_sf300
    from rank_lab.fixtures.search import write_sf300

    write_sf300(tmp_path, "test", {"c1": 1}, size=4)
    write_sf300(tmp_path, "extra_views", {"c1": 1}, size=4)
    assert len(load_sf300(tmp_path, "extra_views")) == 1  # any folder of the layout
    with pytest.raises(ValueError, match="split must be 'train', 'test' or a folder"):
        load_sf300(tmp_path, "bogus")
    with pytest.raises(DatasetFolderError, match="train"):
        load_sf300(tmp_path, "train")  # the layout's split, missing: a folder error


# ----------------------------------------------------------------------------- writers and
# generators
def test_fixture_writers_refuse_bad_counts_before_writing(tmp_path) -> None:
    from rank_lab.fixtures import write_image
    from rank_lab.fixtures.ood import write_svhn
    from rank_lab.fixtures.retrieval import cub_fixture

    for kw, name in (
        ({"n_classes": 0}, "n_classes"),
        ({"per_class": 1.5}, "per_class"),
        ({"size": -1}, "size"),
        ({"seed": -1}, "seed"),
    ):
        with pytest.raises((TypeError, ValueError), match=name):
            cub_fixture(tmp_path / "cub", **kw)
    assert not (tmp_path / "cub").exists()  # nothing half-written
    with pytest.raises(ValueError, match="colour"):
        write_image(tmp_path / "a.png", (1, 2, 300))
    with pytest.raises(ValueError, match="colour 'bogus'"):
        write_image(tmp_path / "a.png", "bogus")
    with pytest.raises(ValueError, match="x must be uint8"):
        write_svhn(
            tmp_path, "test", np.zeros((32, 32, 3, 2), dtype=np.float32), np.array([[1], [2]])
        )


def test_generators_refuse_non_finite_parameters_and_images(tmp_path) -> None:
    from rank_lab.data.landmark_hierarchy import MappingRule, cluster_categories
    from rank_lab.data.procedural import make_multi_source_images, write_image_folder
    from rank_lab.retrieval.synthetic import bridged_clusters

    with pytest.raises(ValueError, match="noise"):
        make_multi_source_images(2, 1, image_size=8, noise=NAN)  # was NaN pixels clamped to black
    with pytest.raises(ValueError, match="images contains"):
        # was written as 0
        write_image_folder(_nan_at_0(torch.rand(1, 3, 4, 4)), tmp_path, ["a.png"])
    with pytest.raises(ValueError, match="natural_or_human_made"):
        MappingRule("lake", "Lake", "maybe")
    x = np.random.default_rng(0).normal(size=(4, 3))
    with pytest.raises(TypeError, match="k must be a positive int"):
        cluster_categories(x, k=1.5)  # was int(1.5) = 1 cluster
    x_nan = x.copy()
    x_nan[0, 0] = NAN
    with pytest.raises(ValueError, match="embeddings contains 1 NaN"):
        cluster_categories(x_nan, k=2)  # was sklearn's "Input X contains NaN"
    # capped: one cluster per category
    assert sorted(set(cluster_categories(x, k=50).tolist())) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="dim must be >= 3"):
        bridged_clusters(2, 2, dim=2)  # was NaN descriptors (no second orthogonal direction)
