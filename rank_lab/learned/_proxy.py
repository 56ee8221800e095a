"""The proxy pre-training loop of the book's task models (:func:`fit_proxy`, :func:`lr_schedule`).

Implementation module of :func:`rank_lab.learned.recognizer.fit_proxy` and
:func:`rank_lab.learned.recognizer.lr_schedule` (import them from there). Used by
:func:`rank_lab.learned.recognizer.fit_ctc` and :func:`rank_lab.learned.boxes.fit_box_regressor`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from rank_lab._validation import check_choice, check_float, check_positive_int
from rank_lab.learned._checks import check_loss, check_module
from rank_lab.utils import get_device

SCHEDULES = ("constant", "cosine", "tail_cosine")


def lr_schedule(opt: torch.optim.Optimizer, steps: int, schedule: str) -> torch.optim.lr_scheduler.LRScheduler | None:
    """Learning-rate schedule of the proxy pre-training helpers (``None`` for ``"constant"``).

    ``"cosine"`` decays to 0 over ``steps``; ``"tail_cosine"`` keeps the rate constant for 70% of
    the steps and decays it to 0 with a half cosine over the last 30%.

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
    if schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    start = int(0.7 * steps)  # "tail_cosine"
    tail = max(steps - start, 1)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 1.0 if t < start else 0.5 * (1 + math.cos(math.pi * min(t - start, tail) / tail))
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
    progress: bool = False,
    schedule: str = "tail_cosine",
    grad_clip: float | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 500,
    desc: str = "proxy",
) -> list[float]:
    """The proxy pre-training loop shared by :func:`fit_ctc` and ``fit_box_regressor``.

    Adam with :func:`lr_schedule`; each step draws ``batch_size`` item indices with replacement
    from a generator seeded with ``seed`` and minimises ``batch_loss(indices, device)``. With
    ``checkpoint`` the state (model, optimiser, schedule, step, losses, generator) is saved every
    ``checkpoint_every`` steps and at the end, and an existing file is resumed from, so an
    interrupted run continues exactly where it stopped.

    Returns:
        The loss of every step (including those of a resumed run).

    Raises:
        ValueError, TypeError: a bad argument (``steps``, ``batch_size``, ``n_items``,
            ``checkpoint_every`` positive ints; ``lr`` and ``grad_clip`` finite and ``> 0``).
        FloatingPointError: a NaN / inf loss; raised before the step is applied, naming the step and
            its item indices; the checkpoint on disk stays the last good one.
    """
    from rank_lab._progress import tqdm

    check_module(model)
    if not callable(batch_loss):
        raise TypeError(f"batch_loss must be callable, got {type(batch_loss).__name__}")
    n_items = check_positive_int(n_items, "n_items")
    steps = check_positive_int(steps, "steps")
    batch_size = check_positive_int(batch_size, "batch_size")
    lr = check_float(lr, "lr", low=0, low_open=True)
    check_choice(schedule, "schedule", SCHEDULES)
    if grad_clip is not None:
        grad_clip = check_float(grad_clip, "grad_clip", low=0, low_open=True)
    checkpoint_every = check_positive_int(checkpoint_every, "checkpoint_every")
    dev = get_device(device)
    model.to(dev).train()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = lr_schedule(opt, steps, schedule)
    losses: list[float] = []
    start = 0
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=dev, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        if sched is not None:
            sched.load_state_dict(state["sched"])
        gen.set_state(state["gen"])
        losses, start = state["losses"], int(state["step"])

    def save(step: int) -> None:
        if ckpt is not None:
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict() if sched else None,
                        "gen": gen.get_state(), "losses": losses, "step": step}, ckpt)

    for step in tqdm(range(start, steps), disable=not progress, desc=desc, initial=start, total=steps):
        idx = torch.randint(n_items, (min(batch_size, n_items),), generator=gen)
        loss = batch_loss(idx, dev)
        check_loss(loss, f"{desc} step {step + 1} on items {idx.tolist()[:16]}", ckpt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(float(loss.detach()))
        if (step + 1) % checkpoint_every == 0:
            save(step + 1)
    save(steps)
    return losses
