"""Where this process stands in a (possibly) distributed run: :class:`DistEnv` and
:func:`current_env`.

The environment of :mod:`rank_lab.train.distributed.collectives`, in a module of its own so that
:mod:`rank_lab.train.distributed.sampler` can read the rank without importing the collectives.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rank_lab._validation import check_nonneg_int, check_positive_int
from rank_lab.utils import DeviceLike, get_device

__all__ = ["DistEnv", "current_env"]


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands in the run.

    Attributes:
        rank: global rank (0 = the main process: it logs and writes checkpoints).
        world_size: number of processes ``W`` (1 = single process, no process group).
        local_rank: rank on this node (the CUDA device index under ``torchrun``).
        backend: ``"nccl"``, ``"gloo"`` or ``None`` (single process).
        owns_group: :func:`init_distributed` created the process group (so
            :func:`cleanup_distributed` destroys it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    owns_group: bool = False

    def __post_init__(self) -> None:
        """``world_size >= 1``, ``0 <= rank < world_size``, ``local_rank >= 0`` (errors name the
        field)."""
        world = check_positive_int(self.world_size, "world_size")
        rank = check_nonneg_int(self.rank, "rank")
        check_nonneg_int(self.local_rank, "local_rank")
        if rank >= world:
            raise ValueError(f"rank={rank} must lie in [0, world_size={world})")
        if self.backend is not None and not isinstance(self.backend, str):
            raise TypeError(f"backend must be a str or None, got {type(self.backend).__name__}")

    @property
    def is_main(self) -> bool:
        """True on rank 0."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        """True when there is more than one process."""
        return self.world_size > 1

    def device(self, device: DeviceLike = None) -> torch.device:
        """This rank's device: ``cuda:<local_rank>`` when ``device`` asks for CUDA without an index
        in a multi-process run, else :func:`rank_lab.utils.get_device` of ``device``."""
        dev = get_device(device)
        if dev.type == "cuda" and dev.index is None and self.is_distributed:
            return torch.device("cuda", self.local_rank)
        return dev


def env_int(name: str, default: int | None = None) -> int:
    """The integer environment variable ``name`` set by ``torchrun`` (``default`` when unset).

    Raises:
        ValueError: unset without a default, or not an integer (the message names the variable).
    """
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise ValueError(f"environment variable {name} is not set (launch with torchrun)")
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc


def current_env() -> DistEnv:
    """The :class:`DistEnv` of an already initialised process group (single process if none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistEnv()
    return DistEnv(
        dist.get_rank(), dist.get_world_size(), env_int("LOCAL_RANK", 0), str(dist.get_backend())
    )
