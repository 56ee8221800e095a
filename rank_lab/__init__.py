"""rank_lab: robust image retrieval and training with non-differentiable objectives.

Sub-packages are named by domain (the floors and what may import what: ``docs/architecture.md``):

* :mod:`rank_lab.metrics` -- exact retrieval metrics and the evaluation engine.
* :mod:`rank_lab.data` -- synthetic generators, bundled datasets, samplers, dataset loaders.
* :mod:`rank_lab.ranking`, :mod:`rank_lab.losses` -- rank primitives and rank losses.
* :mod:`rank_lab.retrieval`, :mod:`rank_lab.fewshot`, :mod:`rank_lab.ood`, :mod:`rank_lab.learned`
  -- image search, few-shot retrieval, out-of-distribution detection, learned surrogates.

Heavy sub-packages are imported lazily so that ``import rank_lab`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from rank_lab.utils import get_device, seed_everything

__version__ = "0.1.0"

_SUBMODULES = {
    "metrics",
    "data",
    "ranking",
    "losses",
    "train",
    "models",
    "retrieval",
    "fewshot",
    "ood",
    "learned",
    "book",
}

__all__ = ["get_device", "seed_everything", "__version__", *sorted(_SUBMODULES)]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"rank_lab.{name}")
    raise AttributeError(f"module 'rank_lab' has no attribute {name!r}")
