"""Loaders for the real datasets, reading their published on-disk formats from a local folder.

Nothing is downloaded, except where torchvision already downloads a dataset (CIFAR-10/100, SVHN,
Textures, Places365): those loaders take ``download=True`` (:mod:`~rank_lab.data.datasets.sources`).
:mod:`~rank_lab.data.datasets.sources` says where every dataset is published; tiny copies in the
published layouts are written by :mod:`rank_lab.fixtures`. One module per dataset
(``rank_lab.data.datasets.sop`` ...); each is tested on a tiny fixture written in the same format. A
missing or malformed folder raises
:class:`~rank_lab.data.datasets.base.DatasetFolderError` (a ``ValueError`` and a
``FileNotFoundError``) that says what was expected where.

Modules are imported lazily: ``from rank_lab.data.datasets import sop``.
"""

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset, require_path

__all__ = ["DatasetFolderError", "ImageListDataset", "require_path"]
