"""Data adapters of the training engine: inputs as datasets, re-indexed labels, batched embedding.

The trainer accepts ``(x, y)`` tensors (e.g. an :class:`rank_lab.data.OpenSetSplit`'s
``(x_train, y_train)``), a ``TensorDataset``, or any dataset exposing ``.labels`` (the loaders of
:mod:`rank_lab.data.datasets` return :class:`~rank_lab.data.datasets.ImageListDataset`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from rank_lab._validation import (
    check_finite,
    check_labels,
    check_magnitude,
    check_positive_int,
    trusted_inputs,
)
from rank_lab.utils import check_amp_dtype, get_device, loader_workers, seed_worker

__all__ = ["as_dataset", "relabel", "embed_dataset", "SamplerStream"]


def as_dataset(data: Any, name: str = "data") -> tuple[Dataset, torch.Tensor]:
    """Accept ``(x, y)`` tensors, a ``TensorDataset`` or a dataset with ``.labels``; return
    ``(dataset, labels (N,) or (N, L))``.

    Tensor inputs are checked here, once (a dataset's items are read lazily: the trainer's
    numerical guard names the batch of a bad one): ``x`` and ``y`` with the same number of rows,
    ``x`` floating (every model of the package takes floating inputs: integer pixels or complex
    values would fail at the first step), finite, with values whose squares stay finite
    (:func:`~rank_lab._validation.check_magnitude`: batch statistics overflow beyond), ``y`` (or
    ``.labels``) integer ``(N,)`` or ``(N, L)`` and non-empty.

    Raises:
        TypeError: another type of input, non-floating ``x`` (integers, complex), float labels
            (``1.5`` is no class), a Dataset without ``.labels``.
        ValueError: mismatched rows, a ``meta`` ``x``, NaN or inf in ``x`` or values whose squares
            overflow, empty or wrongly shaped labels (every message names ``name``).
    """
    if (
        isinstance(data, (tuple, list))
        and len(data) == 2
        and all(isinstance(t, torch.Tensor) for t in data)
    ):
        x, y = data
        if x.ndim == 0 or y.ndim == 0:
            raise ValueError(
                f"{name}: x and y need one row per item, got shapes {tuple(x.shape)} and "
                f"{tuple(y.shape)}"
            )
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{name}: x has {x.shape[0]} rows but y has {y.shape[0]}")
        _check_xy(x, y, name)
        return TensorDataset(x, y), y.long().cpu()
    if isinstance(data, TensorDataset):
        if len(data.tensors) < 2:
            raise ValueError(
                f"{name}: a TensorDataset needs (x, y) tensors, got {len(data.tensors)}"
            )
        _check_xy(data.tensors[0], data.tensors[1], name)
        return data, data.tensors[1].long().cpu()
    if isinstance(data, Dataset):
        labels = getattr(data, "labels", None)
        if labels is None:
            raise TypeError(
                f"{name}: a Dataset must expose .labels (N,) or (N, L) for the m-per-class sampler"
            )
        return data, check_labels(labels, None, f"{name} labels").cpu()
    raise TypeError(
        f"{name} must be (x, y) tensors, a TensorDataset or a Dataset with .labels, got "
        f"{type(data).__name__}"
    )


def _check_xy(x: torch.Tensor, y: torch.Tensor, name: str) -> None:
    check_labels(y, x.shape[0], f"{name} labels")
    check_finite(x, f"{name} (x)")  # complex and meta refused there too
    if not x.is_floating_point():
        raise TypeError(
            f"{name} (x) must be a floating tensor, got dtype {x.dtype} (convert it, e.g. "
            "x.float() / 255 for pixels)"
        )
    check_magnitude(x, f"{name} (x)")


def relabel(labels: torch.Tensor) -> torch.Tensor:
    """Map each label column to contiguous ids ``0..C-1`` (sorted order of the original ids)."""
    labels = check_labels(labels, None, "labels")
    if labels.ndim == 1:
        return torch.unique(labels, return_inverse=True)[1]
    return torch.stack([torch.unique(c, return_inverse=True)[1] for c in labels.T], dim=1)


class IndexedDataset(Dataset):
    """``(x, label, index)`` items: the labels given here (re-indexed) and the dataset index."""

    def __init__(self, base: Dataset, labels: torch.Tensor) -> None:
        self.base, self.labels = base, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Any, torch.Tensor, int]:
        return self.base[i][0], self.labels[i], i


@torch.no_grad()
def embed_dataset(
    model: nn.Module,
    data: Any,
    *,
    batch_size: int = 256,
    device: Any = None,
    num_workers: int = 0,
    amp: bool = False,
    amp_dtype: torch.dtype = torch.float16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings ``(N, d)`` (float32, CPU) and labels of a dataset, in eval mode, without
    touching the global RNG.

    ``data`` is checked by :func:`as_dataset`; the embeddings are checked too (a NaN image of a
    lazily read dataset, or a model that overflows): the error names the batch's items.

    Raises:
        TypeError, ValueError: bad ``data`` (see :func:`as_dataset`), ``batch_size`` not a positive
            int, NaN or inf embeddings.
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    ds, labels = as_dataset(data)
    dev = get_device(device)
    if amp:
        check_amp_dtype(amp_dtype, dev)
    was_training = model.training
    model.eval()
    out = []
    if isinstance(ds, TensorDataset):
        x_all = ds.tensors[0]
        batches = (x_all[i : i + batch_size] for i in range(0, len(ds), batch_size))
    else:
        loader = DataLoader(
            ds,
            batch_size=batch_size,
            shuffle=False,
            num_workers=loader_workers(num_workers),
            generator=torch.Generator(),
            worker_init_fn=seed_worker,
            pin_memory=dev.type == "cuda",
        )
        batches = (b[0] for b in loader)
    start = 0
    try:
        for x in batches:
            amp_ctx = torch.autocast(dev.type, dtype=amp_dtype, enabled=amp and dev.type == "cuda")
            # the embeddings are checked below, naming the items
            with amp_ctx, trusted_inputs([model]):
                emb = model(x.to(dev, non_blocking=True)).float().cpu()
            if not bool(torch.isfinite(emb).all()):
                raise ValueError(
                    f"the model's embeddings of data items [{start}, {start + emb.shape[0]}) hold "
                    "NaN or inf: check those inputs (and the model's weights)"
                )
            start += emb.shape[0]
            out.append(emb)
    finally:
        model.train(was_training)
    if not out:
        raise ValueError("data is empty: nothing to embed")
    return torch.cat(out), labels


class SamplerStream:
    """The batches of a batch sampler, epoch after epoch (``set_epoch`` between them): ``stream(s)``
    is batch ``s`` of the stream (``stream.last`` the latest); asking for an earlier batch (a
    resumed run) replays the draw from the start, which costs only the sampler's index draws.

    Args:
        sampler: a batch sampler with ``set_epoch`` whose epoch's draw depends only on its seed and
            the epoch (:class:`rank_lab.data.MPerClassSampler`).
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler, self.pos, self.epoch, self.it, self.last = sampler, 0, 0, None, None

    def __call__(self, s: int) -> list[int]:
        if self.it is None or s < self.pos:
            self.epoch, self.pos = 0, 0
            self.sampler.set_epoch(0)
            self.it = iter(self.sampler)
        while True:
            try:
                idx = next(self.it)
            except StopIteration:
                self.epoch += 1
                self.sampler.set_epoch(self.epoch)
                self.it = iter(self.sampler)
                idx = next(self.it)
            self.pos += 1
            if self.pos - 1 == s:
                self.last = idx
                return idx
