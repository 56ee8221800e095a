"""The engine's two refusals: the numerical guard's error and the resume rule
(``docs/decisions.md``).

* :class:`NonFiniteTrainingError`: NaN or inf in a loss, a gradient or a weight stopped training
  before the step was applied; nothing was saved.
* :func:`check_resume`: a checkpoint continues a run only when the result equals a straight run of
  the resuming configuration.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from rank_lab.engine.checkpoint import CheckpointMismatchError

__all__ = ["NonFiniteTrainingError", "check_resume", "describe_batch"]


class NonFiniteTrainingError(FloatingPointError):
    """NaN or inf embeddings, loss, gradient or weight stopped training (the numerical guard of
    every loop).

    The offending batch was not applied and nothing was saved: the last checkpoint on disk, if any,
    is the last good state. Attributes: ``epoch`` (1-based), ``step`` (global optimiser steps done),
    ``batch_indices`` (dataset indices of the batch, ``None`` for a weight check) and ``checkpoint``
    (the last good checkpoint's path, or ``None``).
    """

    def __init__(
        self,
        message: str,
        *,
        epoch: int,
        step: int,
        batch_indices: list[int] | None,
        checkpoint: Path | None,
    ) -> None:
        super().__init__(message)
        self.epoch, self.step, self.batch_indices, self.checkpoint = (
            epoch,
            step,
            batch_indices,
            checkpoint,
        )


def describe_batch(indices: list[int] | None) -> str:
    """``", batch indices [...] (n items)"`` (the first 32 indices), or ``""`` without indices."""
    if indices is None:
        return ""
    more = " ..." if len(indices) > 32 else ""
    return f", batch indices {indices[:32]}{more} ({len(indices)} items)"


def check_resume(
    state: Mapping[str, Any],
    run_key: Mapping[str, Any],
    record: Mapping[str, Any],
    *,
    source: str = "the checkpoint",
    free_keys: Collection[str] = (),
    hint: str = "set resume=False or use another checkpoint file",
    unit: str = "epoch",
    length_free: bool = False,
) -> None:
    """The resume rule: raise unless ``state`` continues the run described by ``run_key`` and
    ``record``.

    A checkpoint records the run's key (its configuration) and its schedule record (epochs, steps,
    warm-up, schedule kind, base rates ...). Resuming continues it only when the result equals a
    straight run of the resuming configuration: the same key (except ``free_keys``) and the same
    record, or a record that differs only in its length (``epochs`` / ``total_steps``) when the
    schedule does not depend on the length (``length_free``: constant, linear) and no more than the
    new length was done. A checkpoint without a record (written before records existed) is compared
    on its config's ``epochs``.

    Raises:
        CheckpointMismatchError: (a ``ValueError``) naming the changed keys and saying how to start
            a new run (``hint``).
    """
    if "config" in state:
        old, new = dict(state["config"]), dict(run_key)
        diff = sorted(
            k for k in set(old) | set(new) if k not in free_keys and old.get(k) != new.get(k)
        )
        if diff:
            changes = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:6])
            raise CheckpointMismatchError(
                f"{source} was written with a different config ({changes}); to start a new run "
                f"{hint}"
            )
    new_rec = dict(record)
    old_rec = state.get("schedule")
    if old_rec is None:
        if "config" not in state or "epochs" not in state["config"]:
            return
        per = new_rec.get("steps_per_epoch") or 1
        old_rec = {
            **new_rec,
            "epochs": int(state["config"]["epochs"]),
            "total_steps": int(state["config"]["epochs"]) * per,
        }
    changed = sorted(k for k in set(old_rec) | set(new_rec) if old_rec.get(k) != new_rec.get(k))
    if not changed:
        return
    done = int(state["step"]) if unit == "step" else int(state["epoch"])
    length_only = set(changed) <= {"epochs", "total_steps"}
    if length_only and length_free and new_rec["epochs"] >= done:
        return  # a length-free schedule: continuing = a straight longer run
    what = ", ".join(f"{k}: {old_rec.get(k)!r} -> {new_rec.get(k)!r}" for k in changed)
    if length_only and new_rec["epochs"] < done:
        why = f"it has already done {done} {unit}s"
    elif length_only:
        why = (
            f"the {old_rec.get('scheduler')} learning rate of every completed step depends on the "
            "schedule"
        )
    else:
        why = "the batches and learning rates would change mid-run"
    raise CheckpointMismatchError(
        f"{source} was started with another schedule ({what}); resuming would not equal a straight "
        f"run of this config because {why}. To train with this schedule, start a new run: {hint} "
        "(to warm-start from those weights, load load_checkpoint(path)['model'] into the new run's "
        "model)."
    )
