"""Tests of the chapter-6 losses (rank_lab.losses.contrastive), Eqs. 6.1-6.17 of the Patel
thesis."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.losses.contrastive import cross_entropy_loss, spce_logits, spce_loss, tightness_loss
from rank_lab.losses.esupcon import ESupConLoss, esupcon_loss, esupcon_terms, smooth_max_ce_supcon
from rank_lab.losses.supcon import SimCLRLoss, SupConLoss, nt_xent_loss, supcon_loss
from rank_lab.models.heads import PrototypeClassifier, class_means


def feats(m=8, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(m, d, generator=g, dtype=torch.float64), dim=1)


# ------------------------------------------------------------------------- naive references ---
def naive_supcon_anchor(z, labels, i, tau, extra=()):
    """Eq. 6.5 for one anchor by loops; ``extra`` = additional (vector, is_positive) pool items."""
    den = sum(math.exp(float(z[i] @ z[j]) / tau) for j in range(len(z)) if j != i)
    den += sum(math.exp(float(z[i] @ v) / tau) for v, _ in extra)
    pos = [float(z[i] @ z[p]) for p in range(len(z)) if p != i and labels[p] == labels[i]]
    pos += [float(z[i] @ v) for v, is_pos in extra if is_pos]
    return sum(-s / tau + math.log(den) for s in pos) / len(pos)


def test_supcon_matches_loops_and_reduces_to_simclr():
    z = feats(8, 5)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0])
    tau = 0.5
    expect = sum(naive_supcon_anchor(z, labels, i, tau) for i in range(8)) / 8
    assert float(supcon_loss(z, labels, tau)) == pytest.approx(expect, abs=1e-12)
    # SimCLR: the positive of view i is view i + N (Eq. 6.2 by hand)
    n = 4
    loops = []
    for i in range(2 * n):
        j = (i + n) % (2 * n)
        den = sum(math.exp(float(z[i] @ z[k]) / tau) for k in range(2 * n) if k != i)
        loops.append(-math.log(math.exp(float(z[i] @ z[j]) / tau) / den))
    assert float(nt_xent_loss(z, tau)) == pytest.approx(sum(loops) / (2 * n), abs=1e-12)
    assert float(SimCLRLoss(tau)(z)) == pytest.approx(
        float(supcon_loss(z, torch.arange(n).repeat(2), tau)), abs=1e-14
    )
    # the public-code scaling tau / base_tau
    assert float(SupConLoss(tau, base_temperature=0.07)(z, labels)) == pytest.approx(
        expect * tau / 0.07, abs=1e-10
    )


def test_cross_entropy_and_cosine_variant():
    z = feats(6, 4, seed=1) * 3
    w = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    loops = []
    for i in range(6):
        logits = [float(w[k] @ z[i]) for k in range(3)]
        loops.append(-logits[labels[i]] + math.log(sum(math.exp(v) for v in logits)))
    assert float(cross_entropy_loss(z, labels, w)) == pytest.approx(sum(loops) / 6, abs=1e-12)
    zn, wn = F.normalize(z, dim=1), F.normalize(w, dim=1)
    got = cross_entropy_loss(z, labels, w, normalize=True, temperature=0.2)
    assert float(got) == pytest.approx(float(F.cross_entropy(zn @ wn.T / 0.2, labels)), abs=1e-12)


def test_spce_matches_loops_including_absent_classes():
    z = feats(6, 3, seed=3)
    labels = torch.tensor([0, 0, 1, 1, 1, 3])  # class 2 absent, K = 5 (class 4 absent too)
    k, n = 5, 6
    loops = []
    for i in range(n):
        logit = [sum(float(z[j] @ z[i]) for j in range(n) if labels[j] == c) / n for c in range(k)]
        loops.append(-logit[labels[i]] + math.log(sum(math.exp(v) for v in logit)))
    assert float(spce_loss(z, labels, k)) == pytest.approx(sum(loops) / n, abs=1e-12)


def test_tightness_gradient_eq_6_10_and_momentum_mean_eq_6_11():
    z = feats(7, 4, seed=4)
    labels = torch.tensor([0, 1, 1, 0, 2, 2, 2])
    theta = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    tightness_loss(z, labels, theta, normalize=False).backward()
    for k in range(3):
        torch.testing.assert_close(theta.grad[k], -z[labels == k].sum(0) / 7, atol=1e-14, rtol=0)
    # Eq. 6.11: SGD on l_tt with fixed features adds eta/N sum_{i: y_i = k} z_i at every step, so
    # theta_k drifts along the class mean c_k (a class mean with momentum)
    theta0 = torch.randn(3, 4, dtype=torch.float64)
    theta2 = theta0.clone().requires_grad_(True)
    opt = torch.optim.SGD([theta2], lr=0.5)
    for _ in range(1000):
        opt.zero_grad()
        tightness_loss(z, labels, theta2, normalize=False).backward()
        opt.step()
    sums = torch.stack([z[labels == k].sum(0) for k in range(3)])
    torch.testing.assert_close(theta2.detach(), theta0 + 1000 * 0.5 / 7 * sums, atol=1e-9, rtol=0)
    cos = F.cosine_similarity(theta2.detach(), class_means(z, labels, 3), dim=1)
    assert bool((cos > 0.99).all())
    # detach_features: no gradient into the features
    zz = z.clone().requires_grad_(True)
    tightness_loss(zz, labels, theta2, detach_features=True).backward()
    assert zz.grad is None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), tau=st.floats(0.2, 2.0), m=st.integers(3, 9))
def test_esupcon_identity_eq_6_17(seed, tau, m):
    g = torch.Generator().manual_seed(seed)
    z = F.normalize(torch.randn(m, 4, generator=g, dtype=torch.float64), dim=1)
    theta = torch.randn(3, 4, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 3, (m,), generator=g)
    l_pt = esupcon_terms(z, labels, theta, tau)["l_pt"]
    # independent paths: CE over prototypes, and SupCon of the pair (z_i, theta_{y_i}) with the
    # prototype added to the pool of samples (Eq. 6.16)
    l_ce = cross_entropy_loss(z, labels, theta, normalize=True, temperature=tau, reduction="none")
    tn = F.normalize(theta, dim=1)
    for i in range(m):
        t_i = float(z[i] @ tn[labels[i]]) / tau
        c2 = sum(math.exp(float(z[i] @ z[j]) / tau) for j in range(m) if j != i)
        l_sc = -t_i + math.log(c2 + math.exp(t_i))
        lhs = float(l_pt[i])
        assert lhs == pytest.approx(
            math.log(math.exp(float(l_ce[i])) + math.exp(l_sc) - 1), rel=1e-10, abs=1e-10
        )
        assert lhs == pytest.approx(
            float(smooth_max_ce_supcon(l_ce[i], torch.tensor(l_sc, dtype=torch.float64))), rel=1e-10
        )
        assert lhs >= max(float(l_ce[i]), l_sc) - 1e-12  # a smooth max: above both
    # l_pt = 0 iff both 0
    assert float(smooth_max_ce_supcon(torch.tensor(0.0), torch.tensor(0.0))) == 0.0


def naive_esupcon(z, labels, theta, tau, all_den=False):
    tn = F.normalize(theta, dim=1)
    m, k = len(z), len(theta)
    total = 0.0
    for c in range(k):
        members = [i for i in range(m) if labels[i] == c]
        if not members:
            continue
        acc = 0.0
        for i in members:
            den = sum(math.exp(float(z[i] @ tn[q]) / tau) for q in range(k))
            den += sum(math.exp(float(z[i] @ z[j]) / tau) for j in range(m) if j != i)
            acc += -float(z[i] @ tn[c]) / tau + math.log(den)
        total += acc / len(members)
    for i in range(m):
        if sum(1 for p in range(m) if p != i and labels[p] == labels[i]) == 0:
            continue
        extra = [(tn[q], False) for q in range(k)] if all_den else []
        total += naive_supcon_anchor(z, labels, i, tau, extra)
    return total / (m + k)


@pytest.mark.parametrize("all_den", [False, True])
def test_esupcon_matches_loops(all_den):
    z = feats(9, 4, seed=5)
    # class 2 has no sample positive; class 4 absent
    labels = torch.tensor([0, 0, 1, 1, 1, 3, 3, 0, 2])
    theta = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    got = esupcon_loss(z, labels, theta, 0.5, prototypes_in_all_denominators=all_den)
    assert float(got) == pytest.approx(naive_esupcon(z, labels, theta, 0.5, all_den), abs=1e-12)


def test_esupcon_module_prototypes_learn_and_posterior():
    torch.manual_seed(0)
    z = feats(12, 6, seed=7).requires_grad_(True)
    labels = torch.arange(3).repeat(4)
    loss_mod = ESupConLoss(n_classes=3, dim=6, temperature=0.2)
    loss = loss_mod(z, labels)
    loss.backward()
    assert (
        loss_mod.classifier.prototypes.grad is not None
        and float(loss_mod.classifier.prototypes.grad.abs().sum()) > 0
    )
    p = loss_mod.predict_proba(z.detach())
    torch.testing.assert_close(p.sum(1), torch.ones(12, dtype=p.dtype))
    clf = PrototypeClassifier(n_classes=3, dim=6)
    clf.set_to_class_means(z.detach(), labels)
    torch.testing.assert_close(clf.prototypes.data, class_means(z.detach(), labels, 3).float())


def test_gradcheck_chapter_6_losses():
    g = torch.Generator().manual_seed(8)
    z = torch.randn(8, 4, generator=g, dtype=torch.float64, requires_grad=True)
    theta = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])
    checks = [
        lambda a, b: supcon_loss(a, labels, 0.5),
        lambda a, b: nt_xent_loss(a, 0.5),
        lambda a, b: spce_loss(a, labels, 4),
        lambda a, b: cross_entropy_loss(a, labels, b, normalize=True, temperature=0.5),
        lambda a, b: tightness_loss(a, labels, b),
        lambda a, b: esupcon_loss(a, labels, b, 0.5),
        lambda a, b: esupcon_loss(a, labels, b, 0.5, prototypes_in_all_denominators=True),
    ]
    for fn in checks:
        assert torch.autograd.gradcheck(fn, (z, theta), eps=1e-6, atol=1e-6)


def test_errors():
    z = feats(4, 3)
    with pytest.raises(ValueError, match="positive"):
        supcon_loss(z, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="2N"):
        nt_xent_loss(z[:3])
    with pytest.raises(ValueError, match="temperature"):
        supcon_loss(z, torch.tensor([0, 0, 1, 1]), temperature=0)
    with pytest.raises(ValueError, match="labels"):
        cross_entropy_loss(z, torch.tensor([0, 1, 5, 0]), torch.randn(3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="d="):
        esupcon_loss(z, torch.tensor([0, 0, 1, 1]), torch.randn(2, 5))
    with pytest.raises(ValueError, match="NaN"):
        supcon_loss(torch.full((4, 3), float("nan")), torch.tensor([0, 0, 1, 1]))


# ------------------------------------------------------------------ bad inputs (issue 16)
def test_bad_inputs_name_the_argument():
    z, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 5])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        class_means(z, y, 3)  # was one_hot's RuntimeError
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        spce_logits(z, y, 3)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        tightness_loss(z, y, torch.randn(3, 4))  # was an IndexError
    with pytest.raises(ValueError, match="prototypes contains 1 NaN"):
        # was a NaN loss
        esupcon_loss(
            z, y % 3, torch.tensor([[float("nan"), 0, 0, 0], [1.0, 0, 0, 0], [0, 1.0, 0, 0]])
        )
    with pytest.raises(ValueError, match="reduction must be one of"):
        supcon_loss(z, y % 3, reduction="bogus")  # was silently "mean"
    with pytest.raises(ValueError, match="l_ce must be >= 0"):
        # was log of a negative number: NaN
        smooth_max_ce_supcon(torch.tensor([-2.0]), torch.tensor([-2.0]))


# ------------------------------------------------------------------ the common 4-argument call
# (issue 17)
def naive_supcon_refs(q, labels, ref, ref_labels, tau, self_slot=None):
    """Eq. 6.5 per anchor with the positives and the denominator taken from a reference set
    (loops)."""
    out = []
    for i in range(len(q)):
        pool = [j for j in range(len(ref)) if self_slot is None or j != self_slot[i]]
        pos = [j for j in pool if ref_labels[j] == labels[i]]
        if not pos:
            continue
        den = sum(math.exp(float(q[i] @ ref[j]) / tau) for j in pool)
        out.append(sum(-float(q[i] @ ref[p]) / tau + math.log(den) for p in pos) / len(pos))
    return sum(out) / len(out)


def test_supcon_module_takes_a_reference_set_like_every_loss():
    q, ref = feats(6, 5, seed=20), feats(10, 5, seed=21)
    labels, ref_labels = (
        torch.tensor([0, 1, 2, 0, 1, 3]),
        torch.tensor([0, 0, 1, 1, 2, 2, 0, 1, 3, 4]),
    )
    loss = SupConLoss(0.5)
    assert float(loss(q, labels, ref, ref_labels)) == pytest.approx(
        naive_supcon_refs(q, labels, ref, ref_labels, 0.5), abs=1e-12
    )
    # the batch given as its own reference set, each anchor's slot removed: the in-batch call
    z, y = feats(8, 5), torch.tensor([0, 0, 1, 1, 1, 2, 2, 0])
    slots = torch.arange(8)
    assert float(loss(z, y, z, y, ref_self_index=slots)) == pytest.approx(
        float(supcon_loss(z, y, 0.5)), abs=1e-12
    )
    assert float(loss(z, y)) == pytest.approx(float(supcon_loss(z, y, 0.5)), abs=1e-14)
    assert float(
        loss.forward_scores(z @ z.T, y[:, None] == y[None, :], ~torch.eye(8, dtype=torch.bool))
    ) == pytest.approx(float(supcon_loss(z, y, 0.5)), abs=1e-12)
    with pytest.raises(ValueError, match="ref_labels"):
        loss(q, labels, ref, ref_labels + 100)  # no anchor has a positive among the refs


def test_esupcon_module_takes_a_reference_set_like_every_loss():
    torch.manual_seed(0)
    loss = ESupConLoss(n_classes=4, dim=5, temperature=0.5).double()
    theta = loss.classifier.prototypes.detach()
    z, y = feats(8, 5, seed=22), torch.tensor([0, 0, 1, 1, 1, 2, 2, 0])
    expect = float(esupcon_loss(z, y, theta, 0.5))
    assert loss(z, y).item() == pytest.approx(expect, abs=1e-14)
    assert float(loss(z, y, z, y, ref_self_index=torch.arange(8))) == pytest.approx(
        expect, abs=1e-12
    )
    # against a memory that does not hold the anchors: Eq. 6.15 with the pool = the refs (loops)
    ref, ref_y = feats(7, 5, seed=23), torch.tensor([0, 1, 2, 3, 0, 1, 1])
    tn = F.normalize(theta, dim=1)
    total = 0.0
    for c in range(4):
        members = [i for i in range(8) if y[i] == c]
        if members:
            acc = 0.0
            for i in members:
                den = sum(math.exp(float(z[i] @ tn[k]) / 0.5) for k in range(4))
                den += sum(math.exp(float(z[i] @ ref[j]) / 0.5) for j in range(7))
                acc += -float(z[i] @ tn[c]) / 0.5 + math.log(den)
            total += acc / len(members)
    for i in range(8):
        pos = [j for j in range(7) if ref_y[j] == y[i]]
        den = sum(math.exp(float(z[i] @ ref[j]) / 0.5) for j in range(7))
        total += sum(-float(z[i] @ ref[p]) / 0.5 + math.log(den) for p in pos) / len(pos)
    assert float(loss(z, y, ref, ref_y)) == pytest.approx(total / (8 + 4), abs=1e-12)
    with pytest.raises(ValueError, match=r"\(n_classes, dim\), in this order"):
        ESupConLoss(5, 4)(z, y)  # the old (dim, n_classes) order


@pytest.mark.parametrize(
    "make",
    [lambda: SupConLoss(0.2), lambda: ESupConLoss(n_classes=3, dim=6, temperature=0.2)],
    ids=["supcon", "esupcon"],
)
def test_contrastive_losses_work_behind_a_cross_batch_memory(make):
    from rank_lab.memory import CrossBatchMemory, MemoryLoss

    torch.manual_seed(0)
    wrapped = MemoryLoss(make(), CrossBatchMemory(24, 6))
    y = torch.arange(3).repeat(4)
    for _ in range(3):
        z = torch.randn(12, 6, requires_grad=True)
        value = wrapped(z, y)
        value.backward()
        assert value.ndim == 0 and torch.isfinite(value) and torch.isfinite(z.grad).all()
    assert len(wrapped.memory) == 24
