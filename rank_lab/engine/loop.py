"""The one training engine of rank_lab: every training loop of the package is a configuration of it.

A loop supplies only what differs between loops: its modules and optimisers, a *step function*
(``step_fn(batch) -> loss`` or ``(loss, stats)``) and its *data* (``data(epoch)``: the batches of
an epoch, drawn from generators the engine checkpoints). The engine gives every loop the same:

* **step**: zero the gradients, run the step function (under autocast with ``amp`` on CUDA, with the
  engine's modules trusting their inputs' values, :func:`~rank_lab._validation.trusted_inputs`, so
  that a NaN read lazily or produced inside a model reaches the guard),
  back-propagate (through the ``GradScaler``), clip the global gradient norm (``grad_clip``), step;
* **learning-rate schedule**: :class:`~rank_lab.engine.schedule.Schedule` (the one schedule), set
  from the global step before every step;
* **NaN guard**: a NaN/inf loss or gradient raises :class:`NonFiniteTrainingError` (naming the
  epoch, the step, the batch's dataset indices and the last good checkpoint) before the step is
  applied; a model holding NaN/inf is never saved;
* **checkpoint/resume**: modules, optimisers, grad scaler, named generators, the Python / NumPy /
  torch (CUDA) RNG states, epoch, step and history, written every ``checkpoint_every`` epochs as a
  sealed file (atomic, verified on load, the previous one kept: :mod:`rank_lab.engine.checkpoint`)
  and resumed from when the file exists (``resume``). **Determinism** (``docs/decisions.md``):
  a resumed run equals the straight run bit for bit on the CPU (tested for every loop,
  ``tests/engine/test_training_engine.py``); on CUDA only under deterministic algorithms
  (``rank_lab.utils.seed_everything(seed, deterministic=True)``, the Trainer's
  ``TrainConfig.deterministic``: ``torch.use_deterministic_algorithms(True, warn_only=False)`` with
  ``CUBLAS_WORKSPACE_CONFIG`` set before CUDA starts, and the rank losses' backward accumulating
  without atomic adds), on the same GPU model, driver and library versions; otherwise CUDA's atomic
  adds and cuBLAS' workspace may change the last bits. The exactness of the metrics is a separate
  promise (``docs/decisions.md``). **Resume rule** (``docs/decisions.md``): a checkpoint records the
  fingerprint of the run's data and code (:mod:`rank_lab.engine.fingerprint`), its configuration
  and its schedule; resuming is refused
  (:class:`~rank_lab.engine.checkpoint.CheckpointMismatchError`, a ``ValueError`` saying why and how
  to start a new run) unless it continues the same run on the same data with the same code, or makes
  a run whose schedule does not depend on its length (:data:`~rank_lab.engine.schedule.LENGTH_FREE`)
  longer. What a loop restored and trained is reported to :mod:`rank_lab.engine.run_report`;
* **progress**: one tqdm bar (``progress``).

Step-based loops (a number of steps rather than epochs) run one step per "epoch" (``unit="step"``),
so that they checkpoint and resume at any step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rank_lab._progress import tqdm
from rank_lab._validation import trusted_inputs
from rank_lab.engine import run_report
from rank_lab.engine.guard import NonFiniteTrainingError, describe_batch
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, StepResult
from rank_lab.engine.schedule import Schedule
from rank_lab.engine.state import EngineState
from rank_lab.utils import DeviceLike, check_amp_dtype, get_device

__all__ = ["Engine", "fit"]

_RESERVED = {
    "epoch",
    "step",
    "scaler",
    "history",
    "config",
    "rng",
    "schedule",
    "generators",
    "extra",
    "fingerprint",
}


class Engine(EngineState):
    """State and mechanics of one training run (see the module docstring); the checkpoint methods
    (state, save, resume, the resume rule and fingerprints) are
    :class:`~rank_lab.engine.state.EngineState`'s.

    Args:
        modules: the trained modules by name (the first is the model; a module named ``"model"``
            is what :func:`~rank_lab.engine.load_checkpoint` returns as ``ckpt["model"]``), or one
            module.
        optimizers: the optimisers by name, or one (named ``"optimizer"``).
        config: an :class:`EngineConfig` (default: one epoch, no checkpoint).
        device: the device of the modules (decides AMP; default: CUDA when present).
        schedule: the learning-rate schedule (``None``: the optimisers' rates are left alone).
        generators: named ``torch.Generator`` whose states are checkpointed with the run.
        run_key: what the run is (hyper-parameters, seed, data sizes): a resumed checkpoint must
            have the same, except ``free_keys``.
        free_keys: ``run_key`` entries that may change between a run and its resumption.
        record: the schedule record (default: ``epochs``, ``total_steps``, the schedule's fields and
            the base rates), compared by the resume rule.
        new_run_hint: how to start a new run, quoted by the resume rule's errors.
        autocast: wrap the step function in autocast (``False``: the step function autocasts itself
            with :meth:`autocast`).
        trained_on: what the run trains on (tensors, arrays, datasets, paths, functions and their
            captured values; see :func:`~rank_lab.engine.fingerprint.data_fingerprint`). Its
            fingerprint is stored in the checkpoint, and a checkpoint of other data is refused.
            ``None``: the data is not checked (only the configuration and the code are).
    """

    def __init__(
        self,
        modules: Mapping[str, nn.Module] | nn.Module,
        optimizers: Mapping[str, torch.optim.Optimizer] | torch.optim.Optimizer,
        config: EngineConfig | None = None,
        *,
        device: DeviceLike = None,
        schedule: Schedule | None = None,
        generators: Mapping[str, torch.Generator] | None = None,
        run_key: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        free_keys: Sequence[str] = (),
        record: Callable[[], dict[str, Any]] | None = None,
        new_run_hint: str = "set resume=False or use another checkpoint file",
        autocast: bool = True,
        trained_on: Any = None,
    ) -> None:
        self.config = cfg = config if config is not None else EngineConfig()
        if not isinstance(cfg, EngineConfig):
            raise TypeError(f"config must be an EngineConfig, got {type(cfg).__name__}")
        self.modules = dict(modules) if isinstance(modules, Mapping) else {"model": modules}
        self.optimizers = (
            dict(optimizers) if isinstance(optimizers, Mapping) else {"optimizer": optimizers}
        )
        self.generators = dict(generators or {})
        for name, obj in [*self.modules.items(), *self.optimizers.items()]:
            if name in _RESERVED:
                raise ValueError(
                    f"{name!r} is a reserved checkpoint key: name the module or optimiser otherwise"
                )
            if not isinstance(obj, (nn.Module, torch.optim.Optimizer)):
                raise TypeError(
                    f"{name} must be an nn.Module or a torch optimiser, got {type(obj).__name__}"
                )
        if not self.optimizers:
            raise ValueError("the engine needs at least one optimiser")
        self.device = get_device(device)
        self.schedule = schedule
        for opt in self.optimizers.values():
            for g in opt.param_groups:
                g.setdefault("base_lr", g["lr"])
        self.amp = cfg.amp and self.device.type == "cuda"
        self.amp_dtype = torch.float16 if cfg.amp_dtype == "float16" else torch.bfloat16
        if self.amp:
            check_amp_dtype(self.amp_dtype, self.device)
        self.scaler = torch.amp.GradScaler(
            "cuda", enabled=self.amp and self.amp_dtype == torch.float16
        )
        self._run_key = run_key
        self.free_keys = set(free_keys)
        self._record = record
        self.new_run_hint = new_run_hint
        self.autocast_steps = autocast
        self.checkpoint = Path(cfg.checkpoint) if cfg.checkpoint is not None else None
        self.epoch = 0  # completed epochs
        self.step = 0  # completed optimiser steps
        self.history: Any = []
        # (path, epoch) of the last state saved or resumed
        self.last_good_checkpoint: tuple[Path, int] | None = None
        self._trained_on = trained_on
        self._fingerprint: dict[str, Any] | None = None
        self.report = run_report.LoopReport(
            cfg.desc, cfg.unit, None if self.checkpoint is None else str(self.checkpoint.absolute())
        )
        self._backward_done = False
        self._batch: Batch | None = None

    # ------------------------------------------------------------------ one step
    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to ``amp_dtype`` when AMP is on (CUDA), else a no-op context."""
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Check the loss (the guard), then back-propagate it through the grad scaler.

        A step function that must back-propagate itself (multistage back-propagation, a phase that
        freezes modules around the backward) calls this instead of ``loss.backward()``.
        """
        self.check_loss(loss)
        self.scaler.scale(loss).backward()
        self._backward_done = True

    def mark_backward_done(self) -> None:
        """Tell the step that the step function back-propagated its (checked, scaled) loss
        itself."""
        self._backward_done = True

    def train_step(self, step_fn: Callable[[Any], Any], batch: Batch | Any) -> StepResult:
        """One optimiser step on ``batch`` (a :class:`Batch`, or the step function's argument)."""
        b = batch if isinstance(batch, Batch) else Batch(batch)
        name = b.optimizer if b.optimizer is not None else next(iter(self.optimizers))
        opt = self.optimizers[name]
        if self.schedule is not None:
            for g in opt.param_groups:
                g["lr"] = self.schedule.lr(self.step, g["base_lr"])
        opt.zero_grad(set_to_none=True)
        self._batch, self._backward_done = b, False
        amp = self.autocast() if self.autocast_steps else contextlib.nullcontext()
        with amp, trusted_inputs(self.modules.values()):  # the guard below checks what they return
            out = step_fn(b.data)
        loss, stats = out if isinstance(out, tuple) else (out, {})
        if not self._backward_done:
            self.backward(loss)
        else:
            self.check_loss(loss)
        params = [p for g in opt.param_groups for p in g["params"]]
        self.check_gradients(params)
        clip = (
            self.config.grad_clip.get(name)
            if isinstance(self.config.grad_clip, Mapping)
            else self.config.grad_clip
        )
        norm = None
        if clip is not None:
            self.scaler.unscale_(opt)
            norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        self.scaler.step(opt)
        self.scaler.update()
        self.step += 1
        self.report.steps_trained += 1
        self.report.register()
        self._batch = None
        return StepResult(float(loss.detach()), dict(stats), norm)

    # ------------------------------------------------------------------ the loop
    def run_epoch(
        self, step_fn: Callable[[Any], Any], batches: Iterable[Batch | Any], bar: Any = None
    ) -> list[StepResult]:
        """Run the steps of one epoch (epoch index ``self.epoch``) and return their results."""
        results = []
        for batch in batches:
            results.append(self.train_step(step_fn, batch))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{results[-1].loss:.4f}")
        return results

    def run(
        self,
        step_fn: Callable[[Any], Any],
        data: Callable[[int], Iterable[Batch | Any]],
        *,
        steps_per_epoch: int | None = None,
        on_epoch_start: Callable[[int], None] | None = None,
        on_epoch_end: Callable[[int, list[StepResult]], None] | None = None,
        resume: bool = True,
    ) -> None:
        """Run the remaining epochs: resume (when ``config.resume`` and the checkpoint exists), then
        per epoch ``on_epoch_start(e)``, the steps of ``data(e)``, the weight check,
        ``on_epoch_end(e, results)`` (``self.epoch`` already counts the epoch) and the
        checkpoint."""
        cfg = self.config
        if resume:
            self.maybe_resume()
        if self.checkpoint is not None:
            self.fingerprint()  # of the data as it is before training (a dataset may fill caches)
        per = steps_per_epoch if steps_per_epoch is not None else 1
        bar = tqdm(
            total=cfg.epochs * per,
            initial=min(self.epoch * per, cfg.epochs * per),
            desc=cfg.desc,
            disable=not cfg.progress,
            leave=False,
        )
        try:
            while self.epoch < cfg.epochs:
                e = self.epoch
                if on_epoch_start is not None:
                    on_epoch_start(e)
                results = self.run_epoch(
                    step_fn, data(e), bar if steps_per_epoch is not None else None
                )
                if steps_per_epoch is None:
                    bar.update(1)
                self.check_weights()  # before the epoch counts, is evaluated or saved
                self.epoch += 1
                self.report.trained += 1
                if on_epoch_end is not None:
                    on_epoch_end(e, results)
                every = cfg.checkpoint_every
                if (
                    self.checkpoint is not None
                    and every is not None
                    and (self.epoch % every == 0 or self.epoch == cfg.epochs)
                ):
                    self.save()
        finally:
            bar.close()

    # ------------------------------------------------------------------ numerical guard
    def non_finite(self, what: str, indices: Any = None) -> None:
        """Raise :class:`NonFiniteTrainingError` naming the step, the batch and the last good
        checkpoint."""
        idx = (
            None
            if indices is None
            else [int(i) for i in torch.as_tensor(indices).reshape(-1).tolist()]
        )
        step = f"step {self.step + 1}"
        where = (
            f"{self.config.desc} {step}"
            if self.config.unit == "step"
            else f"epoch {self.epoch + 1}, {step}"
        )
        if self.last_good_checkpoint is not None:
            path, ep = self.last_good_checkpoint
            at = f"step {ep}" if self.config.unit == "step" else f"epoch {ep}"
            last = (
                f"the last good checkpoint is {str(path)!r} ({at}): fix the cause (learning rate, "
                "inputs) and resume from it"
            )
        else:
            keep = (
                "checkpoint_dir" if "checkpoint_dir" in self.new_run_hint else "a checkpoint file"
            )
            last = f"no checkpoint was written yet (set {keep} to keep the last good state)"
        raise NonFiniteTrainingError(
            f"{what} at {where}{describe_batch(idx)}; training stopped before applying it and "
            f"nothing was saved; {last}",
            epoch=self.epoch + 1,
            step=self.step,
            batch_indices=idx,
            checkpoint=None if self.last_good_checkpoint is None else self.last_good_checkpoint[0],
        )

    def check_loss(self, loss: torch.Tensor) -> None:
        """The guard on a step's loss (a scalar tensor)."""
        if not isinstance(loss, torch.Tensor):
            raise TypeError(
                "the step function must return a loss tensor (or (loss, stats)), got "
                f"{type(loss).__name__}"
            )
        if not bool(torch.isfinite(loss.detach()).all()):
            b = self._batch
            label = f" in {b.label}" if b is not None and b.label else ""
            self.non_finite(
                f"the loss is {float(loss.detach().reshape(-1)[0])}{label}",
                None if b is None else b.indices,
            )

    def check_gradients(self, params: Sequence[torch.Tensor]) -> None:
        """A finite loss can still give NaN/inf gradients: refuse the step (unless a grad scaler
        skips it)."""
        if self.scaler.is_enabled():
            return  # float16 AMP: the GradScaler skips steps with inf/NaN gradients by design
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads)
            if not torch.isfinite(norm):
                self.non_finite(
                    f"the gradient norm is {float(norm)}",
                    None if self._batch is None else self._batch.indices,
                )

    def check_weights(self) -> None:
        """Refuse to save (or go on with) a module holding NaN/inf: never a NaN checkpoint."""
        for module in self.modules.values():
            for name, t in [*module.named_parameters(), *module.named_buffers()]:
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    self.non_finite(f"the weight {name!r} holds NaN or inf", None)


def fit(
    model: nn.Module | Mapping[str, nn.Module],
    step_fn: Callable[[Any], Any],
    data: Callable[[int], Iterable[Batch | Any]],
    config: EngineConfig | None = None,
    *,
    optimizer: torch.optim.Optimizer | Mapping[str, torch.optim.Optimizer] | None = None,
    lr: float = 1e-3,
    steps_per_epoch: int | None = None,
    on_epoch_start: Callable[[int], None] | None = None,
    on_epoch_end: Callable[[int, list[StepResult]], None] | None = None,
    **engine_kwargs: Any,
) -> Engine:
    """Train ``model`` with ``step_fn`` on ``data`` for ``config.epochs`` epochs: the engine's core.

    Args:
        model: the trained module (or named modules, the first being the model).
        step_fn: ``step_fn(batch) -> loss`` or ``(loss, stats)`` (a scalar tensor; stats floats).
        data: ``data(epoch)`` yields the epoch's batches (:class:`Batch`, or the step function's
            argument); draw them from the generators passed in ``engine_kwargs`` so that a resumed
            run draws the same.
        config: the shared options (:class:`EngineConfig`).
        optimizer: default Adam over the trainable parameters with ``lr``.
        steps_per_epoch: the progress bar's steps per epoch (``None``: the bar counts epochs).
        on_epoch_start, on_epoch_end: see :meth:`Engine.run`.
        **engine_kwargs: the other arguments of :class:`Engine` (device, schedule, generators,
            run_key ...).

    Returns:
        The :class:`Engine` after the run (``engine.history`` holds what the hooks recorded).
    """
    modules = dict(model) if isinstance(model, Mapping) else {"model": model}
    if optimizer is None:
        optimizer = build_optimizer(
            [p for m in modules.values() for p in m.parameters() if p.requires_grad], lr=lr
        )
    engine = Engine(modules, optimizer, config, **engine_kwargs)
    engine.run(
        step_fn,
        data,
        steps_per_epoch=steps_per_epoch,
        on_epoch_start=on_epoch_start,
        on_epoch_end=on_epoch_end,
    )
    return engine


def one_batch(batch: Batch | Any) -> Iterator[Batch | Any]:
    """The batches of a one-step epoch (step-based loops):
    ``data = lambda step: one_batch(...)``."""
    yield batch
