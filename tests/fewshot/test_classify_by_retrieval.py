"""Tests for classification by retrieval (Gominski thesis chapter 5): sampler, training,
protocols."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.engine import EngineConfig, lr_at
from rank_lab.fewshot import (
    MultiDatasetSampler,
    allways_evaluate,
    allways_split,
    classify_by_retrieval,
    episodic_evaluate,
    fit_multi_dataset,
    global_class_ids,
)
from rank_lab.fewshot.synthetic import anisotropic_classes, make_multi_dataset


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _pool():
    # dataset 0: 3 classes of 8; dataset 1: 10 classes of 6, one class of 3 (dropped: < 5)
    d = np.concatenate([np.zeros(24), np.ones(63)]).astype(int)
    y = np.concatenate([np.repeat(np.arange(3), 8), np.repeat(np.arange(10), 6), np.full(3, 10)])
    return torch.from_numpy(d), torch.from_numpy(y)


# ----------------------------------------------------------------------------- sampler
def test_global_ids_never_merge_classes_of_different_datasets():
    d, y = _pool()
    g = global_class_ids(d, y)
    assert len(torch.unique(g)) == 3 + 11
    assert not set(g[d == 0].tolist()) & set(g[d == 1].tolist())
    for gi in torch.unique(g):  # one (dataset, class) pair per id
        assert len(torch.unique(d[g == gi])) == 1 and len(torch.unique(y[g == gi])) == 1


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 8), k=st.integers(1, 5), seed=st.integers(0, 10**6), b=st.integers(0, 100))
def test_multi_dataset_batches(n, k, seed, b):
    d, y = _pool()
    sampler = MultiDatasetSampler(d, y, n_classes=n, k=k, batches=5, seed=seed)
    batch = sampler.batch(b)
    assert len(batch) == n * k
    pairs = []
    for j in range(n):
        idx = batch[j * k : (j + 1) * k]
        assert len(set(idx)) == k  # k distinct images ...
        assert len({(int(d[i]), int(y[i])) for i in idx}) == 1  # ... of one class, contiguous
        pairs.append((int(d[idx[0]]), int(y[idx[0]])))
    assert len(set(pairs)) == n  # distinct classes
    assert (1, 10) not in pairs  # the class with 3 < 5 images is dropped
    assert sampler.batch(b) == batch  # deterministic


def test_datasets_are_drawn_uniformly_not_by_size():
    d, y = _pool()  # dataset 1 has 3x more classes and images than dataset 0
    sampler = MultiDatasetSampler(d, y, n_classes=1, k=2, batches=2000, distinct=False, seed=0)
    share = np.mean([int(d[b[0]]) == 0 for b in sampler])
    assert abs(share - 0.5) < 0.04
    first = [sampler.batch(b) for b in range(20)]
    sampler.set_epoch(1)
    assert [sampler.batch(b) for b in range(20)] != first  # a new epoch draws new batches


def test_sampler_errors():
    d, y = _pool()
    with pytest.raises(ValueError, match="usable classes"):
        MultiDatasetSampler(d, y, n_classes=14, k=5)
    with pytest.raises(ValueError, match="dataset 0"):
        MultiDatasetSampler(d, y, k=9)  # dataset 0 has no class with 9 images
    with pytest.raises(TypeError):
        MultiDatasetSampler(d.float(), y)


# ----------------------------------------------------------------------------- training
def test_lr_schedule_of_the_author_code():
    f = [
        lr_at(
            3 * e + 1,
            1.0,
            total_steps=45,
            schedule="linear",
            hold_steps=10,
            decay_steps=5,
            step_unit=3,
        )
        for e in range(15)
    ]
    assert f[:10] == [1.0] * 10
    np.testing.assert_allclose(f[10:], [5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


def _mlp(seed=0):
    from rank_lab.models import build_model

    torch.manual_seed(seed)
    return build_model(
        {
            "backbone": "mlp",
            "input_dim": 32,
            "hidden_dims": (32,),
            "embed_dim": 16,
            "layer_norm": False,
        }
    )


def test_multi_dataset_training_lowers_the_loss_and_resumes(tmp_path):
    data = make_multi_dataset(n_datasets=3, classes_per_dataset=6, per_class=12, seed=0)
    kw = dict(
        n_classes=6, k=4, epochs=4, batches_per_epoch=10, niter=2, niter_decay=2, lr=3e-3, seed=0
    )
    hist = fit_multi_dataset(_mlp(), data.x, data.dataset_ids, data.labels, **kw)
    assert hist[-1] < hist[0] - 0.05
    ckpt = tmp_path / "ckpt.pt"
    fit_multi_dataset(
        _mlp(),
        data.x,
        data.dataset_ids,
        data.labels,
        engine=EngineConfig(checkpoint=ckpt),
        **{**kw, "epochs": 2},
    )
    resumed = fit_multi_dataset(
        _mlp(), data.x, data.dataset_ids, data.labels, engine=EngineConfig(checkpoint=ckpt), **kw
    )
    np.testing.assert_allclose(resumed, hist, rtol=1e-5)


# ----------------------------------------------------------------------------- protocol
def test_allways_split():
    y = torch.tensor([0] * 4 + [1] * 3 + [5] * 6)
    s, q = allways_split(y, 2, seed=0)
    assert len(s) == 6 and sorted(y[s].tolist()) == [0, 0, 1, 1, 5, 5]
    assert not set(s.tolist()) & set(q.tolist()) and len(s) + len(q) == len(y)
    with pytest.raises(ValueError, match="no query"):
        allways_split(y, 3)


def _clusters(seed=0, c=6, n=10, d=8, noise=0.05):
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(c, d, generator=g), dim=1)
    y = torch.arange(c).repeat_interleave(n)
    return torch.nn.functional.normalize(
        centres[y] + noise * torch.randn(c * n, d, generator=g), dim=1
    ), y


@pytest.mark.parametrize("method", ["mahalanobis", "euclidean", "cosine", "knn", "diffusion"])
def test_every_method_classifies_separated_clusters(method):
    x, y = _clusters()
    for aqe in (None, (3.0, 5)):
        acc = allways_evaluate(x, y, 1, runs=2, method=method, aqe=aqe)
        assert min(acc) == 1.0


def test_alpha_qe_post_processing_is_applied_to_the_queries_only():
    from rank_lab.retrieval import alpha_qe

    x, y = _clusters(noise=0.6)
    s, q = allways_split(y, 2, seed=1)
    allv = torch.cat([x[s], x[q]])
    expanded = alpha_qe(allv, n=10, alpha=3.0, include_self=False)[len(s) :]
    want = classify_by_retrieval(expanded, x[s], y[s], aqe=None)
    got = classify_by_retrieval(x[q], x[s], y[s], aqe=(3.0, 10))
    assert torch.equal(got, want)
    # it matters here
    assert not torch.equal(classify_by_retrieval(x[q], x[s], y[s], aqe=None), got)


def test_shortlist_of_one_neighbour_is_nearest_support_classification():
    from rank_lab.metrics.classification import knn_classify

    x, y = _clusters(noise=0.8, seed=3)
    s, q = allways_split(y, 3, seed=0)
    one_nn = knn_classify(x[q], x[s], y[s], k=1).labels
    for method in ("mahalanobis", "euclidean"):
        assert torch.equal(
            classify_by_retrieval(x[q], x[s], y[s], method=method, aqe=None, shortlist=1), one_nn
        )
    free = classify_by_retrieval(x[q], x[s], y[s], aqe=None)
    wide = classify_by_retrieval(x[q], x[s], y[s], aqe=None, shortlist=len(s))
    assert torch.equal(free, wide)


def test_allways_harder_than_five_way_and_mahalanobis_helps():
    """Digest 004 §6 R10 (c): all-ways (30 classes) is harder than 5-way episodes."""
    x, y = anisotropic_classes(seed=0)
    allw = np.mean(allways_evaluate(x, y, 5, runs=2, aqe=None))
    five = np.mean(episodic_evaluate(x, y, 5, episodes=30, aqe=None))
    assert five > allw + 0.05
    eucl = np.mean(allways_evaluate(x, y, 5, runs=2, aqe=None, method="euclidean"))
    assert allw > eucl + 0.1


def test_allways_evaluate_matches_a_manual_run():
    x, y = _clusters(noise=0.9, seed=5)
    accs = allways_evaluate(x, y, 2, runs=3, seed=7, method="cosine", aqe=None)
    for r, a in enumerate(accs):
        s, q = allways_split(y, 2, seed=7 + r)
        means = torch.stack([x[s][y[s] == c].mean(0) for c in range(6)])
        pred = (
            torch.nn.functional.normalize(x[q], dim=1)
            @ torch.nn.functional.normalize(means, dim=1).T
        ).argmax(1)
        assert a == pytest.approx(float((pred == y[q]).double().mean()))


def test_input_errors():
    x, y = _clusters()
    with pytest.raises(ValueError, match="method"):
        classify_by_retrieval(x, x, y, method="svm")
    with pytest.raises(ValueError, match="d="):
        classify_by_retrieval(x[:, :3], x, y)
    with pytest.raises(ValueError, match="support_labels"):
        classify_by_retrieval(x, x, y[:5])
    with pytest.raises(ValueError, match="NaN"):
        classify_by_retrieval(torch.full((2, 8), float("nan")), x, y)
    with pytest.raises(ValueError, match="n_way"):
        episodic_evaluate(x, y, 1, n_way=7)


def test_a_new_rule_is_one_registration():
    """A rule registered in METHODS is called with the checked, alpha-QE'd descriptors and the
    options; nearest_class gives it the shortlist."""
    from rank_lab.fewshot import METHODS, RuleOptions, classify_by_retrieval, nearest_class

    seen = {}

    @METHODS.register("farthest_mean", summary="the class whose mean is farthest (a test rule)")
    def farthest(q, s, ys, options):
        seen["options"] = options
        classes = torch.unique(ys)
        means = torch.stack([s[ys == c].mean(0) for c in classes])
        return nearest_class(classes, torch.cdist(q, means), q, s, ys, options)

    try:
        q, s, ys = (
            torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
            torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -0.5]]),
            torch.tensor([0, 1, 2]),
        )
        # distances to the class means: query 0 (0, 1.41, 2.06), query 1 (1.41, 0, 1.80)
        assert classify_by_retrieval(q, s, ys, method="farthest_mean", aqe=None).tolist() == [2, 2]
        assert seen["options"] == RuleOptions()
        # each query's 2 nearest supports (cosine) are those of classes 0 and 1: class 2 is not a
        # candidate
        assert classify_by_retrieval(
            q, s, ys, method="Farthest-Mean", aqe=None, shortlist=2
        ).tolist() == [1, 0]
        assert seen["options"].shortlist == 2
    finally:
        METHODS.unregister("farthest_mean")
    with pytest.raises(ValueError, match="method must be one of"):
        classify_by_retrieval(q, s, ys, method="farthest_mean")
