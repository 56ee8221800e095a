"""The one training engine: every training loop of the package runs on it.

* :mod:`rank_lab.engine.loop` -- :class:`Engine` and :func:`fit`: the step (autocast,
  back-propagation, gradient clipping), the learning-rate schedule, the NaN guard, checkpoint/resume
  and progress;
* :mod:`rank_lab.engine.options` -- :class:`EngineConfig`, the engine's one options object (every
  ``fit_*`` entry point and trainer takes one), :class:`Batch` and :class:`StepResult`;
* :mod:`rank_lab.engine.schedule` -- :class:`Schedule` and :func:`lr_at`, the one learning-rate
  schedule;
* :mod:`rank_lab.engine.checkpoint` -- sealed, atomic, verified checkpoint files (the previous one
  kept), RNG states, :func:`load_checkpoint`;
* :mod:`rank_lab.engine.state` -- the engine's checkpoint side: state, save, resume, the checks;
* :mod:`rank_lab.engine.fingerprint` -- the data and code fingerprints that tie a checkpoint to its
  run;
* :mod:`rank_lab.engine.run_report` -- what this process's loops restored and trained (fresh mode);
* :mod:`rank_lab.engine.guard` -- :class:`NonFiniteTrainingError` and the resume rule;
* :mod:`rank_lab.engine.optim` -- :func:`build_optimizer`.

The loops built on it: :class:`rank_lab.train.trainer.Trainer` (retrieval),
:mod:`rank_lab.train.multistage`, :mod:`rank_lab.train.classification`, the few-shot,
learned-surrogate, proxy and OOD loops. How to add one: ``docs/architecture.md``.
"""

from rank_lab.engine.checkpoint import load_checkpoint
from rank_lab.engine.guard import NonFiniteTrainingError
from rank_lab.engine.loop import Engine, fit
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, StepResult, loop_options
from rank_lab.engine.schedule import Schedule, lr_at

__all__ = [
    "Engine",
    "fit",
    "EngineConfig",
    "Batch",
    "StepResult",
    "loop_options",
    "NonFiniteTrainingError",
    "Schedule",
    "lr_at",
    "build_optimizer",
    "load_checkpoint",
]
