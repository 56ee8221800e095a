"""Tests of SiMix (rank_lab.losses.simix), Eqs. 5.8-5.10 of the Patel thesis."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.losses.recall import DEFAULT_KS_SIMIX, SmoothRecallAtK
from rank_lab.losses.recall_at_k import recall_at_k_surrogate
from rank_lab.losses.simix import (
    mix_embeddings,
    mixing_matrix,
    same_class_pairs,
    simix,
    simix_parents,
    simix_scores,
)


def unit(n, d, seed, dtype=torch.float64):
    return F.normalize(
        torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype), dim=1
    )


def test_virtual_counts():
    # C(m, 2) per class: m = 4 -> 6, so a batch of 4096 = 1024 x 4 becomes 4096 + 6144 = 10240
    labels = torch.arange(1024).repeat_interleave(4)
    assert same_class_pairs(labels).shape[0] == 6144
    assert labels.shape[0] + 6144 == 10240
    uneven = torch.tensor([0, 0, 0, 1, 2, 2, 2, 2, 2, 2])  # C(3,2) + C(1,2) + C(6,2) = 3 + 0 + 15
    pairs = same_class_pairs(uneven)
    assert pairs.shape == (18, 2)
    assert bool((uneven[pairs[:, 0]] == uneven[pairs[:, 1]]).all()) and bool(
        (pairs[:, 0] < pairs[:, 1]).all()
    )


def test_eqs_5_9_and_5_10_by_hand():
    e = unit(4, 3, seed=0)
    labels = torch.tensor([0, 0, 1, 1])
    # virtual 4 = (0, 1, 0.3), 5 = (2, 3, 0.8)
    alphas = torch.tensor([0.3, 0.8], dtype=torch.float64)
    b = simix(e, labels, alphas=alphas)
    s = e @ e.T
    assert b.labels.tolist() == [0, 0, 1, 1, 0, 1]
    # Eq. 5.9: original w = 2 against virtual xz = (0, 1)
    assert float(b.scores[2, 4]) == pytest.approx(
        0.3 * float(s[2, 0]) + 0.7 * float(s[2, 1]), abs=1e-14
    )
    assert float(b.scores[4, 2]) == pytest.approx(float(b.scores[2, 4]), abs=1e-14)
    # Eq. 5.10: virtual (0, 1, a1 = 0.3) against virtual (2, 3, a2 = 0.8): x=0, z=1, y=2, w=3
    a1, a2 = 0.3, 0.8
    expect = (
        a1 * a2 * s[0, 2]
        + (1 - a1) * (1 - a2) * s[1, 3]
        + a1 * (1 - a2) * s[0, 3]
        + (1 - a1) * a2 * s[1, 2]
    )
    assert float(b.scores[4, 5]) == pytest.approx(float(expect), abs=1e-14)
    # the original block is untouched
    torch.testing.assert_close(b.scores[:4, :4], s, atol=0, rtol=0)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=5),
    d=st.integers(1, 6),
)
def test_matrix_form_equals_explicit_mixing(seed, sizes, d):
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(sizes)])
    e = unit(labels.shape[0], d, seed)
    gen = torch.Generator().manual_seed(seed)
    b = simix(e, labels, generator=gen)
    assert b.n_virtual == sum(n * (n - 1) // 2 for n in sizes)
    v = mix_embeddings(e, b.parents, b.alphas)
    a = mixing_matrix(b.parents, b.alphas, labels.shape[0])
    torch.testing.assert_close(b.scores, v @ v.T, atol=1e-12, rtol=0)
    torch.testing.assert_close(b.scores, a @ (e @ e.T) @ a.T, atol=1e-12, rtol=0)
    torch.testing.assert_close(a @ e, v, atol=1e-14, rtol=0)
    # virtual labels are the parents' labels
    assert bool((b.labels == labels[b.parents[:, 0]]).all()) and bool(
        (b.labels == labels[b.parents[:, 1]]).all()
    )


def _explicit_rs_at_k(e, labels, alphas, ks, exclude_self_mixtures=False):
    """RS@k on explicitly mixed embeddings: the reference SiMix must equal."""
    parents, all_alphas, all_labels = simix_parents(labels, alphas=alphas)
    v = mix_embeddings(e, parents, all_alphas)
    n = v.shape[0]
    eye = torch.eye(n, dtype=torch.bool)
    if exclude_self_mixtures:
        p = parents
        excl = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            for j in range(n):
                excl[i, j] = len(set(p[i].tolist()) & set(p[j].tolist())) > 0
    else:
        excl = eye
    pos = (all_labels[:, None] == all_labels[None, :]) & ~excl
    return recall_at_k_surrogate(v @ v.T, pos, ~excl, ks=ks).mean()


@pytest.mark.parametrize("exclude_self_mixtures", [False, True])
def test_rs_at_k_with_simix_equals_explicit_mixing_value_and_gradient(exclude_self_mixtures):
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    e0 = unit(10, 5, seed=3)
    n_virtual = same_class_pairs(labels).shape[0]
    alphas = torch.rand(n_virtual, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ks = DEFAULT_KS_SIMIX
    e1 = e0.clone().requires_grad_(True)
    e2 = e0.clone().requires_grad_(True)
    loss = SmoothRecallAtK(
        ks=ks, simix=True, exclude_self_mixtures=exclude_self_mixtures, normalize=False
    )
    # feed the same alphas as the explicit path: the module draws them from its generator, so
    # compute the module's problem with fixed alphas through the functional API instead
    b = simix(e1, labels, alphas=alphas)
    excl = (
        b.shared_parent_mask()
        if exclude_self_mixtures
        else torch.eye(b.scores.shape[0], dtype=torch.bool)
    )
    pos = (b.labels[:, None] == b.labels[None, :]) & ~excl
    got = recall_at_k_surrogate(b.scores, pos, ~excl, ks=ks).mean()
    expect = _explicit_rs_at_k(e2, labels, alphas, ks, exclude_self_mixtures)
    assert float(got.detach()) == pytest.approx(float(expect.detach()), abs=1e-12)
    got.backward()
    expect.backward()
    torch.testing.assert_close(e1.grad, e2.grad, atol=1e-12, rtol=0)
    # and the module's own problem has the same structure
    s, p, dmask = loss.similarity_problem(e0, labels)
    assert s.shape == (10 + n_virtual,) * 2 and torch.equal(
        p, (b.labels[:, None] == b.labels[None, :]) & ~excl
    )


def test_module_is_deterministic_given_seed_and_gradcheck():
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    e = unit(6, 4, seed=4).requires_grad_(True)
    l1 = SmoothRecallAtK(simix=True, seed=0, tau=0.2)
    l2 = SmoothRecallAtK(simix=True, seed=0, tau=0.2)
    assert float(l1(e, labels).detach()) == float(l2(e, labels).detach())

    def fn(x):
        return SmoothRecallAtK(simix=True, seed=0, tau=0.2, ks=(1, 2, 4))(x, labels)

    assert torch.autograd.gradcheck(fn, (e,), eps=1e-6, atol=1e-6)


def test_simix_scores_gradient_matches_dense_a():
    e = unit(6, 3, seed=5)
    labels = torch.tensor([0, 0, 1, 1, 1, 2])
    parents, alphas, _ = simix_parents(labels, generator=torch.Generator().manual_seed(0))
    s1 = (e @ e.T).requires_grad_(True)
    s2 = (e @ e.T).requires_grad_(True)
    w = torch.randn(parents.shape[0], parents.shape[0], dtype=torch.float64)
    (simix_scores(s1, parents, alphas) * w).sum().backward()
    a = mixing_matrix(parents, alphas, 6)
    ((a @ s2 @ a.T) * w).sum().backward()
    torch.testing.assert_close(s1.grad, s2.grad, atol=1e-12, rtol=0)


def test_max_virtual_and_errors():
    labels = torch.arange(3).repeat_interleave(4)
    e = unit(12, 4, seed=6)
    b = simix(e, labels, max_virtual=5, generator=torch.Generator().manual_seed(0))
    assert b.n_virtual == 5 and b.scores.shape == (17, 17)
    v = mix_embeddings(e, b.parents, b.alphas)
    torch.testing.assert_close(b.scores, v @ v.T, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="alphas"):
        simix(e, labels, alphas=torch.rand(3))
    with pytest.raises(ValueError, match="alphas"):
        simix(e, labels, alphas=torch.full((18,), 1.5))
    with pytest.raises(ValueError, match="labels"):
        simix(e, labels[:5])
    with pytest.raises(ValueError, match="square"):
        simix_scores(torch.rand(3, 4), torch.zeros(1, 2, dtype=torch.long), torch.ones(1))


def test_mixed_norms_are_below_one():
    # no re-normalisation (Eq. 5.8): a mixture of two distinct unit vectors is shorter than 1
    e = unit(4, 3, seed=7)
    b = simix(e, torch.tensor([0, 0, 1, 1]), alphas=torch.tensor([0.5, 0.25], dtype=torch.float64))
    diag = torch.diagonal(b.scores)
    assert torch.allclose(diag[:4], torch.ones(4, dtype=torch.float64))
    assert bool((diag[4:] < 1).all())
    assert float(diag[4]) == pytest.approx(0.5 + 0.5 * float(e[0] @ e[1]), abs=1e-12)
    assert math.isclose(
        float(diag[5]), 0.0625 + 0.5625 + 2 * 0.1875 * float(e[2] @ e[3]), abs_tol=1e-12
    )


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_mixing_inputs_are_checked():
    parents, alphas = torch.tensor([[0, 0], [1, 1], [0, 1]]), torch.tensor([1.0, 1.0, 0.3])
    with pytest.raises(ValueError, match=r"parents must index the 2 rows of scores"):
        # was an IndexError
        simix_scores(torch.eye(2), torch.tensor([[0, 0], [1, 1], [0, 5]]), alphas)
    with pytest.raises(ValueError, match="alphas must lie in"):
        mixing_matrix(parents, torch.tensor([1.0, 1.0, 1.3]), 2)
    with pytest.raises(ValueError, match=r"alphas must have shape \(3,\)"):
        mix_embeddings(torch.randn(2, 4), parents, alphas[:2])
    with pytest.raises(ValueError, match="scores contains 4 NaN"):
        simix(torch.randn(2, 4), torch.tensor([0, 0]), scores=torch.full((2, 2), float("nan")))
    with pytest.raises(TypeError, match="max_virtual must be an int >= 0"):
        simix_parents(torch.tensor([0, 0, 0]), max_virtual=1.5)  # was a slice TypeError
