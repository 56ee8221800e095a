"""The training engine: m-per-class batches, a rank loss (with an optional cross-batch memory),
Adam/AdamW/SGD with a separate head learning rate, a per-step cosine schedule with warm-up, mixed
precision on CUDA, gradient clipping, evaluation with :func:`rank_lab.metrics.retrieval_metrics`,
checkpoint/resume, tqdm progress and a JSON log of every epoch.

The training step is the one of the Ramzi thesis §3.5 / digest 000 §2.9:
``v = normalize(f_theta(x))``; ``loss = L(v, y)`` or, with a cross-batch memory (XBM, §2.10;
:class:`rank_lab.memory.MemoryLoss`), the batch and memory losses averaged as in the official code:
``(L(v, y) + w L(v, y, V_mem, y_mem)) / (1 + w)``, the memory holding the current (detached) batch
("enqueue then read"; ``w = 1`` gives the official ``(batch + memory) / 2``).

Training labels are re-indexed per column to ``0..C-1`` (``relabel_train``) so that proxy losses
(``L*_DG``, NormSoftmax) can index their proxies; ``n_classes`` and ``dim`` are passed to
:func:`rank_lab.losses.build_loss` when the named loss takes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from rank_lab._validation import defer_finite_checks
from rank_lab.train.checkpoint import (
    atomic_save,
    atomic_write_json,
    get_rng_state,
    load_checkpoint,
    lr_at,
    set_rng_state,
)
from rank_lab.train.config import TrainConfig
from rank_lab.train.data import _Indexed, as_dataset, embed_dataset, relabel
from rank_lab.utils import get_device, seed_everything

__all__ = ["Trainer", "NonFiniteTrainingError"]

#: Config keys that may change between an interrupted run and its resumption.
_RESUME_FREE = {
    "epochs", "progress", "resume", "checkpoint_dir", "log_path", "eval_every", "device",
    "num_workers", "eval_batch_size", "checkpoint_every", "eval_at_start", "data_dir",
    "multistage_chunk_size", "dist_loss",
}


class NonFiniteTrainingError(FloatingPointError):
    """NaN or inf embeddings, loss, gradient or weight stopped training (the numerical guard of :class:`Trainer`).

    The offending batch was not applied and nothing was saved: the last checkpoint on disk, if any,
    is the last good state. Attributes: ``epoch`` (1-based), ``step`` (global optimiser steps done),
    ``batch_indices`` (dataset indices of the batch, ``None`` for a weight check) and ``checkpoint``
    (the last good checkpoint's path, or ``None``).
    """

    def __init__(self, message: str, *, epoch: int, step: int, batch_indices: list[int] | None,
                 checkpoint: Path | None) -> None:
        super().__init__(message)
        self.epoch, self.step, self.batch_indices, self.checkpoint = epoch, step, batch_indices, checkpoint


class Trainer:
    """Train an embedding model with a rank loss and evaluate it (see the module docstring).

    Args:
        model: the network (``None``: :func:`rank_lab.models.build_model` from ``config.model``;
            an MLP's ``input_dim`` is then read from the data). An
            :class:`~rank_lab.models.EmbeddingModel` gets two parameter groups (backbone ``lr``,
            pooling + head ``head_lr``); any other module one group.
        loss: ``loss(emb (B,d), labels)`` and, with a memory,
            ``loss(emb, labels, ref_emb (M,d), ref_labels)`` (``None``: ``build_loss(config.loss,
            **config.loss_kwargs)``). Its parameters (proxies) are trained with ``loss_lr``.
        train_data: ``(x, y)`` tensors, a ``TensorDataset`` or a dataset with ``.labels``; tensors are
            checked when the trainer is built (integer labels, finite ``x``: ``ValueError`` /
            ``TypeError`` naming ``train_data``, see :func:`~rank_lab.train.as_dataset`). A NaN met
            later (a lazily read image, an overflow inside the model) stops training through the
            numerical guard (:class:`NonFiniteTrainingError`, naming the step and the batch).
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
        self.amp = cfg.amp and self.device.type == "cuda"
        self.amp_dtype = torch.float16 if cfg.amp_dtype == "float16" else torch.bfloat16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp and self.amp_dtype == torch.float16)
        self.epoch = 0  # completed epochs
        self.step = 0  # completed optimiser steps
        self.history: list[dict[str, Any]] = []
        ckdir = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        self.checkpoint_path = ckdir / "last.pt" if ckdir else None
        self.last_good_checkpoint: tuple[Path, int] | None = None  # (path, epoch) of the last state saved or resumed
        self.log_path = Path(cfg.log_path) if cfg.log_path else (ckdir / "log.json" if ckdir else None)

    # ------------------------------------------------------------------ construction
    def _build_model(self) -> nn.Module:
        from rank_lab.models import build_model

        mcfg = self.config.model
        if mcfg.backbone.lower() == "mlp" and mcfg.input_dim is None:
            x0 = self.train_set[0][0]
            mcfg.input_dim = int(torch.as_tensor(x0).numel())
        return build_model(mcfg)

    def _build_sampler(self) -> Any:
        """The batch sampler of the training set: m-per-class (Ramzi thesis §3.5.1) or, with
        ``sampler="hierarchical"``, the super-class sampler of §4.4.1 (HAPPIER)."""
        from rank_lab.data import HierarchicalSampler, MPerClassSampler

        cfg = self.config
        if cfg.sampler == "hierarchical":
            if self.train_labels.ndim != 2 or self.train_labels.shape[1] < 2:
                raise ValueError("sampler='hierarchical' needs (N, L) training labels with L >= 2 (fine, coarse, ...)")
            return HierarchicalSampler(self.train_labels, batch_size=cfg.batch_size, samples_per_class=cfg.m_per_class,
                                       super_classes_per_batch=cfg.super_classes_per_batch,
                                       max_batches=cfg.batches_per_epoch, seed=cfg.seed)
        length = None if cfg.batches_per_epoch is None else cfg.batches_per_epoch * cfg.batch_size
        return MPerClassSampler(self.train_labels, m=cfg.m_per_class, batch_size=cfg.batch_size, length=length, seed=cfg.seed)

    def _embedding_dim(self) -> int:
        dim = getattr(self.model, "embedding_dim", None)
        if dim is None:
            dim = int(embed_dataset(self.model, (self.train_set[0][0][None], self.train_labels[:1]), device=self.device)[0].shape[1])
        return int(dim)

    def _build_loss(self) -> nn.Module:
        import inspect

        cfg = self.config
        if cfg.loss is None:
            raise ValueError("no loss given: pass a loss module or set config.loss to a rank_lab.losses name")
        from rank_lab.losses import LOSSES, build_loss

        kwargs = dict(cfg.loss_kwargs)
        factory = LOSSES.get(cfg.loss.strip().lower().replace("-", "_"))
        if factory is not None:
            params = inspect.signature(factory).parameters
            fine = self.train_labels if self.train_labels.ndim == 1 else self.train_labels[:, 0]
            if "n_classes" in params and "n_classes" not in kwargs:
                kwargs["n_classes"] = int(fine.max()) + 1 if cfg.relabel_train else int(torch.unique(fine).numel())
            if "dim" in params and "dim" not in kwargs:
                kwargs["dim"] = self._embedding_dim()
        return build_loss(cfg.loss, **kwargs)

    def _wrap_memory(self, loss: Any, memory: Any) -> Any:
        from rank_lab.memory import CrossBatchMemory, MemoryLoss

        cfg = self.config
        if isinstance(loss, MemoryLoss):
            self.memory = loss.memory
            return loss
        if memory is None and cfg.memory_size > 0:
            n_levels = 0 if self.train_labels.ndim == 1 else int(self.train_labels.shape[1])
            size = len(self.train_labels) if cfg.memory_unique else cfg.memory_size
            memory = CrossBatchMemory(size, self._embedding_dim(), n_levels=n_levels, unique=cfg.memory_unique)
        self.memory = memory
        if memory is None:
            return loss
        if not isinstance(memory, CrossBatchMemory):
            raise TypeError(f"memory must be a rank_lab.memory.CrossBatchMemory, got {type(memory).__name__}")
        w = cfg.memory_weight
        return MemoryLoss(loss, memory, batch_weight=1.0 / (1.0 + w), memory_weight=w / (1.0 + w),
                          activate_after=cfg.memory_activate_epoch)

    def _build_optimizer(self) -> torch.optim.Optimizer:
        cfg = self.config
        head_lr = cfg.head_lr if cfg.head_lr is not None else cfg.lr
        groups: list[dict[str, Any]] = []
        if hasattr(self.model, "backbone_parameters") and hasattr(self.model, "head_parameters"):
            groups.append({"name": "backbone", "params": list(self.model.backbone_parameters()), "lr": cfg.lr})
            groups.append({"name": "head", "params": list(self.model.head_parameters()), "lr": head_lr})
        else:
            groups.append({"name": "model", "params": list(self.model.parameters()), "lr": cfg.lr})
        if isinstance(self.loss_fn, nn.Module):
            lp = [p for p in self.loss_fn.parameters() if p.requires_grad]
            groups.append({"name": "loss", "params": lp, "lr": cfg.loss_lr if cfg.loss_lr is not None else head_lr})
        groups = [g for g in groups if g["params"]]
        for g in groups:
            g["base_lr"] = g["lr"]
        if not groups:
            raise ValueError("the model and the loss have no trainable parameter")
        if cfg.optimizer == "adam":
            return torch.optim.Adam(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
        if cfg.optimizer == "adamw":
            return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
        return torch.optim.SGD(groups, lr=cfg.lr, weight_decay=cfg.weight_decay,
                               momentum=cfg.momentum, nesterov=cfg.nesterov)

    # ------------------------------------------------------------------ schedule
    def _set_lr(self) -> None:
        cfg = self.config
        total = cfg.epochs * self.steps_per_epoch
        for g in self.optimizer.param_groups:
            floor = cfg.min_lr * g["base_lr"] / cfg.lr
            g["lr"] = lr_at(self.step, g["base_lr"], total_steps=total,
                            warmup_steps=cfg.warmup_epochs * self.steps_per_epoch,
                            schedule=cfg.scheduler, min_lr=floor)

    def _freeze_backbone(self, frozen: bool) -> None:
        if hasattr(self.model, "backbone_parameters"):
            for p in self.model.backbone_parameters():
                p.requires_grad_(not frozen)

    # ------------------------------------------------------------------ one epoch
    def _loss(self, emb: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        if self.memory is not None:
            return self.loss_fn(emb, y, keys=idx)
        return self.loss_fn(emb, y)

    @property
    def _train_module(self) -> nn.Module:
        """The module run on training batches (the DDP wrapper under the distributed trainer)."""
        return self.model

    def _batch_loss(self, emb: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Loss of a batch's embeddings ``(B, d)``, checked finite (the distributed trainer gathers first)."""
        self._check_embeddings(emb, idx)
        loss = self._loss(emb, y, idx)
        if not torch.isfinite(loss):
            self._non_finite(f"the loss is {float(loss.detach())}", idx)
        return loss

    # ------------------------------------------------------------------ numerical guard
    def _non_finite(self, what: str, idx: torch.Tensor | None) -> None:
        """Raise :class:`NonFiniteTrainingError` naming the step, the batch and the last good checkpoint."""
        indices = None if idx is None else [int(i) for i in torch.as_tensor(idx).reshape(-1).tolist()]
        where = f"epoch {self.epoch + 1}, step {self.step + 1}"
        batch = "" if indices is None else (
            f", batch indices {indices[:32]}{' ...' if len(indices) > 32 else ''} ({len(indices)} items)")
        if self.last_good_checkpoint is not None:
            path, ep = self.last_good_checkpoint
            last = f"the last good checkpoint is {str(path)!r} (epoch {ep}): fix the cause (learning rate, inputs) and resume from it"
        else:
            last = "no checkpoint was written yet (set checkpoint_dir to keep the last good state)"
        raise NonFiniteTrainingError(
            f"{what} at {where}{batch}; training stopped before applying it and nothing was saved; {last}",
            epoch=self.epoch + 1, step=self.step, batch_indices=indices,
            checkpoint=None if self.last_good_checkpoint is None else self.last_good_checkpoint[0])

    def _check_embeddings(self, emb: torch.Tensor, idx: torch.Tensor) -> None:
        """NaN/inf embeddings (a bad input item read lazily, an overflow in the model) stop training here,
        naming the batch, before the loss refuses them with a ``ValueError`` of its own."""
        if not bool(torch.isfinite(emb.detach()).all()):
            self._non_finite("the model's embeddings hold NaN or inf", idx)

    def _check_gradients(self, params: list[torch.Tensor], idx: torch.Tensor) -> None:
        """A finite loss can still give NaN/inf gradients: refuse the step (unless a grad scaler skips it)."""
        if self.scaler.is_enabled():
            return  # float16 AMP: the GradScaler skips steps with inf/NaN gradients by design
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads)
            if not torch.isfinite(norm):
                self._non_finite(f"the gradient norm is {float(norm)}", idx)

    def _check_weights(self) -> None:
        """Refuse to save (or go on with) a model or loss holding NaN/inf: never a NaN checkpoint."""
        modules = [self.model] + ([self.loss_fn] if isinstance(self.loss_fn, nn.Module) else [])
        for module in modules:
            for name, t in [*module.named_parameters(), *module.named_buffers()]:
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    self._non_finite(f"the weight {name!r} holds NaN or inf", None)

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Zero the gradients, embed the batch, back-propagate the (AMP-scaled) loss; return it detached.

        With ``config.multistage_chunk_size`` the batch is embedded chunk by chunk and the loss
        gradient pushed back chunk by chunk (multistage back-propagation, Patel thesis §5.3.2).
        """
        self.optimizer.zero_grad(set_to_none=True)
        chunk = self.config.multistage_chunk_size
        autocast = torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp)
        if chunk is None:
            with autocast:
                emb = self._train_module(x)
            loss = self._batch_loss(emb.float(), y, idx)
            self.scaler.scale(loss).backward()
            return loss.detach()
        from rank_lab.train.multistage import multistage_backward

        seen: list[torch.Tensor] = []

        def loss_fn(emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            with torch.autocast(self.device.type, enabled=False):
                seen.append(self._batch_loss(emb.float(), labels, idx))
            return self.scaler.scale(seen[-1])

        with autocast:
            multistage_backward(self._train_module, x, y, loss_fn, chunk_size=chunk, device=self.device)
        return seen[-1].detach()

    def train_epoch(self) -> dict[str, Any]:
        """Run one epoch (epoch index ``self.epoch``) and return its partial record."""
        from rank_lab._progress import tqdm

        cfg, e = self.config, self.epoch
        self.sampler.set_epoch(e)
        gen = torch.Generator()
        gen.manual_seed(cfg.seed * 100_003 + e)
        loader = DataLoader(_Indexed(self.train_set, self.train_labels), batch_sampler=self.sampler,
                            num_workers=cfg.num_workers, generator=gen, pin_memory=self.device.type == "cuda")
        self.model.train()
        if isinstance(self.loss_fn, nn.Module):
            self.loss_fn.train()
        frozen = e < cfg.freeze_backbone_epochs
        self._freeze_backbone(frozen)
        if self.memory is not None:
            self.loss_fn.set_epoch(e)
        use_memory = self.memory is not None and bool(self.loss_fn.active)
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        losses, norms, t0 = [], [], time.perf_counter()
        bar = tqdm(loader, total=self.steps_per_epoch, desc=f"epoch {e + 1}/{cfg.epochs}",
                   disable=not cfg.progress, leave=False)
        for x, y, idx in bar:
            self._set_lr()
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            with defer_finite_checks():  # a NaN inside the model reaches the guard of _batch_loss
                loss = self._forward_backward(x, y, idx)
            self._check_gradients(params, idx)
            if cfg.grad_clip is not None:
                self.scaler.unscale_(self.optimizer)
                norms.append(float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)))
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.step += 1
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        bar.close()
        if frozen:
            self._freeze_backbone(False)
        lrs = {g.get("name", str(i)): g["lr"] for i, g in enumerate(self.optimizer.param_groups)}
        rec: dict[str, Any] = {
            "epoch": e + 1, "step": self.step, "loss": sum(losses) / len(losses),
            "loss_last": losses[-1], "lr": next(iter(lrs.values())), "lrs": lrs,
            "time": time.perf_counter() - t0, "n_batches": len(losses),
            "memory_active": use_memory, "backbone_frozen": frozen,
        }
        if norms:
            rec["grad_norm"] = sum(norms) / len(norms)
        return rec

    # ------------------------------------------------------------------ evaluation
    def embed(self, data: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings ``(N, d)`` (CPU, float32) and labels of ``data``."""
        return embed_dataset(self.model, data, batch_size=self.config.eval_batch_size, device=self.device,
                             num_workers=self.config.num_workers, amp=self.amp, amp_dtype=self.amp_dtype)

    def _check_eval_ks(self, n_items: int, name: str = "test_data") -> None:
        """Refuse ``eval_ks`` larger than the gallery (``n_items - 1``: each item queries the others).

        The one rule of :func:`rank_lab.metrics.retrieval_metrics` (``docs/decisions.md``), checked
        when the trainer is built so that a long run does not fail at its first evaluation.
        """
        too_big = sorted(k for k in self.config.eval_ks if k > n_items - 1)
        if too_big:
            raise ValueError(f"eval_ks holds k={too_big} but {name} has {n_items} items, so a query ranks only "
                             f"{n_items - 1}; set eval_ks <= {n_items - 1} (e.g. eval_ks=(1, {max(1, min(10, n_items - 1))}))")

    def evaluate(self, data: Any = None) -> dict[str, float]:
        """Retrieval metrics of ``data`` (default: the test data): every item queries all others.

        Raises:
            ValueError: an ``eval_ks`` larger than the gallery (``N - 1``), as
                :func:`~rank_lab.metrics.retrieval_metrics` does (one rule, ``docs/decisions.md``).
        """
        name = "test_data" if data is None else "data"
        data = self.test_data if data is None else data
        if data is None:
            raise ValueError("no evaluation data: pass test_data to the Trainer or data to evaluate()")
        self._check_eval_ks(len(as_dataset(data, name)[1]), name)
        emb, labels = self.embed(data)
        t0 = time.perf_counter()
        res = self._metrics(emb, labels, self.config.eval_ks)
        res["eval_time"] = time.perf_counter() - t0
        return res

    def _metrics(self, emb: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]) -> dict[str, float]:
        """:func:`rank_lab.metrics.retrieval_metrics` of ``emb (N, d)`` (every item queries the others)."""
        from rank_lab.metrics import retrieval_metrics

        res = retrieval_metrics(emb, labels, ks=ks, metrics=self.config.eval_metrics, device=self.device)
        return {k: v for k, v in res.items() if k != "per_query"}

    # ------------------------------------------------------------------ checkpoints
    def schedule(self) -> dict[str, Any]:
        """The schedule of this run: everything that shapes the learning rate and the batches over time.

        Recorded in every checkpoint; :meth:`load_state_dict` compares it with the resuming run's
        (see :meth:`load_state_dict` for the rule).
        """
        cfg = self.config
        return {
            "epochs": cfg.epochs, "steps_per_epoch": self.steps_per_epoch,
            "total_steps": cfg.epochs * self.steps_per_epoch,
            "warmup_steps": cfg.warmup_epochs * self.steps_per_epoch, "scheduler": cfg.scheduler,
            "min_lr": cfg.min_lr, "base_lrs": {g.get("name", str(i)): g["base_lr"] for i, g in enumerate(self.optimizer.param_groups)},
            "batch_size": cfg.batch_size, "freeze_backbone_epochs": cfg.freeze_backbone_epochs,
            "memory_activate_epoch": cfg.memory_activate_epoch,
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume (see :mod:`rank_lab.train.checkpoint`), and the run's :meth:`schedule`."""
        state = {
            "epoch": self.epoch, "step": self.step, "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
            "history": self.history, "config": self.config.to_dict(), "rng": get_rng_state(),
            "schedule": self.schedule(),
        }
        if isinstance(self.loss_fn, nn.Module):
            state["loss"] = self.loss_fn.state_dict()  # proxies, and the memory's buffers
        return state

    def load_state_dict(self, state: Mapping[str, Any], check_config: bool = True, *, source: str = "the checkpoint") -> None:
        """Restore a :meth:`state_dict` (model, optimiser, RNG, history ...).

        **Resume rule** (``check_config=True``, ``docs/decisions.md``): a checkpoint records the
        :meth:`schedule` it was started with. Resuming continues it only when the result equals a
        straight run of the resuming config: the same schedule, or a changed ``epochs`` with the
        ``"constant"`` scheduler (whose learning rate does not depend on the run's length) and no
        more epochs done than asked. Anything else that shapes the schedule (``epochs`` under the
        cosine schedule, steps per epoch, warm-up, learning rates ...) or the training (other
        config keys) raises a ``ValueError`` saying how to start a new run.
        """
        if check_config and "config" in state:
            old, new = dict(state["config"]), self.config.to_dict()
            diff = sorted(k for k in set(old) | set(new) if k not in _RESUME_FREE and old.get(k) != new.get(k))
            if diff:
                changes = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:6])
                raise ValueError(f"{source} was written with a different config ({changes}); to start a new run "
                                 "set resume=False or use another checkpoint_dir")
            self._check_schedule(state, source)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        if "loss" in state and isinstance(self.loss_fn, nn.Module):
            self.loss_fn.load_state_dict(state["loss"])
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.history = [dict(r) for r in state["history"]]
        set_rng_state(state["rng"])

    def _check_schedule(self, state: Mapping[str, Any], source: str) -> None:
        """The resume rule of :meth:`load_state_dict` on the recorded and the current schedule."""
        new = self.schedule()
        old = state.get("schedule")
        if old is None:  # a checkpoint written before schedules were recorded: its config's epochs
            old = {**new, "epochs": int(state["config"]["epochs"]),
                   "total_steps": int(state["config"]["epochs"]) * self.steps_per_epoch}
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if not changed:
            return
        done = int(state["epoch"])
        if set(changed) <= {"epochs", "total_steps"} and new["scheduler"] == "constant" and new["epochs"] >= done:
            return  # the constant schedule does not depend on the length: continuing = a straight longer run
        what = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed)
        why = (f"it has already done {done} epochs" if new["epochs"] < done and set(changed) <= {"epochs", "total_steps"}
               else f"the {old.get('scheduler')} learning rate of every completed step depends on the schedule"
               if set(changed) <= {"epochs", "total_steps"} else "the batches and learning rates would change mid-run")
        raise ValueError(
            f"{source} was started with another schedule ({what}); resuming would not equal a straight run "
            f"of this config because {why}. To train with this schedule, start a new run: set resume=False or "
            "use another checkpoint_dir (to warm-start from those weights, load load_checkpoint(path)['model'] "
            "into the new run's model)."
        )

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Write the state atomically (default ``checkpoint_dir/last.pt``).

        Raises:
            NonFiniteTrainingError: the model or loss holds NaN/inf (nothing is written: the
                checkpoint on disk stays the last good one).
        """
        path = Path(path) if path is not None else self.checkpoint_path
        if path is None:
            raise ValueError("no checkpoint path: set config.checkpoint_dir or pass path")
        self._check_weights()
        atomic_save(self.state_dict(), path)
        self.last_good_checkpoint = (path, self.epoch)
        return path

    def resume_from(self, path: str | Path) -> None:
        """Load a checkpoint file written by :meth:`save_checkpoint` (see :meth:`load_state_dict`)."""
        self.load_state_dict(load_checkpoint(path, map_location=self.device), source=f"checkpoint {str(path)!r}")
        self.last_good_checkpoint = (Path(path), self.epoch)

    def write_log(self) -> None:
        """Write ``{"config": ..., "history": [...]}`` to the JSON log (if a path is set)."""
        if self.log_path is not None:
            atomic_write_json({"config": self.config.to_dict(), "history": self.history}, self.log_path)

    # ------------------------------------------------------------------ main loop
    def fit(self) -> list[dict[str, Any]]:
        """Train for ``config.epochs`` epochs (resuming from ``checkpoint_dir/last.pt`` when
        ``config.resume``); return the history (one record per epoch, epoch 0 = untrained model
        when ``eval_at_start``)."""
        cfg = self.config
        if cfg.resume and self.checkpoint_path is not None and self.checkpoint_path.is_file():
            self.resume_from(self.checkpoint_path)
        if self.epoch == 0 and cfg.eval_at_start and self.test_data is not None and not self.history:
            self._log({"epoch": 0, "step": 0, "loss": None, "lr": None, "time": 0.0, "metrics": self.evaluate()})
        while self.epoch < cfg.epochs:
            rec = self.train_epoch()
            self._check_weights()  # before the epoch counts, is evaluated or saved
            self.epoch += 1
            do_eval = (self.test_data is not None and cfg.eval_every > 0
                       and (self.epoch % cfg.eval_every == 0 or self.epoch == cfg.epochs))
            rec["metrics"] = self.evaluate() if do_eval else None
            save = self.checkpoint_path is not None and (self.epoch % cfg.checkpoint_every == 0 or self.epoch == cfg.epochs)
            self._log(rec, save=save)
        return self.history

    def _log(self, rec: dict[str, Any], save: bool = False) -> None:
        """Append the record, write the JSON log (and the checkpoint), then call the callbacks."""
        self.history.append(rec)
        self.write_log()
        if save:
            self.save_checkpoint()
        for cb in self.callbacks:
            cb(self, rec)

