"""One entry point for the retrieval datasets of the papers:
``load_retrieval_dataset(name, root, split)``.

Names (one per dataset): ``"sop"`` (:func:`~rank_lab.data.datasets.sop.load_sop`), ``"cub"``
(:func:`~rank_lab.data.datasets.cub.load_cub`), ``"cars196"``
(:func:`~rank_lab.data.datasets.cars.load_cars`), ``"inaturalist"``
(:func:`~rank_lab.data.datasets.inaturalist.load_inaturalist`), ``"vehicleid"``
(:func:`~rank_lab.data.datasets.vehicleid.load_vehicleid`). A notebook with a ``dataset`` and a
``data_dir`` parameter calls this for the train and test splits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rank_lab.data.datasets.base import ImageListDataset
from rank_lab.data.datasets.cars import load_cars
from rank_lab.data.datasets.cub import load_cub
from rank_lab.data.datasets.inaturalist import load_inaturalist
from rank_lab.data.datasets.sop import load_sop
from rank_lab.data.datasets.vehicleid import load_vehicleid
from rank_lab.registry import Registry

__all__ = ["load_retrieval_dataset", "RETRIEVAL_DATASETS"]

#: name -> its loader ``loader(root, split, transform, **kwargs)`` (a new dataset registers here).
RETRIEVAL_DATASETS: Registry[Callable[..., ImageListDataset]] = Registry(
    "retrieval dataset",
    {
        "sop": load_sop,
        "cub": load_cub,
        "cars196": load_cars,
        "inaturalist": load_inaturalist,
        "vehicleid": load_vehicleid,
    },
)


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
    key = str(name).lower()
    if key not in RETRIEVAL_DATASETS:
        raise ValueError(
            f"unknown retrieval dataset name {name!r}; known: {sorted(RETRIEVAL_DATASETS)}"
        )
    if root is None:
        raise ValueError(f"dataset {name!r} needs a data folder (root / data_dir), got None")
    return RETRIEVAL_DATASETS[key](root, split, transform, **kwargs)
