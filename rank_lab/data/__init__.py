"""Data for rank_lab: synthetic open-set tasks, bundled small datasets, samplers, loaders.

* :mod:`rank_lab.data.synthetic` -- :class:`OpenSetSplit`, :func:`make_open_set`,
  :func:`make_hierarchical_open_set` (offline stand-ins for the open-set protocol of the Ramzi
  thesis, §2.3.1 and §3.5.1).
* :mod:`rank_lab.data.bundled` -- :func:`load_digits` (scikit-learn), :func:`load_animal_mnist`,
  and the split helpers :func:`split_by_classes`, :func:`stratified_split`.
* :mod:`rank_lab.data.samplers` -- :class:`MPerClassSampler` (Ramzi thesis §3.5.1).
* :mod:`rank_lab.data.perturbations` -- :func:`imbalanced_indices`, :func:`noisy_labels` (the
  imbalance and label-noise protocols of Patel thesis §6.5.5-6.5.6) and :func:`two_views`.
* :mod:`rank_lab.data.datasets` -- loaders of the real datasets' on-disk formats.
* :mod:`rank_lab.data.embedding_files` -- :func:`load_embedding_file` (saved embeddings and labels).

Class ids are never re-indexed: the train and test splits of an open-set task hold disjoint,
original ids. Hierarchical labels are ``(N, L)`` with the fine level in column 0.
"""

from rank_lab.data.bundled import (
    ANIMAL_MNIST_CLASSES,
    DIGITS_CLASSES,
    load_animal_mnist,
    load_digits,
    split_by_classes,
    stratified_split,
)
from rank_lab.data.datasets import DatasetFolderError, ImageListDataset, require_path
from rank_lab.data.embedding_files import EmbeddingFileError, load_embedding_file
from rank_lab.data.hierarchical_sampler import HierarchicalSampler
from rank_lab.data.perturbations import imbalanced_indices, noisy_labels, two_views
from rank_lab.data.samplers import MPerClassSampler
from rank_lab.data.splits import OpenSetSplit
from rank_lab.data.synthetic import RandomNonlinearMap, make_hierarchical_open_set, make_open_set

__all__ = [
    "EmbeddingFileError",
    "load_embedding_file",
    "OpenSetSplit",
    "RandomNonlinearMap",
    "make_open_set",
    "make_hierarchical_open_set",
    "load_digits",
    "load_animal_mnist",
    "split_by_classes",
    "stratified_split",
    "DIGITS_CLASSES",
    "ANIMAL_MNIST_CLASSES",
    "MPerClassSampler",
    "HierarchicalSampler",
    "DatasetFolderError",
    "ImageListDataset",
    "require_path",
    "imbalanced_indices",
    "noisy_labels",
    "two_views",
]
