"""Small shared utilities: device selection and seeding.

Every notebook and experiment of the book takes a ``seed`` and a ``device`` parameter and calls
these two functions, so that smoke runs are reproducible and the same notebook runs on a CPU and on
a CUDA GPU.
"""

from __future__ import annotations

import os
import random
import warnings

import numpy as np
import torch

from rank_lab._validation import check_nonneg_int

__all__ = ["get_device", "seed_everything", "DeviceLike"]

#: The first compute capability with bfloat16 tensor cores (Ampere: A100, A10, L4, RTX 30xx); below
#: it (a Colab T4 is 7.5) bfloat16 is emulated, slower than float32.
BF16_CAPABILITY = (8, 0)

#: The values of ``CUBLAS_WORKSPACE_CONFIG`` under which cuBLAS is deterministic (CUDA >= 10.2; the
#: first is the one set here, 4096 KiB x 8 buffers; the second uses less memory, runs slower).
CUBLAS_WORKSPACE_CONFIGS = (":4096:8", ":16:8")

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
        raise TypeError(
            f"device must be a str, a torch.device or None, got {type(device).__name__}"
        )
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
        deterministic: also make computations deterministic on every device (slower on CUDA):
            ``torch.use_deterministic_algorithms(True, warn_only=False)``, so that an operation
            without a deterministic CUDA kernel raises ``RuntimeError`` (the CTC loss' backward,
            ``AdaptiveAvgPool2d``'s backward ...) instead of running with a warning, and
            ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS' condition, read when CUDA starts: set here
            when CUDA has not started yet; ``:4096:8`` or ``:16:8`` set by the user is kept). The
            rank losses' custom backward then accumulates without atomic adds
            (:func:`rank_lab.ranking.row_kernel.index_add_in_order`).

    Returns:
        A :class:`torch.Generator` seeded with ``seed`` (CPU), for explicit use in samplers.

    Raises:
        RuntimeError: ``deterministic=True`` after CUDA was initialised without
            ``CUBLAS_WORKSPACE_CONFIG`` (export it before starting Python, or ask for determinism
            before any CUDA work).
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
        _use_deterministic_algorithms()
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def _use_deterministic_algorithms() -> None:
    """Make torch deterministic on every device, or refuse: the condition of bit-exact CUDA resumes.

    ``torch.use_deterministic_algorithms(True, warn_only=False)``: every operation with a
    non-deterministic CUDA kernel then either runs a deterministic one (``index_add``,
    ``scatter_add``, ``cumsum``, the backward of indexing ...) or raises ``RuntimeError`` (e.g. the
    CTC loss' backward, ``AdaptiveAvgPool2d``'s backward); nothing runs non-deterministically
    with a mere warning. cuBLAS is deterministic only with ``CUBLAS_WORKSPACE_CONFIG`` set to one
    of ``CUBLAS_WORKSPACE_CONFIGS`` *before* CUDA starts: it is set here when CUDA has not
    been initialised yet, and refused otherwise. The rank losses' custom backward accumulates
    without atomic adds in this mode (:func:`rank_lab.ranking.row_kernel.index_add_in_order`).

    Raises:
        RuntimeError: CUDA is already initialised and ``CUBLAS_WORKSPACE_CONFIG`` is not one of
            ``CUBLAS_WORKSPACE_CONFIGS`` (set it in the environment, or call this, e.g. through
            ``seed_everything(seed, deterministic=True)``, before any CUDA work).
    """
    value = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if value not in CUBLAS_WORKSPACE_CONFIGS:
        if torch.cuda.is_initialized():
            raise RuntimeError(
                f"deterministic CUDA needs CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIGS[0]} "
                f"(or {CUBLAS_WORKSPACE_CONFIGS[1]}) before CUDA starts, but CUDA is already "
                f"initialised in this process with CUBLAS_WORKSPACE_CONFIG={value!r}: export "
                f"CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIGS[0]} before starting Python (or "
                "in a notebook's first cell), or ask for determinism before any CUDA work"
            )
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIGS[0]
    torch.use_deterministic_algorithms(True, warn_only=False)


def check_amp_dtype(amp_dtype: torch.dtype, device: torch.device) -> None:
    """Refuse bfloat16 mixed precision on a CUDA device without bfloat16 tensor cores.

    Below compute capability 8.0 (a Colab T4 is 7.5, a V100 7.0) autocast to bfloat16 runs
    emulated, slower than plain float32: float16 (with its grad scaler) is the mixed precision of
    those GPUs. CPU devices and float16 pass.

    Args:
        amp_dtype: the autocast dtype.
        device: the device autocast runs on.

    Raises:
        ValueError: naming ``amp_dtype``, the device and its capability, suggesting float16.
    """
    if amp_dtype != torch.bfloat16 or device.type != "cuda":
        return
    cap = tuple(torch.cuda.get_device_capability(device))
    if cap < BF16_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise ValueError(
            "amp_dtype='bfloat16' needs a GPU of compute capability "
            f"{BF16_CAPABILITY[0]}.{BF16_CAPABILITY[1]} or more (A100, L4, RTX 30xx); {device} "
            f"({name}) has {cap[0]}.{cap[1]}, where bfloat16 runs emulated and slower than "
            "float32: use amp_dtype='float16' (mixed precision with a grad scaler)"
        )


_WARNED_WORKERS: set[tuple[int, int]] = set()


def _cpu_count() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one: a container's
    share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def loader_workers(num_workers: int, name: str = "num_workers") -> int:
    """``num_workers`` for a ``DataLoader``, never above the CPUs this machine gives the process.

    A Colab runtime has 2 vCPUs: the full-scale configurations written for an 8-core workstation
    (``num_workers=8``) would start 8 processes fighting for 2 cores (and Colab warns that the
    machine may freeze). The count is clamped to the CPUs (divided among the processes of one
    machine under ``torchrun``, ``LOCAL_WORLD_SIZE``), with a ``UserWarning`` once per process and
    value; 0 (load in the main process) stays 0.

    Args:
        num_workers: the requested worker processes (an int >= 0).
        name: the option's name, for the messages.

    Raises:
        TypeError, ValueError: ``num_workers`` not an int >= 0.
    """
    n = check_nonneg_int(num_workers, name)
    # torchrun: the processes of this machine share it
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    cpus = max(1, _cpu_count() // max(1, ranks))
    if n <= cpus:
        return n
    if (n, cpus) not in _WARNED_WORKERS:
        _WARNED_WORKERS.add((n, cpus))
        share = "" if ranks == 1 else f" (its share among {ranks} processes on this machine)"
        warnings.warn(
            f"{name}={n} but this machine gives the process {cpus} CPU(s){share}: using {cpus} "
            f"DataLoader worker(s)",
            UserWarning,
            stacklevel=2,
        )
    return cpus


def seed_worker(worker_id: int) -> None:
    """A ``DataLoader`` ``worker_init_fn``: seed NumPy and Python's ``random`` in each worker
    process.

    From the worker's torch seed (the loader's generator's draw plus ``worker_id``), so that the
    random augmentations a dataset draws with NumPy or ``random`` repeat with the loader's
    generator, and differ between workers and epochs (the recipe of PyTorch's reproducibility
    notes; torch seeds its own generator in each worker).
    """
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
