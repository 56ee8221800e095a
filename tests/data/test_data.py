"""Tests of rank_lab.data: synthetic open-set tasks, bundled datasets, the m-per-class sampler."""

from __future__ import annotations

import collections
import gzip
import pickle
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from rank_lab.data import (
    ANIMAL_MNIST_CLASSES,
    DatasetFolderError,
    MPerClassSampler,
    OpenSetSplit,
    RandomNonlinearMap,
    load_animal_mnist,
    load_digits,
    make_hierarchical_open_set,
    make_open_set,
    split_by_classes,
    stratified_split,
)


def _tensors(split: OpenSetSplit) -> list[torch.Tensor]:
    return [split.x_train, split.y_train, split.x_test, split.y_test]


def _nn_accuracy(x: torch.Tensor, y: torch.Tensor) -> float:
    """Brute-force leave-one-out 1-NN accuracy (L2), the R@1 of the retrieval papers."""
    x = x.double()
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    d.fill_diagonal_(float("inf"))
    return float((y[d.argmin(1)] == y).double().mean())


# ----------------------------------------------------------------------------- make_open_set
def test_open_set_shapes_dtypes_and_disjoint_classes():
    s = make_open_set(n_classes=12, per_class=7, dim=5, input_dim=9, seed=3)
    assert s.x_train.shape == (6 * 7, 9) and s.x_test.shape == (6 * 7, 9)
    assert s.x_train.dtype == torch.float32 and s.y_train.dtype == torch.long
    assert s.y_train.shape == (42,) and s.y_test.shape == (42,)
    assert s.n_classes_train == 6 and s.n_classes_test == 6 and s.n_levels == 1
    # original ids kept: train = 0..5, test = 6..11, disjoint
    assert s.train_classes.tolist() == list(range(6))
    assert s.test_classes.tolist() == list(range(6, 12))
    assert set(Counter(s.y_train.tolist()).values()) == {7}
    assert s.extras["latent_train"].shape == (42, 5) and s.extras["centres"].shape == (12, 5)
    assert torch.isfinite(s.x_train).all() and torch.isfinite(s.x_test).all()
    assert "synthetic" in repr(s) and "(42, 9)" in repr(s)


def test_open_set_determinism():
    a, b = make_open_set(seed=5), make_open_set(seed=5)
    for ta, tb in zip(_tensors(a), _tensors(b), strict=True):
        assert torch.equal(ta, tb)
    assert torch.equal(a.extras["latent_test"], b.extras["latent_test"])
    c = make_open_set(seed=6)
    assert not torch.equal(a.x_train, c.x_train)
    # fixing map_seed keeps the map and changes only the samples
    d, e = make_open_set(seed=1, map_seed=9), make_open_set(seed=2, map_seed=9)
    assert torch.equal(d.extras["feature_map"].w1, e.extras["feature_map"].w1)
    assert not torch.equal(d.x_train, e.x_train)
    # the global RNG is not used
    torch.manual_seed(0)
    r1 = torch.rand(1)
    torch.manual_seed(0)
    make_open_set(seed=1)
    assert torch.equal(torch.rand(1), r1)


def test_open_set_rows_follow_the_generative_model():
    s = make_open_set(n_classes=6, per_class=200, dim=4, input_dim=6, noise=0.5, obs_noise=0.0,
                      dtype=torch.float64, seed=0)  # fmt: skip
    fmap = s.extras["feature_map"]
    assert torch.allclose(s.x_train, fmap(s.extras["latent_train"]), atol=1e-12)
    # class means of the latent codes estimate the centres (std of the mean = 0.5 / sqrt(200))
    for c in range(6):
        lat = torch.cat(
            [s.extras["latent_train"][s.y_train == c], s.extras["latent_test"][s.y_test == c]]
        )
        assert (lat.mean(0) - s.extras["centres"][c]).abs().max() < 5 * 0.5 / 200**0.5


def test_open_set_class_sep_controls_difficulty():
    easy = [
        _nn_accuracy(s.x_test, s.y_test)
        for s in (make_open_set(class_sep=3.0, seed=i) for i in range(3))
    ]
    hard = [
        _nn_accuracy(s.x_test, s.y_test)
        for s in (make_open_set(class_sep=0.5, seed=i) for i in range(3))
    ]
    assert np.mean(easy) > 0.95 and np.mean(hard) < 0.6


def test_open_set_train_fraction_rounds_half_up_and_leaky_map():
    s = make_open_set(n_classes=7, train_fraction=0.5, activation="leaky_relu", seed=0)
    assert s.n_classes_train == 4 and s.n_classes_test == 3


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_classes": 1}, ValueError, "n_classes"),
        ({"n_classes": 0}, ValueError, "n_classes"),
        ({"per_class": 0}, ValueError, "per_class"),
        ({"train_fraction": 1.0}, ValueError, "train_fraction"),
        ({"train_fraction": 0.0}, ValueError, "train_fraction"),
        ({"n_classes": 2, "train_fraction": 0.2}, ValueError, "empty"),
        ({"noise": -1.0}, ValueError, "noise"),
        ({"class_sep": float("nan")}, ValueError, "class_sep"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"dim": 2.0}, TypeError, "dim"),
        ({"activation": "relu6"}, ValueError, "activation"),
        ({"dtype": torch.long}, TypeError, "dtype"),
    ],
)
def test_open_set_bad_inputs(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_open_set(**kwargs)


def test_random_map_rejects_bad_shape():
    fmap = RandomNonlinearMap(3, 5)
    with pytest.raises(ValueError, match="shape"):
        fmap(torch.zeros(4, 2))


# ------------------------------------------------------------------------- hierarchical
def _assert_tree(y: torch.Tensor) -> None:
    """Every coarser column is a function of column 0 (fine)."""
    for lvl in range(1, y.shape[1]):
        parents = collections.defaultdict(set)
        for f, p in zip(y[:, 0].tolist(), y[:, lvl].tolist(), strict=True):
            parents[f].add(p)
        assert all(len(p) == 1 for p in parents.values())


def test_hierarchical_default_structure_and_fine_split():
    s = make_hierarchical_open_set(n_coarse=5, fine_per_coarse=4, per_class=6, seed=1)
    assert s.y_train.shape == (5 * 2 * 6, 2) and s.y_test.shape == (60, 2) and s.n_levels == 2
    y = torch.cat([s.y_train, s.y_test])
    _assert_tree(y)
    assert torch.equal(y[:, 1], y[:, 0] // 4)
    assert s.n_classes_train == 10 and s.n_classes_test == 10
    assert not set(s.y_train[:, 0].tolist()) & set(s.y_test[:, 0].tolist())
    # fine split: every super-class on both sides, 2 fine classes of each per side
    assert set(s.y_train[:, 1].tolist()) == set(s.y_test[:, 1].tolist()) == set(range(5))
    for g in range(5):
        assert len(set(s.y_train[s.y_train[:, 1] == g, 0].tolist())) == 2


def test_hierarchical_coarse_split_and_three_levels():
    s = make_hierarchical_open_set(n_coarse=4, fine_per_coarse=3, split="coarse", seed=0)
    assert set(s.y_train[:, 1].tolist()) == {0, 1} and set(s.y_test[:, 1].tolist()) == {2, 3}
    t = make_hierarchical_open_set(branching=(2, 3, 4), per_class=3, seed=0)
    assert t.y_train.shape[1] == 3 and t.extras["level_std"] == (4.0, 2.0, 1.0)
    y = torch.cat([t.y_train, t.y_test])
    _assert_tree(y)
    assert torch.equal(y[:, 1], y[:, 0] // 4) and torch.equal(y[:, 2], y[:, 0] // 12)
    table = t.extras["fine_to_parents"]
    assert table.shape == (24, 3) and torch.equal(table[y[:, 0]], y)
    u = make_hierarchical_open_set(branching=(6,), per_class=2, seed=0)
    assert u.y_train.shape == (6, 1)


@pytest.mark.parametrize("space", ["latent", "raw"])
def test_hierarchical_siblings_are_closer(space):
    s = make_hierarchical_open_set(n_coarse=6, fine_per_coarse=4, per_class=20, seed=2)
    x = torch.cat([s.extras["latent_train"], s.extras["latent_test"]]) if space == "latent" else (
        torch.cat([s.x_train, s.x_test]))  # fmt: skip
    y = torch.cat([s.y_train, s.y_test])
    fine = torch.unique(y[:, 0])
    means = torch.stack([x[y[:, 0] == f].double().mean(0) for f in fine])
    coarse = torch.stack([y[y[:, 0] == f, 1][0] for f in fine])
    d = torch.cdist(means, means)
    same = coarse[:, None] == coarse[None, :]
    off = ~torch.eye(len(fine), dtype=torch.bool)
    assert d[same & off].mean() < 0.7 * d[~same].mean()


def test_hierarchical_determinism():
    a = make_hierarchical_open_set(branching=(3, 2, 2), seed=4)
    b = make_hierarchical_open_set(branching=(3, 2, 2), seed=4)
    assert all(torch.equal(p, q) for p, q in zip(_tensors(a), _tensors(b), strict=True))
    assert not torch.equal(
        a.x_train, make_hierarchical_open_set(branching=(3, 2, 2), seed=5).x_train
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"split": "middle"}, ValueError, "split"),
        ({"fine_per_coarse": 1}, ValueError, "empty"),
        ({"n_coarse": 1, "split": "coarse"}, ValueError, "empty"),
        ({"branching": (2, 0)}, ValueError, "branching"),
        ({"branching": "23"}, TypeError, "branching"),
        ({"branching": (2, 3), "level_std": (1.0,)}, ValueError, "level_std"),
        ({"level_std": (1.0, -1.0)}, ValueError, "level_std"),
    ],
)
def test_hierarchical_bad_inputs(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_hierarchical_open_set(**kwargs)


# ---------------------------------------------------------------------------- OpenSetSplit
def test_open_set_split_validation_and_helpers():
    x, y = torch.randn(4, 3), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="both train and test"):
        OpenSetSplit(x, y, x, y)
    closed = OpenSetSplit(x, y, x, y, open_set=False)
    assert closed.n_classes_train == 2 and "closed-set" in repr(closed)
    with pytest.raises(ValueError, match="y_train"):
        OpenSetSplit(x, y[:3], x, y + 2)
    with pytest.raises(TypeError, match="y_test"):
        OpenSetSplit(x, y, x, (y + 2).float())
    with pytest.raises(TypeError, match="x_train"):
        OpenSetSplit(y, y, x, y + 2)
    with pytest.raises(ValueError, match="levels"):
        OpenSetSplit(x, y, x, torch.stack([y + 2, y], 1))
    s = OpenSetSplit(x, y, x, y + 2, extras={"t": torch.zeros(2)})
    moved = s.to("cpu")
    assert moved.extras["t"].device.type == "cpu" and len(moved.train_dataset()) == 4
    xb, yb = next(iter(DataLoader(s.test_dataset(), batch_size=4)))
    assert torch.equal(yb, y + 2) and torch.equal(xb, x)


@pytest.mark.cuda
def test_open_set_split_to_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    s = make_open_set(device="cuda")
    assert s.x_train.is_cuda and s.y_test.is_cuda and s.extras["latent_train"].is_cuda


# ---------------------------------------------------------------------------------- bundled
def test_digits_open_set_counts_and_range():
    from sklearn.datasets import load_digits as sk

    counts = np.bincount(sk().target)
    s = load_digits()
    assert s.x_train.shape[1:] == (1, 8, 8) and s.x_train.dtype == torch.float32
    assert len(s.y_train) + len(s.y_test) == 1797
    assert len(s.y_train) == counts[:5].sum() and len(s.y_test) == counts[5:].sum()
    assert s.train_classes.tolist() == list(range(5)) and s.test_classes.tolist() == list(
        range(5, 10)
    )
    assert float(s.x_train.min()) == 0.0 and float(s.x_train.max()) == 1.0
    flat = load_digits(flatten=True)
    assert flat.x_test.shape == (len(s.y_test), 64)
    assert torch.equal(flat.x_test, s.x_test.reshape(-1, 64))
    assert torch.equal(
        s.x_train[0, 0] * 16,
        torch.from_numpy(sk().images[s.extras["index_train"][0].item()]).float(),
    )
    custom = load_digits(train_classes=[1, 3], test_classes=[7])
    assert custom.train_classes.tolist() == [1, 3] and custom.test_classes.tolist() == [7]


def test_digits_closed_set_stratified_and_seeded():
    from sklearn.datasets import load_digits as sk

    counts = np.bincount(sk().target)
    a, b, c = (
        load_digits(open_set=False, seed=0),
        load_digits(open_set=False, seed=0),
        load_digits(open_set=False, seed=1),
    )
    assert not a.open_set and a.n_classes_train == a.n_classes_test == 10
    idx = torch.cat([a.extras["index_train"], a.extras["index_test"]])
    assert torch.equal(torch.sort(idx).values, torch.arange(1797))  # a partition of the rows
    expected = np.floor(0.5 * counts + 0.5).astype(int)
    assert np.array_equal(np.bincount(a.y_test.numpy(), minlength=10), expected)
    assert torch.equal(a.extras["index_test"], b.extras["index_test"])
    assert not torch.equal(a.extras["index_test"], c.extras["index_test"])
    d = load_digits(open_set=False, test_fraction=0.2)
    assert abs(len(d.y_test) - 0.2 * 1797) < 10


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"train_classes": [11]}, ValueError, "train_classes"),
        ({"train_classes": list(range(10))}, ValueError, "test_classes is empty"),
        ({"train_classes": [1, 2], "test_classes": [2, 3]}, ValueError, "overlap"),
        ({"train_classes": [1, 1]}, ValueError, "duplicate"),
        ({"train_classes": "01"}, TypeError, "train_classes"),
        ({"open_set": False, "test_fraction": 1.0}, ValueError, "test_fraction"),
        ({"open_set": False, "test_classes": [5]}, ValueError, "test_classes"),
    ],
)
def test_digits_bad_inputs(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        load_digits(**kwargs)


def test_split_helpers_on_hierarchical_labels():
    x = torch.arange(12.0)[:, None]
    y = torch.stack([torch.arange(12) % 6, torch.arange(12) % 6 // 3], 1)
    s = split_by_classes(x, y, [0, 1, 2])
    assert s.y_train.shape == (6, 2) and s.test_classes.tolist() == [3, 4, 5]
    c = stratified_split(x, y, 0.5, seed=0)
    assert c.n_classes_train == c.n_classes_test == 6 and len(c.y_test) == 6


def test_animal_mnist_from_package():
    s = load_animal_mnist()
    assert s.x_train.shape == (5000, 1, 28, 28) and s.x_test.shape == (5000, 1, 28, 28)
    assert s.train_classes.tolist() == list(range(5)) and s.test_classes.tolist() == list(
        range(5, 10)
    )
    assert set(Counter(s.y_train.tolist()).values()) == {1000}
    assert float(s.x_train.min()) == 0.0 and float(s.x_train.max()) == 1.0
    assert s.class_names == ANIMAL_MNIST_CLASSES and s.class_names[9] == "zebra"


def _write_gz_pickle(path, obj) -> None:
    with gzip.open(path, "wb") as f:
        pickle.dump(obj, f)


def test_animal_mnist_from_folder_fixture(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(20, 28, 28), dtype=np.uint8)
    images[0, 0, 0], images[1, 0, 0] = 0, 255
    labels = np.repeat(np.arange(10), 2).astype(np.int64)
    _write_gz_pickle(tmp_path / "animal_data_version_3.gz", images)
    _write_gz_pickle(tmp_path / "animal_label_version_3.gz", labels)
    s = load_animal_mnist(data_dir=tmp_path, flatten=True)
    assert s.x_train.shape == (10, 784)
    assert torch.allclose(s.x_train[0], torch.from_numpy(images[0].reshape(-1) / 255.0).float())
    closed = load_animal_mnist(data_dir=tmp_path, open_set=False)
    assert closed.n_classes_test == 10 and len(closed.y_test) == 10
    # a pickle with anything but numpy arrays is refused
    _write_gz_pickle(tmp_path / "animal_label_version_3.gz", collections.OrderedDict(a=1))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        load_animal_mnist(data_dir=tmp_path)
    with pytest.raises(DatasetFolderError, match="animal_data_version_3.gz"):
        load_animal_mnist(data_dir=tmp_path / "empty_dir_that_does_not_exist")
    (tmp_path / "animal_data_version_3.gz").unlink()
    with pytest.raises(DatasetFolderError, match="animal_data_version_3.gz"):
        load_animal_mnist(data_dir=tmp_path)


def test_animal_mnist_missing_package(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "animal_mnist" else real(name, *a),
    )
    with pytest.raises(ImportError, match="pip install --no-deps animal-mnist"):
        load_animal_mnist()


# ---------------------------------------------------------------------------------- sampler
def _check_batches(batches, labels: np.ndarray, m: int, batch_size: int) -> None:
    n = len(labels)
    sizes = np.bincount(labels)
    for batch in batches:
        assert len(batch) == batch_size
        assert all(isinstance(i, int) and 0 <= i < n for i in batch)
        per_class = Counter(labels[batch].tolist())
        assert len(per_class) == batch_size // m
        assert set(per_class.values()) == {m}
        for c in per_class:  # repeats only for classes smaller than m, which then appear entirely
            items = [i for i in batch if labels[i] == c]
            if sizes[c] >= m:
                assert len(set(items)) == m
            else:
                assert set(items) == set(np.flatnonzero(labels == c).tolist())


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=15),
    m=st.integers(1, 5),
    k=st.integers(1, 15),
    length=st.one_of(st.none(), st.integers(1, 200)),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 5),
)
def test_sampler_invariants(sizes, m, k, length, seed, epoch):
    k = min(k, len(sizes))
    labels = np.repeat(np.arange(len(sizes)), sizes)
    perm = np.random.default_rng(seed).permutation(len(labels))
    labels = labels[perm]  # interleaved classes
    s = MPerClassSampler(torch.from_numpy(labels), m=m, batch_size=k * m, length=length, seed=seed)
    s.set_epoch(epoch)
    batches = list(s)
    n_items = len(labels) if length is None else length
    assert len(batches) == len(s) == max(1, n_items // (k * m))
    _check_batches(batches, labels, m, k * m)
    assert batches == list(s)  # deterministic given (seed, epoch)
    again = MPerClassSampler(
        labels.tolist(), m=m, batch_size=k * m, length=length, seed=seed, epoch=epoch
    )
    assert list(again) == batches


def test_sampler_epochs_seeds_and_coverage():
    labels = np.repeat(np.arange(25), 16)
    s = MPerClassSampler(labels, m=4, batch_size=40, seed=0)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert e0 != e1
    s.set_epoch(0)
    assert list(s) == e0
    assert list(MPerClassSampler(labels, m=4, batch_size=40, seed=1)) != e0
    seen = np.concatenate(e0)
    assert len(seen) == 400 and len(np.unique(seen)) >= 0.9 * 400  # about one pass per epoch
    # big classes are drawn proportionally more often
    imb = np.concatenate([np.repeat(np.arange(10), 4), np.repeat(np.arange(10, 12), 80)])
    counts = np.bincount(
        imb[np.concatenate(list(MPerClassSampler(imb, m=4, batch_size=8)))], minlength=12
    )
    assert counts[10:].min() > 4 * counts[:10].max()


def test_sampler_refills_when_few_classes_are_left():
    # one big class holds most slots: batches run out of distinct classes and must refill
    labels = np.concatenate([np.zeros(40, dtype=np.int64), np.arange(1, 4)])
    s = MPerClassSampler(labels, m=2, batch_size=4, seed=2)
    batches = list(s)
    assert len(batches) == 10
    _check_batches(batches, labels, 2, 4)
    assert sum(0 in labels[b] for b in batches) >= 8  # the big class is in nearly every batch


def test_sampler_hierarchical_labels_and_dataloader():
    fine = torch.arange(40) % 10
    y2 = torch.stack([fine, fine // 5], 1)
    a = list(MPerClassSampler(y2, m=2, batch_size=8, seed=3))
    assert a == list(MPerClassSampler(fine, m=2, batch_size=8, seed=3))
    ds = torch.utils.data.TensorDataset(torch.randn(40, 3), y2)
    loader = DataLoader(ds, batch_sampler=MPerClassSampler(y2, m=2, batch_size=8))
    batches = [yb for _, yb in loader]
    assert len(batches) == 5 and all(yb.shape == (8, 2) for yb in batches)
    assert all(len(torch.unique(yb[:, 0])) == 4 for yb in batches)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"m": 3, "batch_size": 32}, ValueError, "multiple of m"),
        ({"m": 4, "batch_size": 64}, ValueError, "distinct classes"),
        ({"m": 0}, ValueError, "m must be"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"length": 0}, ValueError, "length"),
        ({"seed": -3}, ValueError, "seed"),
        ({"epoch": -1}, ValueError, "epoch"),
        ({"m": 2.0}, TypeError, "m must be"),
    ],
)
def test_sampler_bad_arguments(kwargs, exc, match):
    labels = np.repeat(np.arange(10), 5)
    with pytest.raises(exc, match=match):
        MPerClassSampler(labels, **kwargs)


def test_sampler_bad_labels():
    with pytest.raises(ValueError, match="empty"):
        MPerClassSampler(torch.zeros(0, dtype=torch.long))
    with pytest.raises(TypeError, match="integers"):
        MPerClassSampler(torch.rand(10))
    with pytest.raises(ValueError, match="shape"):
        MPerClassSampler(torch.zeros(2, 2, 2, dtype=torch.long))
