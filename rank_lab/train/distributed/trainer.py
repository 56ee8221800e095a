"""The trainer under ``torchrun``: DistributedDataParallel with one global rank-loss batch.

:class:`DistributedTrainer` is a :class:`~rank_lab.train.Trainer` whose training step, evaluation
and checkpoints are spread over ``W`` processes (one per GPU), such that a ``W``-process run
reproduces the single-process run with the same **global** batch (``config.batch_size``):

1. :class:`~rank_lab.train.distributed.sampler.DistributedMPerClassSampler` gives rank ``r`` its
   ``batch_size / W`` items of the global m-per-class batch (whole class groups).
2. The model runs wrapped in :class:`torch.nn.parallel.DistributedDataParallel` on the local slice.
3. The embeddings, labels and dataset indices are all-gathered
   (:func:`~rank_lab.train.distributed.collectives.all_gather_with_grad`) and the rank loss ranks
   the whole global batch (``dist_loss="full"``: every rank computes the same loss; ``"local"``:
   rank ``r`` ranks its own queries against the gathered batch, ``W`` times less loss compute, equal
   to ``"full"`` for losses that are a mean over queries, e.g. SmoothAP / SupAP / ROADMAP).
   The gradient reaching the local embeddings is ``W * dL/dE_local``; DDP's average over ranks
   gives the parameters ``dL/dtheta`` of the single-process loss (module docstring of
   :mod:`rank_lab.train.distributed.collectives`). Gradients of the loss' own parameters (proxies)
   are averaged over the ranks by hand (the loss is not inside DDP).
4. A cross-batch memory (XBM) enqueues the *gathered* batch on every rank, so all ranks hold the
   same memory, equal to the single-process one.
5. Multistage back-propagation (``config.multistage_chunk_size``) composes with DDP: pass 1 embeds
   the local slice in chunks, the loss of the gathered batch gives the local rows of
   ``dL/dE``, pass 3 re-embeds each chunk under ``no_sync`` except the last
   (:func:`rank_lab.train.multistage.multistage_backward`).
6. Evaluation: each rank embeds a contiguous shard of the test set, the shards are all-gathered,
   and rank 0 computes the metrics with a faiss index sharded over the visible GPUs
   (:func:`rank_lab.metrics.engine.distributed.sharded_retrieval_metrics`; one GPU or the CPU when
   that is all there is), then broadcasts them.
7. Rank 0 alone writes the JSON log and the checkpoints. A checkpoint holds the unwrapped model,
   optimiser, scaler, loss/memory state, step and epoch (which fix the learning rate and the
   sampler's draw): it is rank-agnostic, so a run written by ``W`` ranks resumes on any number of
   ranks, including a plain :class:`~rank_lab.train.Trainer`.

Equality with the single-process run holds up to floating-point summation order, provided the
forward does not couple the items of a batch (BatchNorm in training mode computes per-rank
statistics: freeze it, ``freeze_bn=True``, or convert to :class:`torch.nn.SyncBatchNorm`) and
draws no random numbers (dropout masks differ between one forward of ``B`` items and ``W``
forwards of ``B / W``). Callbacks run on every rank and must behave the same on all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, TensorDataset

from rank_lab.metrics.engine.distributed import sharded_retrieval_metrics
from rank_lab.train.config import TrainConfig
from rank_lab.train.data import as_dataset, embed_dataset
from rank_lab.train.distributed.collectives import (
    all_gather_tensor,
    all_gather_with_grad,
    all_reduce_mean,
    barrier,
    broadcast_module_state,
    broadcast_object,
    init_distributed,
)
from rank_lab.train.distributed.env import DistEnv
from rank_lab.train.distributed.sampler import DistributedMPerClassSampler
from rank_lab.train.trainer import Trainer

__all__ = ["DistributedTrainer"]


class _Shard(Dataset):
    """Rows ``[a, b)`` of a dataset, exposing their ``.labels``."""

    def __init__(self, base: Dataset, labels: torch.Tensor, a: int, b: int) -> None:
        self.base, self.a, self.labels = base, a, labels[a:b]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> Any:
        return self.base[self.a + i]


class DistributedTrainer(Trainer):
    """A :class:`~rank_lab.train.Trainer` over ``W`` processes (see the module docstring).

    Launch one process per GPU with ``torchrun --nproc_per_node=W``
    (:mod:`rank_lab.train.distributed.launch`); without ``torchrun`` it runs as a single process.

    Args:
        model, loss, train_data, test_data, config, memory, callbacks: as :class:`Trainer`;
            ``config.batch_size`` is the global batch, ``batch_size // m_per_class`` must be a
            multiple of ``W``. Every rank must pass the same data and config.
        env: the process group (default:
            :func:`~rank_lab.train.distributed.collectives.init_distributed` from the ``torchrun``
            environment).
        find_unused_parameters: passed to DDP (default: True when ``freeze_backbone_epochs > 0``,
            whose frozen parameters receive no gradient).
        eval_gpus: GPUs of the faiss evaluation index on rank 0 (``None``: all faiss sees; 0: CPU).
        eval_index: ``"shard"`` (faiss ``IndexShards``) or ``"replicate"`` (``IndexReplicas``).
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
        env: DistEnv | None = None,
        find_unused_parameters: bool | None = None,
        eval_gpus: int | None = None,
        eval_index: str = "shard",
    ) -> None:
        if config is None:
            config = TrainConfig()
        elif isinstance(config, Mapping):
            config = TrainConfig.from_dict(config)
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig or a dict, got {type(config).__name__}")
        if eval_index not in ("shard", "replicate"):
            raise ValueError(f"eval_index must be 'shard' or 'replicate', got {eval_index!r}")
        self.env = env if env is not None else init_distributed(device=config.device)
        changes: dict[str, Any] = {"device": str(self.env.device(config.device))}
        if not self.env.is_main:
            changes["progress"] = False
        self.eval_gpus, self.eval_index = eval_gpus, eval_index
        super().__init__(
            model,
            loss,
            train_data,
            test_data,
            config.replace(**changes),
            memory=memory,
            callbacks=callbacks,
        )
        cfg = self.config
        if cfg.dist_loss == "local" and self.memory is not None:
            raise ValueError(
                "dist_loss='local' does not support a cross-batch memory; use dist_loss='full'"
            )
        self.ddp_model: nn.Module | None = None
        if self.env.is_distributed:
            find = (
                cfg.freeze_backbone_epochs > 0
                if find_unused_parameters is None
                else bool(find_unused_parameters)
            )
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp_model = DistributedDataParallel(
                self.model, device_ids=ids, find_unused_parameters=find
            )
            if isinstance(self.loss_fn, nn.Module):
                broadcast_module_state(self.loss_fn)  # proxies and memory: rank 0's on every rank

    # ------------------------------------------------------------------ training hooks
    def _build_sampler(self) -> DistributedMPerClassSampler:
        cfg = self.config
        length = None if cfg.batches_per_epoch is None else cfg.batches_per_epoch * cfg.batch_size
        return DistributedMPerClassSampler(
            self.train_labels,
            m=cfg.m_per_class,
            batch_size=cfg.batch_size,
            length=length,
            seed=cfg.seed,
            num_replicas=self.env.world_size,
            rank=self.env.rank,
        )

    @property
    def _train_module(self) -> nn.Module:
        return self.ddp_model if self.ddp_model is not None else self.model

    def _batch_loss(self, emb: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Loss of the gathered global batch (``"full"``) or of the local queries against it
        (``"local"``)."""
        if not self.env.is_distributed:
            return super()._batch_loss(emb, y, idx)
        n = emb.shape[0]  # the same on every rank (the sampler's local batch)
        # checked gathered, on every rank alike
        emb_all = all_gather_with_grad(emb, same_size=True, trusted=True)
        meta = torch.cat([y.reshape(n, -1), torch.as_tensor(idx).to(y.device).reshape(n, 1)], 1)
        # labels and dataset indices in one message
        meta_all = all_gather_tensor(meta, same_size=True)
        y_all = meta_all[:, 0] if y.ndim == 1 else meta_all[:, :-1]
        idx_all = meta_all[:, -1]
        if self.config.dist_loss == "full":
            return super()._batch_loss(emb_all, y_all, idx_all)  # the same value on every rank
        self._check_embeddings(emb_all, idx_all)  # the gathered batch: every rank raises together
        self_index = torch.arange(n, device=emb.device) + self.env.rank * n
        loss = self.loss_fn(emb, y, emb_all, y_all, ref_self_index=self_index)
        finite = torch.tensor([float(torch.isfinite(loss.detach()))], device=emb.device)
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)  # every rank raises together
        if not bool(finite):
            self._non_finite(
                f"the loss is not finite on some rank (here {float(loss.detach())})", idx_all
            )
        return loss

    def _forward_backward(
        self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor
    ) -> torch.Tensor:
        loss = super()._forward_backward(x, y, idx)
        if self.env.is_distributed:
            self._average_loss_grads()
            if self.config.dist_loss == "local":
                loss = all_reduce_mean(loss, trusted=True)  # _batch_loss checked it on every rank
        return loss

    @torch.no_grad()
    def _average_loss_grads(self) -> None:
        """Average the gradients of the loss' parameters (proxies) over the ranks."""
        if not isinstance(self.loss_fn, nn.Module):
            return
        params = [p for p in self.loss_fn.parameters() if p.requires_grad]
        if not params:
            return
        dev = params[0].device
        has = torch.tensor([float(p.grad is not None) for p in params], device=dev)
        dist.all_reduce(has, op=dist.ReduceOp.MAX)
        used = [p for p, h in zip(params, has.tolist(), strict=True) if h > 0]
        if not used:
            return
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in used]
        )
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.env.world_size
        pos = 0
        for p in used:
            g = flat[pos : pos + p.numel()].view_as(p)
            pos += p.numel()
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)

    # ------------------------------------------------------------------ evaluation
    def embed(self, data: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings ``(N, d)`` (CPU, float32) and labels of ``data``: each rank embeds a
        contiguous shard, the shards are all-gathered in rank order (every rank gets all of
        them)."""
        ds, labels = as_dataset(data)
        w, r = self.env.world_size, self.env.rank
        n = len(labels)
        if w == 1 or n < w:
            return super().embed(data)
        a, b = r * n // w, (r + 1) * n // w
        if isinstance(ds, TensorDataset):
            shard: Any = TensorDataset(*(t[a:b] for t in ds.tensors))
        else:
            shard = _Shard(ds, labels, a, b)
        emb, _ = embed_dataset(
            self.model,
            shard,
            batch_size=self.config.eval_batch_size,
            device=self.device,
            num_workers=self.config.num_workers,
            amp=self.amp,
            amp_dtype=self.amp_dtype,
        )
        return all_gather_tensor(emb.to(self.device)).cpu(), labels

    def _metrics(
        self, emb: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]
    ) -> dict[str, float]:
        """Metrics on rank 0 with a faiss index over the visible GPUs (or the CPU), broadcast to all
        ranks."""
        res = None
        if self.env.is_main:
            res = sharded_retrieval_metrics(
                emb,
                labels,
                ks=ks,
                metrics=self.config.eval_metrics,
                device=self.device,
                n_gpus=self.eval_gpus,
                mode=self.eval_index,
            )  # type: ignore[arg-type]
        return broadcast_object(res)

    # ------------------------------------------------------------------ checkpoints and log
    def state_dict(self) -> dict[str, Any]:
        """The :class:`Trainer` state (unwrapped model: rank-agnostic) plus the run's layout, for
        information."""
        state = super().state_dict()
        state["distributed"] = {
            "world_size": self.env.world_size,
            "global_batch_size": self.config.batch_size,
            "local_batch_size": self.config.batch_size // self.env.world_size,
        }
        return state

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Rank 0 writes the checkpoint (atomically, never a NaN model: see
        :meth:`Trainer.save_checkpoint`); every rank waits for it."""
        path = Path(path) if path is not None else self.checkpoint_path
        if path is None:
            raise ValueError("no checkpoint path: set config.checkpoint_dir or pass path")
        # on every rank (DDP keeps them equal), so that all ranks raise together
        self.engine.check_weights()
        if self.env.is_main:
            super().save_checkpoint(path)
        barrier()
        self.last_good_checkpoint = (path, self.epoch)
        return path

    def write_log(self) -> None:
        """Rank 0 writes the JSON log."""
        if self.env.is_main:
            super().write_log()
