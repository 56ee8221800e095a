"""What the training loops of this process did: trained, restored from a checkpoint, or started
fresh.

Every :class:`~rank_lab.engine.loop.Engine` that trains or resumes reports here (one
:class:`LoopReport` each); :func:`training_report` sums them up for a results file, so that a run
never reports training it did not do: a notebook whose loops all resumed from finished checkpoints
says so (``resumed: true``, ``trained`` zero). The book's ``results.json`` records it under
``provenance.training`` (:func:`rank_lab.book.save_results`).

:func:`start_fresh` makes the loops of this process ignore checkpoints written before it (the
book runner's ``--fresh``): they train from the start and replace those files (the replaced file is
kept as the previous checkpoint, :func:`~rank_lab.engine.checkpoint.previous_path`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "LoopReport",
    "training_report",
    "reset_training_report",
    "start_fresh",
    "is_fresh",
    "note_written",
    "written_here",
    "MAX_LISTED",
]

#: At most this many resumed loops are listed one by one in :func:`training_report`.
MAX_LISTED = 50

_LOOPS: list[LoopReport] = []
_STATE: dict[str, Any] = {"fresh": False}
_WRITTEN: set[str] = set()


@dataclass
class LoopReport:
    """One training loop of this process.

    Attributes:
        desc: the loop's label (``EngineConfig.desc``).
        unit: ``"epoch"`` or ``"step"``: the unit of ``restored`` and ``trained``.
        checkpoint: its checkpoint file (``None``: no checkpoint).
        resumed_from: the file it resumed from (the previous checkpoint after a fallback), or
            ``None``.
        fallback: why the newest checkpoint was passed over, or ``None``.
        ignored: a checkpoint that existed but was ignored because the run started fresh.
        restored: epochs (steps) restored from the checkpoint.
        trained: epochs (steps) trained in this process.
        steps_restored, steps_trained: optimiser steps restored and run in this process.
    """

    desc: str
    unit: str
    checkpoint: str | None = None
    resumed_from: str | None = None
    fallback: str | None = None
    ignored: str | None = None
    restored: int = 0
    trained: int = 0
    steps_restored: int = 0
    steps_trained: int = 0
    _listed: bool = False

    def register(self) -> None:
        """Count this loop in :func:`training_report` (once)."""
        if not self._listed:
            self._listed = True
            _LOOPS.append(self)


def _key(path: str | Path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path, got {type(path).__name__}")
    return str(Path(path).resolve())


def start_fresh(fresh: bool = True) -> None:
    """From now on (``fresh``), this process's loops ignore the checkpoints written before: they
    resume only from checkpoints written after this call."""
    if not isinstance(fresh, bool):
        raise TypeError(f"fresh must be a bool, got {type(fresh).__name__}")
    _STATE["fresh"] = fresh
    _WRITTEN.clear()


def is_fresh() -> bool:
    """Whether :func:`start_fresh` is in effect."""
    return bool(_STATE["fresh"])


def note_written(path: str | Path) -> None:
    """Record that this process wrote the checkpoint ``path`` (it may resume from it even when
    fresh)."""
    _WRITTEN.add(_key(path))


def written_here(path: str | Path) -> bool:
    """Whether this process wrote the checkpoint ``path``."""
    return _key(path) in _WRITTEN


def reset_training_report() -> None:
    """Forget the loops reported so far (a new run starts in this process)."""
    _LOOPS.clear()


def training_report() -> dict[str, Any]:
    """What this process's loops did since :func:`reset_training_report`.

    Returns:
        A dict with the keys ``resumed`` (bool), ``fresh`` (bool), ``loops`` (int), ``trained`` and
        ``restored`` (each ``{"epochs", "steps"}``), ``resumes`` (list) and ``more_resumes`` (int):
        ``epochs`` sums the epoch-based loops, ``steps`` every loop's optimiser steps; ``resumes``
        lists the loops that resumed or ignored a checkpoint (file, the file used, fallback reason,
        unit, restored, trained), the first :data:`MAX_LISTED` of them.
    """
    resumed = [r for r in _LOOPS if r.resumed_from is not None or r.ignored is not None]
    listed = [
        {k: v for k, v in asdict(r).items() if not k.startswith("_")} for r in resumed[:MAX_LISTED]
    ]
    return {
        "resumed": any(r.resumed_from is not None for r in _LOOPS),
        "fresh": is_fresh(),
        "loops": len(_LOOPS),
        "trained": {
            "epochs": sum(r.trained for r in _LOOPS if r.unit == "epoch"),
            "steps": sum(r.steps_trained for r in _LOOPS),
        },
        "restored": {
            "epochs": sum(r.restored for r in _LOOPS if r.unit == "epoch"),
            "steps": sum(r.steps_restored for r in _LOOPS),
        },
        "resumes": listed,
        "more_resumes": max(0, len(resumed) - MAX_LISTED),
    }
