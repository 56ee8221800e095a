"""One entry point for the retrieval datasets of the papers: ``load_retrieval_dataset(name, root, split)``.

Names: ``"sop"`` (:func:`~rank_lab.data.datasets.sop.load_sop`), ``"cub"``
(:func:`~rank_lab.data.datasets.cub.load_cub`), ``"cars"`` / ``"cars196"``
(:func:`~rank_lab.data.datasets.cars.load_cars`), ``"inaturalist"`` / ``"inat"``
(:func:`~rank_lab.data.datasets.inaturalist.load_inaturalist`). A notebook with a ``dataset`` and a
``data_dir`` parameter calls this for the train and test splits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import ImageListDataset

__all__ = ["load_retrieval_dataset", "RETRIEVAL_DATASETS"]

#: name -> "module:function"
RETRIEVAL_DATASETS = {
    "sop": "sop:load_sop",
    "cub": "cub:load_cub",
    "cars": "cars:load_cars",
    "cars196": "cars:load_cars",
    "inaturalist": "inaturalist:load_inaturalist",
    "inat": "inaturalist:load_inaturalist",
    "vehicleid": "vehicleid:load_vehicleid",
}


def load_retrieval_dataset(
    name: str,
    root: str | Path,
    split: str = "train",
    transform: Callable[[Any], Any] | str | None = "default",
    **kwargs: Any,
) -> ImageListDataset:
    """Load ``split`` of the dataset ``name`` from ``root`` (keyword arguments go to its loader).

    Raises:
        ValueError: unknown ``name`` (the message lists the known ones).
        DatasetFolderError: see the loaders.
    """
    import importlib

    key = str(name).lower()
    if key not in RETRIEVAL_DATASETS:
        raise ValueError(f"unknown retrieval dataset name {name!r}; known: {sorted(RETRIEVAL_DATASETS)}")
    if root is None:
        raise ValueError(f"dataset {name!r} needs a data folder (root / data_dir), got None")
    module, func = RETRIEVAL_DATASETS[key].split(":")
    loader = getattr(importlib.import_module(f"rank_lab.data.datasets.{module}"), func)
    return loader(root, split, transform, **kwargs)
