"""Statistics over repeated runs: means with Student-t confidence intervals, paired differences.

The one home of the package's confidence intervals. For ``n`` runs (seeds) ``x_1..x_n`` with mean ``m`` and sample standard
deviation ``s`` (``ddof = 1``) the two-sided interval at level ``1 - alpha`` is

    m +- t_{1 - alpha/2, n - 1} * s / sqrt(n)

(Student t with ``n - 1`` degrees of freedom; the thesis reports its repeated runs this way,
Ramzi thesis Sec. 4.3.3). A comparison of two methods run on the **same seeds** uses the paired
differences ``d_i = a_i - b_i`` (:func:`paired_difference`): the seed's shared randomness (data
split, initialisation) cancels, so its interval is usually much narrower than the two separate
intervals suggest. The intervals assume roughly normal run-to-run variation; with 3 to 10 seeds
they are wide, which is the honest answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from rank_lab._validation import as_tensor, check_float, check_positive_int

__all__ = ["t_quantile", "mean_ci", "ci_summary", "paired_difference", "ci_sign"]


def _runs(values: object, name: str) -> np.ndarray:
    """``values`` as a float64 array of shape ``(n,)``, ``n >= 2``, finite (else a clear error)."""
    t = as_tensor(values, name)
    if t.dtype == torch.bool:
        raise TypeError(f"{name} must hold numbers, got booleans")
    if t.ndim != 1:
        raise ValueError(f"{name} must have shape (n,), got {tuple(t.shape)}")
    x = np.asarray(t.double().cpu().numpy(), dtype=np.float64)
    if x.size < 2:
        raise ValueError(f"{name} needs at least 2 runs for a confidence interval, got {x.size}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf")
    return x


def _level(level: object) -> float:
    return check_float(level, "level", low=0.0, high=1.0, low_open=True, high_open=True)


def t_quantile(level: float, dof: int) -> float:
    """The two-sided Student-t critical value ``t_{(1 + level)/2, dof}``.

    Args:
        level: confidence level in ``(0, 1)``, e.g. ``0.95``.
        dof: degrees of freedom (``n - 1`` for ``n`` runs), ``>= 1``.

    Returns:
        e.g. ``12.706`` for ``dof = 1``, ``4.303`` for 2, ``2.776`` for 4, ``2.064`` for 24.

    Raises:
        ValueError / TypeError: ``level`` outside ``(0, 1)``; ``dof`` not a positive int.
    """
    # heavy import, paid only on this path
    from scipy import stats

    level = _level(level)
    dof = check_positive_int(dof, "dof")
    return float(stats.t.ppf((1.0 + level) / 2.0, dof))


def mean_ci(values: object, level: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of the Student-t confidence interval (Ramzi thesis Sec. 4.3.3).

    ``mean +- t_{(1+level)/2, n-1} s / sqrt(n)`` with ``s`` the sample standard deviation
    (``ddof = 1``); e.g. ``t = 2.776`` for 5 runs, ``2.064`` for 25.

    Args:
        values: ``(n,)`` results of ``n >= 2`` repeated stochastic runs (integers are cast to float).
        level: confidence level in ``(0, 1)``.

    Returns:
        ``(mean, half_width)``.

    Raises:
        ValueError: ``values`` not 1-D, shorter than 2 or holding NaN / inf; ``level`` outside (0, 1).
        TypeError: ``values`` not array-like; ``level`` not a number.
    """
    x = _runs(values, "values")
    t = t_quantile(level, x.size - 1)
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(x.size))


def ci_summary(values: object, level: float = 0.95) -> dict[str, float]:
    """The mean of repeated runs with its Student-t interval, as a JSON-ready mapping.

    Args:
        values: ``(n,)`` results of ``n >= 2`` runs (one per seed).
        level: confidence level in ``(0, 1)``.

    Returns:
        ``{"n", "mean", "std", "half_width", "lo", "hi", "level"}``: ``std`` is the sample standard
        deviation (``ddof = 1``), ``[lo, hi] = mean -+ half_width`` (:func:`mean_ci`).

    Raises:
        ValueError, TypeError: as :func:`mean_ci`.
    """
    x = _runs(values, "values")
    mean, half = mean_ci(x, level)
    return {"n": int(x.size), "mean": mean, "std": float(x.std(ddof=1)), "half_width": half,
            "lo": mean - half, "hi": mean + half, "level": float(level)}


def paired_difference(a: object, b: object, level: float = 0.95) -> dict[str, float]:
    """The mean of ``a - b`` over the same seeds with its Student-t interval ("A minus B").

    ``a[i]`` and ``b[i]`` must come from the same seed ``i`` (same data, same initialisation, same
    batches where the methods allow it): the interval is :func:`ci_summary` of the ``n``
    differences, which removes the variation the seeds share.

    Args:
        a: ``(n,)`` results of method A, one per seed.
        b: ``(n,)`` results of method B on the same seeds, in the same order.
        level: confidence level in ``(0, 1)``.

    Returns:
        :func:`ci_summary` of ``a - b`` plus ``mean_a`` and ``mean_b``.

    Raises:
        ValueError: ``a`` and ``b`` of different lengths, or see :func:`mean_ci`.
    """
    xa = _runs(a, "a")
    xb = _runs(b, "b")
    if xa.size != xb.size:
        raise ValueError(f"a has {xa.size} runs but b has {xb.size}: a paired difference needs the same seeds")
    out = ci_summary(xa - xb, level)
    out["mean_a"] = float(xa.mean())
    out["mean_b"] = float(xb.mean())
    return out


def ci_sign(summary: Mapping[str, float]) -> int:
    """Which side of zero an interval lies on: ``1`` (all above), ``-1`` (all below), ``0`` (holds zero).

    A difference is *resolved* when its interval excludes zero (``ci_sign != 0``).

    Args:
        summary: a mapping with ``lo`` and ``hi`` (:func:`ci_summary`, :func:`paired_difference`).

    Raises:
        TypeError: ``summary`` not a mapping with numeric ``lo`` and ``hi``.
        ValueError: ``lo > hi`` or a bound not finite.
    """
    if not isinstance(summary, Mapping) or "lo" not in summary or "hi" not in summary:
        raise TypeError(f"summary must be a mapping with 'lo' and 'hi', got {summary!r}")
    lo = check_float(summary["lo"], "summary['lo']")
    hi = check_float(summary["hi"], "summary['hi']")
    if lo > hi:
        raise ValueError(f"summary: lo={lo} > hi={hi}")
    return 1 if lo > 0 else -1 if hi < 0 else 0
