"""Checkpoint helpers of the engine: atomic writes, RNG state capture/restore, reading a checkpoint.

A run interrupted at any point and resumed from its last checkpoint reproduces the uninterrupted
run exactly (on the same device): the engine's checkpoint (:class:`rank_lab.engine.loop.Engine`)
holds the modules, optimisers, grad scaler, generators, the Python / NumPy / torch (and CUDA) RNG
states and the history; the batches depend only on the seed, the epoch and those generators, and
the learning rate only on the global step (:func:`rank_lab.engine.schedule.lr_at`).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["atomic_save", "atomic_write_json", "get_rng_state", "set_rng_state", "load_checkpoint"]


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
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())  # a checkpoint loaded with map_location="cuda" moves it
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


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
