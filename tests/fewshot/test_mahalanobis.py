"""Tests for Simple CNAPS' regularised Mahalanobis classifier (Gominski thesis eqs. 5.1-5.2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.fewshot import (
    MahalanobisClassifier,
    covariance,
    lambda_k,
    mahalanobis_logits,
    nearest_mean_logits,
    simplecnaps_estimate_cov,
)
from rank_lab.fewshot.synthetic import anisotropic_classes


def _closed_form_logits(
    x: np.ndarray, s: np.ndarray, y: np.ndarray, one_shot: str = "zero"
) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 5.1-5.2 written directly with numpy (np.cov, np.linalg.inv)."""
    classes = np.unique(y)
    task = np.cov(s, rowvar=False, ddof=1)
    d = s.shape[1]
    out = np.zeros((len(x), len(classes)))
    for j, c in enumerate(classes):
        sc = s[y == c]
        k = len(sc)
        lam = k / (k + 1)
        if k > 1:
            cov_c = np.cov(sc, rowvar=False, ddof=1)
        elif one_shot == "zero":
            cov_c = np.zeros((d, d))
        else:  # the public code: the scalar variance of the single vector's entries, broadcast
            cov_c = np.full((d, d), np.var(sc[0], ddof=1))
        q = lam * cov_c + (1 - lam) * task + np.eye(d)
        diff = x - sc.mean(0)
        out[:, j] = -0.5 * np.einsum("qd,de,qe->q", diff, np.linalg.inv(q), diff)
    return classes, out


def _data(seed: int, shots: list[int], d: int = 4, n_query: int = 7):
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.full(k, c) for c, k in zip([3, 7, 9], shots, strict=True)])
    s = (
        rng.normal(size=(len(y), d)) * rng.uniform(0.3, 2.0, size=d)
        + 2 * rng.normal(size=(3, d))[np.searchsorted([3, 7, 9], y)]
    )
    x = rng.normal(size=(n_query, d)) * 2
    return x, s, y


@pytest.mark.parametrize("shots", [[5, 5, 5], [2, 4, 3], [1, 1, 1], [1, 3, 6]])
def test_logits_match_the_closed_form(shots):
    x, s, y = _data(0, shots)
    for one_shot in ("zero", "simplecnaps"):
        classes, want = _closed_form_logits(x, s, y, one_shot)
        got_c, got = mahalanobis_logits(
            torch.from_numpy(x), torch.from_numpy(s), torch.from_numpy(y), one_shot=one_shot
        )
        np.testing.assert_array_equal(got_c.numpy(), classes)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-9, atol=1e-9)
    classes, want = _closed_form_logits(x, s, y)
    clf = MahalanobisClassifier(half=False).fit(torch.from_numpy(s), torch.from_numpy(y))
    # the code's logits
    np.testing.assert_allclose(clf.logits(torch.from_numpy(x)).numpy(), 2 * want, rtol=1e-9)
    np.testing.assert_array_equal(clf.predict(torch.from_numpy(x)).numpy(), classes[want.argmax(1)])


def test_lambda_and_regularised_covariances_for_k1_and_k5():
    assert lambda_k(1) == 0.5 and lambda_k(5) == pytest.approx(5 / 6)
    with pytest.raises(ValueError):
        lambda_k(0)
    x, s, y = _data(1, [5, 5, 1])
    s_t, y_t = torch.from_numpy(s), torch.from_numpy(y)
    classes, means, q, counts = MahalanobisClassifier().regularized_covariances(s_t, y_t)
    task = torch.from_numpy(np.cov(s, rowvar=False))
    eye = torch.eye(4, dtype=torch.float64)
    cov0 = torch.from_numpy(np.cov(s[y == 3], rowvar=False))
    torch.testing.assert_close(q[0], 5 / 6 * cov0 + 1 / 6 * task + eye)  # k = 5
    torch.testing.assert_close(q[2], 0.5 * task + eye)  # k = 1: Q_c = Sigma/2 + I (Sigma_c = 0)
    assert counts.tolist() == [5, 5, 1]
    torch.testing.assert_close(means[1], torch.from_numpy(s[y == 7].mean(0)))
    # the public code's 1-shot quirk adds the scalar variance of the vector's entries everywhere
    _, _, q_quirk, _ = MahalanobisClassifier(one_shot="simplecnaps").regularized_covariances(
        s_t, y_t
    )
    v = float(np.var(s[y == 9][0], ddof=1))
    torch.testing.assert_close(
        q_quirk[2], 0.5 * v * torch.ones(4, 4, dtype=torch.float64) + 0.5 * task + eye
    )
    # a fixed shrinkage overrides k / (k + 1)
    _, _, q_fix, _ = MahalanobisClassifier(shrinkage=1.0).regularized_covariances(s_t, y_t)
    torch.testing.assert_close(q_fix[0], cov0 + eye)


def test_covariance_estimators():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(covariance(x), torch.from_numpy(np.cov(x.numpy(), rowvar=False)))
    torch.testing.assert_close(simplecnaps_estimate_cov(x), covariance(x))
    one = x[:1]
    # undefined (n - 1 = 0), never a silent zero matrix
    with pytest.raises(ValueError, match="n=1 row"):
        covariance(one)
    quirk = simplecnaps_estimate_cov(one)
    assert quirk.ndim == 0 and float(quirk) == pytest.approx(float(np.var(one.numpy()[0], ddof=1)))
    with pytest.raises(ValueError, match="empty"):
        covariance(torch.zeros(0, 3))


def test_tiny_covariances_reduce_to_half_squared_euclidean():
    """With Sigma, Sigma_c << I (rescaled features), Q_c ~ I and the rule is a nearest mean."""
    x, s, y = _data(2, [4, 4, 4])
    xs, ss = torch.from_numpy(x) * 1e-4, torch.from_numpy(s) * 1e-4
    c1, maha = mahalanobis_logits(xs, ss, torch.from_numpy(y))
    c2, eucl = nearest_mean_logits(xs, ss, torch.from_numpy(y))
    assert torch.equal(c1, c2)
    torch.testing.assert_close(maha, eucl, rtol=1e-6, atol=1e-14)
    torch.testing.assert_close(
        eucl,
        -0.5
        * torch.cdist(xs, torch.stack([ss[torch.from_numpy(y) == c].mean(0) for c in c2])) ** 2,
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), shift=st.floats(-5, 5))
def test_invariances(seed, shift):
    x, s, y = _data(seed, [3, 2, 4])
    xt, st_, yt = (torch.from_numpy(a) for a in (x, s, y))
    _, base = mahalanobis_logits(xt, st_, yt)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(y)))
    _, permuted = mahalanobis_logits(xt, st_[perm], yt[perm])  # support order is irrelevant
    torch.testing.assert_close(permuted, base)
    _, shifted = mahalanobis_logits(xt + shift, st_ + shift, yt)  # translation invariance
    torch.testing.assert_close(shifted, base, rtol=1e-7, atol=1e-7)
    assert bool((base <= 0).all())


def test_mahalanobis_beats_euclidean_only_when_covariance_matters():
    """Digest 004 §6 R10: anisotropic shared covariance -> Mahalanobis wins; x0.1 -> they agree."""

    def acc(x, y, method, k=5, seed=0):
        rng = np.random.default_rng(seed)
        sup = np.concatenate(
            [
                rng.choice(np.flatnonzero(y.numpy() == c), k, replace=False)
                for c in range(int(y.max()) + 1)
            ]
        )
        q = np.setdiff1d(np.arange(len(y)), sup)
        fn = mahalanobis_logits if method == "maha" else nearest_mean_logits
        classes, logits = fn(x[q], x[sup], y[sup])
        return float((classes[logits.argmax(1)] == y[q]).double().mean())

    x, y = anisotropic_classes(seed=0)
    assert acc(x, y, "maha") > acc(x, y, "eucl") + 0.1
    xs, ys = anisotropic_classes(seed=0, scale=0.1)
    assert abs(acc(xs, ys, "maha") - acc(xs, ys, "eucl")) < 0.03


def test_errors():
    x, s, y = _data(3, [1, 1, 1])
    st_, yt = torch.from_numpy(s), torch.from_numpy(y)
    with pytest.raises(ValueError, match="positive definite"):
        # 1-shot classes, 3 supports in 4-d: Sigma/2 is singular without the + I term
        MahalanobisClassifier(identity_scale=0.0).fit(st_, yt)
    with pytest.raises(ValueError, match="at least 2"):
        MahalanobisClassifier().fit(st_[:1], yt[:1])
    clf = MahalanobisClassifier().fit(st_, yt)
    with pytest.raises(ValueError, match="D=4"):
        clf.logits(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="NaN"):
        clf.logits(torch.full((1, 4), float("nan")))
    with pytest.raises(RuntimeError, match="fit"):
        MahalanobisClassifier().logits(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="shrinkage"):
        MahalanobisClassifier(shrinkage=2.0)
    with pytest.raises(ValueError, match="one_shot"):
        MahalanobisClassifier(one_shot="ignore")
    with pytest.raises(ValueError, match=r"\blabels has 2 rows"):  # fit's argument is labels
        MahalanobisClassifier().fit(st_, yt[:2])
    with pytest.raises(ValueError, match="metric"):
        nearest_mean_logits(st_, st_, yt, metric="manhattan")


def test_cosine_prototypes_and_chunking():
    x, s, y = _data(4, [3, 3, 3], n_query=30)
    xt, st_, yt = (torch.from_numpy(a) for a in (x, s, y))
    classes, cos = nearest_mean_logits(xt, st_, yt, metric="cosine")
    means = torch.stack([st_[yt == c].mean(0) for c in classes])
    torch.testing.assert_close(
        cos,
        torch.nn.functional.normalize(xt, dim=1) @ torch.nn.functional.normalize(means, dim=1).T,
    )
    clf = MahalanobisClassifier().fit(st_, yt)
    torch.testing.assert_close(clf.logits(xt, chunk_size=4), clf.logits(xt))
