"""Tests of rank_lab.ranking: step functions (Eq. 2.5, 2.8, 3.4 of the Ramzi thesis) and ranks."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.ranking import (
    Heaviside,
    SigmoidStep,
    SupRankStep,
    delta_from_epsilon,
    exact_rank,
    exact_rank_plus_rows,
    h_minus,
    heaviside,
    make_step,
    pairwise_differences,
    positive_rows,
    rank_split,
    retrieval_mask,
    row_step_sums,
    sigmoid_step,
    smooth_rank,
)

SETTINGS = settings(max_examples=40, deadline=None)


# ----------------------------------------------------------------------------- steps
def test_delta_from_epsilon_thesis_value():
    # delta = tau ln((1 - eps) / eps) = 0.01 ln 99 (thesis "Choice of delta"; SupRank App. A-C)
    assert delta_from_epsilon(0.01, 0.01) == pytest.approx(0.01 * math.log(99), abs=1e-12)
    assert delta_from_epsilon(0.01, 0.01) == pytest.approx(0.045951, abs=1e-6)
    step = SupRankStep()
    assert step.delta == pytest.approx(0.045951, abs=1e-6)
    # sigma(delta / tau) = 1 - eps: the sigmoid is saturated at delta
    assert torch.sigmoid(
        torch.tensor(step.delta / step.tau, dtype=torch.float64)
    ).item() == pytest.approx(0.99, abs=1e-9)
    # continuous offset sigma(delta/tau) + 0.5 (= 1.49 for delta = 0.0459, 1.4933 for 0.05)
    assert step.offset == pytest.approx(1.49, abs=1e-9)
    assert SupRankStep(delta=0.05).offset == pytest.approx(
        1.0 / (1 + math.exp(-5)) + 0.5, abs=1e-12
    )
    with pytest.raises(ValueError, match="eps"):
        delta_from_epsilon(0.01, 0.7)
    with pytest.raises(ValueError, match="tau"):
        delta_from_epsilon(0.0, 0.01)


def test_h_minus_pieces_hand_values():
    tau, rho, delta = 0.01, 100.0, 0.05
    t = torch.tensor([-0.2, -0.01, 0.0, 0.02, 0.05, 0.3], dtype=torch.float64)
    got = h_minus(t, tau=tau, rho=rho, delta=delta)
    sig = lambda x: 1 / (1 + math.exp(-x / tau))  # noqa: E731
    want = [
        sig(-0.2),
        sig(-0.01),
        sig(0.0) + 0.5,
        sig(0.02) + 0.5,
        sig(0.05) + 0.5,
        rho * (0.3 - delta) + sig(delta) + 0.5,
    ]
    assert got.tolist() == pytest.approx(want, abs=1e-12)
    # t = 0 belongs to the upper branch by default (H^-(0) = 1 >= H(0) = 1) ...
    assert got[2].item() == pytest.approx(1.0)
    # ... and to the lower one with the official code's `t > 0` test (0.5 < H(0) = 1)
    assert h_minus(torch.tensor([0.0]), zero_branch="lower").item() == pytest.approx(0.5)
    # left limit at 0 is 0.5: the +0.5 jump is by design
    assert h_minus(torch.tensor([-1e-9], dtype=torch.float64)).item() == pytest.approx(
        0.5, abs=1e-6
    )


def test_h_minus_continuity_at_delta_and_code_variants():
    step = SupRankStep(delta=0.05)
    left = step(torch.tensor([0.05], dtype=torch.float64))
    right = step(torch.tensor([0.05 + 1e-12], dtype=torch.float64))
    assert left.item() == pytest.approx(right.item(), abs=1e-8)
    # official offset 1.44: downward jump of 0.0533 at delta
    code = SupRankStep(delta=0.05, offset=1.44)
    jump = code(torch.tensor([0.05 + 1e-12], dtype=torch.float64)) - code(
        torch.tensor([0.05], dtype=torch.float64)
    )
    assert jump.item() == pytest.approx(1.44 - (1 / (1 + math.exp(-5)) + 0.5), abs=1e-8)
    # ROADMAP NeurIPS code: rho * t + offset (no -delta)
    neurips = SupRankStep(delta=0.05, offset=1.44, linear_origin="zero")
    assert neurips(torch.tensor([0.3], dtype=torch.float64)).item() == pytest.approx(
        100 * 0.3 + 1.44
    )
    with pytest.raises(ValueError, match="linear_origin"):
        SupRankStep(linear_origin="bad")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rho"):
        SupRankStep(rho=-1)


def test_h_minus_upper_bound_dense_grid_and_inat_variant_breaks_it():
    t = torch.linspace(-1, 1, 20001, dtype=torch.float64)
    t = torch.cat([t, torch.zeros(1, dtype=torch.float64)])
    assert bool((h_minus(t) >= heaviside(t)).all())
    # 1.44 >= 1: still a bound
    assert bool((h_minus(t, delta=0.05, offset=1.44) >= heaviside(t)).all())
    # iNat configs of the official code: start = 0, offset = 1 -> below H on (0, delta]
    inat = SupRankStep(delta=0.05, start=0.0, offset=1.0)
    inside = torch.tensor([0.01, 0.03, 0.05], dtype=torch.float64)
    assert bool((inat(inside) < 1.0).all())
    # the code's tie rule breaks the bound at exactly t = 0
    assert (
        h_minus(torch.tensor([0.0]), zero_branch="lower").item()
        < heaviside(torch.tensor([0.0])).item()
    )


@SETTINGS
@given(
    t=st.floats(-3, 3, allow_nan=False),
    tau=st.floats(1e-3, 0.5),
    rho=st.floats(0, 1e3),
    eps=st.floats(1e-4, 0.4),
)
def test_h_minus_is_an_upper_bound_of_heaviside(t, tau, rho, eps):
    x = torch.tensor([t], dtype=torch.float64)
    assert h_minus(x, tau=tau, rho=rho, eps=eps).item() >= heaviside(x).item()


@pytest.mark.parametrize(
    "step",
    [
        SigmoidStep(0.01),
        SigmoidStep(0.3),
        SupRankStep(),
        SupRankStep(delta=0.05, offset=1.44, linear_origin="zero", rho=7.0),
    ],
)
def test_analytic_derivative_matches_autograd(step):
    gen = torch.Generator().manual_seed(0)
    t = (torch.rand(500, generator=gen, dtype=torch.float64) - 0.5) * 0.6
    # away from the kink at delta
    t = t[(t - step.delta if hasattr(step, "delta") else t).abs() > 1e-6]
    t = t[t.abs() > 1e-6].requires_grad_()
    (auto,) = torch.autograd.grad(step(t).sum(), t)
    assert torch.allclose(step.derivative(t.detach()), auto, rtol=1e-10, atol=1e-10)


def test_suprank_derivative_is_rho_beyond_delta_and_sigmoid_margin_before():
    step = SupRankStep(rho=37.0)
    t = torch.tensor([step.delta + 1e-3, 0.2, 1.5], dtype=torch.float64)
    assert step.derivative(t).tolist() == pytest.approx([37.0] * 3)
    # margin: a correctly ranked negative (t < 0) still gets a gradient until about -delta
    assert step.derivative(torch.tensor([-0.02], dtype=torch.float64)).item() > 1.0
    assert step.derivative(torch.tensor([-0.2], dtype=torch.float64)).item() < 1e-6
    # sigmoid alone vanishes for large violations, H^- does not
    assert SigmoidStep(0.01).derivative(torch.tensor([0.5], dtype=torch.float64)).item() < 1e-15


def test_heaviside_and_sigmoid_functional_and_factory():
    t = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    assert heaviside(t).tolist() == [0.0, 1.0, 1.0]
    assert heaviside(t, zero_value=0.0).tolist() == [0.0, 0.0, 1.0]
    assert not heaviside(t).requires_grad
    assert torch.allclose(sigmoid_step(t, 0.5), torch.sigmoid(t / 0.5))
    assert isinstance(make_step("suprank", rho=3.0), SupRankStep)
    assert make_step("sigmoid").tau == 0.01
    assert isinstance(make_step(Heaviside()), Heaviside)
    with pytest.raises(ValueError, match="step must be"):
        make_step("nope")
    with pytest.raises(ValueError, match="tau"):
        SigmoidStep(0.0)


# ----------------------------------------------------------------------------- ranks
def _brute_ranks(scores, rel, valid):
    """Independent loops: rank, rank+ (rel_j >= rel_k), rank- (rel_j < rel_k), H(0) = 1."""
    q, n = scores.shape
    r = torch.zeros(q, n, dtype=torch.float64)
    rp, rn = torch.zeros_like(r), torch.zeros_like(r)
    for a in range(q):
        for k in range(n):
            if not valid[a, k]:
                continue
            r[a, k] = rp[a, k] = 1
            for j in range(n):
                if j == k or not valid[a, j] or scores[a, j] < scores[a, k]:
                    continue
                r[a, k] += 1
                if rel[a, j] >= rel[a, k]:
                    rp[a, k] += 1
                else:
                    rn[a, k] += 1
    return r, rp, rn


@pytest.mark.parametrize("with_ties", [False, True])
def test_exact_rank_and_split_against_brute_force(with_ties):
    gen = torch.Generator().manual_seed(1)
    scores = torch.rand(4, 9, generator=gen, dtype=torch.float64)
    if with_ties:
        scores = (scores * 4).round() / 4
    rel = torch.randint(0, 3, (4, 9), generator=gen).double()  # graded relevance
    valid = retrieval_mask(4, 9, torch.tensor([0, 5, -1, 8]))
    r, rp, rn = _brute_ranks(scores, rel, valid)
    assert torch.equal(exact_rank(scores, valid), r)
    got_p, got_n = rank_split(scores, rel, valid, max_elements=7)
    assert torch.equal(got_p, rp) and torch.equal(got_n, rn)
    assert torch.equal(
        exact_rank(scores), _brute_ranks(scores, rel, torch.ones(4, 9, dtype=torch.bool))[0]
    )


def test_hand_worked_ranks():
    # scores 0.9 (pos), 0.7 (neg), 0.7 (pos), 0.1 (neg): the tie at 0.7 counts as ranked before
    # (H(0) = 1)
    s = torch.tensor([[0.9, 0.7, 0.7, 0.1]])
    y = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    assert exact_rank(s).tolist() == [[1.0, 3.0, 3.0, 4.0]]
    rp, rn = rank_split(s, y)
    assert rp[0, [0, 2]].tolist() == [1.0, 2.0] and rn[0, [0, 2]].tolist() == [0.0, 1.0]


def test_retrieval_mask_choices_and_errors():
    m = retrieval_mask(3, 5, torch.tensor([0, -1, 4]))
    assert m.tolist() == [
        [False, True, True, True, True],
        [True] * 5,
        [True, True, True, True, False],
    ]
    assert bool(retrieval_mask(3, 5, torch.tensor([0, 1, 2]), exclude_self=False).all())
    assert bool(retrieval_mask(3, 5).all())
    with pytest.raises(ValueError, match="self_index"):
        retrieval_mask(3, 5, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="self_index"):
        retrieval_mask(2, 5, torch.tensor([0, 5]))


def _direct_sums(scores, rel, valid, step, relation):
    d = pairwise_differences(scores)
    n = scores.shape[1]
    m = valid[:, None, :] & ~torch.eye(n, dtype=torch.bool)
    if relation == "geq":
        m = m & (rel[:, None, :] >= rel[:, :, None])
    elif relation == "lower":
        m = m & (rel[:, None, :] < rel[:, :, None])
    return torch.where(m, step(d), torch.zeros_like(d)).sum(-1)


@pytest.mark.parametrize("step", [SigmoidStep(0.05), SupRankStep(tau=0.05, rho=3.0)])
def test_row_kernel_matches_direct_tensor_values_and_gradients(step):
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(5, 11, generator=gen, dtype=torch.float64) * 0.2
    rel = torch.randint(0, 3, (5, 11), generator=gen).double()
    valid = retrieval_mask(5, 11, torch.tensor([0, 1, 2, -1, 10]))
    q, k = positive_rows(rel, valid)
    w = torch.randn(q.numel(), 3, generator=gen, dtype=torch.float64)
    s1 = scores.clone().requires_grad_()
    out = row_step_sums(
        s1, q, k, step, ("all", "geq", "lower"), valid=valid, relevance=rel, max_elements=13
    )
    (out * w).sum().backward()
    s2 = scores.clone().requires_grad_()
    direct = torch.stack(
        [_direct_sums(s2, rel, valid, step, r)[q, k] for r in ("all", "geq", "lower")], 1
    )
    (direct * w).sum().backward()
    assert torch.allclose(out, direct, atol=1e-12)
    assert torch.allclose(s1.grad, s2.grad, atol=1e-10)


@pytest.mark.parametrize("step", [SigmoidStep(0.02), SupRankStep()])
def test_row_kernel_gradcheck_float64(step):
    gen = torch.Generator().manual_seed(3)
    scores = (torch.rand(3, 7, generator=gen, dtype=torch.float64) * 0.3).requires_grad_()
    rel = torch.randint(0, 2, (3, 7), generator=gen).double()
    rel[:, 0] = 1
    q, k = positive_rows(rel)
    fn = lambda s: row_step_sums(s, q, k, step, ("lower", "all"), relevance=rel, max_elements=8)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (scores,), eps=1e-7, atol=1e-5)


def test_heaviside_rows_carry_no_gradient_and_rank_plus_rows():
    scores = torch.tensor([[0.5, 0.2, 0.9, 0.4]], requires_grad=True)
    rel = torch.tensor([[1.0, 1.0, 0.0, 1.0]])
    q, k = positive_rows(rel)
    rp = exact_rank_plus_rows(scores, rel, q, k)
    assert rp.tolist() == [1.0, 3.0, 2.0]  # positives 0.5 (first), 0.2 (third), 0.4 (second)
    assert not rp.requires_grad
    out = row_step_sums(scores, q, k, "heaviside", ("lower",), relevance=rel)
    assert out[:, 0].tolist() == [1.0, 1.0, 1.0] and not out.requires_grad
    with pytest.raises(ValueError, match="relevance is required"):
        row_step_sums(scores, q, k, "sigmoid", ("lower",))
    with pytest.raises(ValueError, match="relations"):
        row_step_sums(scores, q, k, "sigmoid", ("bad",), relevance=rel)  # type: ignore[arg-type]


def test_smooth_rank_tends_to_exact_rank_and_upper_bounds_it():
    gen = torch.Generator().manual_seed(4)
    scores = torch.rand(3, 10, generator=gen, dtype=torch.float64)
    exact = exact_rank(scores)
    assert torch.allclose(smooth_rank(scores, SigmoidStep(1e-6)), exact, atol=1e-6)
    rel = torch.randint(0, 2, (3, 10), generator=gen).double()
    rp, _ = rank_split(scores, rel)
    # rank+ (exact) + rank_s^- (SupRank) >= rank for every item, with any relevance
    bound = rp + smooth_rank(scores, SupRankStep(), relevance=rel, relation="lower")
    assert bool((bound >= exact - 1e-12).all())


@SETTINGS
@given(
    vals=st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.25, 0.5, 0.9]), min_size=2, max_size=9),
    rels=st.lists(st.integers(0, 2), min_size=9, max_size=9),
)
def test_suprank_rank_bounds_exact_rank_with_ties(vals, rels):
    scores = torch.tensor([vals], dtype=torch.float64)
    rel = torch.tensor([rels[: len(vals)]], dtype=torch.float64)
    rp, rn = rank_split(scores, rel)
    smooth_neg = smooth_rank(scores, SupRankStep(), relevance=rel, relation="lower")
    assert bool((smooth_neg >= rn - 1e-12).all())
    assert torch.equal(rp + rn, exact_rank(scores))


def test_bad_inputs_raise_named_errors():
    with pytest.raises(ValueError, match="scores"):
        exact_rank(torch.tensor([[0.1, float("nan")]]))
    with pytest.raises(ValueError, match="scores"):
        exact_rank(torch.zeros(3))
    with pytest.raises(ValueError, match="valid"):
        exact_rank(torch.zeros(2, 3), torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="relevance"):
        rank_split(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="q_idx"):
        row_step_sums(
            torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), torch.zeros(3, dtype=torch.long)
        )


@pytest.mark.parametrize("graded", [False, True])
def test_split_rank_rows_is_rank_split_on_the_positive_rows(graded):
    """The SupRank losses' split (exact rank+, stepped rank-) with a Heaviside step is the exact
    ``rank_split`` of those rows, binary and graded, with the query's own item excluded."""
    from rank_lab.ranking.ranks import rank_split, split_rank_rows_trusted
    from rank_lab.ranking.row_kernel import positive_rows_trusted
    from rank_lab.ranking.steps import Heaviside

    g = torch.Generator().manual_seed(3)
    scores = torch.randint(-3, 4, (5, 11), generator=g).double() / 4  # many exact ties
    if graded:
        relevance = torch.randint(0, 3, (5, 11), generator=g).double()
    else:
        relevance = (torch.rand(5, 11, generator=g) < 0.4).double()
    valid = torch.ones(5, 11, dtype=torch.bool)
    valid[torch.arange(5), torch.arange(5)] = False
    q_idx, k_idx = positive_rows_trusted(relevance, valid)
    rank_pos, rank_neg = split_rank_rows_trusted(
        scores,
        relevance,
        q_idx,
        k_idx,
        Heaviside(),
        valid=valid,
        max_elements=None,
        binary=not graded,
    )
    want_pos, want_neg = rank_split(scores, relevance, valid)
    assert torch.equal(rank_pos, want_pos[q_idx, k_idx])
    assert torch.equal(rank_neg, want_neg[q_idx, k_idx])
