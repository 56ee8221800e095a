"""Statistics over repeated runs: means with Student-t confidence intervals, paired differences.

The one home of the package's confidence intervals. For ``n`` runs (seeds) ``x_1..x_n`` with mean
``m`` and sample standard deviation ``s`` (``ddof = 1``) the two-sided interval at level
``1 - alpha`` is

    m +- t_{1 - alpha/2, n - 1} * s / sqrt(n)

(Student t with ``n - 1`` degrees of freedom; the thesis reports its repeated runs this way,
Ramzi thesis Sec. 4.3.3). A comparison of two methods run on the **same seeds** uses the paired
differences ``d_i = a_i - b_i`` (:func:`paired_difference`): the seed's shared randomness (data
split, initialisation) cancels, so its interval is usually much narrower than the two separate
intervals suggest. The intervals assume roughly normal run-to-run variation; with 3 to 10 seeds
they are wide, which is the honest answer.

**Bounded metrics** (accuracy, AP, recall, FPR, AUROC: a fraction in ``[0, 1]`` or percent in
``[0, 100]``) take ``bounds``: the t-interval is intersected with the metric's range
(:func:`ci_summary`). The true mean lies inside the range, so the intersection covers it exactly as
often as the t-interval does; the interval still holds the reported mean, and a metric at 0 or
100 % on every seed gets the zero-width interval at that value. (A percentile bootstrap covers
badly at 3 to 8 seeds: with 3 seeds it has at most 10 distinct resamples and never leaves the
range of the values. A t-interval on the logit scale is undefined at 0 and 100 %, and it is an
interval for the back-transformed mean of the logits, which can exclude the arithmetic mean the
tables report.) Paired differences (:func:`paired_difference`) stay plain t-intervals.

**Power.** :func:`minimum_detectable_effect` is the smallest true difference that a paired,
two-sided t-test at level ``alpha`` detects with probability ``power`` (80 % by default) given
the seed-to-seed standard deviation of the differences and the number of seeds: a comparison whose
interval holds zero says nothing about effects below it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rank_lab._validation import as_tensor, check_float, check_positive_int

__all__ = [
    "t_quantile",
    "mean_ci",
    "ci_summary",
    "paired_difference",
    "ci_sign",
    "minimum_detectable_effect",
]


def _runs(values: object, name: str) -> np.ndarray:
    """``values`` as a float64 array of shape ``(n,)``, ``n >= 2``, finite (else a clear error).

    Python and numpy numbers keep their float64 precision (a list is not cast to float32 on its
    way).
    """
    if isinstance(values, torch.Tensor):
        t = as_tensor(values, name)
        if t.dtype == torch.bool:
            raise TypeError(f"{name} must hold numbers, got booleans")
        x = np.asarray(t.detach().double().cpu().numpy(), dtype=np.float64)
    else:
        try:
            raw = np.asarray(values)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be array-like numbers, got {type(values).__name__}"
            ) from None
        if raw.dtype == np.bool_:
            raise TypeError(f"{name} must hold numbers, got booleans")
        if raw.dtype.kind not in "iuf":
            raise TypeError(
                f"{name} must be array-like numbers, got {type(values).__name__} of {raw.dtype}"
            )
        x = raw.astype(np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must have shape (n,), got {tuple(x.shape)}")
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
        values: ``(n,)`` results of ``n >= 2`` repeated stochastic runs (integers are cast to
            float).
        level: confidence level in ``(0, 1)``.

    Returns:
        ``(mean, half_width)``.

    Raises:
        ValueError: ``values`` not 1-D, shorter than 2 or holding NaN / inf; ``level`` outside (0,
            1).
        TypeError: ``values`` not array-like; ``level`` not a number.
    """
    x = _runs(values, "values")
    t = t_quantile(level, x.size - 1)
    # all runs agree: exactly that value, a zero-width interval (no rounding residue)
    if (x == x[0]).all():
        return float(x[0]), 0.0
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(x.size))


def _bounds(bounds: object) -> tuple[float, float] | None:
    if bounds is None:
        return None
    if (
        isinstance(bounds, (str, bytes))
        or not isinstance(bounds, (tuple, list))
        or len(bounds) != 2
    ):
        raise TypeError(f"bounds must be None or a pair (low, high), got {bounds!r}")
    low = check_float(bounds[0], "bounds[0]")
    high = check_float(bounds[1], "bounds[1]")
    if not low < high:
        raise ValueError(f"bounds must satisfy low < high, got {bounds!r}")
    return low, high


def ci_summary(
    values: object, level: float = 0.95, bounds: tuple[float, float] | None = None
) -> dict[str, Any]:
    """The mean of repeated runs with its Student-t interval, as a JSON-ready mapping.

    Args:
        values: ``(n,)`` results of ``n >= 2`` runs (one per seed).
        level: confidence level in ``(0, 1)``.
        bounds: ``(low, high)``, the range of a bounded metric (``(0, 1)`` for a fraction,
            ``(0, 100)`` in percent), or ``None`` for an unbounded quantity. With bounds the
            interval is the t-interval intersected with the range (see the module: same
            coverage, always inside the range, always holding the mean).

    Returns:
        ``{"n", "mean", "std", "half_width", "lo", "hi", "level"}``, plus ``"bounds": [low, high]``
        when given: ``std`` is the sample standard deviation (``ddof = 1``), ``half_width`` the
        t half-width of :func:`mean_ci`, ``[lo, hi] = mean -+ half_width`` (clipped to the bounds).

    Raises:
        ValueError: as :func:`mean_ci`; a value outside ``bounds``; ``bounds`` with low >= high.
        TypeError: as :func:`mean_ci`; ``bounds`` not a pair of numbers.
    """
    x = _runs(values, "values")
    rng = _bounds(bounds)
    mean, half = mean_ci(x, level)
    lo, hi = mean - half, mean + half
    std = 0.0 if half == 0.0 and (x == x[0]).all() else float(x.std(ddof=1))
    out: dict[str, Any] = {
        "n": int(x.size),
        "mean": mean,
        "std": std,
        "half_width": half,
        "lo": lo,
        "hi": hi,
        "level": float(level),
    }
    if rng is not None:
        if x.min() < rng[0] or x.max() > rng[1]:
            raise ValueError(
                f"values must lie inside bounds {list(rng)}, got min {x.min()} and max {x.max()}"
            )
        out.update(lo=max(lo, rng[0]), hi=min(hi, rng[1]), bounds=[rng[0], rng[1]])
    return out


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
        raise ValueError(
            f"a has {xa.size} runs but b has {xb.size}: a paired difference needs the same seeds"
        )
    out = ci_summary(xa - xb, level)
    out["mean_a"] = float(xa.mean())
    out["mean_b"] = float(xb.mean())
    return out


def ci_sign(summary: Mapping[str, float]) -> int:
    """Which side of zero an interval lies on: ``1`` (all above), ``-1`` (all below), ``0`` (holds
    zero).

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


#: Gauss-Legendre nodes per panel of the MDE's average over the chi-square variable.
_MDE_NODES = 400


def minimum_detectable_effect(
    std: float, n: int, *, power: float = 0.8, alpha: float = 0.05
) -> float:
    """The smallest true mean difference a paired two-sided t-test detects with probability
    ``power``.

    With ``n`` paired runs whose differences have standard deviation ``std`` the test statistic
    ``T = mean / (s / sqrt(n))`` follows a noncentral t distribution with ``n - 1`` degrees of
    freedom and noncentrality ``delta sqrt(n) / std`` for a true difference ``delta``. The MDE is
    the ``delta`` at which ``P(|T| > t_{1 - alpha/2, n - 1}) = power`` (solved exactly; close to the
    textbook ``(t_{1 - alpha/2} + t_{power}) std / sqrt(n)`` once ``n`` is moderate). ``std`` is
    the recorded seed-to-seed standard deviation of the differences (``paired_difference(a,
    b)["std"]``), used as if it were the true one, as power analyses do.

    Args:
        std: standard deviation of the per-seed differences (``>= 0``; ``0`` gives ``0``).
        n: number of seeds (pairs), ``>= 2``.
        power: probability of detection in ``(alpha, 1)``, default 0.8.
        alpha: two-sided significance level in ``(0, 1)``, default 0.05 (the 95 % intervals).

    Returns:
        The MDE in the units of ``std`` (``>= 0``).

    Raises:
        ValueError: ``std`` negative or not finite, ``n < 2``, ``power`` or ``alpha`` out of range.
        TypeError: non-numeric arguments.
    """
    # heavy imports, paid only on this path
    from scipy import optimize, stats

    std = check_float(std, "std", low=0.0)
    n = check_positive_int(n, "n")
    if n < 2:
        raise ValueError(f"n must be at least 2 seeds, got {n}")
    alpha = check_float(alpha, "alpha", low=0.0, high=1.0, low_open=True, high_open=True)
    power = check_float(power, "power", low=alpha, high=1.0, low_open=True, high_open=True)
    if std == 0.0:
        return 0.0
    dof = n - 1
    crit = float(stats.t.ppf(1.0 - alpha / 2.0, dof))

    # P(|Z + nc| > crit sqrt(V / dof)), V ~ chi2(dof): the noncentral t's two tails, averaged over V
    # by Gauss-Legendre quadrature in V's quantile u (V = F^-1(u)), which removes the chi2 density's
    # peak and its singularity at 0 for one degree of freedom (scipy's nct loses its tails there);
    # the nodes are computed once for every noncentrality the root search tries
    x, w = np.polynomial.legendre.leggauss(_MDE_NODES)
    u = np.concatenate([(x + 1.0) / 4.0, (x + 3.0) / 4.0])  # two panels on [0, 1/2] and [1/2, 1]
    weights = np.concatenate([w, w]) / 4.0
    c = crit * np.sqrt(stats.chi2.ppf(u, dof) / dof)

    def shortfall(nc: float) -> float:
        tails = stats.norm.sf(c - nc) + stats.norm.cdf(-c - nc)
        return float(weights @ tails) - power

    high = crit + float(stats.norm.ppf(power)) + 1.0
    while shortfall(high) < 0:
        high *= 2.0
    nc = optimize.brentq(shortfall, 0.0, high, xtol=1e-12, rtol=1e-12)
    return float(nc * std / math.sqrt(n))
