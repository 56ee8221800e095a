"""The proxy pre-training loop of the book's task models (:func:`fit_proxy`, :func:`lr_schedule`).

Used by :func:`rank_lab.learned.recognizer.fit_ctc` and
:func:`rank_lab.learned.boxes.fit_box_regressor`.
The loop is a configuration of the training engine (:mod:`rank_lab.engine.loop`): one step per
engine step, the batch generator checkpointed, the learning rate from the one schedule
(:func:`rank_lab.engine.lr_at`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from rank_lab._validation import check_choice, check_float, check_positive_int
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, loop_options
from rank_lab.engine.schedule import Schedule, lr_at
from rank_lab.learned._checks import check_module
from rank_lab.utils import get_device

__all__ = ["fit_proxy", "lr_schedule"]

SCHEDULES = ("constant", "cosine", "tail_cosine")


def lr_schedule(
    opt: torch.optim.Optimizer, steps: int, schedule: str
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The proxy pre-training schedule as a torch scheduler (``None`` for ``"constant"``).

    ``"cosine"`` decays to 0 over ``steps``; ``"tail_cosine"`` keeps the rate constant for 70% of
    the steps and decays it to 0 with a half cosine over the last 30%. Both are the one schedule
    :func:`rank_lab.engine.lr_at` (a ``LambdaLR`` of its factor; :func:`fit_proxy` sets the rates
    through the engine instead).

    Args:
        opt: the optimiser.
        steps: the number of scheduler steps (a positive int).
        schedule: ``"constant"``, ``"cosine"`` or ``"tail_cosine"``.
    """
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"opt must be a torch.optim.Optimizer, got {type(opt).__name__}")
    steps = check_positive_int(steps, "steps")
    check_choice(schedule, "schedule", SCHEDULES)
    if schedule == "constant":
        return None
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: lr_at(t, 1.0, total_steps=steps, schedule=schedule)
    )


def fit_proxy(
    model: nn.Module,
    n_items: int,
    batch_loss: Callable[[torch.Tensor, torch.device], torch.Tensor],
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    device: torch.device | str | None = None,
    schedule: str = "tail_cosine",
    desc: str = "proxy",
    engine: EngineConfig | None = None,
) -> list[float]:
    """The proxy pre-training loop shared by :func:`fit_ctc` and ``fit_box_regressor``, on the
    engine.

    Adam with the schedule ``schedule`` (:func:`lr_schedule`); each step draws ``batch_size`` item
    indices with replacement from a generator seeded with ``seed`` and minimises
    ``batch_loss(indices, device)``. The run's options are ``engine`` (:class:`EngineConfig`: with
    ``checkpoint`` the state (model, optimiser, step, losses, generator, RNG) is saved every
    ``checkpoint_every`` steps and at the end, and an existing file is resumed from (``resume``),
    so an interrupted run continues exactly where it stopped; under ``schedule="constant"`` a run
    may be resumed with more steps; ``progress``, ``amp``, ``grad_clip``); ``steps`` sets its
    length.

    Returns:
        The loss of every step (including those of a resumed run).

    Raises:
        ValueError, TypeError: a bad argument (``steps``, ``batch_size``, ``n_items`` positive
            ints; ``lr`` finite and ``> 0``; ``engine`` an :class:`EngineConfig`).
        NonFiniteTrainingError: a NaN / inf loss or gradient (a ``FloatingPointError``); raised
            before the step is applied, naming the step, its item indices and the last good
            checkpoint, which stays on disk.
    """
    check_module(model)
    if not callable(batch_loss):
        raise TypeError(f"batch_loss must be callable, got {type(batch_loss).__name__}")
    n_items = check_positive_int(n_items, "n_items")
    steps = check_positive_int(steps, "steps")
    batch_size = check_positive_int(batch_size, "batch_size")
    lr = check_float(lr, "lr", low=0, low_open=True)
    check_choice(schedule, "schedule", SCHEDULES)
    options = loop_options(engine, epochs=steps, desc=desc, unit="step", length="steps")
    dev = get_device(device)
    model.to(dev).train()
    gen = torch.Generator().manual_seed(seed)
    run = Engine(
        model,
        build_optimizer(model.parameters(), lr=lr),
        options,
        device=dev,
        generators={"batches": gen},
        schedule=Schedule(schedule, steps),
        run_key={"n_items": n_items, "batch_size": batch_size, "lr": lr, "seed": seed},
        trained_on=batch_loss,
    )

    def batch(step: int) -> Iterator[Batch]:
        idx = torch.randint(n_items, (min(batch_size, n_items),), generator=gen)
        yield Batch(idx, indices=idx)

    run.run(
        lambda idx: batch_loss(idx, dev),
        batch,
        steps_per_epoch=1,
        on_epoch_end=lambda step, res: run.history.append(res[0].loss),
    )
    return run.history
