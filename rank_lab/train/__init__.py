"""Retrieval training: the typed config and the papers' recipes, the retrieval trainer.

Every loop runs on the one training engine (:mod:`rank_lab.engine`:
:class:`~rank_lab.engine.loop.Engine`, its options :class:`~rank_lab.engine.options.EngineConfig`,
schedule, checkpoints, NaN guard).

* :class:`TrainConfig` -- a flat dataclass that a papermill parameters cell can fill
  (:meth:`TrainConfig.from_dict`), started from one of the papers' training recipes
  (:meth:`TrainConfig.recipe`; :mod:`rank_lab.train.recipes`: :data:`RECIPES`, one schema for the
  ROADMAP / HAPPIER and the RS@k recipes).
* :class:`Trainer` -- m-per-class batches, rank loss (+ cross-batch memory), Adam/AdamW/SGD with a
  separate head learning rate, cosine (or step) schedule with warm-up, evaluation with
  :func:`rank_lab.metrics.retrieval_metrics`, JSON log.
* :mod:`rank_lab.train.multistage` -- the multistage step of large batches (gradient caching);
  :mod:`rank_lab.train.classification` -- the chapter-6 classifier loop.
* :mod:`rank_lab.train.distributed` -- the same trainer under ``torchrun`` (a sub-package on a floor
  above this one).
"""

from rank_lab.train.config import TrainConfig
from rank_lab.train.data import as_dataset, embed_dataset, relabel
from rank_lab.train.recipes import RECIPES, list_recipes
from rank_lab.train.trainer import Trainer

__all__ = [
    "TrainConfig",
    "RECIPES",
    "list_recipes",
    "Trainer",
    "as_dataset",
    "embed_dataset",
    "relabel",
]
