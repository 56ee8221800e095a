"""Cross-batch memory (XBM): rank and pair losses against a large queue of past embeddings.

Wang, Zhang, Huang, Scott, "Cross-Batch Memory for Embedding Learning" (CVPR 2020), used by the
Ramzi thesis (Sec. 3.5; Tab. 3.2 baseline: contrastive loss with the whole dataset in memory) and by
SupRank's state-of-the-art table (ROADMAP "with a memory to virtually increase the batch size").
The representation drifts slowly, so embeddings of past batches are still useful references.

* :class:`CrossBatchMemory` -- a FIFO ring buffer of *detached* embeddings and labels of capacity
  ``size`` (official: the train-set size for SOP/CUB, 60,000 for iNaturalist). With
  ``unique=True`` each dataset item has one slot (its key), so an item is never in the memory twice
  (official ``unique`` mode). It is an ``nn.Module``: its content is in ``state_dict``
  (checkpoints).
* :class:`MemoryLoss` -- wraps any loss with the common call. Each training step **enqueues the
  current batch first, then reads** the memory (the XBM order, which guarantees every query has its
  own positives in the memory), and returns::

      batch_weight * loss(emb, labels) + memory_weight * loss(emb, labels, mem_emb, mem_labels)

  Defaults ``(0.5, 0.5)`` reproduce the official ROADMAP/SupRank code's ``(batch + memory) / 2``;
  the XBM paper uses ``(1, 1)``. Gradients flow only through the current batch (the memory is
  detached). Before activation (``activate_after`` epochs, official: 5; XBM: after a warm-up)
  only the batch loss is used and nothing is enqueued (XBM code). The query's own (detached) copy
  in the memory is passed as ``ref_self_index``, so the loss' ``query_role`` choice
  applies to it as in-batch; older copies of the same image (``unique=False``) stay as positives.
"""

from __future__ import annotations

import torch
from torch import nn

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
    unit_rows,
)

__all__ = ["CrossBatchMemory", "MemoryLoss"]


class CrossBatchMemory(nn.Module):
    """FIFO memory of detached embeddings ``(size, dim)`` and labels ``(size,)`` or ``(size, L)``.

    Args:
        size: capacity (number of stored embeddings).
        dim: embedding dimension.
        n_levels: 0 for ``(N,)`` labels, L for hierarchical ``(N, L)`` labels.
        unique: one slot per dataset item, addressed by ``keys`` in :meth:`enqueue` (``size`` must
            then be the dataset size and keys lie in ``[0, size)``).
        dtype: storage dtype (float32; float16 halves the memory of a 60k x 512 queue).

    Raises:
        TypeError, ValueError: ``size`` or ``dim`` not a positive int, ``n_levels`` not an int >= 0.
    """

    def __init__(
        self,
        size: int,
        dim: int,
        n_levels: int = 0,
        unique: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.size, self.dim = check_positive_int(size, "size"), check_positive_int(dim, "dim")
        self.n_levels, self.unique = check_nonneg_int(n_levels, "n_levels"), bool(unique)
        lab_shape = (self.size,) if self.n_levels == 0 else (self.size, self.n_levels)
        self.register_buffer("embeddings", torch.zeros(self.size, self.dim, dtype=dtype))
        self.register_buffer("labels", torch.zeros(lab_shape, dtype=torch.long))
        self.register_buffer("filled", torch.zeros(self.size, dtype=torch.bool))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    def __len__(self) -> int:
        return int(self.filled.sum())

    @property
    def is_full(self) -> bool:
        """True once every slot holds an embedding."""
        return bool(self.filled.all())

    def reset(self) -> None:
        """Empty the memory."""
        self.filled.zero_()
        self.ptr.zero_()

    @torch.no_grad()
    def enqueue(
        self, embeddings: torch.Tensor, labels: torch.Tensor, keys: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Store a batch (detached); return the slot of each item, ``(B,)`` long (``-1`` if
        dropped).

        FIFO mode: the oldest entries are overwritten; if the batch is larger than the memory only
        its last ``size`` items are kept. Unique mode: item i goes to slot ``keys[i]``.
        """
        emb = check_embeddings(embeddings, "embeddings").detach()
        lab = check_labels(labels, emb.shape[0], "labels")
        if emb.shape[1] != self.dim:
            raise ValueError(
                f"embeddings has dimension {emb.shape[1]} but the memory stores {self.dim}"
            )
        if (lab.ndim == 1) != (self.n_levels == 0) or (
            lab.ndim == 2 and lab.shape[1] != self.n_levels
        ):
            raise ValueError(
                f"labels has shape {tuple(lab.shape)} but the memory stores labels with "
                f"n_levels={self.n_levels}"
            )
        b = emb.shape[0]
        dev = self.embeddings.device
        if self.unique:
            if keys is None:
                raise ValueError("unique=True needs keys (dataset indices) in enqueue")
            slots = torch.as_tensor(keys, device=dev).long().reshape(-1)
            if slots.numel() != b or bool((slots < 0).any()) or bool((slots >= self.size).any()):
                raise ValueError(f"keys must be {b} dataset indices in [0, {self.size})")
        else:
            slots = torch.full((b,), -1, dtype=torch.long, device=dev)
            kept = min(b, self.size)
            slots[b - kept :] = (self.ptr + torch.arange(kept, device=dev)) % self.size
            self.ptr.copy_((self.ptr + kept) % self.size)
        ok = slots >= 0
        self.embeddings[slots[ok]] = emb[ok.to(emb.device)].to(dev, self.embeddings.dtype)
        self.labels[slots[ok]] = lab[ok.to(lab.device)].to(dev)
        self.filled[slots[ok]] = True
        return slots

    def get(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(embeddings (M, d), labels (M,)|(M, L), slot_to_row (size,))`` of the filled slots.

        ``slot_to_row[s]`` is the row of slot s in the returned tensors (``-1`` if empty), to map
        the slots returned by :meth:`enqueue` to columns of the score matrix.
        """
        rows = torch.nonzero(self.filled).squeeze(1)
        slot_to_row = torch.full((self.size,), -1, dtype=torch.long, device=self.filled.device)
        slot_to_row[rows] = torch.arange(rows.numel(), device=rows.device)
        return self.embeddings[rows], self.labels[rows], slot_to_row

    def extra_repr(self) -> str:
        return (
            f"size={self.size}, dim={self.dim}, n_levels={self.n_levels}, unique={self.unique}, "
            f"filled={len(self)}"
        )


class MemoryLoss(nn.Module):
    """A loss evaluated against the batch and against a cross-batch memory (XBM, enqueue-then-read).

    Args:
        loss: any loss with the common call (``uses_references`` False -> memory term skipped).
        memory: a :class:`CrossBatchMemory`.
        batch_weight: weight of the in-batch loss (0.5: official ROADMAP code; XBM paper: 1).
        memory_weight: weight of the memory loss (0.5: official ROADMAP code; XBM paper: 1).
        activate_after: epochs before the memory is used (0 = from the start; official code: 5).
            Call :meth:`set_epoch` each epoch (the trainer does); before activation the loss is
            ``loss(emb, labels)`` only and nothing is enqueued.

    Call: ``memory_loss(embeddings (B, d), labels, keys=None)`` -> scalar. ``keys`` are dataset
    indices, needed for a ``unique`` memory. In ``eval()`` mode nothing is enqueued.

    Raises:
        TypeError, ValueError: a weight that is not a finite number >= 0, ``activate_after`` not an
            int >= 0, ``memory`` not a :class:`CrossBatchMemory`.
    """

    def __init__(
        self,
        loss: nn.Module,
        memory: CrossBatchMemory,
        batch_weight: float = 0.5,
        memory_weight: float = 0.5,
        activate_after: int = 0,
    ) -> None:
        super().__init__()
        batch_weight = check_float(batch_weight, "batch_weight", low=0.0)
        memory_weight = check_float(memory_weight, "memory_weight", low=0.0)
        if not isinstance(memory, CrossBatchMemory):
            raise TypeError(f"memory must be a CrossBatchMemory, got {type(memory).__name__}")
        self.loss, self.memory = loss, memory
        self.batch_weight, self.memory_weight = batch_weight, memory_weight
        self.activate_after = check_nonneg_int(activate_after, "activate_after")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Tell the wrapper the current epoch (0-based) for ``activate_after``."""
        self.epoch = int(epoch)

    @property
    def active(self) -> bool:
        """Whether the memory term is used at the current epoch."""
        return self.epoch >= self.activate_after and getattr(self.loss, "uses_references", True)

    def forward(
        self, embeddings: torch.Tensor, labels: torch.Tensor, keys: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Enqueue (training mode), then ``w_b * L(batch) + w_m * L(batch vs memory)``."""
        if not self.active:
            return self.loss(embeddings, labels)
        emb = embeddings
        if self.training:
            store = (
                unit_rows(emb.detach(), dim=1)
                if getattr(self.loss, "normalize", True)
                else emb.detach()
            )
            slots = self.memory.enqueue(store, labels, keys)
        else:
            slots = torch.full(
                (emb.shape[0],), -1, dtype=torch.long, device=self.memory.filled.device
            )
        if len(self.memory) == 0:
            return self.loss(embeddings, labels)
        mem_emb, mem_lab, slot_to_row = self.memory.get()
        self_index = torch.where(slots >= 0, slot_to_row[slots.clamp(min=0)], slots).to(emb.device)
        mem_emb = mem_emb.to(emb.device)
        out = 0.0
        # a zero weight skips the term (a batch may lack in-batch positives)
        if self.batch_weight > 0:
            out = self.batch_weight * self.loss(embeddings, labels)
        if self.memory_weight > 0:
            mem_term = self.loss(
                embeddings,
                labels,
                mem_emb.to(emb.dtype),
                mem_lab.to(emb.device),
                ref_self_index=self_index,
            )
            out = out + self.memory_weight * mem_term
        return out if isinstance(out, torch.Tensor) else embeddings.sum() * 0.0

    def extra_repr(self) -> str:
        return (
            f"batch_weight={self.batch_weight}, memory_weight={self.memory_weight}, "
            f"activate_after={self.activate_after}"
        )
