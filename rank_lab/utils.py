"""Small shared utilities: device selection and seeding.

Every notebook and experiment of the book takes a ``seed`` and a ``device`` parameter and calls
these two functions, so that smoke runs are reproducible and the same notebook runs on a CPU and on
a CUDA GPU.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["get_device", "seed_everything", "DeviceLike"]

DeviceLike = str | torch.device | None


def get_device(device: DeviceLike = None) -> torch.device:
    """Resolve a device argument: CUDA when present unless ``device`` overrides it.

    Args:
        device: ``None`` or ``"auto"`` picks ``cuda`` when available, else ``cpu``; any other
            string or :class:`torch.device` is returned as a :class:`torch.device`.

    Returns:
        The resolved :class:`torch.device`.

    Raises:
        ValueError: if ``device`` asks for CUDA and none is available, or is not a device name.
    """
    if device is None or (isinstance(device, str) and device.lower() == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str, a torch.device or None, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device={device!r} is not a valid torch device name") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} asks for CUDA but torch.cuda.is_available() is False")
    return dev


def seed_everything(seed: int, deterministic: bool = False) -> torch.Generator:
    """Seed Python, NumPy and torch (CPU and CUDA) and return a seeded torch generator.

    Args:
        seed: a non-negative integer.
        deterministic: also ask torch for deterministic algorithms (slower on CUDA).

    Returns:
        A :class:`torch.Generator` seeded with ``seed`` (CPU), for explicit use in samplers.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen
