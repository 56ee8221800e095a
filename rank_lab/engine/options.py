"""The engine's options and step records: :class:`EngineConfig`, :class:`Batch`,
:class:`StepResult`.

The options every training loop of rank_lab shares (:class:`rank_lab.engine.loop.Engine`): the run's
length, the checkpoint file and its period, resume, progress, mixed precision and gradient clipping.
Every training entry point (the ``fit_*`` functions, the trainers) takes one :class:`EngineConfig`
as its ``engine`` argument, with these defaults; a loop that has its own length (``steps``,
``epochs``, ``episodes``) sets ``epochs``, ``desc`` and ``unit`` itself (:func:`loop_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rank_lab._validation import check_choice, check_float, check_positive_int

__all__ = ["Batch", "StepResult", "EngineConfig", "loop_options"]


@dataclass
class Batch:
    """One step's input for the engine: the step function's argument and what the guard names.

    Attributes:
        data: passed to the step function as it is.
        indices: the batch's dataset indices (named by :class:`NonFiniteTrainingError`), or
            ``None``.
        optimizer: the name of the optimiser this step updates (``None``: the engine's first).
        label: what the step is (e.g. ``"the model phase"``), named by the guard.
    """

    data: Any
    indices: Any = None
    optimizer: str | None = None
    label: str | None = None


@dataclass
class StepResult:
    """What :meth:`Engine.train_step` returns: the loss (float), the step function's stats and
    the gradient norm before clipping (``None`` without ``grad_clip``)."""

    loss: float
    stats: dict[str, float] = field(default_factory=dict)
    grad_norm: float | None = None


@dataclass
class EngineConfig:
    """The options every training loop shares.

    Attributes:
        epochs: epochs to run (steps for a step-based loop, ``unit="step"``).
        checkpoint: a checkpoint file (``None``: no checkpoint).
        checkpoint_every: epochs between checkpoints (the last epoch is always saved; ``None``:
            the loop saves itself).
        resume: resume from ``checkpoint`` when it exists.
        progress: show a tqdm bar.
        amp: mixed precision (autocast + grad scaler), on CUDA only.
        amp_dtype: ``"float16"`` (with a grad scaler) or ``"bfloat16"`` (refused on a GPU of compute
            capability below 8.0, such as Colab's T4, where it runs emulated:
            :func:`rank_lab.utils.check_amp_dtype`).
        grad_clip: maximal global gradient norm (``None``: no clipping), or one per optimiser name.
        desc: the progress bar's label.
        unit: ``"epoch"`` or ``"step"``: how messages count the run.
    """

    epochs: int = 1
    checkpoint: str | Path | None = None
    checkpoint_every: int | None = 1
    resume: bool = True
    progress: bool = False
    amp: bool = False
    amp_dtype: str = "float16"
    grad_clip: float | Mapping[str, float | None] | None = None
    desc: str = "train"
    unit: str = "epoch"

    def __post_init__(self) -> None:
        self.epochs = check_positive_int(self.epochs, "epochs")
        if self.checkpoint_every is not None:
            self.checkpoint_every = check_positive_int(self.checkpoint_every, "checkpoint_every")
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, Path)):
            raise TypeError(
                f"checkpoint must be a file path or None, got {type(self.checkpoint).__name__}"
            )
        for name in ("resume", "progress", "amp"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        check_choice(self.amp_dtype, "amp_dtype", ("float16", "bfloat16"))
        check_choice(self.unit, "unit", ("epoch", "step"))
        clips = self.grad_clip.values() if isinstance(self.grad_clip, Mapping) else [self.grad_clip]
        for c in clips:
            if c is not None:
                check_float(c, "grad_clip", low=0.0, low_open=True)


def loop_options(
    engine: EngineConfig | None,
    *,
    epochs: int,
    desc: str,
    unit: str = "epoch",
    length: str = "epochs",
) -> EngineConfig:
    """The options of one loop's run: the caller's ``engine`` with the loop's length and labels.

    A training entry point takes the one options object (``engine``, default ``EngineConfig()``)
    and its own length argument (``steps=``, ``epochs=``, ``episodes=``, named ``length``): the
    run's ``epochs``, the progress label ``desc`` and the ``unit`` come from the loop.

    Args:
        engine: the caller's options (``None``: the defaults of :class:`EngineConfig`).
        epochs: the run's length in ``unit`` (the loop's own argument).
        desc: the progress bar's label.
        unit: ``"epoch"`` or ``"step"``.
        length: the name of the loop's length argument, for the error message.

    Returns:
        A new :class:`EngineConfig` (``engine`` is not modified).

    Raises:
        TypeError: ``engine`` is neither an :class:`EngineConfig` nor ``None``.
        ValueError: ``engine.epochs`` was set to another length than the loop's (the loop's
            ``length`` argument sets it).
    """
    if engine is None:
        engine = EngineConfig()
    if not isinstance(engine, EngineConfig):
        raise TypeError(f"engine must be an EngineConfig or None, got {type(engine).__name__}")
    epochs = check_positive_int(epochs, length)
    if engine.epochs not in (1, epochs):
        raise ValueError(
            f"engine.epochs ({engine.epochs}) differs from {length}={epochs}: the "
            f"loop's {length} sets the run's length (leave engine.epochs at its default)"
        )
    return replace(engine, epochs=epochs, desc=desc, unit=unit)
