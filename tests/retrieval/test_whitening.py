"""PCA / PCA-whitening with shrinkage, learned Lw whitening, L2 renormalisation (digest 004
§2.3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.metrics import average_precision
from rank_lab.retrieval.whitening import (
    Whitening,
    apply_whitening,
    l2n,
    learn_lw_whitening,
    learn_pca_whitening,
)


def _data(n: int = 200, d: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    return torch.randn(n, d, generator=g, dtype=torch.float64) @ a + torch.randn(
        d, generator=g, dtype=torch.float64
    )


def test_l2n() -> None:
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    torch.testing.assert_close(l2n(x), torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


def test_pca_whitening_gives_identity_covariance() -> None:
    x = _data()
    w = learn_pca_whitening(x)
    y = apply_whitening(x, w, normalize=False)
    cov = torch.cov(y.T)
    torch.testing.assert_close(cov, torch.eye(6, dtype=torch.float64), atol=1e-6, rtol=0)
    assert torch.allclose(y.mean(0), torch.zeros(6, dtype=torch.float64), atol=1e-10)
    # eigenvalues sorted, projection rows ordered by variance
    assert bool((w.eigenvalues[:-1] >= w.eigenvalues[1:]).all())


def test_pca_power_zero_is_a_rotation() -> None:
    x = _data(seed=1)
    w = learn_pca_whitening(x, power=0.0)
    y = apply_whitening(x, w, normalize=False)
    torch.testing.assert_close(y.norm(dim=1), (x - x.mean(0)).norm(dim=1))
    # variances of the outputs are the eigenvalues, in decreasing order
    torch.testing.assert_close(y.var(0), w.eigenvalues, rtol=1e-8, atol=1e-10)


def test_pca_against_numpy_svd() -> None:
    """Independent computation: numpy SVD of the centred data."""
    x = _data(n=50, d=5, seed=2)
    w = learn_pca_whitening(x, dim=3)
    xc = (x - x.mean(0)).numpy()
    _, s, vt = np.linalg.svd(xc, full_matrices=False)
    lam = s**2 / (x.shape[0] - 1)
    ref = (xc @ vt[:3].T) / np.sqrt(lam[:3] + 1e-9)
    got = apply_whitening(x, w, normalize=False).numpy()
    signs = np.sign((ref * got).sum(0))
    np.testing.assert_allclose(got * signs, ref, atol=1e-8)
    assert w.out_dim == 3


def test_full_shrinkage_keeps_cosines_of_centred_data() -> None:
    """shrinkage = 1 replaces C by tr(C)/d I: the whitening is an isotropic rescaling."""
    x = _data(seed=3)
    w = learn_pca_whitening(x, shrinkage=1.0)
    y = apply_whitening(x, w)
    xc = l2n(x - x.mean(0))
    torch.testing.assert_close(y @ y.T, xc @ xc.T, atol=1e-8, rtol=0)


@settings(max_examples=15, deadline=None)
@given(beta=st.floats(0.0, 1.0), power=st.floats(0.0, 0.5), seed=st.integers(0, 100))
def test_shrinkage_bounds_the_gain(beta: float, power: float, seed: int) -> None:
    """With shrinkage the smallest eigenvalue is at least beta tr(C)/d: bounded projection norm."""
    x = _data(n=40, d=5, seed=seed)
    w = learn_pca_whitening(x, power=power, shrinkage=beta)
    floor = beta * float(torch.trace(torch.cov(x.T))) / 5
    assert float(w.eigenvalues.min()) >= floor - 1e-9
    y = apply_whitening(x, w)
    torch.testing.assert_close(y.norm(dim=1), torch.ones(40, dtype=torch.float64))


def _pairs(y: torch.Tensor) -> torch.Tensor:
    i, j = torch.nonzero(y[:, None] == y[None], as_tuple=True)
    keep = i != j
    return torch.stack([i[keep], j[keep]], 1)


def test_lw_whitens_the_matching_pair_covariance() -> None:
    x = _data(n=120, d=5, seed=4)
    y = torch.arange(120) // 4
    p = _pairs(y)
    w = learn_lw_whitening(x, p)
    diff = (x[p[:, 0]] - x[p[:, 1]]) @ w.projection.T
    cs = diff.T @ diff / diff.shape[0]
    torch.testing.assert_close(cs, torch.eye(5, dtype=torch.float64), atol=1e-6, rtol=0)


def test_lw_cholesky_equals_sym_up_to_signs() -> None:
    x = _data(n=100, d=4, seed=5)
    p = _pairs(torch.arange(100) // 5)
    a = apply_whitening(x, learn_lw_whitening(x, p, factor="sym", eps=0.0))
    b = apply_whitening(x, learn_lw_whitening(x, p, factor="cholesky"))
    signs = torch.sign((a * b).sum(0))
    torch.testing.assert_close(a, b * signs, atol=1e-7, rtol=0)


def test_lw_with_negative_pairs_matches_paper_formula() -> None:
    """P = eig(C_S^-1/2 C_D C_S^-1/2)^T C_S^-1/2, written independently with numpy / scipy."""
    from scipy.linalg import fractional_matrix_power

    x = _data(n=60, d=4, seed=6)
    y = torch.arange(60) // 6
    p = _pairs(y)
    neg = torch.stack(torch.nonzero(y[:, None] != y[None], as_tuple=True), 1)[::7]
    w = learn_lw_whitening(x, p, negative_pairs=neg, eps=0.0)
    xn = x.numpy()
    ds = xn[p[:, 0]] - xn[p[:, 1]]
    dd = xn[neg[:, 0]] - xn[neg[:, 1]]
    cs, cd = ds.T @ ds / len(ds), dd.T @ dd / len(dd)
    isq = np.real(fractional_matrix_power(cs, -0.5))
    evals, evecs = np.linalg.eigh(isq @ cd @ isq)
    ref_p = evecs[:, ::-1].T @ isq
    mu = xn[p[:, 0]].mean(0)
    ref = (xn - mu) @ ref_p.T
    got = apply_whitening(x, w, normalize=False).numpy()
    signs = np.sign((ref * got).sum(0))
    np.testing.assert_allclose(got * signs, ref, atol=1e-7)
    np.testing.assert_allclose(w.eigenvalues.numpy(), evals[::-1], atol=1e-8)


def test_lw_removes_a_nuisance_direction() -> None:
    """Classes separated on 2 axes, a large shared nuisance on 6 others: Lw restores retrieval."""
    g = torch.Generator().manual_seed(7)
    n_cls, per = 20, 6
    y = torch.arange(n_cls).repeat_interleave(per)
    centres = torch.randn(n_cls, 2, generator=g, dtype=torch.float64)
    sig = torch.cat(
        [
            centres[y] + 0.05 * torch.randn(len(y), 2, generator=g, dtype=torch.float64),
            3.0 * torch.randn(len(y), 6, generator=g, dtype=torch.float64),
        ],
        1,
    )
    x = l2n(sig)
    train, test = y < 10, y >= 10
    w = learn_lw_whitening(x[train], _pairs(y[train]), dim=2)

    def m_ap(z: torch.Tensor, lab: torch.Tensor) -> float:
        s = z @ z.T
        s.fill_diagonal_(-10.0)
        t = lab[:, None] == lab[None]
        t.fill_diagonal_(False)
        return float(average_precision(s, t).mean())

    raw = m_ap(x[test], y[test])
    white = m_ap(apply_whitening(x[test], w), y[test])
    assert white > raw + 0.3, (raw, white)


def test_to_linear_and_state_dict() -> None:
    x = _data(n=30, d=4, seed=8)
    w = learn_pca_whitening(x, dim=3)
    lin = w.to_linear().double()
    torch.testing.assert_close(l2n(lin(x)), apply_whitening(x, w))
    w2 = Whitening.from_state_dict(w.state_dict())
    torch.testing.assert_close(w2(x), w(x))


def test_errors() -> None:
    x = _data(n=10, d=3)
    with pytest.raises(ValueError, match="dim"):
        learn_pca_whitening(x, dim=4)
    with pytest.raises(ValueError, match="power"):
        learn_pca_whitening(x, power=2.0)
    with pytest.raises(ValueError, match="shrinkage"):
        learn_pca_whitening(x, shrinkage=-0.1)
    with pytest.raises(ValueError, match="at least 2"):
        learn_pca_whitening(x[:1])
    with pytest.raises(ValueError, match="NaN"):
        learn_pca_whitening(torch.full((5, 2), float("nan")))
    with pytest.raises(ValueError, match="pairs"):
        learn_lw_whitening(x, torch.tensor([[0, 11]]))
    with pytest.raises(ValueError, match="pairs"):
        learn_lw_whitening(x, torch.zeros(0, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="factor"):
        learn_lw_whitening(x, torch.tensor([[0, 1]]), factor="qr")  # type: ignore[arg-type]
    w = learn_pca_whitening(x)
    with pytest.raises(ValueError, match="d=2"):
        apply_whitening(torch.ones(3, 2), w)
