"""Stochastic gradient Langevin dynamics (SGLD), the sampler of HEAT's negatives.

Eq. 5.4 / C.5 of the Ramzi thesis (Welling & Teh, 2011):

``z_{t+1} = z_t - (eta_t / 2) grad_z E(z_t) + sqrt(eta_t) w_t,   w_t ~ N(0, I)``

For a small constant step this is a discretised Langevin diffusion whose stationary law is
``p(z) ∝ exp(-E(z))`` (up to an ``O(eta)`` bias). The thesis' implementation decouples the noise
from the step ("step size 1e-4 -> 1e-5, noise scale 5e-3 -> 5e-4, linear decay"); the official
code also drops the 1/2 (``z <- z - eta grad E - sigma w``), decays both with a power-2 polynomial
and projects every iterate (ReLU, L2-normalisation). All of these are options of :func:`sgld`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rank_lab._validation import check_choice, check_finite, check_float, check_nonneg_int

__all__ = ["schedule_values", "sgld"]

ScheduleSpec = float | Sequence[float]
SCHEDULES = ("linear", "polynomial")


def schedule_endpoints(spec: ScheduleSpec, name: str) -> tuple[float, float]:
    """``(start, end)`` of a constant or a ``(start, end)`` pair, both finite and ``>= 0``."""
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence):
        start = end = check_float(spec, name, low=0)
        return start, end
    if len(spec) != 2:
        raise ValueError(f"{name} must be a float or (start, end), got {spec!r}")
    return check_float(spec[0], name, low=0), check_float(spec[1], name, low=0)


def schedule_values(
    spec: ScheduleSpec, steps: int, kind: str = "linear", power: float = 2.0
) -> list[float]:
    """The per-step values of a decayed hyper-parameter.

    Args:
        spec: a constant, or ``(start, end)``.
        steps: number of SGLD steps ``T``.
        kind: ``"linear"`` (thesis): ``start + (end - start) t / (T - 1)``, so step ``0`` uses
            ``start`` and step ``T - 1`` uses ``end``; ``"polynomial"`` (official code):
            ``(start - end) (1 - t / T)^power + end``.
        power: exponent of the polynomial decay.

    Returns:
        ``T`` floats.

    Raises:
        ValueError, TypeError: ``spec`` values not finite and ``>= 0``, ``steps`` not an int
            ``>= 0``, ``kind`` unknown or ``power`` not finite and ``> 0``.
    """
    return _values(spec, steps, kind, power, "spec", "kind")


def _values(
    spec: ScheduleSpec, steps: int, kind: str, power: float, spec_name: str, kind_name: str
) -> list[float]:
    start, end = schedule_endpoints(spec, spec_name)
    steps = check_nonneg_int(steps, "steps")
    check_choice(kind, kind_name, SCHEDULES)
    power = check_float(power, "power", low=0, low_open=True)
    if kind == "linear":
        return [start + (end - start) * t / max(steps - 1, 1) for t in range(steps)]
    return [(start - end) * (1 - t / steps) ** power + end for t in range(steps)]  # "polynomial"


def sgld(
    energy_fn: Callable[[torch.Tensor], torch.Tensor],
    z0: torch.Tensor,
    *,
    steps: int = 20,
    step_size: ScheduleSpec = (1e-4, 1e-5),
    noise: ScheduleSpec | None = (5e-3, 5e-4),
    schedule: str = "linear",
    power: float = 2.0,
    grad_scale: float = 0.5,
    projection: Callable[[torch.Tensor], torch.Tensor] | None = None,
    generator: torch.Generator | None = None,
    return_chain: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
    """Run ``steps`` SGLD updates from ``z0`` on the energy ``energy_fn`` (Eq. 5.4).

    ``z_{t+1} = P(z_t - grad_scale * eta_t * grad_z E(z_t) + sigma_t w_t)``

    Args:
        energy_fn: maps ``(N, d)`` to ``(N,)`` energies, differentiable in its input. Only the
            gradient with respect to ``z`` is computed: parameters of ``energy_fn`` get no
            ``.grad`` (the samples are constants of the training loss, Eq. 5.3).
        z0: ``(N, d)`` initial points (the proposal ``z'_0``).
        steps: number of updates ``T >= 0``.
        step_size: ``eta``: a constant or ``(start, end)`` (thesis: ``1e-4 -> 1e-5``).
        noise: ``sigma``: a constant or ``(start, end)`` (thesis: ``5e-3 -> 5e-4``); ``None`` gives
            the exact Langevin noise ``sigma_t = sqrt(eta_t)`` of Eq. 5.4.
        schedule: ``"linear"`` (thesis) or ``"polynomial"`` (official code), see
            :func:`schedule_values`.
        power: exponent of the polynomial schedule.
        grad_scale: factor of the gradient step: 0.5 in Eq. 5.4, 1.0 in the official code.
        projection: applied after every step (e.g. ``torch.relu`` for post-ReLU features, or an
            L2-normalisation); ``None`` for none.
        generator: source of the noise (for reproducibility).
        return_chain: also return the list of iterates ``[z_0, ..., z_T]`` (detached).

    Returns:
        ``z_T`` ``(N, d)``, detached; or ``(z_T, chain)``.

    Raises:
        ValueError: bad arguments (naming them), or a chain that diverged to NaN/inf (checked after
            every step, before the energy sees the iterate; reduce the step size).
    """
    if not isinstance(z0, torch.Tensor) or z0.ndim != 2 or z0.shape[0] == 0:
        raise ValueError(
            f"z0 must be a (N, d) tensor with N >= 1, got {getattr(z0, 'shape', type(z0))}"
        )
    if not z0.is_floating_point():
        raise TypeError(f"z0 must be a floating tensor, got dtype {z0.dtype}")
    check_finite(z0, "z0")
    if not callable(energy_fn):
        raise TypeError(f"energy_fn must be callable, got {type(energy_fn).__name__}")
    grad_scale = check_float(grad_scale, "grad_scale", low=0)
    etas = _values(step_size, steps, schedule, power, "step_size", "schedule")
    sigmas = (
        [eta**0.5 for eta in etas]
        if noise is None
        else _values(noise, steps, schedule, power, "noise", "schedule")
    )

    z = z0.detach().clone()
    chain = [z.clone()] if return_chain else []
    with torch.enable_grad():
        for t, (eta, sigma) in enumerate(zip(etas, sigmas, strict=True)):
            z.requires_grad_(True)
            energy = energy_fn(z)
            if energy.shape != (z.shape[0],):
                raise ValueError(
                    f"energy_fn must return shape ({z.shape[0]},), got {tuple(energy.shape)}"
                )
            (grad,) = torch.autograd.grad(energy.sum(), [z])
            dev = z.device if generator is None else generator.device
            w = torch.randn(z.shape, generator=generator, device=dev, dtype=z.dtype).to(z.device)
            z = (z.detach() - grad_scale * eta * grad + sigma * w).detach()
            if projection is not None:
                z = projection(z).detach()
            if not bool(torch.isfinite(z).all()):
                raise ValueError(
                    f"SGLD diverged at step {t + 1} (NaN or inf in the chain): reduce step_size or "
                    "grad_scale, or check the energy"
                )
            if return_chain:
                chain.append(z.clone())
    return (z, chain) if return_chain else z
