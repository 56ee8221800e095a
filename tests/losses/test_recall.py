"""Tests of RS@k / Smooth-R@k (rank_lab.losses.recall.SmoothRecallAtK and the score-level functions
of rank_lab.losses.recall_at_k), Eqs. 5.1-5.7 of the Patel thesis, and of the former names."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.losses.recall import DEFAULT_KS, SmoothRecallAtK
from rank_lab.losses.recall_at_k import recall_at_k_surrogate, smooth_positive_ranks


def sig(u: float) -> float:
    return 1.0 / (1.0 + math.exp(-u))


# ---------------------------------------------------------------- brute force (independent) ---
def brute_rs_at_k(
    emb,
    labels,
    ks,
    tau1s,
    tau2,
    include_query=False,
    normalization="min",
    ref=None,
    ref_labels=None,
):
    """Triple loop over queries q, positives x, database items z, straight from Eq. 5.5."""
    emb = F.normalize(emb, dim=1)
    if ref is None:
        db, db_lab, self_in_db = emb, labels, True
    else:
        db, db_lab, self_in_db = F.normalize(ref, dim=1), ref_labels, False
    losses = []
    for q in range(emb.shape[0]):
        items = [j for j in range(db.shape[0]) if not (self_in_db and j == q)]
        pos = [j for j in items if db_lab[j] == labels[q]]
        s = {j: emb[q] @ db[j] for j in items}
        s_self = emb[q] @ emb[q]
        lq = 0.0
        for k, t1 in zip(ks, tau1s, strict=True):
            num = 0.0
            for x in pos:
                r = 1.0
                for z in items:
                    if z != x:
                        r = r + torch.sigmoid((s[z] - s[x]) / tau2)
                if include_query:
                    r = r + torch.sigmoid((s_self - s[x]) / tau2)
                num = num + torch.sigmoid((k - r) / t1)
            if normalization == "min":
                rec = torch.clamp(num, max=k) / min(k, len(pos))
            else:
                rec = num / len(pos)
            lq = lq + (1 - rec)
        losses.append(lq / len(ks))
    return torch.stack(losses).mean()


def batch(n_classes=4, m=4, d=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n_classes).repeat_interleave(m)
    emb = (
        torch.randn(n_classes * m, d, generator=g, dtype=dtype)
        + 0.8 * torch.randn(n_classes, d, generator=g, dtype=dtype)[labels]
    )
    return emb, labels


# ------------------------------------------------------------------------ hand-worked values ---
def test_hand_worked_three_items():
    # one query; database: a negative at 0.9, positives at 0.8 and 0.1. With tau2 -> 0 the ranks
    # are exactly 2 and 3: L^1 = 1 - (s(-1) + s(-2)) / min(1, 2),  L^2 = 1 - min(2, s(0) + s(-1)) /
    # 2
    scores = torch.tensor([[0.9, 0.8, 0.1]], dtype=torch.float64)
    pos = torch.tensor([[False, True, True]])
    l1 = recall_at_k_surrogate(scores, pos, ks=(1,), tau=1e-4)
    l2 = recall_at_k_surrogate(scores, pos, ks=(2,), tau=1e-4)
    l12 = recall_at_k_surrogate(scores, pos, ks=(1, 2), tau=1e-4)
    assert float(l1) == pytest.approx(1 - (0.2689414214 + 0.1192029220), abs=1e-9)
    assert float(l2) == pytest.approx(1 - (0.5 + 0.2689414214) / 2, abs=1e-9)
    assert float(l12) == pytest.approx((float(l1) + float(l2)) / 2, abs=1e-12)
    # plain Eq. 5.5 normaliser |P| = 2 for k = 1
    l1p = recall_at_k_surrogate(scores, pos, ks=(1,), tau=1e-4, normalization="positives")
    assert float(l1p) == pytest.approx(1 - (0.2689414214 + 0.1192029220) / 2, abs=1e-9)


def test_hand_worked_soft_ranks():
    # tau2 = 0.1: every term of the smooth rank written out
    scores = torch.tensor([[0.9, 0.8, 0.1]], dtype=torch.float64)
    pos = torch.tensor([[False, True, True]])
    r_a = 1 + sig((0.9 - 0.8) / 0.1) + sig((0.1 - 0.8) / 0.1)
    r_b = 1 + sig((0.9 - 0.1) / 0.1) + sig((0.8 - 0.1) / 0.1)
    ranks, valid, idx = smooth_positive_ranks(scores, pos, tau=0.1)
    assert idx.tolist() == [[1, 2]] and valid.all()
    assert ranks[0].tolist() == pytest.approx([r_a, r_b], abs=1e-12)
    tau1 = 0.5
    expect = 1 - min(3, sig((3 - r_a) / tau1) + sig((3 - r_b) / tau1)) / min(3, 2)
    got = recall_at_k_surrogate(scores, pos, ks=(3,), tau_star=tau1, tau=0.1)
    assert float(got) == pytest.approx(expect, abs=1e-12)


def test_fig_5_1_row4_low_temperature():
    # Fig. 5.1 row 4: positives at 0.880 (rank 2) and 0.820 (rank 5) and one of the top three
    # (0.940 here); recall@4 = 2/3 and recall@8 = 1. tau -> 0 gives recall with rank-k counted 1/2.
    sims = torch.tensor(
        [[0.940, 0.880, 0.870, 0.850, 0.820, 0.800, 0.775, 0.570, 0.430, 0.320]],
        dtype=torch.float64,
    )
    pos = torch.zeros_like(sims, dtype=torch.bool)
    pos[0, [0, 1, 4]] = True
    l4 = recall_at_k_surrogate(
        sims, pos, ks=(4,), tau_star=1e-3, tau=1e-4, normalization="positives"
    )
    l8 = recall_at_k_surrogate(
        sims, pos, ks=(8,), tau_star=1e-3, tau=1e-4, normalization="positives"
    )
    assert 1 - float(l4) == pytest.approx(2 / 3, abs=1e-6)
    assert 1 - float(l8) == pytest.approx(1.0, abs=1e-6)


# ------------------------------------------------------------- agreement with the brute force ---
@pytest.mark.parametrize("include_query", [False, True])
@pytest.mark.parametrize("normalization", ["min", "positives"])
def test_module_matches_brute_force(include_query, normalization):
    emb, labels = batch(n_classes=3, m=4, d=6, seed=1)
    ks, tau1 = (1, 2, 4, 8), (1.0, 2.0, 0.5, 1.0)
    loss = SmoothRecallAtK(
        ks=ks,
        tau_star=tau1,
        tau=0.05,
        query_role="competitor" if include_query else "excluded",
        normalization=normalization,
    )
    expect = brute_rs_at_k(emb, labels, ks, tau1, 0.05, include_query, normalization)
    assert float(loss(emb, labels)) == pytest.approx(float(expect), abs=1e-12)


def test_uneven_classes_and_ref_set_match_brute_force():
    g = torch.Generator().manual_seed(3)
    emb = torch.randn(7, 5, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    ref = torch.randn(11, 5, generator=g, dtype=torch.float64)
    ref_labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 3])
    for inc in (False, True):
        loss = SmoothRecallAtK(ks=(1, 3), tau=0.1, query_role="competitor" if inc else "excluded")
        assert float(loss(emb, labels)) == pytest.approx(
            float(brute_rs_at_k(emb, labels, (1, 3), (1.0, 1.0), 0.1, inc)), abs=1e-12
        )
        got = loss(emb, labels, ref, ref_labels)
        expect = brute_rs_at_k(
            emb, labels, (1, 3), (1.0, 1.0), 0.1, inc, ref=ref, ref_labels=ref_labels
        )
        assert float(got) == pytest.approx(float(expect), abs=1e-12)


@pytest.mark.parametrize("role", ["excluded", "competitor", "positive"])
def test_efficient_equals_direct_and_the_score_call(role):
    emb, labels = batch(n_classes=4, m=3, d=6, seed=11)
    e1, e2 = emb.clone().requires_grad_(True), emb.clone().requires_grad_(True)
    fast = SmoothRecallAtK(ks=(1, 2, 4), tau=0.05, query_role=role)(e1, labels)
    direct = SmoothRecallAtK(ks=(1, 2, 4), tau=0.05, query_role=role, impl="direct")(e2, labels)
    assert fast.item() == pytest.approx(direct.item(), abs=1e-12)
    fast.backward()
    direct.backward()
    torch.testing.assert_close(e1.grad, e2.grad, atol=1e-12, rtol=0)
    # the score-level call of the common base class, and the score-level function
    s = torch.tensor([[0.9, 0.8, 0.1]], dtype=torch.float64)
    t = torch.tensor([[0, 1, 1]])
    ours = SmoothRecallAtK(ks=(1, 2, 4), tau=0.05)
    assert float(ours.forward_scores(s, t)) == pytest.approx(
        float(recall_at_k_surrogate(s, t.bool(), ks=(1, 2, 4), tau=0.05)), abs=1e-14
    )


def test_memory_call_with_self_index_and_reduction_none():
    # refs = the batch itself given as a memory with each query's slot: same as the in-batch call
    emb, labels = batch(n_classes=3, m=4, d=5, seed=12)
    for inc in (False, True):
        loss = SmoothRecallAtK(ks=(1, 2), tau=0.05, query_role="competitor" if inc else "excluded")
        slots = torch.arange(emb.shape[0])
        got = loss(emb, labels, emb, labels, ref_self_index=slots)
        assert float(got) == pytest.approx(float(loss(emb, labels)), abs=1e-12)
    per_q = SmoothRecallAtK(reduction="none")(emb, labels)
    assert per_q.shape == (12,) and float(per_q.mean()) == pytest.approx(
        float(SmoothRecallAtK()(emb, labels)), abs=1e-12
    )


def test_query_as_competitor_adds_the_self_term_to_every_rank():
    emb, labels = batch(seed=2)
    e = F.normalize(emb, dim=1)
    module_t = SmoothRecallAtK(query_role="competitor")
    module_f = SmoothRecallAtK(query_role="excluded")
    s_t, p_t, d_t = module_t.similarity_problem(emb, labels)
    s_f, p_f, d_f = module_f.similarity_problem(emb, labels)
    r_t, _, idx = smooth_positive_ranks(s_t, p_t, d_t, tau=0.01)
    r_f, _, _ = smooth_positive_ranks(s_f, p_f, d_f, tau=0.01)
    s_qq = (e * e).sum(1)[:, None]
    extra = torch.sigmoid((s_qq - (e @ e.T).gather(1, idx)) / 0.01)
    torch.testing.assert_close(r_t, r_f + extra, atol=1e-12, rtol=0)
    assert float((r_t - r_f).mean()) == pytest.approx(1.0, abs=0.05)  # ~ +1, as the digest says


# ------------------------------------------------------------------ limits and properties ---
def exact_recall(scores, pos, k):
    """Eq. 5.1 with ranks from Eq. 5.2 (no ties in the data), a positive at rank exactly k
    counting 1/2 as sigma(0) does in the limit."""
    out = []
    for q in range(scores.shape[0]):
        ranks = [
            1 + int((scores[q] > scores[q, x]).sum())
            for x in torch.nonzero(pos[q]).flatten().tolist()
        ]
        out.append(sum(1.0 if r < k else 0.5 if r == k else 0.0 for r in ranks) / len(ranks))
    return torch.tensor(out, dtype=torch.float64)


def test_low_temperature_limit_is_recall_at_k():
    g = torch.Generator().manual_seed(5)
    scores = torch.rand(6, 30, generator=g, dtype=torch.float64)
    pos = torch.rand(6, 30, generator=g) < 0.3
    pos[:, 0] = True
    for k in (1, 2, 5, 10):
        got = 1 - recall_at_k_surrogate(
            scores, pos, ks=(k,), tau_star=1e-4, tau=1e-6, normalization="positives"
        )
        torch.testing.assert_close(got, exact_recall(scores, pos, k), atol=1e-6, rtol=0)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_classes=st.integers(2, 4),
    m=st.integers(2, 4),
    tau_star=st.floats(0.1, 10.0),
    normalization=st.sampled_from(["min", "positives"]),
)
def test_bounds_and_permutation_invariance(seed, n_classes, m, tau_star, normalization):
    emb, labels = batch(n_classes=n_classes, m=m, d=4, seed=seed)
    loss = SmoothRecallAtK(ks=(1, 2, 4), tau_star=tau_star, tau=0.05, normalization=normalization)
    value = float(loss(emb, labels))
    assert 0.0 <= value <= 1.0
    perm = torch.randperm(emb.shape[0], generator=torch.Generator().manual_seed(seed))
    assert float(loss(emb[perm], labels[perm])) == pytest.approx(value, abs=1e-12)


def test_clip_keeps_the_loss_non_negative():
    # with a hot tau1 and many positives the smooth count exceeds k = 1: the clip makes L^1 = 0
    scores = torch.tensor(
        [[0.5, 0.49, 0.48, 0.47, 0.46, 0.0]], dtype=torch.float64, requires_grad=True
    )
    pos = torch.tensor([[True, True, True, True, True, False]])
    loss = recall_at_k_surrogate(scores, pos, ks=(1,), tau_star=10.0, tau=0.01)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-12)
    ranks, valid, _ = smooth_positive_ranks(scores.detach(), pos, tau=0.01)
    assert float(torch.sigmoid((1 - ranks) / 10.0).sum()) > 1.0  # the count really exceeds k
    loss.sum().backward()
    # clipped: no gradient, as torch.minimum in the code
    assert float(scores.grad.abs().max()) == 0.0


def test_better_ranking_gives_lower_loss():
    # moving a positive above the negatives lowers the loss (Fig. 5.1, row 1 -> row 4)
    sims = torch.tensor(
        [[0.94, 0.87, 0.85, 0.80, 0.775, 0.65, 0.57, 0.43, 0.40, 0.32]], dtype=torch.float64
    )
    pos = torch.zeros_like(sims, dtype=torch.bool)
    pos[0, [0, 5, 8]] = True
    before = recall_at_k_surrogate(sims, pos, ks=(4, 8))
    sims2 = sims.clone()
    sims2[0, 8] = 0.88
    assert float(recall_at_k_surrogate(sims2, pos, ks=(4, 8))) < float(before)


def test_gradcheck_float64():
    emb, labels = batch(n_classes=3, m=3, d=4, seed=7)
    emb.requires_grad_(True)
    loss = SmoothRecallAtK(ks=(1, 2, 4), tau_star=(1.0, 1.0, 2.0), tau=0.2)
    assert torch.autograd.gradcheck(lambda e: loss(e, labels), (emb,), eps=1e-6, atol=1e-6)
    loss_inc = SmoothRecallAtK(
        ks=(1, 2), tau=0.2, query_role="competitor", normalization="positives"
    )
    assert torch.autograd.gradcheck(lambda e: loss_inc(e, labels), (emb,), eps=1e-6, atol=1e-6)


def test_blocked_equals_unblocked_value_and_gradient():
    emb, labels = batch(n_classes=5, m=4, d=8, seed=8)
    e1 = emb.clone().requires_grad_(True)
    e2 = emb.clone().requires_grad_(True)
    l1 = SmoothRecallAtK()(e1, labels)
    l2 = SmoothRecallAtK(max_elements=7)(e2, labels)  # blocks of a single row
    l1.backward()
    l2.backward()
    assert float(l1.detach()) == pytest.approx(float(l2.detach()), abs=1e-12)
    torch.testing.assert_close(e1.grad, e2.grad, atol=1e-12, rtol=0)


def test_memory_is_quadratic_times_positives_not_cubic():
    # every tensor autograd saves is at most Q x P x N (P = m - 1 positives), never B^3
    n_classes, m = 16, 4
    emb, labels = batch(n_classes=n_classes, m=m, d=8, seed=9, dtype=torch.float32)
    emb.requires_grad_(True)
    b = n_classes * m
    sizes: list[int] = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        SmoothRecallAtK()(emb, labels)
    assert max(sizes) <= b * (m - 1) * b
    assert sum(sizes) < 3 * b * (m - 1) * b < b**3


def test_default_hyper_parameters_are_the_thesis():
    loss = SmoothRecallAtK()
    assert loss.ks == DEFAULT_KS == (1, 2, 4, 8, 16)
    assert loss.tau_star == (1.0,) * 5 and loss.tau == 0.01
    assert loss.query_role == "excluded" and loss.normalization == "min" and loss.clip is True


# ---------------------------------------------------------------------------- bad input ---
def test_errors():
    emb, labels = batch()
    loss = SmoothRecallAtK()
    with pytest.raises(ValueError, match="labels"):
        loss(emb, labels[:-1])
    bad = emb.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        loss(bad, labels)
    lone = labels.clone()
    lone[0] = 99
    with pytest.raises(ValueError, match="no positive"):
        SmoothRecallAtK(no_positive="raise")(emb, lone)
    assert torch.isfinite(loss(emb, lone))  # default "skip": the lone query is left out of the mean
    with pytest.raises(ValueError, match="no query has a positive"):
        loss(emb, torch.arange(emb.shape[0]))
    with pytest.raises(ValueError, match="query_role must be one of"):
        SmoothRecallAtK(query_role="bogus")
    with pytest.raises(ValueError, match="cannot be combined with simix"):
        SmoothRecallAtK(query_role="positive", simix=True)
    with pytest.raises(ValueError, match="tau"):
        SmoothRecallAtK(tau=0)
    with pytest.raises(ValueError, match="tau_star"):
        SmoothRecallAtK(ks=(1, 2), tau_star=(1.0,))
    with pytest.raises(TypeError, match="ks"):
        SmoothRecallAtK(ks=(1.5,))
    with pytest.raises(ValueError, match="SiMix"):
        SmoothRecallAtK(simix=True)(emb, labels, emb, labels)
    with pytest.raises(ValueError, match="together"):
        loss(emb, labels, emb)
    with pytest.raises(ValueError, match="database"):
        recall_at_k_surrogate(
            torch.rand(2, 3),
            torch.ones(2, 3, dtype=torch.bool),
            torch.zeros(2, 3, dtype=torch.bool),
        )


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_surrogate_options_are_checked():
    s, p = (
        torch.randn(2, 5),
        torch.tensor([[True, False, True, False, False], [False, True, True, False, False]]),
    )
    with pytest.raises(ValueError, match=r"no_positive must be one of \('raise', 'zero'\)"):
        # was accepted while every query has a positive
        recall_at_k_surrogate(s, p, ks=(1,), no_positive="bogus")
