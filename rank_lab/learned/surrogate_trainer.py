"""Algorithm 1 of the Patel thesis: the alternating training of a learned surrogate and a model.

:class:`SurrogateTrainer` and :func:`evaluate_surrogate`; the surrogate, its loss, the task
interface and the configuration are in :mod:`rank_lab.learned.surrogate_model`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from typing import Any

import torch
from torch import nn

from rank_lab._validation import check_choice, check_positive_int
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer
from rank_lab.engine.options import Batch, EngineConfig, StepResult, loop_options
from rank_lab.learned._checks import check_module
from rank_lab.learned.surrogate_model import (
    EmbeddingSurrogate,
    LSConfig,
    SurrogateTask,
    ls_model_loss,
    surrogate_loss,
)
from rank_lab.utils import get_device

__all__ = ["SurrogateTrainer", "evaluate_surrogate"]


class SurrogateTrainer:
    """Alternating training of a surrogate and a model: Algorithm 1 of the Patel thesis, on the
    engine.

    Each epoch first updates ``Phi`` for ``I_a`` steps with eq. 3.6 on pairs from the configured
    source (the model is frozen and its predictions detached), then updates ``Theta`` for ``I_b``
    steps on ``model_loss(e_hat, e)`` with ``Phi`` frozen (gradients flow *through* ``h_Phi``).
    With :func:`ls_model_loss` this is LS; :class:`rank_lab.learned.feds.FEDSTrainer` plugs in
    the filtered loss of eq. 4.7 (Algorithm 2). The two phases are steps of one training engine
    (:class:`rank_lab.engine.loop.Engine`) with two optimisers (``opt_s``, ``opt_m``): the same
    NaN guard, checkpoint/resume, progress and AMP as every loop of the package.

    Args:
        model: the pre-trained task model ``f_Theta``.
        surrogate: an :class:`EmbeddingSurrogate` (randomly initialised, Sec. 3.2.3).
        task: the task adapter (:class:`SurrogateTask`); its ``device`` is set to the trainer's
            (its batches must sit where the model is).
        config: :class:`LSConfig` (``epochs`` may be raised between two :meth:`fit` calls).
        model_loss: ``(e_hat, e_true) -> loss`` or ``-> (loss, stats)``; default LS.
        seed: seeds all sampling (batches, generator).
        device: device (default: CUDA when present).
        eval_fn: called as ``eval_fn(model)`` after each epoch (and once before training); its
            dict is stored in ``history["eval"]``.
        engine: the run's options (:class:`~rank_lab.engine.options.EngineConfig`: a
            ``checkpoint`` file saved every ``checkpoint_every`` epochs, an existing file is resumed
            from (``resume``); progress; mixed precision on CUDA). The run's length is
            ``config.epochs`` and the model phase's gradient clipping ``config.grad_clip``.

    The run's :attr:`history` lists ``surrogate`` (per surrogate step: ``l1_local``, ``l1_global``,
    ``gp``, ``grad_norm``), ``model`` (per model step: ``loss``, ``e_hat``, ``e`` + the model loss'
    statistics) and ``eval`` (per epoch).
    """

    def __init__(
        self,
        model: nn.Module,
        surrogate: EmbeddingSurrogate,
        task: SurrogateTask,
        config: LSConfig | None = None,
        *,
        model_loss: Callable[[torch.Tensor, torch.Tensor], Any] = ls_model_loss,
        seed: int = 0,
        device: torch.device | str | None = None,
        eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
        engine: EngineConfig | None = None,
    ) -> None:
        check_module(model), check_module(surrogate, "surrogate")
        if config is not None and not isinstance(config, LSConfig):
            raise TypeError(f"config must be an LSConfig, got {type(config).__name__}")
        if not callable(model_loss):
            raise TypeError(f"model_loss must be callable, got {type(model_loss).__name__}")
        self.config = config or LSConfig()
        options = loop_options(engine, epochs=self.config.epochs, desc="LS epochs")
        if options.grad_clip is not None:
            raise ValueError(
                "engine.grad_clip must be None: the model phase is clipped with "
                "config.grad_clip (LSConfig), the surrogate phase is not clipped"
            )
        self.device = get_device(device)
        self.model = model.to(self.device)
        self.surrogate = surrogate.to(self.device)
        self.task = task
        task.device = self.device
        self.model_loss = model_loss
        self.eval_fn = eval_fn
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed)
        self.opt_s = build_optimizer(self.surrogate.parameters(), lr=self.config.surrogate_lr)
        self.opt_m = build_optimizer(self.model.parameters(), lr=self.config.model_lr)
        self.engine = Engine(
            {"model": self.model, "surrogate": self.surrogate},
            {"opt_s": self.opt_s, "opt_m": self.opt_m},
            replace(options, grad_clip={"opt_m": self.config.grad_clip}),
            device=self.device,
            generators={"gen": self.gen},
            run_key=self._run_key,
            trained_on=self.task,
        )
        self.engine.history = {"surrogate": [], "model": [], "eval": []}

    epoch = property(
        lambda self: self.engine.epoch,
        lambda self, v: setattr(self.engine, "epoch", v),
        doc="Completed epochs (the engine's counter).",
    )
    history = property(
        lambda self: self.engine.history,
        lambda self, v: setattr(self.engine, "history", v),
        doc=(
            "The run's history (the engine's): ``surrogate``, ``model`` and ``eval`` lists of "
            "dicts."
        ),
    )

    def _run_key(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in asdict(self.config).items() if k != "epochs"},
            "seed": self.seed,
        }

    # -- the two phases: the engine's step functions -------------------------------------------
    def _surrogate_phase(self, _: object) -> tuple[torch.Tensor, dict[str, float]]:
        """The surrogate's loss of one step (Algorithm 1 lines 4-7; Algorithm 2 lines 4-7)."""
        cfg, task = self.config, self.task
        self.model.eval()
        self.surrogate.train()
        loss = torch.zeros((), device=self.device)
        stats: dict[str, float] = {}
        if cfg.source in ("local", "local_global"):
            batch = task.sample_batch(self.gen)
            with torch.no_grad():
                z = task.predict(self.model, batch)
                y = task.encode_target(z, batch)
                e = task.metric(z, batch)
            l_loc, s = surrogate_loss(
                self.surrogate,
                z,
                y,
                e,
                grad_penalty=cfg.grad_penalty,
                fit_weight=cfg.fit_weight,
                grad_target=cfg.grad_target,
            )
            loss = loss + l_loc
            stats.update(l1_local=s["l1"], gp=s["gp"], grad_norm=s["grad_norm"])
        if cfg.source in ("global", "local_global"):
            zr, yr, er = task.sample_global(cfg.global_batch_size or task.batch_size, self.gen)
            l_glob, s = surrogate_loss(
                self.surrogate,
                zr.to(self.device),
                yr.to(self.device),
                er.to(self.device),
                grad_penalty=cfg.grad_penalty,
                fit_weight=cfg.fit_weight,
                grad_target=cfg.grad_target,
            )
            loss = loss + l_glob
            stats["l1_global"] = s["l1"]
            stats.setdefault("gp", s["gp"])
            stats.setdefault("grad_norm", s["grad_norm"])
        if cfg.source == "global" and cfg.monitor_local:
            batch = task.sample_batch(self.gen)
            with torch.no_grad():
                z = task.predict(self.model, batch)
                e_hat = self.surrogate(z, task.encode_target(z, batch))
                stats["l1_local"] = float((e_hat - task.metric(z, batch)).abs().mean())
        return loss, stats

    def _model_phase(self, _: object) -> tuple[torch.Tensor, dict[str, float]]:
        """The model's loss of one step through the frozen surrogate (Algorithm 1 lines 11-14),
        back-propagated here while ``Phi`` is frozen."""
        task = self.task
        self.model.train(self.config.model_train_mode)
        self.surrogate.eval()
        for p in self.surrogate.parameters():
            p.requires_grad_(False)
        try:
            batch = task.sample_batch(self.gen)
            z = task.predict(self.model, batch)
            with torch.no_grad():
                y = task.encode_target(z.detach(), batch)
                e = task.metric(z.detach(), batch)
            e_hat = self.surrogate(z, y)
            out = self.model_loss(e_hat, e)
            loss, extra = out if isinstance(out, tuple) else (out, {})
            self.engine.backward(loss)
        finally:
            for p in self.surrogate.parameters():
                p.requires_grad_(True)
        stats = {"e_hat": float(e_hat.detach().mean()), "e": float(e.float().mean())}
        stats.update({k: float(v) for k, v in extra.items()})
        return loss, stats

    def surrogate_step(self) -> dict[str, float]:
        """One update of ``Phi`` (Algorithm 1 lines 4-7; Algorithm 2 lines 4-7)."""
        r = self.engine.train_step(
            self._surrogate_phase, Batch(None, optimizer="opt_s", label="the surrogate phase")
        )
        return {**r.stats, "loss": r.loss}

    def model_step(self) -> dict[str, float]:
        """One update of ``Theta`` through the frozen surrogate (Algorithm 1 lines 11-14)."""
        r = self.engine.train_step(
            self._model_phase, Batch(None, optimizer="opt_m", label="the model phase")
        )
        return {"loss": r.loss, **r.stats}

    # -- the loop ----------------------------------------------------------------------------
    def _n_surrogate(self, epoch: int) -> int:
        cfg = self.config
        return (
            cfg.first_surrogate_steps
            if (epoch == 0 and cfg.first_surrogate_steps is not None)
            else cfg.surrogate_steps
        )

    def _phases(self, epoch: int) -> Iterator[Batch]:
        for _ in range(self._n_surrogate(epoch)):
            yield Batch(self._surrogate_phase, optimizer="opt_s", label="the surrogate phase")
        for _ in range(self.config.model_steps):
            yield Batch(self._model_phase, optimizer="opt_m", label="the model phase")

    def _end_epoch(self, epoch: int, results: list[StepResult]) -> None:
        n_s = self._n_surrogate(epoch)
        self.history["surrogate"] += [
            {"epoch": epoch + 1, **r.stats, "loss": r.loss} for r in results[:n_s]
        ]
        self.history["model"] += [
            {"epoch": epoch + 1, "loss": r.loss, **r.stats} for r in results[n_s:]
        ]
        if self.eval_fn is not None:
            self.history["eval"].append({"epoch": self.epoch, **self.eval_fn(self.model)})

    def fit(self) -> dict[str, list[dict[str, float]]]:
        """Run the remaining epochs (resuming from the engine's checkpoint if it exists); returns
        the history."""
        self.engine.config.epochs = self.config.epochs  # may have been raised since the last call
        self.engine.maybe_resume()
        if self.eval_fn is not None and not self.history["eval"]:
            self.history["eval"].append({"epoch": 0, **self.eval_fn(self.model)})
        self.engine.run(
            lambda phase: phase(None), self._phases, on_epoch_end=self._end_epoch, resume=False
        )
        return self.history

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimisers, epoch, history, generator and RNG
        states."""
        return self.engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the resume rule of the engine applies)."""
        self.engine.load_state_dict(state)


@torch.no_grad()
def evaluate_surrogate(
    model: nn.Module | None,
    surrogate: EmbeddingSurrogate,
    task: SurrogateTask,
    source: str = "local",
    n_batches: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """Approximation quality of a surrogate on fresh pairs (the scatter of Fig. 3.2 / 4.4).

    Args:
        model: the task model (needed for ``source="local"``).
        surrogate: the surrogate.
        task: the task adapter.
        source: ``"local"`` (model predictions) or ``"global"`` (generator pairs).
        n_batches: batches to draw.
        seed: seeds the draw.

    Returns:
        A dict with ``"e"`` (``(n,)`` true values), ``"e_hat"`` (``(n,)`` surrogate values),
        ``"l1"`` (mean ``|e_hat - e|``) and ``"pearson"`` (their correlation; NaN, with a
        ``UserWarning``, when ``e`` or ``e_hat`` is constant: the correlation is undefined).
    """
    check_choice(source, "source", ("local", "global"))
    n_batches = check_positive_int(n_batches, "n_batches")
    check_module(surrogate, "surrogate")
    if source == "local" and not isinstance(model, nn.Module):
        raise ValueError(
            f"model (an nn.Module) is required for source='local', got {type(model).__name__}"
        )
    gen = torch.Generator().manual_seed(seed)
    surrogate.eval()
    if model is not None:
        model.eval()
    es, ehs = [], []
    dev = next(surrogate.parameters()).device
    for _ in range(n_batches):
        if source == "local":
            batch = task.sample_batch(gen)
            z = task.predict(model, batch)  # type: ignore[arg-type]
            y, e = task.encode_target(z, batch), task.metric(z, batch)
        else:
            z, y, e = (t.to(dev) for t in task.sample_global(task.batch_size, gen))
        es.append(e.float().cpu())
        ehs.append(surrogate(z, y).float().cpu())
    e, e_hat = torch.cat(es), torch.cat(ehs)
    if len(e) > 1 and e.std() > 0 and e_hat.std() > 0:
        pearson = float(torch.corrcoef(torch.stack([e, e_hat]))[0, 1])
    else:
        warnings.warn(
            "evaluate_surrogate: e or e_hat is constant, the Pearson correlation is undefined "
            "(NaN)",
            UserWarning,
            stacklevel=2,
        )
        pearson = math.nan
    return {"e": e, "e_hat": e_hat, "l1": float((e - e_hat).abs().mean()), "pearson": pearson}
