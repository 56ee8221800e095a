"""rank_lab.stats: Student-t intervals of repeated runs and paired differences, bounded metrics,
power.

Hand-worked values (the t quantiles from printed tables), an independent brute-force quantile
(numerical integration of the t density, no scipy), the coverage of the interval on simulated
normal runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.stats import (
    ci_sign,
    ci_summary,
    mean_ci,
    minimum_detectable_effect,
    paired_difference,
    t_quantile,
)


def _t_quantile_brute(p: float, dof: int) -> float:
    """The ``p`` quantile of Student's t by bisection on the trapezoid-integrated density."""
    c = math.gamma((dof + 1) / 2) / (math.sqrt(dof * math.pi) * math.gamma(dof / 2))

    def cdf(x: float) -> float:  # 0.5 + integral_0^x of the density
        grid = np.linspace(0.0, x, 200_001)
        pdf = c * (1 + grid**2 / dof) ** (-(dof + 1) / 2)
        return 0.5 + float(np.sum((pdf[1:] + pdf[:-1]) / 2) * (grid[1] - grid[0]))

    lo, hi = 0.0, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def test_t_quantile_matches_printed_tables() -> None:
    # two-sided 95 %: the textbook table
    for dof, t in [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (24, 2.0639)]:
        assert t_quantile(0.95, dof) == pytest.approx(t, abs=1e-4)
    assert t_quantile(0.90, 4) == pytest.approx(2.1318, abs=1e-4)


@pytest.mark.parametrize("dof", [2, 4, 9])
def test_t_quantile_brute_force(dof: int) -> None:
    assert t_quantile(0.95, dof) == pytest.approx(_t_quantile_brute(0.975, dof), abs=1e-4)


def test_mean_ci_hand_worked() -> None:
    # 1..5: mean 3, s = sqrt(2.5), t_{0.975, 4} = 2.776445 -> half-width 1.963243
    m, h = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m == 3.0
    assert h == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)
    assert h == pytest.approx(1.963243, abs=1e-6)
    # two runs 0 and 2: s = sqrt(2), t_{0.975, 1} = 12.706205 -> half-width 12.706205 * sqrt(2) /
    # sqrt(2)
    m2, h2 = mean_ci([0.0, 2.0])
    assert (m2, h2) == (1.0, pytest.approx(12.706205 * math.sqrt(2) / math.sqrt(2)))


def test_ci_summary_fields() -> None:
    s = ci_summary(torch.tensor([1, 2, 3, 4, 5]))  # integers are cast
    assert s["n"] == 5 and s["mean"] == 3.0 and s["level"] == 0.95
    assert s["std"] == pytest.approx(math.sqrt(2.5))
    assert s["lo"] == pytest.approx(3.0 - 1.963243, abs=1e-6) and s["hi"] == pytest.approx(
        3.0 + 1.963243, abs=1e-6
    )
    assert ci_summary([2.0, 2.0, 2.0]) == {
        "n": 3,
        "mean": 2.0,
        "std": 0.0,
        "half_width": 0.0,
        "lo": 2.0,
        "hi": 2.0,
        "level": 0.95,
    }


def test_paired_difference_hand_worked() -> None:
    # d = a - b = [2, 3, 1]: mean 2, s = 1, t_{0.975, 2} = 4.302653 -> half-width 4.302653 / sqrt(3)
    # = 2.484138
    d = paired_difference([3.0, 5.0, 4.0], [1.0, 2.0, 3.0])
    assert d["mean"] == 2.0 and d["std"] == 1.0 and d["n"] == 3
    assert d["half_width"] == pytest.approx(2.484138, abs=1e-6)
    assert (d["mean_a"], d["mean_b"]) == (4.0, 2.0)
    assert ci_sign(d) == 0  # [-0.48, 4.48] holds zero
    # a shift shared by the seeds cancels: the paired interval is far narrower than the separate
    # ones
    base = np.array([10.0, 20.0, 30.0, 40.0])
    p = paired_difference(base + 1.0 + np.array([0.1, -0.1, 0.05, -0.05]), base)
    assert ci_sign(p) == 1 and p["half_width"] < 0.2 < mean_ci(base)[1]
    assert ci_sign(paired_difference(base, base + 1.0 + np.array([0.1, -0.1, 0.05, -0.05]))) == -1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=12), st.floats(0.5, 0.99)
)
def test_mean_ci_against_the_formula(values: list[float], level: float) -> None:
    x = np.asarray(values)
    m, h = mean_ci(x, level)
    assert m == pytest.approx(x.mean(), abs=1e-9)
    assert h == pytest.approx(
        _t_quantile_table(level, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size), rel=1e-6, abs=1e-9
    )
    assert h >= 0
    # a wider level never gives a narrower interval
    assert mean_ci(x, min(0.999, level + 0.005))[1] >= h - 1e-12


def _t_quantile_table(level: float, dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf((1 + level) / 2, dof))


def test_coverage_on_simulated_runs() -> None:
    """95 % of the intervals from 4 normal runs hold the true mean (binomial tolerance)."""
    rng = np.random.default_rng(0)
    hits = 0
    trials = 4000
    for _ in range(trials):
        x = rng.normal(1.5, 2.0, size=4)
        m, h = mean_ci(x)
        hits += abs(m - 1.5) <= h
    assert abs(hits / trials - 0.95) < 4 * math.sqrt(0.95 * 0.05 / trials)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        mean_ci([1.0])
    with pytest.raises(ValueError, match="NaN"):
        ci_summary([1.0, float("nan")])
    with pytest.raises(ValueError, match=r"shape \(n,\)"):
        mean_ci([[0.5, 0.6, 0.7]])
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level=1.0)
    with pytest.raises(TypeError, match="values"):
        mean_ci("abc")
    with pytest.raises(TypeError, match="booleans"):
        mean_ci([True, False])
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="dof"):
        t_quantile(0.95, 0)
    with pytest.raises(TypeError, match="summary"):
        ci_sign([0.0, 1.0])
    with pytest.raises(ValueError, match="lo="):
        ci_sign({"lo": 1.0, "hi": 0.0})


# ------------------------------------------------------------------------------- bounded metrics
def test_bounded_interval_is_the_t_interval_clipped_to_the_range() -> None:
    free = ci_summary([0.0, 10.0, 2.0])  # mean 4, t-interval reaches below 0
    assert free["lo"] < 0 and "bounds" not in free
    s = ci_summary([0.0, 10.0, 2.0], bounds=(0, 100))
    assert s["lo"] == 0.0 and s["hi"] == pytest.approx(free["hi"]) and s["bounds"] == [0.0, 100.0]
    assert s["mean"] == 4.0 and s["half_width"] == free["half_width"]  # the t half-width is kept
    # the reported FEDS-like case: a wide interval around a low accuracy stays inside [0, 100]
    s2 = ci_summary([0.0, 55.0, 3.0, 61.0, 31.0], bounds=(0, 100))
    assert 0.0 <= s2["lo"] <= s2["mean"] <= s2["hi"] <= 100.0
    # FPR95 near the top, in percent
    s3 = ci_summary([99.0, 100.0, 92.0], bounds=(0.0, 100.0))
    assert s3["hi"] == 100.0 and s3["lo"] < s3["mean"]


@pytest.mark.parametrize(
    "values, bounds",
    [
        ([0.0, 0.0, 0.0], (0, 1)),  # a metric at 0 on every seed
        ([1.0, 1.0, 1.0, 1.0], (0, 1)),  # at 100 % on every seed
        ([100.0, 100.0], (0, 100)),  # two seeds, both at the top
        ([0.7, 0.7, 0.7], (0, 1)),  # all seeds equal inside the range
    ],
)
def test_bounded_interval_edge_cases_all_seeds_equal(
    values: list[float], bounds: tuple[float, float]
) -> None:
    s = ci_summary(values, bounds=bounds)
    assert (
        s["lo"] == s["mean"] == s["hi"] == values[0] and s["std"] == 0.0 and s["n"] == len(values)
    )


def test_bounded_interval_two_seeds() -> None:
    # two seeds 0.1 and 0.9: t_{0.975, 1} = 12.7 makes the t-interval far wider than [0, 1]
    s = ci_summary([0.1, 0.9], bounds=(0, 1))
    assert (s["lo"], s["hi"]) == (0.0, 1.0) and s["mean"] == pytest.approx(0.5)
    s = ci_summary([0.0, 0.02], bounds=(0, 1))  # one seed at the bound
    assert s["lo"] == 0.0 and s["hi"] == pytest.approx(0.01 + 12.706205 * 0.01, rel=1e-6)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=10))
def test_bounded_interval_inside_range_and_holds_the_mean(values: list[float]) -> None:
    s = ci_summary(values, bounds=(0.0, 1.0))
    assert 0.0 <= s["lo"] <= s["mean"] + 1e-12 and s["mean"] - 1e-12 <= s["hi"] <= 1.0


def test_bounded_interval_coverage_near_the_bound() -> None:
    """Clipping never drops the true mean: coverage stays at the t-interval's (accuracies near
    1)."""
    rng = np.random.default_rng(1)
    trials, hits, true = 3000, 0, 0.97
    for _ in range(trials):
        x = np.clip(rng.normal(true, 0.02, size=4), 0, 1)
        s = ci_summary(x, bounds=(0, 1))
        assert 0 <= s["lo"] and s["hi"] <= 1
        hits += s["lo"] <= x.mean() * 0 + float(np.clip(true, 0, 1)) <= s["hi"] or False
    # the clipped normal's mean is slightly below 0.97; the t-interval's coverage is about 95 %
    assert hits / trials > 0.9


def test_bounded_interval_bad_inputs() -> None:
    with pytest.raises(ValueError, match="inside bounds"):
        ci_summary([0.5, 1.2], bounds=(0, 1))
    with pytest.raises(ValueError, match="low < high"):
        ci_summary([0.5, 0.6], bounds=(1, 0))
    with pytest.raises(TypeError, match="bounds"):
        ci_summary([0.5, 0.6], bounds=1.0)
    with pytest.raises(TypeError, match="bounds"):
        ci_summary([0.5, 0.6], bounds="01")


# ------------------------------------------------------------------------------- power
def _rejection_rate(
    delta: float, std: float, n: int, trials: int, rng: np.random.Generator
) -> float:
    """Brute force: how often the paired two-sided t-test at 5 % rejects 'no difference'."""
    crit = t_quantile(0.95, n - 1)
    d = rng.normal(delta, std, size=(trials, n))
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(t) > crit))


@pytest.mark.parametrize("n", [3, 5, 8])
def test_mde_has_80_percent_power_by_simulation(n: int) -> None:
    rng = np.random.default_rng(n)
    std = 1.7
    mde = minimum_detectable_effect(std, n)
    trials = 20000
    tol = 4 * math.sqrt(0.8 * 0.2 / trials)
    assert _rejection_rate(mde, std, n, trials, rng) == pytest.approx(0.8, abs=tol)
    # and the power is monotone: half the MDE is detected far less often
    assert _rejection_rate(mde / 2, std, n, trials, rng) < 0.6


def test_mde_against_the_textbook_approximation() -> None:
    from scipy import stats

    # large n: the noncentral t tends to the normal, MDE -> (z_{0.975} + z_{0.8}) sigma / sqrt(n) =
    # 2.8016 sigma / sqrt(n)
    assert minimum_detectable_effect(1.0, 400) == pytest.approx(2.8016 / 20, rel=5e-3)
    assert minimum_detectable_effect(1.0, 10_000) == pytest.approx(2.8016 / 100, rel=2e-4)
    # moderate n: within a few percent of (t_{0.975, n-1} + t_{0.8, n-1}) sigma / sqrt(n)
    for n in (8, 12, 25):
        approx = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) / math.sqrt(n)
        assert minimum_detectable_effect(1.0, n) == pytest.approx(approx, rel=0.03)
    # scales with the standard deviation; fewer seeds need a larger effect
    assert minimum_detectable_effect(3.0, 5) == pytest.approx(3 * minimum_detectable_effect(1.0, 5))
    assert (
        minimum_detectable_effect(1.0, 2)
        > minimum_detectable_effect(1.0, 3)
        > minimum_detectable_effect(1.0, 8)
    )
    # more power or a smaller alpha needs a larger effect
    assert minimum_detectable_effect(1.0, 5, power=0.9) > minimum_detectable_effect(1.0, 5)
    assert minimum_detectable_effect(1.0, 5, alpha=0.01) > minimum_detectable_effect(1.0, 5)


def test_mde_edge_cases() -> None:
    assert minimum_detectable_effect(0.0, 5) == 0.0  # all seeds gave the same difference
    two = minimum_detectable_effect(1.0, 2)  # two seeds: one degree of freedom, a very large MDE
    assert 10 < two < 100
    d = paired_difference([3.0, 5.0, 4.0], [1.0, 2.0, 3.0])
    assert minimum_detectable_effect(d["std"], d["n"]) == pytest.approx(
        minimum_detectable_effect(1.0, 3)
    )
    with pytest.raises(ValueError, match="at least 2"):
        minimum_detectable_effect(1.0, 1)
    with pytest.raises(ValueError, match="std"):
        minimum_detectable_effect(-1.0, 5)
    with pytest.raises(ValueError, match="power"):
        minimum_detectable_effect(1.0, 5, power=1.0)
    with pytest.raises(ValueError, match="alpha"):
        minimum_detectable_effect(1.0, 5, alpha=0.0)
    with pytest.raises(TypeError, match="n"):
        minimum_detectable_effect(1.0, 2.5)
