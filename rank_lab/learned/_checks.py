"""The input checks of :mod:`rank_lab.learned`, in one place (issue 16).

Every entry point of the package (module ``forward``, trainers, tasks, data helpers) checks its
arguments with these helpers, built on :mod:`rank_lab._validation`: bad input raises a
``ValueError`` / ``TypeError`` naming the argument before any work. The training loops stop on a
non-finite loss *before* the update through the engine's guard
(:class:`rank_lab.engine.NonFiniteTrainingError`), so no NaN model is ever saved.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rank_lab._validation import as_tensor, check_float, check_input_batch

IMAGES = ("N", "C", "H", "W")


def check_module(m: object, name: str = "model") -> nn.Module:
    """``m`` must be an ``nn.Module`` (``TypeError`` naming ``name``)."""
    if not isinstance(m, nn.Module):
        raise TypeError(f"{name} must be an nn.Module, got {type(m).__name__}")
    return m


def check_generator(gen: object, name: str = "gen") -> torch.Generator:
    """``gen`` must be a ``torch.Generator``."""
    if not isinstance(gen, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator, got {type(gen).__name__}")
    return gen


def uniform(gen: torch.Generator, *shape: int, device: torch.device | str) -> torch.Tensor:
    """``U[0, 1)`` draws of ``shape`` from ``gen`` (made on the generator's device), placed on
    ``device``.

    The random helpers take a generator and data that may sit on different devices (a CPU generator
    with CUDA boxes: the draws are then the same on every device).
    """
    return torch.rand(shape, generator=gen, device=gen.device).to(device)


def normal(gen: torch.Generator, *shape: int, device: torch.device | str) -> torch.Tensor:
    """``N(0, 1)`` draws of ``shape`` from ``gen`` placed on ``device`` (see :func:`uniform`)."""
    return torch.randn(shape, generator=gen, device=gen.device).to(device)


def check_range(r: object, name: str, positive: bool = False) -> tuple[float, float]:
    """A ``(low, high)`` pair of finite floats with ``low <= high`` (and ``low > 0`` if
    ``positive``)."""
    if not isinstance(r, (tuple, list)) or len(r) != 2:
        raise TypeError(f"{name} must be a (low, high) pair, got {r!r}")
    lo = check_float(r[0], name, low=0 if positive else None, low_open=positive)
    hi = check_float(r[1], name)
    if lo > hi:
        raise ValueError(f"{name} must satisfy low <= high, got {tuple(r)}")
    return lo, hi


def check_images(
    images: object, name: str = "images", model: nn.Module | None = None
) -> torch.Tensor:
    """Finite floating images ``(N, C, H, W)``, ``N >= 1``, cast to ``model``'s dtype (float64
    accepted).

    Integer images are refused: scale them to floats first (e.g. ``uint8 / 255``).
    """
    return check_input_batch(images, name, IMAGES, dtype=model)


def check_boxes(boxes: object, name: str = "boxes") -> torch.Tensor:
    """Finite floating ``(N, 5)`` boxes ``(cx, cy, w, h, theta)`` with ``N >= 1`` and
    ``w, h > 0``."""
    boxes = check_input_batch(boxes, name, ("N", 5))
    if not bool((boxes[:, 2:4] > 0).all()):
        raise ValueError(f"{name} must have positive widths and heights (columns 2 and 3)")
    return boxes


def check_words(words: object, n: int | None = None, name: str = "words") -> list[str]:
    """A sequence of strings (not a single string), of length ``n`` when given (the images'
    rows)."""
    if (
        isinstance(words, str)
        or not isinstance(words, Sequence)
        or not all(isinstance(w, str) for w in words)
    ):
        raise TypeError(f"{name} must be a sequence of str, got {type(words).__name__}")
    if n is not None and len(words) != n:
        raise ValueError(f"images has {n} rows but {name} has {len(words)}")
    return list(words)


def check_int_matrix(x: object, name: str) -> torch.Tensor:
    """An integer ``(B, T)`` tensor with ``B, T >= 1``."""
    x = as_tensor(x, name)
    if x.ndim != 2 or x.numel() == 0:
        raise ValueError(f"{name} must have shape (B, T) with B, T >= 1, got {tuple(x.shape)}")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer class indices, got dtype {x.dtype}")
    return x


def check_targets(
    targets: object, target_lengths: object, b: int, c: int, blank: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded targets ``(B, U)`` and lengths ``(B,)`` in ``[0, U]``; used entries are classes
    ``0..C-1`` but not ``blank``."""
    targets, target_lengths = (
        as_tensor(targets, "targets"),
        as_tensor(target_lengths, "target_lengths"),
    )
    if targets.ndim != 2 or targets.shape[0] != b:
        raise ValueError(
            f"targets must have shape ({b}, U) (one row per log_probs / logits row), got "
            f"{tuple(targets.shape)}"
        )
    if target_lengths.shape != (b,):
        raise ValueError(
            f"target_lengths must have shape ({b},), got {tuple(target_lengths.shape)}"
        )
    for name, t in (("targets", targets), ("target_lengths", target_lengths)):
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {t.dtype}")
    target_lengths = target_lengths.long()
    if bool(((target_lengths < 0) | (target_lengths > targets.shape[1])).any()):
        raise ValueError(
            f"target_lengths must be in [0, U = {targets.shape[1]}], got {target_lengths.tolist()}"
        )
    used = (
        torch.arange(targets.shape[1], device=targets.device)[None]
        < target_lengths.to(targets.device)[:, None]
    )
    vals = targets[used]
    if bool(((vals < 0) | (vals >= c) | (vals == blank)).any()):
        raise ValueError(
            f"targets must hold classes in 0..{c - 1} other than the blank {blank} (within "
            "target_lengths)"
        )
    return targets.long(), target_lengths


def check_pair(
    z: object, y: object, dtype: torch.dtype | nn.Module | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The input check of every surrogate entry point: ``z`` and ``y`` finite floating
    ``(B, *shape)``.

    Args:
        z: predictions ``(B, *shape)`` (at least 2-D, ``B >= 1``).
        y: ground truths of the same shape.
        dtype: cast both to this dtype, or to the dtype of this module's weights (``None``: keep).

    Returns:
        ``(z, y)``, cast (autograd kept).
    """
    for name, t in (("z", z), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ValueError(
                f"{name} must have shape (B, *shape) with at least 2 dims, got {tuple(t.shape)}"
            )
    if z.shape != y.shape:  # type: ignore[union-attr]
        raise ValueError(f"z has shape {tuple(z.shape)} but y has shape {tuple(y.shape)}")  # type: ignore[union-attr]
    free = ("B",) + ("*",) * (z.ndim - 1)  # type: ignore[union-attr]
    return check_input_batch(z, "z", free, dtype=dtype), check_input_batch(
        y, "y", free, dtype=dtype
    )
