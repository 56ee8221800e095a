"""Tests of the training-set perturbations (rank_lab.data.perturbations), Patel thesis §6.5."""

from __future__ import annotations

import pytest
import torch

from rank_lab.data.perturbations import imbalanced_indices, noisy_labels, two_views


def test_protocol_helpers():
    labels = torch.arange(4).repeat_interleave(20)
    idx = imbalanced_indices(labels, 0.1, seed=0)
    counts = torch.bincount(labels[idx], minlength=4)
    assert counts.tolist() == [20, 2, 20, 2]
    noisy = noisy_labels(labels, 0.3, seed=0)
    assert int((noisy != labels).sum()) == 24 and int(noisy.max()) <= 3
    x = torch.rand(5, 1, 8, 8)
    v = two_views(x, generator=torch.Generator().manual_seed(0))
    assert v.shape == (10, 1, 8, 8) and not torch.equal(v[:5], v[5:])
    # without noise every view is the image shifted by at most one pixel (zero padding)
    v0 = two_views(x, noise_std=0.0, max_shift=1, generator=torch.Generator().manual_seed(1))
    pad = torch.nn.functional.pad(x, (1, 1, 1, 1))
    for i in range(10):
        shifts = [pad[i % 5, :, dy : dy + 8, dx : dx + 8] for dy in range(3) for dx in range(3)]
        assert any(torch.equal(v0[i], s) for s in shifts)
    flat = two_views(torch.zeros(4, 6), noise_std=1.0, generator=torch.Generator().manual_seed(2))
    assert flat.shape == (8, 6) and float(flat.std()) > 0.5


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="imbalance_rate"):
        imbalanced_indices(torch.tensor([0, 1]), 0.0)
    with pytest.raises(ValueError, match="noise_rate"):
        noisy_labels(torch.tensor([0, 1]), 1.5)
    y = torch.tensor([0, 1, 2, 0, 1, 5])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        noisy_labels(y, 0.5, n_classes=3)  # label 5 was folded into the 3 classes
    with pytest.raises(ValueError, match="x contains 1 NaN"):
        two_views(torch.tensor([[float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="max_shift must be >= 0"):
        two_views(torch.zeros(2, 1, 4, 4), max_shift=-1)  # was silently no shift
