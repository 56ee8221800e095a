"""Tests of kNN classification and classification metrics (rank_lab.metrics.classification),
Section 5.4 of the Patel thesis."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import confusion_matrix as sk_confusion
from sklearn.metrics import f1_score

from rank_lab.metrics.classification import (
    accuracy,
    aggregate_observations,
    classification_metrics,
    confusion_matrix,
    knn_classify,
    macro_f1,
    observation_level,
    per_class_accuracy,
    per_class_f1,
)


def unit_vectors(angles):
    a = torch.tensor(angles, dtype=torch.float64)
    return torch.stack([torch.cos(a), torch.sin(a)], dim=1)


def test_hand_worked_votes():
    # the query at angle 0 (similarity = cos(angle)); neighbours at angles 0.2 (class 1), 0.5 and
    # 0.6 (class 0), then 2.0 (class 2)
    gallery = unit_vectors([0.2, 0.5, 0.6, 2.0])
    glab = torch.tensor([1, 0, 0, 2])
    q = unit_vectors([0.0])
    s = torch.cos(torch.tensor([0.2, 0.5, 0.6], dtype=torch.float64))
    maj = knn_classify(q, gallery, glab, k=3, backend="torch")
    assert maj.labels.tolist() == [0] and float(maj.confidence[0]) == pytest.approx(2 / 3)
    assert maj.neighbor_indices.tolist() == [[0, 1, 2]]
    sim = knn_classify(q, gallery, glab, k=3, vote="similarity", backend="torch")
    assert sim.labels.tolist() == [0]  # 0.878 + 0.825 > 0.980
    assert float(sim.confidence[0]) == pytest.approx(float((s[1] + s[2]) / s.sum()), abs=1e-12)
    soft = knn_classify(q, gallery, glab, k=3, vote="softmax", temperature=0.01, backend="torch")
    assert soft.labels.tolist() == [1]  # a cold softmax follows the nearest neighbour
    one = knn_classify(q, gallery, glab, k=1, backend="torch")
    assert one.labels.tolist() == [1] and float(one.confidence[0]) == pytest.approx(
        float(s[0]), abs=1e-12
    )
    torch.testing.assert_close(maj.class_scores.sum(1), torch.ones(1, dtype=maj.class_scores.dtype))


def test_tie_goes_to_the_nearest_class():
    gallery = unit_vectors([0.1, 0.3])
    out = knn_classify(unit_vectors([0.0]), gallery, torch.tensor([2, 1]), k=2, backend="torch")
    assert out.labels.tolist() == [2] and float(out.confidence[0]) == pytest.approx(0.5)


def brute_knn(q, g, glab, k, vote, temperature, c):
    qn, gn = F.normalize(q, dim=1), F.normalize(g, dim=1)
    preds = []
    for i in range(q.shape[0]):
        s = (gn @ qn[i]).tolist()
        order = sorted(range(len(s)), key=lambda j: -s[j])[:k]
        w = np.zeros(c)
        ws = [1.0 if vote == "majority" else np.exp(s[j] / temperature) for j in order]
        for j, wj in zip(order, ws, strict=True):
            w[int(glab[j])] += wj
        best = [cl for cl in range(c) if w[cl] >= w.max() - 1e-12 * w.sum()]
        preds.append(next(int(glab[j]) for j in order if int(glab[j]) in best))
    return preds


@pytest.mark.parametrize("vote", ["majority", "softmax"])
def test_matches_brute_force(vote):
    g = torch.Generator().manual_seed(0)
    gallery = torch.randn(60, 5, generator=g, dtype=torch.float64)
    glab = torch.randint(0, 4, (60,), generator=g)
    q = torch.randn(25, 5, generator=g, dtype=torch.float64)
    for k in (1, 4, 7):
        out = knn_classify(q, gallery, glab, k=k, vote=vote, temperature=0.3, backend="torch")
        assert out.labels.tolist() == brute_knn(q, gallery, glab, k, vote, 0.3, 4)


def test_separable_data_and_leave_one_out():
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(5, 8, generator=g) * 5
    y = torch.arange(5).repeat_interleave(10)
    x = centers[y] + 0.1 * torch.randn(50, 8, generator=g)
    out = knn_classify(x, x, y, k=1, exclude_self=True)
    assert accuracy(out.labels, y) == 1.0
    assert not bool((out.neighbor_indices[:, 0] == torch.arange(50)).any())


def test_observation_aggregation_rules():
    preds = torch.tensor([3, 1, 1, 2, 0])
    conf = torch.tensor([0.9, 0.6, 0.7, 0.4, 0.8])
    obs = torch.tensor([7, 7, 7, 5, 5])
    per_img, ids, per_obs = aggregate_observations(preds, conf, obs)
    assert ids.tolist() == [5, 7] and per_obs.tolist() == [0, 3]  # most confident image decides
    assert per_img.tolist() == [3, 3, 3, 0, 0]
    _, _, maj = aggregate_observations(preds, conf, obs, rule="majority")
    assert maj.tolist() == [0, 1]  # obs 5: tie 1-1 -> larger confidence (0.8 > 0.4)
    scores = F.one_hot(preds, 4).double() * conf[:, None]
    _, _, mean = aggregate_observations(preds, conf, obs, class_scores=scores, rule="mean_scores")
    assert mean.tolist() == [0, 1]  # obs 7: class 1 has 1.3 > 0.9
    with pytest.raises(ValueError, match="class_scores"):
        aggregate_observations(preds, conf, obs, rule="mean_scores")
    # refused naming the argument (issue 26)
    for bad in (torch.complex(conf, conf), conf.to("meta")):
        with pytest.raises((TypeError, ValueError), match="confidence"):
            aggregate_observations(preds, bad, obs)
    for bad in (torch.complex(scores, scores), scores.to("meta")):
        with pytest.raises((TypeError, ValueError), match="class_scores"):
            aggregate_observations(preds, conf, obs, class_scores=bad, rule="mean_scores")
    # observation-level metrics after aggregation
    targets = torch.tensor([3, 3, 3, 2, 2])
    m = classification_metrics(per_img, targets, observation_ids=obs)
    assert m == {"accuracy": 0.5, "macro_f1": pytest.approx(1 / 3), "n": 2.0}
    with pytest.raises(ValueError, match="aggregate"):
        observation_level(preds, targets, obs)
    with pytest.raises(ValueError, match="true classes"):
        observation_level(per_img, torch.tensor([3, 1, 3, 2, 2]), obs)


@pytest.mark.filterwarnings("ignore:A single label:UserWarning")
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), c=st.integers(1, 6))
def test_metrics_match_sklearn(seed, n, c):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    p = rng.integers(0, c, n)
    assert macro_f1(torch.tensor(p), torch.tensor(y)) == pytest.approx(
        f1_score(y, p, average="macro", zero_division=0)
    )
    assert accuracy(torch.tensor(p), torch.tensor(y)) == pytest.approx(float((p == y).mean()))
    cm = confusion_matrix(torch.tensor(p), torch.tensor(y), n_classes=c)
    assert cm.tolist() == sk_confusion(y, p, labels=list(range(c))).tolist()
    classes, acc = per_class_accuracy(torch.tensor(p), torch.tensor(y))
    for cl, a in zip(classes.tolist(), acc.tolist(), strict=True):
        assert a == pytest.approx(float((p[y == cl] == cl).mean()))


def test_per_class_f1_by_hand_and_errors():
    classes, f1 = per_class_f1(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 1, 1, 1]))
    # class 0: P = 1/2, R = 1 -> 2/3; class 1: P = 1, R = 1/3 -> 1/2; class 2: never true -> 0
    assert classes.tolist() == [0, 1, 2] and f1.tolist() == pytest.approx([2 / 3, 0.5, 0.0])
    with pytest.raises(ValueError, match="rows"):
        accuracy(torch.tensor([0, 1]), torch.tensor([0]))
    with pytest.raises(TypeError, match="integers"):
        accuracy(torch.tensor([0.5]), torch.tensor([0]))
    with pytest.raises(ValueError, match="n_classes"):
        knn_classify(torch.randn(2, 3), torch.randn(4, 3), torch.tensor([0, 1, 2, 5]), n_classes=3)
    with pytest.raises(ValueError, match="vote"):
        knn_classify(torch.randn(2, 3), torch.randn(4, 3), torch.tensor([0, 1, 2, 1]), vote="mode")
    with pytest.raises(ValueError, match="k="):
        knn_classify(torch.randn(2, 3), torch.randn(4, 3), torch.tensor([0, 1, 2, 1]), k=9)


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_bad_inputs_name_the_argument():
    pred, target = torch.tensor([0, 1, 2, 1]), torch.tensor([0, 1, 1, 2])
    with pytest.raises(ValueError, match="n_classes=2 but predictions / targets hold class 2"):
        confusion_matrix(pred, target, n_classes=2)  # was a reshape RuntimeError
    with pytest.raises(ValueError, match="predictions must be class indices >= 0"):
        confusion_matrix(torch.tensor([0, -1, 2, 1]), target)  # was counted in another cell
    g, q = torch.randn(6, 4), torch.randn(2, 4)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        # checked for every vote
        knn_classify(q, g, torch.tensor([0, 0, 1, 1, 2, 2]), k=3, temperature=0.0, backend="torch")
    with pytest.raises(ValueError, match="class_scores contains 1 NaN"):
        aggregate_observations(
            pred,
            torch.ones(4),
            torch.tensor([0, 0, 1, 1]),
            class_scores=torch.tensor([[float("nan"), 0.0, 1.0]] + [[1.0, 0.0, 0.0]] * 3),
            rule="mean_scores",
        )
