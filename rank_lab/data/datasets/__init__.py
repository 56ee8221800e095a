"""Loaders for the real datasets, reading their published on-disk formats from a local folder.

Nothing is ever downloaded. One module per dataset (``rank_lab.data.datasets.sop`` ...); each is
tested on a tiny fixture written in the same format. A missing or malformed folder raises
:class:`~rank_lab.data.datasets.base.DatasetFolderError` (a ``ValueError`` and a
``FileNotFoundError``) that says what was expected where.

Modules are imported lazily: ``from rank_lab.data.datasets import sop``.
"""

from rank_lab.data.datasets.base import DatasetFolderError, ImageListDataset, require_path

__all__ = ["DatasetFolderError", "ImageListDataset", "require_path"]
