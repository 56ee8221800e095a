"""Tests of calibration metrics and temperature scaling (rank_lab.metrics.calibration), Section
6.5.8 of the Patel thesis."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from rank_lab.metrics.calibration import (
    expected_calibration_error,
    fit_temperature,
    holdout_split,
    negative_log_likelihood,
    plot_reliability_diagram,
    reliability_diagram,
)


def two_class(conf):
    c = torch.tensor(conf, dtype=torch.float64)
    return torch.stack([c, 1 - c], dim=1)  # class 0 predicted with confidence c (c >= 0.5)


def test_hand_worked_ece():
    # 4 predictions of class 0: confidences 0.95, 0.95 (bin 10 of 10), 0.65, 0.55 (bins 7 and 6)
    probs = two_class([0.95, 0.95, 0.65, 0.55])
    targets = torch.tensor([0, 1, 0, 0])
    d = reliability_diagram(probs, targets, n_bins=10)
    # bin (0.9, 1]: acc 1/2, conf 0.95; bin (0.6, 0.7]: acc 1, conf 0.65; bin (0.5, 0.6]: acc 1,
    # conf 0.55
    expect = (2 / 4) * abs(0.5 - 0.95) + (1 / 4) * abs(1 - 0.65) + (1 / 4) * abs(1 - 0.55)
    assert d.ece == pytest.approx(expect, abs=1e-12)
    assert d.counts.tolist() == [0, 0, 0, 0, 0, 1, 1, 0, 0, 2]
    assert float(d.accuracy[9]) == pytest.approx(0.5) and torch.isnan(d.accuracy[0])
    assert expected_calibration_error(probs, targets, n_bins=10) == pytest.approx(expect)


def test_bin_edges_are_right_closed():
    # a confidence of exactly 0.6 belongs to (0.5, 0.6], not (0.6, 0.7]
    d = reliability_diagram(two_class([0.6]), torch.tensor([0]), n_bins=10)
    assert int(d.counts[5]) == 1


def test_perfectly_calibrated_bins_have_zero_ece():
    # 10 predictions at 0.8 with 8 correct, 4 at 0.5 with 2 correct (two-class ties go to class 0)
    probs = two_class([0.8] * 10 + [0.5] * 4)
    targets = torch.tensor([0] * 8 + [1] * 2 + [0, 0, 1, 1])
    assert expected_calibration_error(probs, targets) == pytest.approx(0.0, abs=1e-12)


def test_temperature_scaling_recovers_the_temperature_and_lowers_ece():
    g = torch.Generator().manual_seed(0)
    n, c = 6000, 5
    true_logits = 1.5 * torch.randn(n, c, generator=g, dtype=torch.float64)
    targets = torch.multinomial(true_logits.softmax(1), 1, generator=g).squeeze(1)
    over = 3.0 * true_logits  # an over-confident classifier
    hold, rest = holdout_split(n, 0.2, seed=0)
    t = fit_temperature(over[hold], targets[hold])
    assert t == pytest.approx(3.0, rel=0.15)
    assert negative_log_likelihood(over[rest], targets[rest], t) < negative_log_likelihood(
        over[rest], targets[rest]
    )
    before = expected_calibration_error(over[rest].softmax(1), targets[rest])
    after = expected_calibration_error((over[rest] / t).softmax(1), targets[rest])
    assert after < before / 3 and after < 0.03


def test_holdout_split_and_plot():
    hold, rest = holdout_split(50, 0.2, seed=1)
    assert hold.numel() == 10 and rest.numel() == 40
    assert sorted(torch.cat([hold, rest]).tolist()) == list(range(50))
    d = reliability_diagram(two_class([0.9, 0.7, 0.6]), torch.tensor([0, 1, 0]))
    ax = plot_reliability_diagram(d)
    assert "ECE" in ax.get_title()


def test_errors():
    with pytest.raises(ValueError, match="summing to 1"):
        expected_calibration_error(torch.tensor([[0.3, 0.3]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="targets"):
        expected_calibration_error(two_class([0.7]), torch.tensor([2]))
    with pytest.raises(ValueError, match="NaN"):
        fit_temperature(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="fraction"):
        holdout_split(10, 1.5)
    with pytest.raises(TypeError, match="floating"):
        reliability_diagram(torch.tensor([[1, 0]]), torch.tensor([0]))


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_bad_inputs_name_the_argument():
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 1.5, 0.3]])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        # was a silent inf / NaN
        negative_log_likelihood(logits, torch.tensor([0, 1]), temperature=0.0)
    with pytest.raises(ValueError, match="temperature must be finite"):
        negative_log_likelihood(logits, torch.tensor([0, 1]), temperature=float("nan"))
    with pytest.raises(ValueError, match=r"targets must be \(N,\) classes in \[0, 3\)"):
        negative_log_likelihood(logits, torch.tensor([0, 3]))  # was torch's IndexError
    with pytest.raises(TypeError, match="seed must be an int >= 0"):
        holdout_split(10, seed=1.5)  # was a RuntimeError of manual_seed
    with pytest.raises(ValueError, match="fraction must be < 1"):
        holdout_split(10, fraction=1.0)
    with pytest.raises(TypeError, match="diagram must be a ReliabilityDiagram"):
        plot_reliability_diagram({"ece": 0.1})


def test_an_empty_bin_is_nan_by_definition():
    """The one documented NaN: the mean confidence / accuracy of a bin without samples is undefined
    (``counts`` is 0 there); the ECE and the plot skip such bins."""
    d = reliability_diagram(two_class([0.95, 0.55]), torch.tensor([0, 1]), n_bins=4)
    assert d.counts.tolist() == [0, 0, 1, 1]
    assert torch.isnan(d.confidence[:2]).all() and torch.isfinite(d.confidence[2:]).all()
    assert d.ece == pytest.approx((0.05 + 0.55) / 2)
