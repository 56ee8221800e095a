"""Multi-GPU retrieval training: the :class:`~rank_lab.train.trainer.Trainer` under ``torchrun``.

* :mod:`~rank_lab.train.distributed.trainer` -- :class:`DistributedTrainer` (DDP, one global
  rank-loss batch all-gathered over the ranks, rank-agnostic checkpoints);
* :mod:`~rank_lab.train.distributed.collectives` -- the process group, the differentiable all-gather
  and the other collectives; :mod:`~rank_lab.train.distributed.env` -- where this process stands
  (:class:`DistEnv`);
* :mod:`~rank_lab.train.distributed.sampler` -- :class:`DistributedMPerClassSampler`, the global
  m-per-class batch cut into whole class groups per rank;
* :mod:`~rank_lab.train.distributed.launch` -- ``python -m rank_lab.train.distributed.launch`` (or
  ``torchrun -m ...``), the command-line entry point;
* :mod:`~rank_lab.train.distributed.local_batches` -- :class:`LocalBatchLoss`, the objective of
  ranks that skip the all-gather (for comparison).
"""

from rank_lab.train.distributed.collectives import all_gather_with_grad, init_distributed
from rank_lab.train.distributed.env import DistEnv, current_env
from rank_lab.train.distributed.local_batches import LocalBatchLoss
from rank_lab.train.distributed.sampler import DistributedMPerClassSampler
from rank_lab.train.distributed.trainer import DistributedTrainer

__all__ = [
    "DistributedTrainer",
    "DistributedMPerClassSampler",
    "LocalBatchLoss",
    "DistEnv",
    "current_env",
    "all_gather_with_grad",
    "init_distributed",
]
