"""Learned surrogates (LS) of non-differentiable metrics via a deep embedding (Patel thesis, Ch. 3).

A decomposable, lower-is-better metric ``e(z, y)`` is approximated by the Euclidean distance in a
learned embedding (eq. 3.3), trained with a squared error plus a gradient penalty (eq. 3.6; eq. 4.5),
and the task model is post-tuned by minimising the surrogate (eq. 3.2), alternately with the
surrogate (Algorithm 1).

The one import point of the method: the surrogate, its loss, the task interface and the
configuration come from :mod:`rank_lab.learned.surrogate_model`, the alternating training
(:class:`SurrogateTrainer`, :func:`evaluate_surrogate`) from :mod:`rank_lab.learned._trainer`,
which builds on the first (so neither imports this module).
"""

from __future__ import annotations

from rank_lab.learned._trainer import SurrogateTrainer, evaluate_surrogate
from rank_lab.learned.surrogate_model import (  # noqa: F401 - re-exported (listed in their defining module's __all__ only)
    SOURCES,
    BoxMLP,
    CharCNN,
    EmbeddingSurrogate,
    LSConfig,
    SurrogateTask,
    ls_model_loss,
    surrogate_loss,
)

__all__ = [
    "SurrogateTrainer",
    "evaluate_surrogate",
]
