"""Checkpoint helpers: atomic writes, RNG state capture/restore, the learning-rate schedule.

A run interrupted at any point and resumed from its last end-of-epoch checkpoint reproduces the
uninterrupted run exactly (on the same device): the checkpoint holds the model, optimiser, grad
scaler, loss (proxies) and memory states, the Python / NumPy / torch (and CUDA) RNG states and the
history; the batch sampler's draw depends only on ``(seed, epoch)`` and the learning rate only on
the global step (:func:`lr_at`).
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rank_lab._validation import check_float, check_positive_int

__all__ = ["atomic_save", "atomic_write_json", "get_rng_state", "set_rng_state", "lr_at", "load_checkpoint"]


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a temporary file, then rename: a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def atomic_write_json(obj: Any, path: str | Path) -> None:
    """Write JSON atomically (temporary file + rename).

    NumPy scalars, one-element tensors, tuples, sets and paths are converted; NaN and inf are
    written as JSON's ``NaN`` / ``Infinity`` extensions (Python's ``json`` reads them back).

    Raises:
        TypeError: ``obj`` holds a value JSON cannot represent (nothing is written).
    """
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default)  # before touching the disk
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, torch.Tensor) and o.numel() == 1:
        return o.item()
    if isinstance(o, (tuple, set)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"obj holds a value that is not JSON serialisable: {type(o).__name__}")


def get_rng_state() -> dict[str, Any]:
    """The Python, NumPy, torch CPU (and CUDA) RNG states, in a ``weights_only``-loadable form."""
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]),
                  int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` captured.

    Raises:
        TypeError, ValueError: ``state`` is not such a dict (a missing key, a malformed entry).
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be the dict of get_rng_state(), got {type(state).__name__}")
    missing = [k for k in ("python", "numpy", "torch") if k not in state]
    if missing:
        raise ValueError(f"state lacks {missing}: pass the dict of get_rng_state() (a checkpoint's 'rng')")
    try:
        _set_rng_state(state)
    except (TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise ValueError(f"state is not a valid get_rng_state() dict: {exc}") from exc


def _set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def lr_at(
    step: int,
    base_lr: float,
    *,
    total_steps: int,
    warmup_steps: int = 0,
    schedule: str = "cosine",
    min_lr: float = 0.0,
) -> float:
    """Learning rate at a global step (0-based): linear warm-up, then cosine decay or constant.

    ``lr(t) = base * (t + 1) / W`` for ``t < W``; then cosine annealing
    ``min + (base - min) (1 + cos(pi (t - W) / (T - W))) / 2`` (Loshchilov & Hutter, the
    schedule of the thesis §3.5.1 "cosine decay"), or ``base`` for ``"constant"``.
    """
    step, warmup_steps = _nonneg_int(step, "step"), _nonneg_int(warmup_steps, "warmup_steps")
    total_steps = check_positive_int(total_steps, "total_steps")
    base_lr = check_float(base_lr, "base_lr", low=0.0, low_open=True)
    min_lr = check_float(min_lr, "min_lr", low=0.0)
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"schedule must be 'cosine' or 'constant', got {schedule!r}")
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return base_lr
    span = max(1, total_steps - warmup_steps)
    t = min(1.0, (step - warmup_steps) / span)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def _nonneg_int(v: object, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be an int >= 0, got {v!r}")
    return v


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by the trainer (``weights_only`` unpickling: tensors and plain data).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if the file is not a rank_lab checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(ckpt, dict) or "model" not in ckpt or "epoch" not in ckpt:
        raise ValueError(f"{str(path)!r} is not a rank_lab training checkpoint")
    return ckpt
