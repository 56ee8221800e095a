"""Feature extraction from a frozen classifier: pooled features, std-pooled features, logits.

HEAT and every post-hoc scorer work on the classifier's penultimate features ``z = phi(x)`` (the
average pooling of the last feature map), its logits, and -- for the style prior GMM_std of the
Ramzi thesis (Section 5.2.2) -- the **std-pooled** vector: the per-channel standard deviation of
the last feature map (its second-order moments before average pooling).

:func:`extract_features` runs the model once over a dataset (batched, with progress), hooks the
layer that outputs the feature map, and can cache the result to disk in shards so that an
interrupted extraction resumes where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from rank_lab._progress import tqdm
from rank_lab._validation import check_finite, check_positive_int
from rank_lab.utils import DeviceLike, get_device, loader_workers, seed_worker

__all__ = ["avg_pool", "std_pool", "extract_features"]


def _check_fmap(fmap: torch.Tensor, name: str = "fmap") -> torch.Tensor:
    """A finite floating ``(N, C, *spatial)`` map (one or more spatial dims), no size 0."""
    if not isinstance(fmap, torch.Tensor) or fmap.ndim < 3:
        raise ValueError(
            f"{name} must be a feature map of shape (N, C, *spatial), got "
            f"{getattr(fmap, 'shape', type(fmap))}"
        )
    if fmap.numel() == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(fmap.shape)}; N, C and the spatial sizes must be >= 1)"
        )
    if not fmap.is_floating_point():
        raise TypeError(f"{name} must be floating, got {fmap.dtype}")
    check_finite(fmap, name)
    return fmap


def avg_pool(fmap: torch.Tensor) -> torch.Tensor:
    """Global average pooling: ``(N, C, *spatial) -> (N, C)`` (the penultimate features ``z``).

    ``fmap`` may have any number (>= 1) of spatial dims (``(N, C, L)``, ``(N, C, H, W)``,
    ``(N, C, T, H, W)`` ...); it must be floating, finite and non-empty (else ``ValueError`` /
    ``TypeError`` naming ``fmap``).
    """
    fmap = _check_fmap(fmap)
    return fmap.flatten(2).mean(2)


def std_pool(fmap: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Std pooling, the input of the GMM_std prior: ``(N, C, *spatial) -> (N, C)``.

    ``sigma_c = std of fmap[n, c] over the spatial positions``; ``unbiased=True`` divides by
    ``HW - 1`` (``torch.std``'s default, used by the official code), ``False`` by ``HW``.
    ``fmap`` is checked as in :func:`avg_pool` (any number of spatial dims).
    """
    fmap = _check_fmap(fmap)
    if fmap.flatten(2).shape[2] < 2 and unbiased:
        raise ValueError("std_pool needs at least 2 spatial positions with unbiased=True")
    return fmap.flatten(2).std(2, unbiased=unbiased)


def _as_dataset(data: Any) -> Dataset:
    if isinstance(data, Dataset):
        return data
    if isinstance(data, torch.Tensor):
        return TensorDataset(data)
    if isinstance(data, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in data):
        return TensorDataset(*data)
    raise TypeError(
        f"data must be a Dataset, a tensor or a tuple of tensors, got {type(data).__name__}"
    )


def _split_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, (tuple, list)):
        x = batch[0]
        y = batch[1] if len(batch) > 1 and isinstance(batch[1], torch.Tensor) else None
        return x, y
    raise TypeError(f"a dataset item must be x or (x, y, ...), got {type(batch).__name__}")


def _model_dtype(model: nn.Module) -> torch.dtype | None:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), None)


def _check_batch(x: torch.Tensor, start: int, dtype: torch.dtype | None) -> torch.Tensor:
    """A batch of ``data`` (items ``start..``): floating ones must be finite; cast to the model's
    dtype."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"data items must be tensors, got {type(x).__name__}")
    if x.is_floating_point():
        check_finite(x, f"data (items {start}..{start + x.shape[0] - 1})")
        if dtype is not None and x.dtype != dtype:
            # float64 inputs to a float32 model (float32 and float64 are both accepted)
            x = x.to(dtype)
    return x


@torch.no_grad()
def _run(
    model: nn.Module, layer: nn.Module | None, x: torch.Tensor, unbiased: bool
) -> dict[str, torch.Tensor]:
    store: dict[str, torch.Tensor] = {}
    handle = None
    if layer is not None:

        def hook(_m: nn.Module, _inp: Any, out: Any) -> None:
            store["map"] = out[0] if isinstance(out, (tuple, list)) else out

        handle = layer.register_forward_hook(hook)
    try:
        out = model(x)
    except (RuntimeError, IndexError, ValueError, TypeError) as exc:
        raise ValueError(
            f"model failed on a batch of data of shape {tuple(x.shape)} and dtype {x.dtype} "
            f"(does data match the model's input?): {exc}"
        ) from exc
    finally:
        if handle is not None:
            handle.remove()
    logits = out[0] if isinstance(out, (tuple, list)) else out
    res = {"logits": logits.float().cpu()}
    if layer is not None:
        fmap = store["map"]
        if fmap.ndim == 2:
            res["features"] = fmap.float().cpu()
        else:
            res["features"] = avg_pool(fmap).float().cpu()
            res["std"] = std_pool(fmap, unbiased).float().cpu()
    return res


def extract_features(
    model: nn.Module,
    data: Dataset | torch.Tensor | Sequence[torch.Tensor],
    *,
    layer: str | None = None,
    batch_size: int = 256,
    device: DeviceLike = None,
    cache_dir: str | Path | None = None,
    shard_batches: int = 20,
    num_workers: int = 0,
    unbiased_std: bool = True,
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """Run a frozen classifier over ``data`` and collect its features.

    Args:
        model: maps a batch of inputs to logits ``(B, C)`` (a tuple output uses its first item).
            It is put in eval mode; its parameters are not modified.
        data: a ``Dataset`` of ``x`` or ``(x, y, ...)`` items, a tensor ``(N, ...)`` of inputs, or a
            tuple ``(inputs, labels)`` of tensors. The order is kept (no shuffling).
        layer: name of the sub-module (``model.get_submodule(layer)``) whose output is the last
            feature map ``(B, C, H, W)`` -- e.g. ``"layer4"`` for a timm ResNet -- or already pooled
            features ``(B, d)``. ``None``: logits only.
        batch_size: inference batch size.
        device: where to run (``None``: CUDA when present).
        cache_dir: a folder for the result. Every ``shard_batches`` batches a shard is written; a
            later call with the same arguments loads the finished file, or resumes after the last
            complete shard.
        shard_batches: batches per shard.
        num_workers: ``DataLoader`` workers.
        unbiased_std: see :func:`std_pool`.
        progress: show a tqdm bar.

    Returns:
        ``{"logits": (N, C)}`` plus, with ``layer``, ``"features"`` ``(N, C_map)`` (average pooled)
        and ``"std"`` ``(N, C_map)`` (std pooled; absent when the layer outputs vectors), plus
        ``"labels"`` ``(N,)`` when the items carry labels. Float32 tensors on the CPU.

    Raises:
        ValueError, TypeError: a bad argument; a floating batch of ``data`` holding NaN / inf (the
            message gives the item range); a ``model`` that fails on the data (wrong shape or dtype:
            the error names ``data`` and the batch's shape) or returns NaN / inf. Floating inputs
            are cast to the model's parameter dtype (float64 images into a float32 model).
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    shard_batches = check_positive_int(shard_batches, "shard_batches")
    ds = _as_dataset(data)
    n = len(ds)  # type: ignore[arg-type]
    if n == 0:
        raise ValueError("data is empty")
    module = None
    if layer is not None:
        try:
            module = model.get_submodule(layer)
        except AttributeError as exc:
            names = [k for k, _ in model.named_modules() if k][:20]
            raise ValueError(f"model has no sub-module {layer!r}; some names: {names}") from exc
    dev = get_device(device)
    was_training = model.training
    model.eval().to(dev)

    shard_size = batch_size * shard_batches
    meta = {
        "n": n,
        "batch_size": batch_size,
        "shard_batches": shard_batches,
        "layer": layer,
        "unbiased_std": unbiased_std,
    }
    cache = Path(cache_dir) if cache_dir is not None else None
    start, shards = 0, []
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        meta_path = cache / "meta.json"
        if meta_path.exists():
            old = json.loads(meta_path.read_text())
            if old != meta:
                raise ValueError(
                    f"cache_dir {str(cache)!r} holds features extracted with other settings: {old}"
                )
            final = cache / "features.pt"
            if final.exists():
                return torch.load(final, weights_only=True)
        else:
            meta_path.write_text(json.dumps(meta))
        i = 0
        while (cache / f"shard_{i:05d}.pt").exists():
            shards.append(torch.load(cache / f"shard_{i:05d}.pt", weights_only=True))
            i += 1
        start = min(i * shard_size, n)

    todo = Subset(ds, range(start, n)) if start else ds
    loader = DataLoader(
        todo,
        batch_size=batch_size,
        shuffle=False,
        num_workers=loader_workers(num_workers),
        worker_init_fn=seed_worker,
    )
    buf: list[dict[str, torch.Tensor]] = []
    bar = tqdm(total=n, initial=start, desc="features", disable=not progress, leave=False)
    dtype = _model_dtype(model)
    done = start
    try:
        for b, batch in enumerate(loader):
            x, y = _split_batch(batch)
            x = _check_batch(x, done, dtype)
            res = _run(model, module, x.to(dev), unbiased_std)
            bad = [k for k, v in res.items() if not bool(torch.isfinite(v).all())]
            if bad:
                raise ValueError(
                    f"model returned NaN or inf {bad} on finite data items "
                    f"{done}..{done + x.shape[0] - 1}"
                )
            done += x.shape[0]
            if y is not None:
                res["labels"] = torch.as_tensor(y).cpu()
            buf.append(res)
            bar.update(x.shape[0])
            if cache is not None and (len(buf) == shard_batches or b == len(loader) - 1):
                shard = {k: torch.cat([r[k] for r in buf]) for k in buf[0]}
                tmp = cache / f"shard_{len(shards):05d}.pt.tmp"
                torch.save(shard, tmp)
                tmp.replace(cache / f"shard_{len(shards):05d}.pt")
                shards.append(shard)
                buf = []
    finally:
        bar.close()
        model.train(was_training)
    parts = shards + ([{k: torch.cat([r[k] for r in buf]) for k in buf[0]}] if buf else [])
    out = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    if cache is not None:
        torch.save(out, cache / "features.pt")
    return out
