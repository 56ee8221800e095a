"""The one learning-rate schedule of rank_lab's training loops (:func:`lr_at`, :class:`Schedule`).

Every loop of the package sets its learning rates from the global optimiser step through
:func:`lr_at` (the engine does it before every step, :class:`rank_lab.engine.loop.Engine`), so a
resumed run needs only the step to continue the schedule. The kinds:

* ``"constant"``: the base rate.
* ``"cosine"``: cosine annealing from the base rate to ``min_lr`` over the steps after the warm-up
  (Loshchilov & Hutter 2017; the schedule of the Ramzi thesis §3.5.1, "cosine decay").
* ``"tail_cosine"``: constant for ``hold_steps`` (default 70% of the run), then a half cosine down
  to
  0 over the remaining steps (the proxy pre-training of :mod:`rank_lab.learned`).
* ``"linear"``: constant for ``hold_steps`` units, then a linear decay by ``1 / (decay_steps + 1)``
  per unit (the ``niter`` / ``niter_decay`` policy of the Gominski thesis' author code, §5.4, one
  unit = one epoch: ``step_unit`` = steps per epoch).
* ``"step"``: multiplied by ``gamma`` at each of the ``milestones`` (units; torch's ``MultiStepLR``,
  the RS@k recipes of the Patel thesis, Section 5.4).

Each kind may start with a linear warm-up (``warmup_steps``). ``"constant"`` and ``"linear"`` do not
depend on the run's length, so a run of those kinds may be resumed with more epochs or steps
(the resume rule, ``docs/decisions.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rank_lab._validation import check_choice, check_float, check_positive_int

__all__ = ["SCHEDULES", "lr_at", "Schedule"]

#: The schedule kinds of :func:`lr_at`.
SCHEDULES = ("cosine", "constant", "tail_cosine", "linear", "step")
#: Kinds whose learning rate does not depend on the run's length.
LENGTH_FREE = ("constant", "linear", "step")


def lr_at(
    step: int,
    base_lr: float,
    *,
    total_steps: int,
    warmup_steps: int = 0,
    schedule: str = "cosine",
    min_lr: float = 0.0,
    hold_steps: int | None = None,
    decay_steps: int | None = None,
    step_unit: int = 1,
    milestones: Sequence[int] = (),
    gamma: float = 0.1,
) -> float:
    """Learning rate at a global step (0-based) of a run of ``total_steps`` steps.

    ``lr(t) = base * (t + 1) / W`` for ``t < W`` (warm-up); then, by ``schedule``:

    * ``"constant"``: ``base``;
    * ``"cosine"``: ``min + (base - min) (1 + cos(pi (t - W) / (T - W))) / 2``;
    * ``"tail_cosine"``: ``base`` for ``t < H`` (``H = hold_steps``, default ``int(0.7 T)``), then
      ``min + (base - min) (1 + cos(pi min(t - H, T - H) / (T - H))) / 2``;
    * ``"linear"``: with ``u = t // step_unit``,
      ``min + (base - min) (1 - max(0, u + 1 - H) / (D + 1))`` (``H = hold_steps`` and
      ``D = decay_steps`` in units);
    * ``"step"``: ``base`` times ``gamma`` per milestone ``<= u`` (repeated products, as torch's
      ``MultiStepLR``).

    Args:
        step: the global step ``t >= 0``.
        base_lr: the base rate (> 0).
        total_steps: ``T``, the run's length in steps (> 0).
        warmup_steps: ``W >= 0``.
        schedule: one of :data:`SCHEDULES`.
        min_lr: the floor of the decaying kinds (>= 0).
        hold_steps: ``H`` of ``"tail_cosine"`` (steps) and ``"linear"`` (units, required).
        decay_steps: ``D`` of ``"linear"`` (units, required).
        step_unit: steps per unit of ``"linear"`` and ``"step"`` (e.g. the steps of an epoch).
        milestones, gamma: the units where ``"step"`` multiplies the rate by ``gamma`` (> 0).

    Raises:
        ValueError, TypeError: a negative step, a non-positive ``base_lr`` / ``total_steps`` /
            ``step_unit``, an unknown ``schedule``, ``"linear"`` without ``hold_steps`` and
            ``decay_steps``.
    """
    step, warmup_steps = _nonneg_int(step, "step"), _nonneg_int(warmup_steps, "warmup_steps")
    total_steps = check_positive_int(total_steps, "total_steps")
    step_unit = check_positive_int(step_unit, "step_unit")
    base_lr = check_float(base_lr, "base_lr", low=0.0, low_open=True)
    min_lr = check_float(min_lr, "min_lr", low=0.0)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {schedule!r}")
    if hold_steps is not None:
        hold_steps = _nonneg_int(hold_steps, "hold_steps")
    if decay_steps is not None:
        decay_steps = _nonneg_int(decay_steps, "decay_steps")
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return base_lr
    if schedule == "cosine":
        span = max(1, total_steps - warmup_steps)
        t = min(1.0, (step - warmup_steps) / span)
        return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))
    if schedule == "tail_cosine":
        start = int(0.7 * total_steps) if hold_steps is None else hold_steps
        tail = max(total_steps - start, 1)
        if step < start:
            return base_lr
        return min_lr + (base_lr - min_lr) * (
            0.5 * (1 + math.cos(math.pi * min(step - start, tail) / tail))
        )
    unit = step // step_unit
    if schedule == "step":
        gamma = check_float(gamma, "gamma", low=0.0, low_open=True)
        lr = base_lr
        # as MultiStepLR: times gamma ** (repeats of m) at milestone m
        for m in sorted(set(milestones)):
            if _nonneg_int(m, "milestones") <= unit:
                lr = lr * gamma ** list(milestones).count(m)
        return lr
    if hold_steps is None or decay_steps is None:  # "linear"
        raise ValueError(
            "schedule='linear' needs hold_steps and decay_steps (in units of step_unit steps)"
        )
    return min_lr + (base_lr - min_lr) * (
        1.0 - max(0, unit + 1 - hold_steps) / float(decay_steps + 1)
    )


def _nonneg_int(v: object, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be an int >= 0, got {v!r}")
    return v


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule for the engine: :func:`lr_at` with fixed arguments.

    Every parameter group of an optimiser run by the engine gets ``lr_at(step, group["base_lr"],
    ...)`` before each step (``base_lr`` defaults to the group's ``lr`` when the engine is built).
    The floor of a group is ``min_lr * base_lr / ref_lr`` when ``ref_lr`` is set (groups keep the
    ratio of their base rates, as the retrieval trainer's backbone and head groups), else
    ``min_lr``.

    Attributes:
        kind: one of :data:`SCHEDULES`.
        total_steps, warmup_steps, min_lr, hold_steps, decay_steps, step_unit, milestones, gamma:
            see :func:`lr_at`.
        ref_lr: the base rate ``min_lr`` refers to (``None``: ``min_lr`` is absolute).
    """

    kind: str = "constant"
    total_steps: int = 1
    warmup_steps: int = 0
    min_lr: float = 0.0
    ref_lr: float | None = None
    hold_steps: int | None = None
    decay_steps: int | None = None
    step_unit: int = 1
    milestones: tuple[int, ...] = ()
    gamma: float = 0.1

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", SCHEDULES)
        lr_at(
            0,
            1.0,
            total_steps=self.total_steps,
            warmup_steps=self.warmup_steps,
            schedule=self.kind,
            min_lr=self.min_lr,
            hold_steps=self.hold_steps,
            decay_steps=self.decay_steps,
            step_unit=self.step_unit,
            milestones=self.milestones,
            gamma=self.gamma,
        )
        object.__setattr__(self, "milestones", tuple(self.milestones))
        if self.ref_lr is not None:
            check_float(self.ref_lr, "ref_lr", low=0.0, low_open=True)

    @property
    def length_free(self) -> bool:
        """Whether the rate at a step does not depend on ``total_steps`` (a run may then be made
        longer)."""
        return self.kind in LENGTH_FREE

    def lr(self, step: int, base_lr: float) -> float:
        """The rate of a group with base rate ``base_lr`` at ``step``."""
        floor = self.min_lr if self.ref_lr is None else self.min_lr * base_lr / self.ref_lr
        return lr_at(
            step,
            base_lr,
            total_steps=self.total_steps,
            warmup_steps=self.warmup_steps,
            schedule=self.kind,
            min_lr=floor,
            hold_steps=self.hold_steps,
            decay_steps=self.decay_steps,
            step_unit=self.step_unit,
            milestones=self.milestones,
            gamma=self.gamma,
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (recorded in checkpoints by the engine)."""
        return asdict(self)
