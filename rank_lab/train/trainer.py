"""The retrieval trainer: the engine (:mod:`rank_lab.engine.loop`) configured for metric learning.

m-per-class batches, a rank loss (with an optional cross-batch memory), Adam/AdamW/SGD with a
separate head learning rate, a per-step cosine, constant or step schedule with warm-up
(:meth:`~rank_lab.train.config.TrainConfig.schedule`), evaluation with
:func:`rank_lab.metrics.retrieval_metrics` and a JSON log of every epoch; mixed precision, gradient
clipping, the NaN guard, checkpoint/resume and progress are the engine's. A resumed run equals the
straight run bit for bit on the CPU, and on CUDA with ``deterministic=True`` only (the engine's
determinism promise, :mod:`rank_lab.engine.loop`); the rank loss is computed on float32 scores
whatever ``amp`` says (the losses leave autocast).

The training step is the one of the Ramzi thesis §3.5: ``v = normalize(f_theta(x))``;
``loss = L(v, y)`` or, with a cross-batch memory (XBM, §2.10; :class:`rank_lab.memory.MemoryLoss`),
``(L(v, y) + w L(v, y, V_mem, y_mem)) / (1 + w)`` as in the official code, the memory holding the
current (detached) batch ("enqueue then read"; ``w = 1`` gives the official
``(batch + memory) / 2``).
Training labels are re-indexed per column to ``0..C-1`` (``relabel_train``) so that proxy losses
(``L*_DG``, NormSoftmax) can index their proxies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from rank_lab._progress import tqdm
from rank_lab.data import HierarchicalSampler, MPerClassSampler
from rank_lab.engine.checkpoint import atomic_write_json
from rank_lab.engine.loop import Engine
from rank_lab.engine.optim import build_optimizer, param_groups
from rank_lab.engine.options import Batch, StepResult
from rank_lab.losses.registry import build_loss, loss_info
from rank_lab.memory import CrossBatchMemory, MemoryLoss
from rank_lab.models import build_model
from rank_lab.train.config import TrainConfig
from rank_lab.train.data import (
    IndexedDataset,
    as_dataset,
    embed_dataset,
    relabel,
)
from rank_lab.train.evaluation import RetrievalEvaluation
from rank_lab.train.multistage import multistage_backward
from rank_lab.utils import get_device, loader_workers, seed_everything, seed_worker

__all__ = ["Trainer"]

#: Config keys that may change between an interrupted run and its resumption.
_RESUME_FREE = {
    "epochs",
    "progress",
    "resume",
    "checkpoint_dir",
    "log_path",
    "eval_every",
    "device",
    "num_workers",
    "eval_batch_size",
    "checkpoint_every",
    "eval_at_start",
    "data_dir",
    "multistage_chunk_size",
    "dist_loss",
    # they shape only the "step" schedule, whose record (schedule()) holds them
    "milestones",
    "gamma",
}


def _engine_attr(name: str, doc: str) -> property:
    """A trainer attribute that is the engine's (read and written through)."""
    return property(
        lambda self: getattr(self.engine, name),
        lambda self, v: setattr(self.engine, name, v),
        doc=doc,
    )


class Trainer(RetrievalEvaluation):
    """Train an embedding model with a rank loss and evaluate it (see the module docstring).

    Args:
        model: the network (``None``: :func:`rank_lab.models.build_model` from ``config.model``;
            an MLP's ``input_dim`` is then read from the data). An
            :class:`~rank_lab.models.EmbeddingModel` gets two parameter groups (backbone ``lr``,
            pooling + head ``head_lr``); any other module one group.
        loss: ``loss(emb (B,d), labels)`` and, with a memory,
            ``loss(emb, labels, ref_emb (M,d), ref_labels)`` (``None``: ``build_loss(config.loss,
            **config.loss_kwargs)``). Its parameters (proxies) are trained with ``loss_lr``.
        train_data: ``(x, y)`` tensors, a ``TensorDataset`` or a dataset with ``.labels``; tensors
            are checked when the trainer is built (:func:`~rank_lab.train.as_dataset`). A NaN met
            later (a lazily read image, an overflow) stops training
            (:class:`NonFiniteTrainingError`).
        test_data: same forms; evaluated every ``config.eval_every`` epochs.
        config: a :class:`TrainConfig` or a dict for :meth:`TrainConfig.from_dict`.
        memory: a :class:`rank_lab.memory.CrossBatchMemory` (``None``: built from
            ``config.memory_size`` when > 0); the loss is then wrapped in a
            :class:`rank_lab.memory.MemoryLoss` (a loss that already is one is used as it is).
        callbacks: called as ``cb(trainer, record)`` after every epoch's record is logged and its
            checkpoint written (an exception there stops training with the state saved).
    """

    def __init__(
        self,
        model: nn.Module | None,
        loss: nn.Module | Callable[..., torch.Tensor] | None,
        train_data: Any,
        test_data: Any = None,
        config: TrainConfig | Mapping[str, Any] | None = None,
        *,
        memory: Any = None,
        callbacks: Sequence[Callable[[Trainer, dict[str, Any]], None]] = (),
    ) -> None:
        if config is None:
            config = TrainConfig()
        elif isinstance(config, Mapping):
            config = TrainConfig.from_dict(config)
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig or a dict, got {type(config).__name__}")
        self.config = cfg = config
        self.device = get_device(cfg.device)
        seed_everything(cfg.seed, deterministic=cfg.deterministic)
        self.train_set, raw = as_dataset(train_data, "train_data")
        self.train_labels = relabel(raw) if cfg.relabel_train else raw
        self.test_data = test_data
        if test_data is not None:
            self._check_eval_ks(len(as_dataset(test_data, "test_data")[1]))
        if model is None:
            model = self._build_model()
        self.model = model.to(self.device)
        if loss is None:
            loss = self._build_loss()
        self.loss_fn = self._wrap_memory(loss, memory)
        if isinstance(self.loss_fn, nn.Module):
            self.loss_fn = self.loss_fn.to(self.device)
        self.callbacks = list(callbacks)
        self.sampler = self._build_sampler()
        self.steps_per_epoch = len(self.sampler)
        self.optimizer = self._build_optimizer()
        ckdir = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        self.checkpoint_path = ckdir / "last.pt" if ckdir else None
        self.log_path = (
            Path(cfg.log_path) if cfg.log_path else (ckdir / "log.json" if ckdir else None)
        )
        self.engine = Engine(
            {
                "model": self.model,
                **({"loss": self.loss_fn} if isinstance(self.loss_fn, nn.Module) else {}),
            },
            {"optimizer": self.optimizer},
            cfg.engine_options(self.checkpoint_path),
            device=self.device,
            autocast=False,
            run_key=self.config.to_dict,
            free_keys=_RESUME_FREE,
            record=self.schedule,
            schedule=cfg.schedule(self.steps_per_epoch),
            new_run_hint="set resume=False or use another checkpoint_dir",
            trained_on=(self.train_set, self.train_labels, test_data),
        )
        self.amp, self.amp_dtype, self.scaler = (
            self.engine.amp,
            self.engine.amp_dtype,
            self.engine.scaler,
        )

    # ------------------------------------------------------------------ construction
    def _build_model(self) -> nn.Module:
        mcfg = self.config.model
        if mcfg.backbone.lower() == "mlp" and mcfg.input_dim is None:
            x0 = self.train_set[0][0]
            mcfg.input_dim = int(torch.as_tensor(x0).numel())
        return build_model(mcfg)

    def _build_sampler(self) -> Any:
        """The batch sampler of the training set: m-per-class (Ramzi thesis §3.5.1) or, with
        ``sampler="hierarchical"``, the super-class sampler of §4.4.1 (HAPPIER)."""
        cfg = self.config
        if cfg.sampler == "hierarchical":
            if self.train_labels.ndim != 2 or self.train_labels.shape[1] < 2:
                raise ValueError(
                    "sampler='hierarchical' needs (N, L) training labels with L >= 2 (fine, "
                    "coarse, ...)"
                )
            return HierarchicalSampler(
                self.train_labels,
                batch_size=cfg.batch_size,
                samples_per_class=cfg.m_per_class,
                super_classes_per_batch=cfg.super_classes_per_batch,
                max_batches=cfg.batches_per_epoch,
                seed=cfg.seed,
            )
        length = None if cfg.batches_per_epoch is None else cfg.batches_per_epoch * cfg.batch_size
        return MPerClassSampler(
            self.train_labels,
            m=cfg.m_per_class,
            batch_size=cfg.batch_size,
            length=length,
            seed=cfg.seed,
        )

    def _embedding_dim(self) -> int:
        dim = getattr(self.model, "embedding_dim", None)
        if dim is None:
            dim = int(
                embed_dataset(
                    self.model,
                    (self.train_set[0][0][None], self.train_labels[:1]),
                    device=self.device,
                )[0].shape[1]
            )
        return int(dim)

    def _build_loss(self) -> nn.Module:
        cfg = self.config
        if cfg.loss is None:
            raise ValueError(
                "no loss given: pass a loss module or set config.loss to a rank_lab.losses name"
            )
        kwargs = dict(cfg.loss_kwargs)
        # the registry says which training-set facts the loss takes
        needs = loss_info(cfg.loss).needs
        fine = self.train_labels if self.train_labels.ndim == 1 else self.train_labels[:, 0]
        if "n_classes" in needs and "n_classes" not in kwargs:
            kwargs["n_classes"] = (
                int(fine.max()) + 1 if cfg.relabel_train else int(torch.unique(fine).numel())
            )
        if "dim" in needs and "dim" not in kwargs:
            kwargs["dim"] = self._embedding_dim()
        return build_loss(cfg.loss, **kwargs)

    def _wrap_memory(self, loss: Any, memory: Any) -> Any:
        cfg = self.config
        if isinstance(loss, MemoryLoss):
            self.memory = loss.memory
            return loss
        if memory is None and cfg.memory_size > 0:
            n_levels = 0 if self.train_labels.ndim == 1 else int(self.train_labels.shape[1])
            size = len(self.train_labels) if cfg.memory_unique else cfg.memory_size
            memory = CrossBatchMemory(
                size, self._embedding_dim(), n_levels=n_levels, unique=cfg.memory_unique
            )
        self.memory = memory
        if memory is None:
            return loss
        if not isinstance(memory, CrossBatchMemory):
            raise TypeError(
                f"memory must be a rank_lab.memory.CrossBatchMemory, got {type(memory).__name__}"
            )
        w = cfg.memory_weight
        return MemoryLoss(
            loss,
            memory,
            batch_weight=1.0 / (1.0 + w),
            memory_weight=w / (1.0 + w),
            activate_after=cfg.memory_activate_epoch,
        )

    def _build_optimizer(self) -> torch.optim.Optimizer:
        cfg = self.config
        groups = param_groups(
            self.model, self.loss_fn, lr=cfg.lr, head_lr=cfg.head_lr, loss_lr=cfg.loss_lr
        )
        return build_optimizer(
            groups,
            cfg.optimizer,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
        )

    # ------------------------------------------------------------------ the engine's state
    epoch = _engine_attr("epoch", "Completed epochs (the engine's counter).")
    step = _engine_attr("step", "Completed optimiser steps (the engine's counter).")
    history = _engine_attr("history", "One record per epoch (the engine's history).")
    last_good_checkpoint = _engine_attr(
        "last_good_checkpoint", "``(path, epoch)`` of the last state saved or resumed."
    )

    def _freeze_backbone(self, frozen: bool) -> None:
        for p in (
            self.model.backbone_parameters() if hasattr(self.model, "backbone_parameters") else ()
        ):
            p.requires_grad_(not frozen)

    # ------------------------------------------------------------------ one step
    def _loss(self, emb: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        if self.memory is not None:
            return self.loss_fn(emb, y, keys=idx)
        return self.loss_fn(emb, y)

    @property
    def _train_module(self) -> nn.Module:
        """The module run on training batches (the DDP wrapper under the distributed trainer)."""
        return self.model

    def _batch_loss(self, emb: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Loss of a batch's embeddings ``(B, d)``, checked finite (the distributed trainer gathers
        first)."""
        self._check_embeddings(emb, idx)
        loss = self._loss(emb, y, idx)
        if not torch.isfinite(loss):
            self._non_finite(f"the loss is {float(loss.detach())}", idx)
        return loss

    def _non_finite(self, what: str, idx: torch.Tensor | None) -> None:
        """Raise :class:`NonFiniteTrainingError` naming the step, the batch and the last good
        checkpoint."""
        self.engine.non_finite(what, idx)

    def _check_embeddings(self, emb: torch.Tensor, idx: torch.Tensor) -> None:
        """NaN/inf embeddings (a bad input item read lazily, an overflow in the model) stop training
        here, naming the batch, before the loss refuses them with a ``ValueError`` of its own."""
        if not bool(torch.isfinite(emb.detach()).all()):
            self._non_finite("the model's embeddings hold NaN or inf", idx)

    def _forward_backward(
        self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor
    ) -> torch.Tensor:
        """Embed the batch, back-propagate the (AMP-scaled) loss; return it detached.

        With ``config.multistage_chunk_size`` the batch is embedded chunk by chunk and the loss
        gradient pushed back chunk by chunk (multistage back-propagation, Patel thesis §5.3.2).
        """
        chunk = self.config.multistage_chunk_size
        if chunk is None:
            with self.engine.autocast():
                emb = self._train_module(x)
            loss = self._batch_loss(emb.float(), y, idx)
            self.engine.backward(loss)
            return loss.detach()
        seen: list[torch.Tensor] = []

        def loss_fn(emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            with torch.autocast(self.device.type, enabled=False):
                seen.append(self._batch_loss(emb.float(), labels, idx))
            return self.scaler.scale(seen[-1])

        with self.engine.autocast():
            # a NaN read lazily reaches _batch_loss's check of the embeddings (the guard), as
            # without chunks
            multistage_backward(
                self._train_module,
                x,
                y,
                loss_fn,
                chunk_size=chunk,
                device=self.device,
                trusted=True,
            )
        self.engine.mark_backward_done()
        return seen[-1].detach()

    def _step(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The engine's step function: one ``(x, y, index)`` batch of the loader."""
        x, y, idx = batch
        return self._forward_backward(
            x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True), idx
        )

    # ------------------------------------------------------------------ one epoch
    def _epoch_batches(self, e: int) -> Iterator[Batch]:
        """The batches of epoch ``e``: the sampler's draw for ``(seed, e)``, loaded with a generator
        seeded by them."""
        cfg = self.config
        gen = torch.Generator()
        gen.manual_seed(cfg.seed * 100_003 + e)
        loader = DataLoader(
            IndexedDataset(self.train_set, self.train_labels),
            batch_sampler=self.sampler,
            num_workers=loader_workers(cfg.num_workers),
            generator=gen,
            worker_init_fn=seed_worker,
            pin_memory=self.device.type == "cuda",
        )
        for x, y, idx in loader:
            yield Batch((x, y, idx), indices=idx)

    def _start_epoch(self, e: int) -> None:
        cfg = self.config
        self.sampler.set_epoch(e)
        self.model.train()
        if isinstance(self.loss_fn, nn.Module):
            self.loss_fn.train()
        self._frozen = e < cfg.freeze_backbone_epochs
        self._freeze_backbone(self._frozen)
        if self.memory is not None:
            self.loss_fn.set_epoch(e)
        self._use_memory = self.memory is not None and bool(self.loss_fn.active)
        self._t0 = time.perf_counter()

    def _epoch_record(self, e: int, results: list[StepResult]) -> dict[str, Any]:
        if self._frozen:
            self._freeze_backbone(False)
        losses = [r.loss for r in results]
        norms = [r.grad_norm for r in results if r.grad_norm is not None]
        lrs = {g.get("name", str(i)): g["lr"] for i, g in enumerate(self.optimizer.param_groups)}
        rec: dict[str, Any] = {
            "epoch": e + 1,
            "step": self.step,
            "loss": sum(losses) / len(losses),
            "loss_last": losses[-1],
            "lr": next(iter(lrs.values())),
            "lrs": lrs,
            "time": time.perf_counter() - self._t0,
            "n_batches": len(losses),
            "memory_active": self._use_memory,
            "backbone_frozen": self._frozen,
        }
        if norms:
            rec["grad_norm"] = sum(norms) / len(norms)
        return rec

    def train_epoch(self) -> dict[str, Any]:
        """Run one epoch (epoch index ``self.epoch``) and return its partial record."""
        e = self.epoch
        self._start_epoch(e)
        with tqdm(
            total=self.steps_per_epoch,
            desc=f"epoch {e + 1}/{self.config.epochs}",
            disable=not self.config.progress,
            leave=False,
        ) as bar:
            results = self.engine.run_epoch(self._step, self._epoch_batches(e), bar)
        return self._epoch_record(e, results)

    def _end_epoch(self, e: int, results: list[StepResult]) -> None:
        """The engine's end-of-epoch hook: the record, the evaluation, the log and the
        checkpoint."""
        cfg = self.config
        rec = self._epoch_record(e, results)
        do_eval = (
            self.test_data is not None
            and cfg.eval_every > 0
            and (self.epoch % cfg.eval_every == 0 or self.epoch == cfg.epochs)
        )
        rec["metrics"] = self.evaluate() if do_eval else None
        save = self.checkpoint_path is not None and (
            self.epoch % cfg.checkpoint_every == 0 or self.epoch == cfg.epochs
        )
        self._log(rec, save=save)

    # ------------------------------------------------------------------ checkpoints
    def schedule(self) -> dict[str, Any]:
        """The schedule of this run: everything that shapes the learning rate and the batches over
        time.

        Recorded in every checkpoint and compared on resume (:meth:`load_state_dict`).
        """
        cfg = self.config
        record = {
            "epochs": cfg.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": cfg.epochs * self.steps_per_epoch,
            "warmup_steps": cfg.warmup_epochs * self.steps_per_epoch,
            "scheduler": cfg.scheduler,
            "min_lr": cfg.min_lr,
            "base_lrs": {
                g.get("name", str(i)): g["base_lr"]
                for i, g in enumerate(self.optimizer.param_groups)
            },
            "batch_size": cfg.batch_size,
            "freeze_backbone_epochs": cfg.freeze_backbone_epochs,
            "memory_activate_epoch": cfg.memory_activate_epoch,
        }
        if cfg.scheduler == "step":
            record.update(milestones=list(cfg.milestones), gamma=cfg.gamma)
        return record

    def state_dict(self) -> dict[str, Any]:
        """The engine's state (model, optimiser, scaler, loss with proxies and memory, RNG, history,
        config, :meth:`schedule`)."""
        return self.engine.state_dict()

    def load_state_dict(
        self, state: Mapping[str, Any], check_config: bool = True, *, source: str = "the checkpoint"
    ) -> None:
        """Restore a :meth:`state_dict` (model, optimiser, RNG, history ...).

        **Resume rule** (``check_config=True``, ``docs/decisions.md``,
        :func:`~rank_lab.engine.guard.check_resume`): resuming continues the checkpoint's run only
        when the result equals a straight run of this config: the same config (except keys such as
        ``epochs``, ``device``, ``progress``) and the same
        :meth:`schedule`, or more ``epochs`` under the ``"constant"`` or ``"step"`` scheduler.
        Otherwise a ``ValueError`` says how to start a new run.
        """
        self.engine.load_state_dict(state, check_config, source=source)

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Write the state atomically (default ``checkpoint_dir/last.pt``); a model or loss holding
        NaN/inf raises :class:`NonFiniteTrainingError` and nothing is written."""
        path = Path(path) if path is not None else self.checkpoint_path
        if path is None:
            raise ValueError("no checkpoint path: set config.checkpoint_dir or pass path")
        return self.engine.save(path, self.state_dict())

    def resume_from(self, path: str | Path) -> None:
        """Load a checkpoint file written by :meth:`save_checkpoint` (see
        :meth:`load_state_dict`)."""
        self.engine.resume_from(path)

    def write_log(self) -> None:
        """Write ``{"config": ..., "history": [...]}`` to the JSON log (if a path is set)."""
        if self.log_path is not None:
            atomic_write_json(
                {"config": self.config.to_dict(), "history": self.history}, self.log_path
            )

    # ------------------------------------------------------------------ main loop
    def fit(self) -> list[dict[str, Any]]:
        """Train for ``config.epochs`` epochs (resuming from ``checkpoint_dir/last.pt`` when
        ``config.resume``); return the history (one record per epoch, epoch 0 = untrained model
        when ``eval_at_start``)."""
        self.engine.maybe_resume()
        if (
            self.epoch == 0
            and self.config.eval_at_start
            and self.test_data is not None
            and not self.history
        ):
            self._log(
                {
                    "epoch": 0,
                    "step": 0,
                    "loss": None,
                    "lr": None,
                    "time": 0.0,
                    "metrics": self.evaluate(),
                }
            )
        self.engine.run(
            self._step,
            self._epoch_batches,
            steps_per_epoch=self.steps_per_epoch,
            on_epoch_start=self._start_epoch,
            on_epoch_end=self._end_epoch,
            resume=False,
        )
        return self.history

    def _log(self, rec: dict[str, Any], save: bool = False) -> None:
        """Append the record, write the JSON log (and the checkpoint), then call the callbacks."""
        self.history.append(rec)
        self.write_log()
        if save:
            self.save_checkpoint()
        for cb in self.callbacks:
            cb(self, rec)
