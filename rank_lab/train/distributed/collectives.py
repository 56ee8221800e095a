"""Scale-out primitives: the process group, collectives with gradients, a distributed m-per-class
sampler.

Rank losses improve with the size of the batch they rank (the decomposability gap of Eq. 3.6 of the
Ramzi thesis shrinks as ``B / N`` grows), so the batch of a multi-GPU run must be ranked as *one*
batch, not as ``W`` independent ones. This module gives the three pieces
:class:`~rank_lab.train.distributed.trainer.DistributedTrainer` builds on:

* :func:`init_distributed` -- joins the process group that ``torchrun`` describes in the environment
  (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); NCCL on CUDA, gloo
  on the CPU. Without those variables (or with ``WORLD_SIZE=1``) it returns a single-process
  :class:`DistEnv` and every collective below becomes the identity.
* :func:`all_gather_with_grad` -- the embeddings of every rank, concatenated in rank order, with
  gradients flowing back to the local rows. **Scale convention**: the backward all-reduces (sums)
  the gradient of the gathered tensor over the ranks and returns the local rows. When every rank
  computes the same loss ``L`` of the gathered batch, the local embeddings receive
  ``W * dL/dE_local``; DistributedDataParallel then *averages* the parameter gradients over the
  ``W`` ranks, so the parameters receive exactly ``dL/dtheta``, the gradient of the single-process
  loss of the concatenated batch. More generally (ranks computing different losses ``L_r``) the
  parameters receive the gradient of ``(1/W) sum_r L_r``. (``torch.distributed.nn.all_gather`` has
  the same convention but needs ``reduce_scatter``, which gloo lacks.)
* :class:`~rank_lab.train.distributed.sampler.DistributedMPerClassSampler` -- the global m-per-class
  batch of :class:`rank_lab.data.MPerClassSampler` (a function of ``(seed, epoch)`` only), cut into
  ``W`` contiguous slices of whole class groups: the ``m`` images of a class sit on one rank, every
  rank gets ``batch_size / W`` items and the same number of batches, and the concatenation of the
  slices in rank order *is* the single-process batch. A run on ``W`` ranks therefore sees the same
  global batches as a run on one, which is what makes checkpoints rank-agnostic.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from rank_lab._validation import (
    check_finite_input,
    check_float,
    check_module,
    check_nonneg_int,
    check_real,
)
from rank_lab.train.distributed.env import DistEnv, current_env, env_int
from rank_lab.utils import DeviceLike, get_device

__all__ = [
    "init_distributed",
    "cleanup_distributed",
    "barrier",
    "broadcast_object",
    "broadcast_module_state",
    "all_gather_tensor",
    "all_gather_with_grad",
    "all_reduce_mean",
]


def init_distributed(
    backend: str | None = None, *, device: DeviceLike = None, timeout_s: float = 1800.0
) -> DistEnv:
    """Join the process group described by the ``torchrun`` environment variables.

    Args:
        backend: ``"nccl"`` / ``"gloo"``; default NCCL when ``device`` resolves to CUDA, else gloo.
        device: the device the run uses (``None``: CUDA when present); with CUDA the process'
            current device becomes ``cuda:<LOCAL_RANK>``.
        timeout_s: collective timeout in seconds.

    Returns:
        The :class:`DistEnv`. An existing process group is reused (``owns_group=False``); without
        ``WORLD_SIZE`` or with ``WORLD_SIZE=1`` no group is created (single-process fallback).

    Raises:
        ValueError: an unknown ``backend``, a ``timeout_s`` that is not a finite positive number,
            malformed variables, ``RANK`` outside ``[0, WORLD_SIZE)``, or a missing
            ``MASTER_ADDR`` / ``MASTER_PORT``.
    """
    _check_backend(backend)
    timeout_s = check_float(timeout_s, "timeout_s", low=0.0, low_open=True)
    if dist.is_available() and dist.is_initialized():
        return current_env()
    world = env_int("WORLD_SIZE", 1)
    if world < 1:
        raise ValueError(f"WORLD_SIZE must be >= 1, got {world}")
    if world == 1:
        return DistEnv()
    if not dist.is_available():  # pragma: no cover - torch built without distributed
        raise RuntimeError("WORLD_SIZE > 1 but torch.distributed is not available")
    rank, local_rank = env_int("RANK"), env_int("LOCAL_RANK", 0)
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} must lie in [0, WORLD_SIZE={world})")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise ValueError(f"environment variable {name} is not set (launch with torchrun)")
    dev = get_device(device)
    if backend is None:
        backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s)
    )
    return DistEnv(rank, world, local_rank, backend, owns_group=True)


_BACKENDS = ("nccl", "gloo", "mpi", "ucc", "xccl")


def _check_backend(backend: object) -> None:
    """``None``, a torch.distributed backend name, or a ``"cpu:gloo,cuda:nccl"`` device map of
    them."""
    if backend is None:
        return
    if not isinstance(backend, str) or not backend:
        raise TypeError(f"backend must be a backend name (str) or None, got {backend!r}")
    known = tuple(getattr(getattr(dist, "Backend", None), "backend_list", ())) or _BACKENDS
    names = [part.split(":")[-1].strip().lower() for part in backend.split(",")]
    if not all(n in known for n in names):
        raise ValueError(
            f"backend must be one of {sorted(set(known))} (or a 'cpu:gloo,cuda:nccl' map), got "
            f"{backend!r}"
        )


def cleanup_distributed(env: DistEnv | None = None) -> None:
    """Destroy the process group if ``env`` created it (``env=None``: whatever group exists).

    Raises:
        TypeError: ``env`` is neither a :class:`DistEnv` nor ``None``.
    """
    if env is not None and not isinstance(env, DistEnv):
        raise TypeError(f"env must be a DistEnv or None, got {type(env).__name__}")
    if dist.is_available() and dist.is_initialized() and (env is None or env.owns_group):
        dist.destroy_process_group()


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if _active():
        dist.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s (picklable) ``obj`` on every rank (identity in a single process).

    Raises:
        TypeError, ValueError: ``src`` not a rank of the run (an int in ``[0, world_size)``).
    """
    _check_src(src)
    if not _active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


@torch.no_grad()
def broadcast_module_state(module: nn.Module, src: int = 0) -> None:
    """Overwrite every parameter and buffer of ``module`` with rank ``src``'s (e.g. loss proxies, a
    memory).

    Raises:
        TypeError, ValueError: ``module`` is not an ``nn.Module``, ``src`` not a rank of the run.
    """
    check_module(module, "module")
    _check_src(src)
    if _active():
        for t in module.state_dict().values():
            if isinstance(t, torch.Tensor) and t.numel() > 0:
                dist.broadcast(t, src=src)


def _check_src(src: object) -> None:
    world = dist.get_world_size() if _active() else 1
    if check_nonneg_int(src, "src") >= world:
        raise ValueError(f"src={src} is not a rank of this run (world_size={world})")


def _gather_sizes(n: int, device: torch.device, same_size: bool = False) -> list[int]:
    if same_size:  # the caller guarantees it: save a collective
        return [n] * dist.get_world_size()
    t = torch.tensor([n], dtype=torch.long, device=device)
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [int(v) for v in out]


def _gather_rows(x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    m = max(sizes)
    if m == 0:
        return x.new_empty((0, *x.shape[1:]))
    as_bool = x.dtype == torch.bool
    xp = x.to(torch.uint8) if as_bool else x
    if xp.shape[0] < m:  # pad to the largest rank, strip after
        xp = torch.cat([xp, xp.new_zeros((m - xp.shape[0], *xp.shape[1:]))])
    out = [torch.empty_like(xp) for _ in sizes]
    dist.all_gather(out, xp.contiguous())
    res = torch.cat([o[:n] for o, n in zip(out, sizes, strict=True)])
    return res.bool() if as_bool else res


def all_gather_tensor(
    x: torch.Tensor, *, same_size: bool = False, trusted: bool = False
) -> torch.Tensor:
    """Concatenate every rank's ``x (n_r, ...)`` along dim 0 in rank order (no gradient).

    The ranks may hold different numbers of rows (exchanged first, padded internally);
    ``same_size=True`` promises equal ``n_r`` and skips that exchange. Identity in a single process.
    Any real dtype (labels, indices, booleans); a floating ``x`` must be finite (``trusted=True``
    skips that check: a caller whose numerical guard checks the gathered result on every rank).

    Raises:
        TypeError: ``x`` not a tensor, complex. ValueError: a 0-d or ``meta`` tensor, NaN or inf.
    """
    _check_rows(x)
    if x.is_floating_point():
        check_finite_input(x, "x", trusted=trusted)
    if not _active():
        return x
    return _gather_rows(x.detach(), _gather_sizes(x.shape[0], x.device, same_size))


class _AllGatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, same_size: bool) -> torch.Tensor:  # noqa: D102
        sizes = _gather_sizes(x.shape[0], x.device, same_size)
        rank = dist.get_rank()
        ctx.start, ctx.stop = sum(sizes[:rank]), sum(sizes[: rank + 1])
        return _gather_rows(x, sizes)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: D102
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.start : ctx.stop], None


def all_gather_with_grad(
    x: torch.Tensor, *, same_size: bool = False, trusted: bool = False
) -> torch.Tensor:
    """Differentiable all-gather: ``(sum_r n_r, ...)`` rows of every rank, in rank order.

    Backward: the gradient of the gathered tensor is summed over the ranks (all-reduce) and the
    local rows are returned, so that, with DDP's averaging of parameter gradients, the parameters
    get the gradient of ``(1/W) sum_r L_r`` -- exactly the single-process gradient when every rank
    computes the same loss of the gathered batch (see the module docstring). Every rank must
    back-propagate through the gathered tensor (the backward is a collective). Identity in a
    single process.

    Args:
        x: ``(n_r, ...)`` local rows (floating point); ranks may hold different ``n_r``.
        same_size: promise equal ``n_r`` on every rank (skips the size exchange).
        trusted: skip the finite check of ``x`` (the distributed trainer's step: its guard checks
            the gathered batch on every rank together).

    Returns:
        ``(N, ...)`` with ``N = sum_r n_r``; rows ``[sum_{s<r} n_s, sum_{s<=r} n_s)`` are ``x``.

    Raises:
        TypeError: ``x`` not a floating tensor (also in a single process, so that a script behaves
            the same on one rank and on many; gather labels with :func:`all_gather_tensor`).
        ValueError: a 0-d tensor, NaN or inf (unless ``trusted``).
    """
    _check_rows(x)
    if not x.is_floating_point():
        raise TypeError(
            f"x must be a floating tensor for all_gather_with_grad, got {x.dtype}; use "
            "all_gather_tensor"
        )
    check_finite_input(x, "x", trusted=trusted)
    if not _active():
        return x
    return _AllGatherWithGrad.apply(x, bool(same_size))


def _check_rows(x: object) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor with the rows on dim 0, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("x must be a tensor with the rows on dim 0, got a 0-d tensor")
    check_real(x, "x")


def all_reduce_mean(x: torch.Tensor, *, trusted: bool = False) -> torch.Tensor:
    """Mean of ``x`` over the ranks (a new tensor; identity in a single process).

    Raises:
        TypeError: ``x`` is not a tensor, or complex. ValueError: a ``meta`` tensor, NaN or inf in
            ``x`` (unless ``trusted``: a caller that checked it on every rank).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    check_real(x, "x")
    if x.is_floating_point():
        check_finite_input(x, "x", trusted=trusted)
    if not _active():
        return x
    out = x.detach().clone().float() if not x.is_floating_point() else x.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size()
