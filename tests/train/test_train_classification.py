"""Tests of the contrastive classifiers of chapter 6 (rank_lab.train.classification)."""

from __future__ import annotations

import pytest
import torch

from rank_lab.models.heads import class_means


@pytest.mark.parametrize(
    "method", ["ce", "supcon+ce", "supcon+ce(n)", "supcon+tt", "spce", "spce(m)", "esupcon"]
)
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
        ContrastiveClassifier(
            torch.nn.Linear(3, 3), n_classes=2, dim=3, method="esupcon"
        ).start_stage2()


def test_classifier_sizes_by_keyword_in_the_package_order():
    from rank_lab.train.classification import ContrastiveClassifier

    model = ContrastiveClassifier(torch.nn.Linear(3, 5), n_classes=2, dim=5, method="ce")
    assert model.linear.weight.shape == (2, 5)  # (n_classes, dim)
    with pytest.raises(TypeError, match="n_classes= and dim="):
        ContrastiveClassifier(torch.nn.Linear(3, 5), n_classes=2)


def _two_stage_run(stage2_lr, x, y, method="supcon+ce"):
    from rank_lab.train.classification import ContrastiveClassifier, fit_classifier

    torch.manual_seed(0)
    enc = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    model = ContrastiveClassifier(enc, n_classes=3, dim=8, method=method, temperature=0.2)
    hist = fit_classifier(
        model, x, y, epochs=3, stage2_epochs=3, batch_size=20, lr=1e-3, stage2_lr=stage2_lr, seed=0
    )
    return model, hist


@pytest.mark.parametrize("method", ["supcon+ce", "supcon+ce(n)"])
def test_stage2_lr_steps_only_the_classifier_stage(method):
    g = torch.Generator().manual_seed(1)
    y = torch.arange(3).repeat_interleave(20)
    x = torch.randn(3, 10, generator=g)[y] + 0.3 * torch.randn(60, 10, generator=g)
    m_none, h_none = _two_stage_run(None, x, y, method)
    m_same, h_same = _two_stage_run(1e-3, x, y, method)
    m_big, h_big = _two_stage_run(1e-1, x, y, method)
    assert h_none == h_same  # None means the encoder's step
    for a, b in zip(m_none.state_dict().values(), m_same.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    # stage 1 (epochs 1-3) is the same run whatever the probe's step; stage 2 is not
    assert h_big[:3] == h_none[:3]
    assert all(x["stage"] == 2 for x in h_big[3:]) and h_big[3:] != h_none[3:]
    for a, b in zip(
        m_none.encoder.state_dict().values(), m_big.encoder.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)  # the frozen encoder is the one stage 1 trained
    # a larger step fits the probe further in the same epochs
    assert h_big[-1]["loss"] < h_none[-1]["loss"]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_stage2_lr_must_be_a_positive_number(bad):
    y = torch.arange(3).repeat_interleave(4)
    with pytest.raises(ValueError, match="stage2_lr"):
        _two_stage_run(bad, torch.randn(12, 10), y)


def test_a_new_method_is_one_registration():
    """A method registered in CLS_METHODS is built, trained in its two stages and refused when
    malformed."""
    from rank_lab.losses.contrastive import cross_entropy_loss
    from rank_lab.train.classification import (
        CLS_METHODS,
        ClassificationMethod,
        ContrastiveClassifier,
        fit_classifier,
    )

    calls = []

    def ce_on_prototypes(model, f, labels):
        calls.append(model.stage)
        return cross_entropy_loss(
            f, labels, model.prototypes.prototypes, normalize=True, temperature=model.temperature
        )

    CLS_METHODS.register(
        "test_ce(n)",
        ClassificationMethod(
            "CE(n) twice", "prototypes", ce_on_prototypes, stage2_loss=ce_on_prototypes
        ),
    )
    try:
        model = ContrastiveClassifier(
            torch.nn.Linear(4, 6), n_classes=3, dim=6, method="test_ce(n)"
        )
        assert (
            model.two_stage
            and model.linear is None
            and model.projection is None
            and model.prototypes is not None
        )
        hist = fit_classifier(
            model, torch.randn(12, 4), torch.arange(12) % 3, epochs=1, stage2_epochs=1, batch_size=6
        )
        assert [r["stage"] for r in hist] == [1, 2] and calls == [1, 1, 2, 2]
    finally:
        CLS_METHODS.unregister("test_ce(n)")
    with pytest.raises(ValueError, match="classifier"):
        ClassificationMethod("x", "svm", ce_on_prototypes)
    with pytest.raises(ValueError, match="class_means"):
        ClassificationMethod("x", "linear", ce_on_prototypes, class_means=True)
