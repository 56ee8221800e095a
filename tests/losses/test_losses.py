"""Tests of rank_lab.losses: SmoothAP, SupAP, R@k surrogates, DG losses and tools, presets,
baselines."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.losses import (
    LOSSES,
    ROD,
    BlackBoxAP,
    ContrastiveLoss,
    FastAP,
    NormSoftmaxLoss,
    PairDGLoss,
    ProxyDGLoss,
    ProxyNCAPlusPlusLoss,
    SmoothAP,
    SmoothRecallAtK,
    SoftBinAP,
    SupAP,
    SupRecallAtK,
    TripletMarginLoss,
    build_loss,
    calibration_counts,
    decomposability_gap,
    dg_calibrated_bound,
    dg_upper_bound,
    embedding_decomposability_gap,
    expected_decomposability_gap,
    juxtaposed_batches,
    random_batches,
    roadmap_neurips,
    roadmap_tpami,
    rod_recall,
    worst_case_dg_brute_force,
)
from rank_lab.losses.blackbox import BlackBoxRank, normalised_rank
from rank_lab.metrics import average_precision, true_recall_at_k

SETTINGS = settings(max_examples=40, deadline=None)
TOY_S = [[0.66, 0.67, 0.80]]  # Fig. 3.8 of the Ramzi thesis: s3 - s2 = 0.13, s3 - s1 = 0.14
TOY_Y = [[1, 1, 0]]


def _toy():
    return torch.tensor(TOY_S, dtype=torch.float64, requires_grad=True), torch.tensor(TOY_Y)


def _formula_ap(scores, targets):
    """Independent loops: AP of Eq. 3.9 with H(0) = 1 (rank+ and rank counted with ties before)."""
    out = []
    for s, y in zip(scores.tolist(), targets.tolist(), strict=True):
        pos = [k for k, t in enumerate(y) if t > 0]
        acc = 0.0
        for k in pos:
            rank_p = 1 + sum(1 for j in pos if j != k and s[j] >= s[k])
            rank = 1 + sum(1 for j in range(len(s)) if j != k and s[j] >= s[k])
            acc += rank_p / rank
        out.append(acc / len(pos))
    return torch.tensor(out, dtype=torch.float64)


# ----------------------------------------------------------------------------- the 3-item toy
def test_toy_smooth_ap_pushes_a_positive_the_wrong_way():
    s, y = _toy()
    loss = SmoothAP(tau=0.01).forward_scores(s, y)
    loss.backward()
    # L_AP = 0.4167
    assert 1 - average_precision(s.detach(), y).item() == pytest.approx(5 / 12, abs=1e-12)
    assert loss.item() == pytest.approx(0.4034, abs=5e-5)  # below L_AP: not an upper bound
    g = s.grad[0]
    assert g.tolist() == pytest.approx([-0.5916, 0.5915, 0.0], abs=5e-5)
    assert g[0].item() == pytest.approx(-g[1].item(), rel=1e-3)  # dL/ds1 = -dL/ds2 (App. A.1.1)
    assert g[1] > 0  # gradient descent lowers s2: the higher positive is pushed down
    # the negative far above: saturated, ~4e-5
    assert abs(g[2].item()) < 1e-4 * abs(g[0].item()) * 10


def test_toy_sup_ap_has_correct_gradient_signs_and_bounds_the_ap_loss():
    s, y = _toy()
    loss = SupAP(delta=0.05).forward_scores(s, y)  # official delta, as in the digest's check
    loss.backward()
    assert loss.item() == pytest.approx(0.8723, abs=5e-5)
    assert s.grad[0].tolist() == pytest.approx([-0.6407, -0.4541, 1.0948], abs=5e-5)
    s2, y2 = _toy()
    default = SupAP().forward_scores(s2, y2)  # thesis delta = 0.04595
    default.backward()
    assert default.item() >= 5 / 12
    assert bool((s2.grad[0, :2] < 0).all()) and s2.grad[0, 2] > 0  # positives up, negative down


def test_sup_ap_hand_worked_value():
    # positives 0.8 and 0.2, negative 0.5; tau 0.01, rho 100, delta 0.05 (continuous offset)
    s = torch.tensor([[0.8, 0.5, 0.2]], dtype=torch.float64)
    y = torch.tensor([[1, 0, 1]])
    sig = lambda x: 1 / (1 + math.exp(-x / 0.01))  # noqa: E731
    r1 = 1 / (1 + sig(-0.3))  # rank+ = 1, rank_s^- = sigma(-30)
    h = 100 * (0.3 - 0.05) + sig(0.05) + 0.5  # linear branch, 26.4933
    r2 = 2 / (2 + h)
    want = 1 - (r1 + r2) / 2
    assert SupAP(delta=0.05).forward_scores(s, y).item() == pytest.approx(want, abs=1e-12)
    assert SupAP(delta=0.05, impl="direct").forward_scores(s, y).item() == pytest.approx(
        want, abs=1e-12
    )
    # Sup-R@1 of the same query: sigma((1 - rank(p)) / 1) for rank(0.8) = 1 + sigma(-30), rank(0.2)
    # = 2 + h
    want_r = (
        1
        - (
            torch.sigmoid(torch.tensor(-sig(-0.3), dtype=torch.float64)).item()
            + 1 / (1 + math.exp(1 + h))
        )
        / 1
    )
    got_r = SupRecallAtK(ks=(1,), tau_star=1.0, delta=0.05).forward_scores(s, y).item()
    assert got_r == pytest.approx(want_r, abs=1e-12)


def test_smooth_recall_hand_worked_value_with_clip():
    # one query, positives 0.9, 0.8, negative 0.1: smooth ranks 1 + sig(-0.1) + sig(-0.8) and 1 +
    # sig(0.1) + sig(-0.7)
    s = torch.tensor([[0.9, 0.8, 0.1]], dtype=torch.float64)
    y = torch.tensor([[1, 1, 0]])
    sig = lambda x: 1 / (1 + math.exp(-x / 0.01))  # noqa: E731
    r = [1 + sig(-0.1) + sig(-0.8), 1 + sig(0.1) + sig(-0.7)]
    for k, clip in [(1, True), (1, False), (2, True)]:
        num = sum(1 / (1 + math.exp(-(k - ri))) for ri in r)
        num = min(num, k) if clip else num
        want = 1 - num / min(k, 2)
        got = SmoothRecallAtK(ks=(k,), clip=clip).forward_scores(s, y).item()
        assert got == pytest.approx(want, abs=1e-12)


# ----------------------------------------------------------------------------- efficient == direct
def _data(seed, n=16, d=6, n_cls=4, hier=False):
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, d, generator=gen, dtype=torch.float64)
    fine = torch.arange(n) % n_cls
    lab = torch.stack([fine, fine // 2], 1) if hier else fine
    return emb, lab


LOSS_CASES = [
    (SmoothAP, {}),
    (SupAP, {}),
    (SupAP, {"delta": 0.05, "offset": 1.44, "linear_origin": "zero", "zero_branch": "lower"}),
    (SmoothRecallAtK, {"ks": (1, 2, 4)}),
    (SupRecallAtK, {"ks": (1, 3), "tau_star": (1.0, 2.0)}),
    (SupRecallAtK, {"clip": True}),
]


@pytest.mark.parametrize("cls,kw", LOSS_CASES)
@pytest.mark.parametrize("mode", ["batch", "batch_keep_self", "refs", "hier"])
def test_efficient_equals_direct_values_and_gradients(cls, kw, mode):
    emb, lab = _data(5, hier=mode == "hier")
    extra = {
        "query_role": "positive" if mode == "batch_keep_self" else "excluded",
        "hierarchy_level": 1 if mode == "hier" else 0,
    }
    results = []
    for impl in ("efficient", "direct"):
        e = emb.clone().requires_grad_()
        loss = cls(impl=impl, max_elements=37, reduction="none", **kw, **extra)
        if mode == "refs":
            gen = torch.Generator().manual_seed(9)
            ref = torch.cat(
                [e.detach(), torch.randn(20, e.shape[1], generator=gen, dtype=torch.float64)]
            )
            ref_lab = torch.cat([lab, torch.randint(0, 4, (20,), generator=gen)])
            out = loss(e[:6], lab[:6], ref, ref_lab, ref_self_index=torch.arange(6))
        else:
            out = loss(e, lab)
        w = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype)
        (out * w).sum().backward()
        results.append((out.detach(), e.grad.clone()))
    (v1, g1), (v2, g2) = results
    assert torch.allclose(v1, v2, atol=1e-12, rtol=0)
    assert torch.allclose(g1, g2, atol=1e-10, rtol=1e-8)


# ----------------------------------------------------------------------------- gradcheck
GRADCHECK = [
    SmoothAP(),
    SupAP(),
    SmoothRecallAtK(),
    SupRecallAtK(),
    SmoothAP(impl="direct"),
    SupAP(impl="direct"),
    FastAP(),
    SoftBinAP(),
]


@pytest.mark.parametrize(
    "loss", GRADCHECK, ids=lambda m: f"{type(m).__name__}-{getattr(m, 'impl', '')}"
)
def test_gradcheck_listwise_losses_float64(loss):
    gen = torch.Generator().manual_seed(11)
    scores = (torch.rand(3, 8, generator=gen, dtype=torch.float64) * 1.6 - 0.8).requires_grad_()
    targets = torch.tensor(
        [[1, 0, 1, 0, 0, 1, 0, 0], [0, 1, 1, 1, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0, 0, 0]]
    )
    assert torch.autograd.gradcheck(
        lambda s: loss.forward_scores(s, targets), (scores,), eps=1e-7, atol=1e-5
    )


@pytest.mark.parametrize(
    "loss",
    [
        PairDGLoss(),
        PairDGLoss(pair_reduction="avg_nonzero"),
        ContrastiveLoss(),
        TripletMarginLoss(),
        TripletMarginLoss(mining="hard"),
        NormSoftmaxLoss(4, 5),
        ProxyNCAPlusPlusLoss(4, 5),
        ROD(SupAP(), ProxyDGLoss(4, 5), lam=0.3),
    ],
    ids=lambda m: type(m).__name__,
)
def test_gradcheck_embedding_losses_float64(loss):
    loss = loss.double()
    gen = torch.Generator().manual_seed(12)
    emb = torch.randn(12, 5, generator=gen, dtype=torch.float64).requires_grad_()
    lab = torch.arange(12) % 4
    assert torch.autograd.gradcheck(lambda e: loss(e, lab), (emb,), eps=1e-7, atol=1e-5)


# ----------------------------------------------------------------------------- upper bounds
@SETTINGS
@given(
    vals=st.lists(
        st.sampled_from([-0.3, 0.0, 0.1, 0.12, 0.2, 0.5, 0.51, 0.9]), min_size=2, max_size=10
    ),
    bits=st.lists(st.booleans(), min_size=10, max_size=10),
    tau=st.sampled_from([0.005, 0.01, 0.05]),
    rho=st.sampled_from([0.0, 1.0, 100.0, 1e3]),
)
def test_sup_ap_upper_bounds_the_ap_loss_of_eq_3_9_even_with_ties(vals, bits, tau, rho):
    y = torch.tensor([bits[: len(vals)]])
    y[0, 0] = True
    s = torch.tensor([vals], dtype=torch.float64)
    sup = SupAP(tau=tau, rho=rho).forward_scores(s, y).item()
    assert sup >= 1 - _formula_ap(s, y).item() - 1e-12


@SETTINGS
@given(seed=st.integers(0, 10_000), n=st.integers(2, 40), n_q=st.integers(1, 4))
def test_sup_ap_upper_bounds_one_minus_metric_ap_on_tie_free_scores(seed, n, n_q):
    gen = torch.Generator().manual_seed(seed)
    s = torch.rand(n_q, n, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.rand(n_q, n, generator=gen) < 0.3
    y[:, 0] = True
    sup = SupAP(reduction="none").forward_scores(s, y)
    assert bool((sup >= 1 - average_precision(s, y) - 1e-12).all())
    assert torch.allclose(average_precision(s, y), _formula_ap(s, y))  # no ties: same AP


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 30),
    k=st.integers(1, 8),
    tau_star=st.sampled_from([0.1, 1.0, 4.0]),
    clip=st.booleans(),
)
def test_sup_recall_bounds_the_same_outer_sigmoid_on_exact_ranks(seed, n, k, tau_star, clip):
    gen = torch.Generator().manual_seed(seed)
    s = torch.rand(1, n, generator=gen, dtype=torch.float64)
    y = torch.rand(1, n, generator=gen) < 0.4
    y[0, 0] = True
    sup = SupRecallAtK(ks=(k,), tau_star=tau_star, clip=clip).forward_scores(s, y).item()
    # exact rank inside the same outer sigmoid (what SupRank's rank substitution bounds)
    ranks = ((s[0][None, :] >= s[0][:, None]).sum(1)).double()  # 1 + #{j != k: s_j >= s_k}
    num = torch.sigmoid((k - ranks[y[0]]) / tau_star).sum().item()
    num = min(num, k) if clip else num
    exact_sig = 1 - num / min(k, int(y.sum()))
    assert sup >= exact_sig - 1e-12


def test_sup_recall_is_not_an_upper_bound_of_one_minus_true_recall():
    # the positive is ranked 2nd (a negative 1e-4 above it): TR@1 = 0, so 1 - TR@1 = 1, but the
    # outer sigmoid still credits it sigma((1 - rank_s) / tau*) = sigma(-1) with rank_s ~ 2 (thesis
    # Sec. 3.3.2 note)
    s = torch.tensor([[0.5, 0.5001, 0.0]], dtype=torch.float64)
    y = torch.tensor([[1, 0, 0]])
    sup = SupRecallAtK(ks=(1,)).forward_scores(s, y).item()
    assert 1 - true_recall_at_k(s, y, 1).item() == 1.0
    assert sup == pytest.approx(1 - 1 / (1 + math.e), abs=2e-3) and sup < 1.0


def test_smooth_ap_is_not_an_upper_bound_and_suprank_code_variant_can_break_it():
    s, y = _toy()
    assert SmoothAP().forward_scores(s, y).item() < 1 - average_precision(s.detach(), y).item()
    # official iNat variant start=0, offset=1: H^- < 1 on (0, delta] -> SupAP below the AP loss
    s2 = torch.tensor([[0.50, 0.52, 0.0]], dtype=torch.float64)  # negative 0.02 above the positive
    y2 = torch.tensor([[1, 0, 0]])
    inat = SupAP(delta=0.05, start=0.0, offset=1.0).forward_scores(s2, y2).item()
    assert inat < 1 - average_precision(s2, y2).item()
    assert SupAP().forward_scores(s2, y2).item() >= 1 - average_precision(s2, y2).item()


def test_smooth_ap_tends_to_ap_as_tau_vanishes():
    gen = torch.Generator().manual_seed(13)
    s = torch.rand(3, 12, generator=gen, dtype=torch.float64)
    y = torch.rand(3, 12, generator=gen) < 0.4
    y[:, 0] = True
    got = SmoothAP(tau=1e-7, reduction="none").forward_scores(s, y)
    assert torch.allclose(got, 1 - average_precision(s, y), atol=1e-6)


# ----------------------------------------------------------------------------- API behaviour
def test_self_exclusion_choices():
    emb, lab = _data(6, n=8)
    en = F.normalize(emb, dim=1)
    s = en @ en.T
    y = lab[:, None] == lab[None, :]
    keep = SupAP(query_role="positive")(emb, lab)
    assert keep.item() == pytest.approx(SupAP().forward_scores(s, y).item(), abs=1e-12)
    drop = SupAP()(emb, lab)
    valid = ~torch.eye(8, dtype=torch.bool)
    assert drop.item() == pytest.approx(SupAP().forward_scores(s, y, valid).item(), abs=1e-12)
    assert keep.item() < drop.item()  # the query itself is a free positive ranked first
    with pytest.raises(ValueError, match="does not support 'competitor'"):
        SupAP(query_role="competitor")  # only the R@k surrogates rank the query as a competitor


def test_reductions_and_no_positive_handling():
    s = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.3, 0.4], [0.1, 0.7, 0.2]], dtype=torch.float64)
    y = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 1, 1]])
    none = SupAP(reduction="none").forward_scores(s, y)
    assert none.shape == (3,) and none[1].item() == 0.0
    assert SupAP().forward_scores(s, y).item() == pytest.approx((none[0] + none[2]).item() / 2)
    assert SupAP(reduction="sum").forward_scores(s, y).item() == pytest.approx(
        (none[0] + none[2]).item()
    )
    with pytest.raises(ValueError, match="no positive"):
        SupAP(no_positive="raise").forward_scores(s, y)
    with pytest.raises(ValueError, match="no query has a positive"):
        SmoothAP()(torch.randn(4, 3), torch.arange(4))


def test_bad_inputs_name_the_argument():
    emb, lab = _data(7, n=8)
    with pytest.raises(ValueError, match="labels"):
        SupAP()(emb, lab[:5])
    with pytest.raises(ValueError, match="embeddings"):
        SupAP()(torch.full((4, 3), float("nan")), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="together"):
        SupAP()(emb, lab, emb)
    with pytest.raises(ValueError, match="ref_embeddings has dimension"):
        SupAP()(emb, lab, torch.randn(3, 2), torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="labels"):
        SupAP()(emb, lab.float())
    with pytest.raises(ValueError, match="hierarchy_level"):
        SupAP(hierarchy_level=1)(emb, lab)
    with pytest.raises(ValueError, match="impl"):
        SupAP(impl="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ks"):
        SupRecallAtK(ks=())
    with pytest.raises(ValueError, match="tau_star"):
        SupRecallAtK(ks=(1, 2), tau_star=(1.0,))
    with pytest.raises(ValueError, match="labels must be in"):
        NormSoftmaxLoss(3, 6)(emb, lab + 5)


def test_float16_embeddings_are_scored_in_float32():
    emb, lab = _data(8, n=8)
    out = SupAP()(emb.half(), lab)
    assert out.dtype == torch.float32 and torch.isfinite(out)


# ----------------------------------------------------------------------------- pair / proxy /
# triplet
def test_pair_dg_loss_hand_worked():
    # query 0: positives 0.95, 0.7 and negatives 0.65, 0.1 (alpha 0.9, beta 0.6)
    s = torch.tensor([[0.95, 0.7, 0.65, 0.1]], dtype=torch.float64)
    y = torch.tensor([[1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    valid = torch.ones(1, 4, dtype=torch.bool)
    from rank_lab.losses import pair_margin_loss

    assert pair_margin_loss(s, y, valid, 0.9, 0.6).item() == pytest.approx(0.2 / 2 + 0.05 / 2)
    assert pair_margin_loss(s, y, valid, 0.9, 0.6, "avg_nonzero").item() == pytest.approx(
        0.2 + 0.05
    )
    assert pair_margin_loss(s, y, valid, 1.0, 0.5, "per_query_sum").item() == pytest.approx(
        0.05 + 0.3 + 0.15
    )
    with pytest.raises(ValueError, match="beta must be < alpha"):
        PairDGLoss(alpha=0.5, beta=0.6)


def test_pair_dg_zero_when_calibrated():
    v = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    lab = torch.tensor([0, 0, 1, 1])
    assert PairDGLoss()(v, lab).item() == 0.0  # positives at s = 1 >= 0.9, negatives at 0 <= 0.6


def _brute_triplets(emb, lab, margin, mining):
    e = F.normalize(emb, dim=1)
    d = torch.cdist(e, e) ** 2
    per_anchor = []
    for a in range(len(lab)):
        losses = []
        for p in range(len(lab)):
            if p == a or lab[p] != lab[a]:
                continue
            negs = [n for n in range(len(lab)) if lab[n] != lab[a]]
            if mining == "hard":
                negs = [min(negs, key=lambda n: d[a, n].item())]
            losses += [max(0.0, (d[a, p] - d[a, n] + margin).item()) for n in negs]
        per_anchor.append(sum(losses) / len(losses))
    return sum(per_anchor) / len(per_anchor)


@pytest.mark.parametrize("mining", ["all", "hard"])
def test_triplet_against_brute_force(mining):
    emb, lab = _data(14, n=12, n_cls=3)
    got = TripletMarginLoss(margin=0.2, mining=mining)(emb, lab).item()
    assert got == pytest.approx(_brute_triplets(emb, lab, 0.2, mining), abs=1e-10)


def test_triplet_semihard_picks_negatives_inside_the_margin():
    # anchor (0 deg), positive at 40 deg, negatives at 45 deg (semi-hard), 10 deg (hard), 120 deg
    # (easy)
    ang = torch.tensor([0.0, 40.0, 45.0, 10.0, 120.0], dtype=torch.float64) * math.pi / 180
    emb = torch.stack([ang.cos(), ang.sin()], 1)
    lab = torch.tensor([0, 0, 1, 2, 3])
    d = lambda i, j: ((emb[i] - emb[j]) ** 2).sum().item()  # noqa: E731
    loss = TripletMarginLoss(margin=0.2, mining="semihard", reduction="none")(emb, lab)
    assert loss[0].item() == pytest.approx(d(0, 1) - d(0, 2) + 0.2, abs=1e-12)


def test_proxy_losses_against_cross_entropy_and_each_other():
    emb, lab = _data(15, n=10, d=5, n_cls=4)
    ns = NormSoftmaxLoss(4, 5, temperature=0.05).double()
    p = F.normalize(ns.proxies, dim=1)
    want = F.cross_entropy(F.normalize(emb, dim=1) @ p.T / 0.05, lab)
    assert ns(emb, lab).item() == pytest.approx(want.item(), abs=1e-10)
    # ProxyNCA++ with temperature T equals NormSoftmax with temperature T / 2 (unit vectors)
    pp = ProxyNCAPlusPlusLoss(4, 5, temperature=1 / 9).double()
    ns2 = NormSoftmaxLoss(4, 5, temperature=1 / 18).double()
    with torch.no_grad():
        ns2.proxies.copy_(pp.proxies)
    assert pp(emb, lab).item() == pytest.approx(ns2(emb, lab).item(), abs=1e-9)
    # ProxyDGLoss ignores references (the memory never reaches it)
    dg = ProxyDGLoss(4, 5).double()
    assert dg(emb, lab, emb[:3], lab[:3]).item() == pytest.approx(dg(emb, lab).item())


# ----------------------------------------------------------------------------- histogram / blackbox
# baselines
def test_fastap_and_softbin_equal_ap_when_scores_sit_on_distinct_bin_centres():
    # FastAP: distances 2 - 2s on centres l * 4 / L; SoftBin: scores on centres of [-1, 1]
    y = torch.tensor([[1, 0, 1, 1, 0, 0, 1, 0]])
    fl = torch.tensor([[0, 1, 2, 4, 5, 7, 8, 9]], dtype=torch.float64)
    s_fast = 1 - (fl * 0.4) / 2  # L = 10 -> Delta = 0.4
    assert FastAP(num_bins=10).forward_scores(s_fast, y).item() == pytest.approx(
        1 - average_precision(s_fast, y).item(), abs=1e-12
    )
    s_soft = 1 - fl * (2 / 19)  # M = 20 bins on [-1, 1]
    assert SoftBinAP(num_bins=20).forward_scores(s_soft, y).item() == pytest.approx(
        1 - average_precision(s_soft, y).item(), abs=1e-12
    )


def _brute_fastap(s, y, bins):
    out = []
    for row_s, row_y in zip(s.tolist(), y.tolist(), strict=True):
        d = [2 - 2 * v for v in row_s]
        width, hp, ha = 4 / bins, [], []
        for z in [i * 4 / bins for i in range(bins + 1)]:
            k = [max(0.0, 1 - abs(x - z) / width) for x in d]
            hp.append(sum(kk for kk, t in zip(k, row_y, strict=True) if t))
            ha.append(sum(k))
        cp = ca = acc = 0.0
        for a, b in zip(hp, ha, strict=True):
            cp, ca = cp + a, ca + b
            acc += a * cp / ca if ca > 0 else 0.0
        out.append(1 - acc / sum(row_y))
    return sum(out) / len(out)


def test_fastap_against_loops():
    gen = torch.Generator().manual_seed(16)
    s = torch.rand(3, 9, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.rand(3, 9, generator=gen) < 0.4
    y[:, 0] = True
    assert FastAP(num_bins=7).forward_scores(s, y).item() == pytest.approx(
        _brute_fastap(s, y.int(), 7), abs=1e-12
    )


def test_blackbox_ap_forward_is_exact_and_backward_follows_the_interpolation_formula():
    gen = torch.Generator().manual_seed(17)
    s = torch.rand(3, 10, generator=gen, dtype=torch.float64)
    y = torch.rand(3, 10, generator=gen) < 0.4
    y[:, 0] = True
    got = BlackBoxAP(margin=0.0, reduction="none").forward_scores(s, y)
    assert torch.allclose(got, 1 - average_precision(s, y), atol=1e-12)
    x = s.clone().requires_grad_()
    g = torch.randn(3, 10, generator=gen, dtype=torch.float64)
    BlackBoxRank.apply(x, 4.0).backward(g)
    want = -(normalised_rank(s) - normalised_rank(s + 4.0 * g)) / 4.0
    assert torch.allclose(x.grad, want)
    # the margin lowers positives / raises negatives: a positive 0.005 above a negative drops below
    # it
    s2 = torch.tensor([[0.5, 0.495, 0.1]], dtype=torch.float64)
    y2 = torch.tensor([[1, 0, 1]])
    assert (
        BlackBoxAP(margin=0.02).forward_scores(s2, y2).item()
        > BlackBoxAP(margin=0.0).forward_scores(s2, y2).item()
    )


# ----------------------------------------------------------------------------- decomposability gap
def _brute_dg(scores, targets, batch_ids):
    def ap(s, y):
        order = sorted(range(len(s)), key=lambda i: (-s[i], y[i]))
        hits, acc = 0, 0.0
        for r, i in enumerate(order, 1):
            if y[i]:
                hits += 1
                acc += hits / r
        return acc / hits

    s, y, b = scores.tolist(), targets.tolist(), batch_ids.tolist()
    per = []
    for bid in sorted(set(b)):
        idx = [i for i in range(len(s)) if b[i] == bid]
        if any(y[i] for i in idx):
            per.append(ap([s[i] for i in idx], [y[i] for i in idx]))
    return sum(per) / len(per) - ap(s, y)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_decomposability_gap_against_brute_force(seed):
    gen = torch.Generator().manual_seed(seed)
    s = torch.rand(24, generator=gen, dtype=torch.float64)
    y = torch.rand(24, generator=gen) < 0.3
    y[0] = True
    ids = random_batches(24, 6, seed=seed, targets=y)
    assert decomposability_gap(s, y, ids).item() == pytest.approx(
        _brute_dg(s, y.int(), ids), abs=1e-12
    )
    # several queries at once share the partition
    s2 = torch.stack([s, s.flip(0)])
    y2 = torch.stack([y, y.flip(0)])
    both = decomposability_gap(s2, y2, ids)
    assert both[1].item() == pytest.approx(_brute_dg(s.flip(0), y.flip(0).int(), ids), abs=1e-12)


def test_dg_is_zero_for_one_batch_and_when_calibrated():
    gen = torch.Generator().manual_seed(21)
    s = torch.rand(20, generator=gen, dtype=torch.float64)
    y = torch.zeros(20, dtype=torch.bool)
    y[torch.randperm(20, generator=gen)[:8]] = True  # 2 positives in each of the 4 balanced batches
    assert decomposability_gap(s, y, torch.zeros(20, dtype=torch.long)).item() == pytest.approx(
        0.0, abs=1e-15
    )
    # L_DG = 0 on every batch (positives >= alpha > beta >= negatives) => DG = 0 (thesis Sec. 3.4.2)
    cal = torch.where(y, 0.9 + 0.1 * s, 0.6 * s)
    for seed in range(3):
        ids = random_batches(20, 5, seed=seed, targets=y)
        assert decomposability_gap(cal, y, ids).item() == pytest.approx(0.0, abs=1e-15)
        counts = calibration_counts(cal, y, ids)
        assert sum(counts[1]) == 0 and sum(counts[3]) == 0
        assert dg_calibrated_bound(*counts) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize(
    "pos,neg,want",
    [
        ([2, 2], [2, 2], 0.1833),
        ([1, 1], [3, 3], 0.3),
        ([2, 2, 2], [2, 2, 2], 0.263),
        ([1, 1, 1], [2, 2, 2], 0.3571),
        ([2, 2], [5, 5], 0.2951),
    ],
)
def test_worst_case_bound_is_attained_by_juxtaposed_batches(pos, neg, want):
    bound = dg_upper_bound(pos, neg)
    brute, order = worst_case_dg_brute_force(pos, neg)
    s, y, ids = juxtaposed_batches(pos, neg)
    assert bound == pytest.approx(brute, abs=1e-12)
    assert decomposability_gap(s, y, ids).item() == pytest.approx(bound, abs=1e-12)
    assert bound == pytest.approx(want, abs=5e-5)
    assert order == sorted(order)  # the maximiser is the juxtaposition itself


def test_bounds_hand_values_and_refined_bound_relations():
    # K = 2, B = 32 with 4 positives per batch (digest: 0.406)
    assert dg_upper_bound([4, 4], [28, 28]) == pytest.approx(0.4062, abs=1e-4)
    # every item violating its threshold: Eq. 3.19 reduces to Eq. 3.18
    assert dg_calibrated_bound([0, 0], [4, 4], [0, 0], [28, 28]) == pytest.approx(
        dg_upper_bound([4, 4], [28, 28])
    )
    # fewer violations -> tighter bound
    assert dg_calibrated_bound([3, 3], [1, 1], [20, 20], [8, 8]) < dg_upper_bound([4, 4], [28, 28])
    with pytest.raises(ValueError, match="batches"):
        dg_upper_bound([1, 2], [3])
    with pytest.raises(ValueError, match="max_orderings"):
        worst_case_dg_brute_force([5, 5, 5], [10, 10, 10], max_orderings=1000)


def test_random_batches_and_expected_dg():
    y = torch.zeros(40, dtype=torch.bool)
    y[:8] = True
    ids = random_batches(40, 10, seed=3, targets=y)
    assert torch.bincount(ids).tolist() == [10] * 4
    assert torch.bincount(ids[y]).tolist() == [2] * 4  # positives spread evenly
    assert not torch.equal(ids, random_batches(40, 10, seed=4, targets=y))
    with pytest.raises(ValueError, match="multiple"):
        random_batches(41, 10)
    s = torch.linspace(1, 0, 40, dtype=torch.float64)
    mean, std = expected_decomposability_gap(s, y, 10, n_draws=4)
    assert mean == pytest.approx(0.0) and std == pytest.approx(0.0)  # perfect ranking: DG = 0
    contiguous = torch.arange(40) // 10  # batches 1-3 hold no positive
    with pytest.raises(ValueError, match="no positive"):
        decomposability_gap(s, y, contiguous, empty_batch="raise")
    # skipped: only batch 0 counts
    assert decomposability_gap(s, y, contiguous).item() == pytest.approx(0.0)


def test_embedding_decomposability_gap_matches_a_per_query_brute_force():
    gen = torch.Generator().manual_seed(3)
    lab = torch.arange(4).repeat_interleave(4)[torch.randperm(16, generator=gen)]  # 4 classes x 4
    emb = torch.randn(16, 5, generator=gen, dtype=torch.float64)
    mean, std = embedding_decomposability_gap(emb, lab, 3, n_draws=3, seed=7)
    # brute force: the queries, retrieval set and partitions rebuilt by hand, one query at a time
    unit = emb / emb.norm(dim=1, keepdim=True)
    queries = [int(torch.nonzero(lab == c)[0, 0]) for c in range(4)]
    rest = [i for i in range(16) if i not in queries]
    draws = []
    for d in range(3):
        ids = random_batches(12, 3, seed=7 + d)
        gaps = []
        for q in queries:
            s = torch.stack([unit[q] @ unit[j] for j in rest])
            y = torch.tensor([int(lab[j] == lab[q]) for j in rest])
            batch_aps = [
                average_precision(s[ids == b][None], y[ids == b][None]).item()
                for b in range(4)
                if y[ids == b].any()
            ]
            gaps.append(
                sum(batch_aps) / len(batch_aps) - average_precision(s[None], y[None]).item()
            )
        draws.append(sum(gaps) / len(gaps))
    assert mean == pytest.approx(sum(draws) / 3, abs=1e-12)
    assert std == pytest.approx(torch.tensor(draws, dtype=torch.float64).std().item(), abs=1e-12)
    # one batch = the whole retrieval set: no gap; a perfect embedding: no gap at any B
    assert embedding_decomposability_gap(emb, lab, 12, n_draws=2) == (
        pytest.approx(0.0),
        pytest.approx(0.0),
    )
    onehot = torch.nn.functional.one_hot(lab, 4).double()
    assert embedding_decomposability_gap(onehot, lab, 3, n_draws=2)[0] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="batch_size"):
        embedding_decomposability_gap(emb, lab, 5)
    with pytest.raises(ValueError, match="labels"):
        embedding_decomposability_gap(emb[:5], torch.tensor([0, 0, 1, 1, 2]), 2)  # class 2: 1 item


# ----------------------------------------------------------------------------- presets / factory
def test_rod_combination_and_presets():
    emb, lab = _data(22, n=12, d=5, n_cls=3)
    sup, dg = SupAP().double(), PairDGLoss().double()
    rod = ROD(sup, dg, lam=0.25)
    assert rod(emb, lab).item() == pytest.approx(
        0.75 * sup(emb, lab).item() + 0.25 * dg(emb, lab).item()
    )
    neur = roadmap_neurips()
    assert neur.weights == (0.5, 0.5) and neur.dg_loss.alpha == 0.9 and neur.dg_loss.beta == 0.6
    assert neur.rank_loss.step.rho == 100.0 and neur.rank_loss.step.tau == 0.01
    tp = roadmap_tpami(n_classes=3, dim=5)
    assert tp.weights == pytest.approx((0.9, 0.1)) and tp.dg_loss.temperature == 0.05
    rr = rod_recall(n_classes=3, dim=5)
    assert (
        rr.rank_loss.ks == (1, 2, 4, 8, 16)
        and rr.rank_loss.tau_star == (1.0,) * 5
        and not rr.rank_loss.clip
    )
    assert len(list(tp.parameters())) == 1  # the proxies
    with pytest.raises(ValueError, match="n_classes"):
        roadmap_tpami()
    with pytest.raises(ValueError, match="lam"):
        ROD(sup, dg, lam=1.5)


def test_build_loss_names_every_loss_and_preset():
    needs = {"proxy_dg", "norm_softmax", "proxy_nca_pp", "roadmap_tpami", "rod_recall"}
    names = [
        "smooth_ap",
        "sup_ap",
        "smooth_recall",
        "sup_recall",
        "pair_dg",
        "proxy_dg",
        "norm_softmax",
        "proxy_nca_pp",
        "fast_ap",
        "softbin_ap",
        "blackbox_ap",
        "contrastive",
        "triplet",
        "roadmap_neurips",
        "roadmap_tpami",
        "rod_recall",
    ]  # the names of this module's losses (other modules register more in LOSSES)
    assert set(names) <= set(LOSSES)
    emb, lab = _data(23, n=8, d=4, n_cls=2)
    for name in names:
        loss = build_loss(
            name.upper().replace("_", "-"), **({"n_classes": 2, "dim": 4} if name in needs else {})
        ).double()
        e = emb.clone().requires_grad_()
        out = loss(e, lab)
        out.backward()
        assert out.ndim == 0 and torch.isfinite(out) and e.grad is not None, name
    with pytest.raises(ValueError, match="unknown loss"):
        build_loss("sup_apx")
    with pytest.raises(ValueError, match="bad arguments"):
        build_loss("sup_ap", nonsense=1)


# ----------------------------------------------------------------------------- plain training loop
def test_short_training_run_improves_map_at_r():
    from rank_lab.data import make_open_set

    sp = make_open_set(n_classes=80, per_class=10, dim=8, input_dim=32, noise=0.5, seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster on a shared 2-core machine
    try:
        _train_and_check(sp)
    finally:
        torch.set_num_threads(threads)


def _train_and_check(sp):
    from rank_lab.data import MPerClassSampler
    from rank_lab.memory import CrossBatchMemory, MemoryLoss
    from rank_lab.metrics import retrieval_metrics

    for use_memory in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)
        )

        def evaluate(net: torch.nn.Module) -> float:
            with torch.no_grad():
                return retrieval_metrics(net(sp.x_test), sp.y_test, metrics=("mAP@R",), ks=(1,))[
                    "mAP@R"
                ]

        before = evaluate(model)
        loss_fn = SupAP()
        if use_memory:
            loss_fn = MemoryLoss(loss_fn, CrossBatchMemory(96, 16))
        opt = torch.optim.Adam(model.parameters(), 3e-3)
        sampler = MPerClassSampler(sp.y_train, m=4, batch_size=32, seed=0)
        for epoch in range(6):
            sampler.set_epoch(epoch)
            for idx in sampler:
                loss = loss_fn(model(sp.x_train[idx]), sp.y_train[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        assert evaluate(model) > before + 0.03, use_memory


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sup_ap_b256_against_the_sop_train_set_fits_one_gpu():
    torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator(device="cuda").manual_seed(0)
    emb = torch.randn(256, 512, device="cuda", generator=gen, requires_grad=True)
    lab = torch.arange(256, device="cuda") // 4
    ref = torch.randn(59_551, 512, device="cuda", generator=gen)
    ref_lab = torch.randint(0, 11_318, (59_551,), device="cuda", generator=gen)
    ref_lab[:256] = lab
    loss = SupAP()(emb, lab, ref, ref_lab)
    loss.backward()
    assert torch.isfinite(loss) and torch.cuda.max_memory_allocated() < 8 * 2**30


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_references_are_checked_by_every_loss_of_the_common_call():
    from rank_lab.losses import NormSoftmaxLoss, SmoothAP

    emb, lab = torch.randn(6, 4), torch.arange(6) % 3
    bad_ref = torch.randn(8, 4)
    bad_ref[0, 0] = float("nan")
    # a proxy loss ignores the references, but checks them
    for loss in (SmoothAP(), NormSoftmaxLoss(3, 4)):
        with pytest.raises(ValueError, match="ref_embeddings contains 1 NaN"):
            loss(emb, lab, bad_ref, torch.arange(8) % 3)
        with pytest.raises(ValueError, match="ref_labels has 7 rows"):
            loss(emb, lab, torch.randn(8, 4), torch.arange(7) % 3)
    # no query shares a label with the references
    with pytest.raises(ValueError, match="ref_labels"):
        SmoothAP()(emb, lab, torch.randn(8, 4), torch.arange(8) + 100)


def test_public_kernels_validate_their_inputs():
    from rank_lab.losses.base import per_query_mean, reduce_per_query
    from rank_lab.losses.blackbox import blackbox_rank
    from rank_lab.losses.histogram import triangular_histogram
    from rank_lab.losses.recall import recall_surrogate_from_ranks

    values, keep = torch.tensor([0.5, float("nan"), 0.2]), torch.tensor([True, False, True])
    # a dropped query may hold anything
    assert float(reduce_per_query(values, keep, "mean")) == pytest.approx(0.35)
    with pytest.raises(ValueError, match="values contains 1 NaN"):
        reduce_per_query(values, torch.tensor([True, True, True]), "mean")
    with pytest.raises(TypeError, match="keep must be a bool tensor"):
        reduce_per_query(values, torch.tensor([1, 0, 1]), "mean")
    with pytest.raises(ValueError, match=r"q_idx must lie in \[0, 2\)"):
        per_query_mean(torch.ones(3), torch.tensor([0, 1, 2]), 2)  # was an index error
    with pytest.raises(ValueError, match="scores contains 1 NaN"):
        blackbox_rank(torch.tensor([[0.1, float("nan")]]))  # NaN was ranked silently
    with pytest.raises(ValueError, match="width must be > 0"):
        # was a 0/0
        triangular_histogram(torch.rand(2, 3), torch.ones(2, 3), torch.linspace(0, 1, 3), 0.0)
    with pytest.raises(TypeError, match="ks must be a positive int"):
        # was int(1.5) = 1
        recall_surrogate_from_ranks(torch.ones(2), torch.tensor([0, 1]), 2, ks=(1.5,))
    s = torch.tensor([[0.3, 0.1, 0.2]])
    # the autograd Function behind blackbox_rank stays importable for .apply (it is not in __all__)
    assert torch.equal(BlackBoxRank.apply(s, 4.0), blackbox_rank(s)) and torch.equal(
        blackbox_rank(s), normalised_rank(s)
    )
