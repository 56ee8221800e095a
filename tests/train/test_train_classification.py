"""Tests of the contrastive classifiers of chapter 6 (rank_lab.train.classification)."""

from __future__ import annotations

import pytest
import torch

from rank_lab.models.heads import class_means


@pytest.mark.parametrize("method", ["ce", "supcon+ce", "supcon+ce(n)", "supcon+tt", "spce", "spce(m)", "esupcon"])
def test_every_method_learns_a_separable_task(method):
    from rank_lab.metrics.classification import accuracy
    from rank_lab.train.classification import ContrastiveClassifier, fit_classifier, predict_logits

    g = torch.Generator().manual_seed(0)
    centers = 3 * torch.randn(4, 10, generator=g)
    y = torch.arange(4).repeat_interleave(30)
    x = centers[y] + 0.5 * torch.randn(120, 10, generator=g)
    torch.manual_seed(0)
    enc = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    model = ContrastiveClassifier(enc, n_classes=4, dim=16, method=method, temperature=0.2)
    hist = fit_classifier(model, x, y, epochs=15, stage2_epochs=10, batch_size=40, lr=5e-3, seed=0)
    assert len(hist) == (25 if model.two_stage else 15)
    logits = predict_logits(model, x)
    assert logits.shape == (120, 4)
    assert accuracy(logits.argmax(1), y) > 0.9
    if model.two_stage:
        assert model.stage == 2 and not any(p.requires_grad for p in model.encoder.parameters())
    if method == "spce(m)":
        with torch.no_grad():
            torch.testing.assert_close(model.prototypes.prototypes, class_means(enc(x), y, 4))


def test_classifier_errors():
    from rank_lab.train.classification import ContrastiveClassifier

    with pytest.raises(ValueError, match="method"):
        ContrastiveClassifier(torch.nn.Linear(3, 3), n_classes=2, dim=3, method="svm")
    with pytest.raises(ValueError, match="single stage"):
        ContrastiveClassifier(torch.nn.Linear(3, 3), n_classes=2, dim=3, method="esupcon").start_stage2()


def test_classifier_sizes_by_keyword_in_the_package_order():
    from rank_lab.train.classification import ContrastiveClassifier

    model = ContrastiveClassifier(torch.nn.Linear(3, 5), n_classes=2, dim=5, method="ce")
    assert model.linear.weight.shape == (2, 5)  # (n_classes, dim)
    with pytest.raises(TypeError, match="n_classes= and dim="):
        ContrastiveClassifier(torch.nn.Linear(3, 5), n_classes=2)
