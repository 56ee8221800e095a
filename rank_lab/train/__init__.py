"""Training: one engine for every loop, the typed retrieval config and presets, the retrieval trainer.

* :mod:`rank_lab.train.engine` -- :class:`Engine` and :func:`fit`, the one training engine of the
  package: every training loop (the retrieval :class:`Trainer`, multistage, classifier, few-shot,
  learned-surrogate, proxy and OOD loops) is a configuration of it, with the same
  checkpoint/resume, progress, AMP, gradient clipping, learning-rate schedule
  (:mod:`rank_lab.train.schedule`) and NaN guard (:class:`NonFiniteTrainingError`); optimisers are
  built by :func:`build_optimizer`.
* :class:`TrainConfig` -- a flat dataclass that a papermill parameters cell can fill
  (:meth:`TrainConfig.from_dict`), started from one of the papers' training recipes
  (:meth:`TrainConfig.recipe`; :mod:`rank_lab.train.recipes`: :data:`RECIPES`, and the RS@k
  :class:`RecallRecipe` of :data:`RECALL_RECIPES`).
* :class:`Trainer` -- m-per-class batches, rank loss (+ cross-batch memory), Adam/AdamW/SGD with a
  separate head learning rate, cosine schedule with warm-up, evaluation with
  :func:`rank_lab.metrics.retrieval_metrics`, JSON log.
* :class:`DistributedTrainer` -- the same under ``torchrun`` (DDP, one global rank-loss batch
  all-gathered over the ranks, rank-agnostic checkpoints); :mod:`rank_lab.train.distributed` holds
  the process group, the differentiable all-gather and the distributed m-per-class sampler, and
  ``python -m rank_lab.train.launch`` is the command-line entry point;
  :class:`LocalBatchLoss` is the objective of ranks that skip the all-gather (for comparison).
"""

from rank_lab.train.checkpoint import load_checkpoint
from rank_lab.train.config import TrainConfig
from rank_lab.train.data import as_dataset, embed_dataset, relabel
from rank_lab.train.distributed import all_gather_with_grad, init_distributed
from rank_lab.train.distributed_sampler import DistributedMPerClassSampler
from rank_lab.train.distributed_trainer import DistributedTrainer
from rank_lab.train.engine import Engine, fit
from rank_lab.train.guard import NonFiniteTrainingError
from rank_lab.train.local_batches import LocalBatchLoss
from rank_lab.train.optim import build_optimizer
from rank_lab.train.options import Batch, EngineConfig
from rank_lab.train.recipes import (
    RECALL_RECIPES,
    RECIPES,
    RecallRecipe,
    get_recall_recipe,
    list_recall_recipes,
    list_recipes,
)
from rank_lab.train.schedule import Schedule, lr_at
from rank_lab.train.trainer import Trainer

__all__ = [
    "TrainConfig",
    "RECIPES",
    "list_recipes",
    "RecallRecipe",
    "RECALL_RECIPES",
    "get_recall_recipe",
    "list_recall_recipes",
    "Engine",
    "EngineConfig",
    "Batch",
    "fit",
    "NonFiniteTrainingError",
    "Schedule",
    "build_optimizer",
    "Trainer",
    "DistributedTrainer",
    "DistributedMPerClassSampler",
    "LocalBatchLoss",
    "all_gather_with_grad",
    "init_distributed",
    "as_dataset",
    "embed_dataset",
    "relabel",
    "load_checkpoint",
    "lr_at",
]
