"""What ``W`` ranks compute when each ranks only its own slice: the loss of independent local
batches.

A data-parallel run without the all-gather of
:func:`rank_lab.train.distributed.all_gather_with_grad` (or gradient accumulation over ``W``
micro-batches) optimises the mean of ``W`` losses, each computed on one slice of ``B / W`` items,
instead of the loss of the ``B`` items ranked together. For a loss that decomposes over items the
two are the same; for a rank loss they are not: every query is ranked against ``B / W - 1`` items
instead of ``B - 1``, and the decomposability gap of Eq. 3.6 of the Ramzi thesis is that of the
smaller batch. :class:`LocalBatchLoss` computes that objective in one process, so that the two can
be compared on the same batches, initialisation and data.
"""

from __future__ import annotations

import torch
from torch import nn

from rank_lab._validation import check_embeddings, check_labels, check_module, check_positive_int

__all__ = ["LocalBatchLoss"]


class LocalBatchLoss(nn.Module):
    """``(1/W) sum_r L(E_r, y_r)``: a loss averaged over ``W`` contiguous slices of the batch.

    With the batch of a (distributed) m-per-class sampler, the ``W`` contiguous slices are the
    slices of the ``W`` ranks (whole class groups;
    :class:`rank_lab.train.distributed.DistributedMPerClassSampler`), so this is the objective of
    ``W`` ranks that rank their own slice only: DDP averages their parameter gradients into
    ``(1/W) sum_r dL(E_r)/dtheta`` (the scale convention of
    :mod:`rank_lab.train.distributed.collectives` with ranks computing different losses), which is
    also the gradient of accumulation over ``W`` micro-batches with the loss divided by ``W``.

    Args:
        loss: the wrapped loss, called as ``loss(embeddings, labels)`` (or with
            ``ref_embeddings, ref_labels``, passed unchanged to every slice).
        n_slices: ``W``, the number of slices; the batch size must be a multiple of it.

    Shapes:
        ``embeddings (B, d)``, ``labels (B,)`` or ``(B, L)`` -> a 0-d tensor.

    Raises:
        TypeError: ``loss`` not an ``nn.Module``; ``n_slices`` not an int.
        ValueError: ``n_slices < 1``; at the call, a batch whose size is not a multiple of
            ``n_slices``, or labels of another length.
    """

    def __init__(self, loss: nn.Module, n_slices: int) -> None:
        super().__init__()
        self.loss = check_module(loss, "loss")
        self.n_slices = check_positive_int(n_slices, "n_slices")
        self.uses_references = bool(getattr(loss, "uses_references", True))

    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Mean of the wrapped loss over the ``n_slices`` contiguous slices of the batch.

        Args:
            embeddings: ``(B, d)``, ``B`` a multiple of ``n_slices``.
            labels: ``(B,)`` or ``(B, L)``.
            ref_embeddings, ref_labels: optional references (a memory), given to every slice.

        Returns:
            The 0-d mean loss.
        """
        emb = check_embeddings(embeddings, "embeddings")
        lab = check_labels(labels, emb.shape[0], "labels")
        if emb.shape[0] % self.n_slices:
            raise ValueError(
                f"embeddings has {emb.shape[0]} rows, not a multiple of n_slices={self.n_slices}"
            )
        refs = () if ref_embeddings is None and ref_labels is None else (ref_embeddings, ref_labels)
        parts = [
            self.loss(e, y, *refs)
            for e, y in zip(emb.chunk(self.n_slices), lab.chunk(self.n_slices), strict=True)
        ]
        return torch.stack(parts).mean()

    def extra_repr(self) -> str:
        return f"n_slices={self.n_slices}"
