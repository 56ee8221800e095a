"""Matrix entries of :mod:`rank_lab.data` and :mod:`rank_lab.data.datasets`."""

from __future__ import annotations

import torch

import rank_lab.data as D
import rank_lab.data.perturbations as PT

from . import entries_datasets, entries_fixtures
from .factories import emb, hier_labels, images, labels
from .framework import cls, fn


def _embedding_file(raw: bytes | None = None) -> str:
    """A saved ``.npy`` embedding file with its ``_labels.npy`` (or ``raw`` bytes in its place)."""
    import tempfile
    from pathlib import Path

    import numpy as np

    folder = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_emb_"))
    np.save(folder / "e.npy", np.ones((4, 3), np.float32))
    np.save(folder / "e_labels.npy", np.arange(4) % 2)
    if raw is not None:
        (folder / "e.npy").write_bytes(raw)
    return str(folder / "e.npy")


NET = {
    "n_classes": "posint",
    "per_class": "posint",
    "dim": "posint",
    "input_dim": "posint",
    "noise": "nonneg",
    "train_fraction": "prob",
    "activation": "choice",
}


ENTRIES = [
    fn(
        D.OpenSetSplit,
        lambda: dict(x_train=emb(6), y_train=labels(6), x_test=emb(6), y_test=labels(6) + 3),
        {"x_train": "x", "y_train": "labels"},
        rows=(("x_train", "y_train"), ("x_test", "y_test")),
        legal={
            "x_train:ndim+": "images (N, C, H, W) or any (N, ...) data",
            "x_train:f64": "float64 accepted",
        },
    ),
    cls(
        D.RandomNonlinearMap,
        {"dim": 4, "input_dim": 6, "hidden_dim": 8},
        {
            "dim": "posint",
            "input_dim": "posint",
            "hidden_dim": "posint",
            "activation": "choice",
            "gain": "pos",
            "input_scale": "pos",
        },
        calls=[("__call__", lambda: {"u": emb(5)}, {"u": "x"})],
        legal={"__call__.u:int": "integer latents are cast to float"},
    ),
    fn(
        D.make_open_set,
        {"n_classes": 4, "per_class": 4, "dim": 4, "input_dim": 6, "hidden_dim": 8},
        NET,
    ),
    fn(
        D.make_hierarchical_open_set,
        {
            "n_coarse": 2,
            "fine_per_coarse": 2,
            "per_class": 4,
            "dim": 4,
            "input_dim": 6,
            "hidden_dim": 8,
        },
        {
            "n_coarse": "posint",
            "fine_per_coarse": "posint",
            "per_class": "posint",
            "noise": "nonneg",
            "train_fraction": "prob",
            "split": "choice",
        },
    ),
    fn(
        D.load_digits,
        {"train_classes": (0, 1), "test_classes": (2, 3)},
        {"test_fraction": "prob"},
        extra={"unknown_class": ("train_classes", lambda: (0, 42), ("train_classes",))},
    ),
    fn(
        D.load_animal_mnist,
        {"train_classes": (0, 1), "test_classes": (2, 3)},
        {"test_fraction": "prob", "data_dir": "path"},
    ),
    fn(
        D.split_by_classes,
        lambda: dict(x=emb(12), y=labels(12, 4), train_classes=(0, 1)),
        {"x": "x", "y": "labels"},
        rows=(("x", "y"),),
        extra={"unknown_class": ("train_classes", lambda: (0, 9), ("train_classes",))},
    ),
    fn(
        D.stratified_split,
        lambda: dict(x=emb(12), y=labels(12, 3)),
        {"x": "x", "y": "labels", "test_fraction": "prob"},
        rows=(("x", "y"),),
    ),
    cls(
        D.MPerClassSampler,
        lambda: dict(labels=labels(24, 6), m=2, batch_size=4),
        {"labels": "labels", "m": "posint", "batch_size": "posint"},
        calls=[("__iter__", None, None)],
        extra={"m_too_big": ("m", lambda: 5, ("m",))},
    ),
    cls(
        D.HierarchicalSampler,
        lambda: dict(
            labels=hier_labels(16), batch_size=8, samples_per_class=2, super_classes_per_batch=2
        ),
        {
            "labels": "labels",
            "batch_size": "posint",
            "samples_per_class": "posint",
            "super_classes_per_batch": "posint",
        },
        calls=[("__iter__", None, None)],
    ),
    fn(D.DatasetFolderError, {"args": None} and (lambda: {})),
    cls(D.EmbeddingFileError),
    fn(
        D.load_embedding_file,
        lambda: {"path": _embedding_file()},
        {"path": "path"},
        extra={
            "garbage": ("path", lambda: _embedding_file(b"garbage" * 20), ("npy",)),
            "int": ("path", lambda: 3, ("path",)),
        },
    ),
    cls(
        D.ImageListDataset,
        lambda: dict(paths=["a.png", "b.png"], labels=[0, 1]),
        {"labels": "labels"},
        rows=(("paths", "labels"),),
    ),
    fn(D.require_path, lambda: dict(root="/", relative="tmp", dataset="x"), {"root": "path"}),
]

# the training-set protocols of Patel thesis §6.5 and the two-view augmentation
ENTRIES += [
    fn(
        PT.imbalanced_indices,
        lambda: dict(labels=labels(12), imbalance_rate=0.5, minority_classes=None),
        {"labels": "labels", "imbalance_rate": "prob", "seed": "nonnegint"},
        extra={
            "all_minority": (
                "minority_classes",
                lambda: torch.tensor([0, 1, 2]),
                ("minority_classes",),
            )
        },
    ),
    fn(
        PT.noisy_labels,
        lambda: dict(labels=labels(12), noise_rate=0.25, n_classes=3),
        {"labels": "labels", "noise_rate": "prob", "n_classes": "posint", "seed": "nonnegint"},
        extra={"range": ("labels", lambda: labels(12) + 5, ("labels",))},
    ),
    fn(
        PT.two_views,
        lambda: dict(x=images(3, 1, 6), generator=torch.Generator().manual_seed(0)),
        {"x": "x", "noise_std": "nonneg", "max_shift": "nonnegint"},
        legal={
            "x:ndim*": (
                "(N, ...): any input shape of 2 dims or more (images get the shift only when 4-D)"
            )
        },
    ),
]

ENTRIES += [*entries_datasets.ENTRIES, *entries_fixtures.ENTRIES]
