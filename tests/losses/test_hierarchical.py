"""Hierarchical losses (Ramzi thesis ch. 4): chunked vs direct (values and gradients), the upper
bounds of Sup-H-AP and Sup-NDCG, the L = 1 reduction to SupAP, gradcheck, presets, Σ-losses, CSL
against an independent implementation, and the memory / reference call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.losses import (
    CSLLoss,
    SigmaLoss,
    SmoothHAP,
    SupAP,
    SupHAP,
    SupNDCG,
    build_loss,
    sigma_loss,
)
from rank_lab.losses.hierarchical import weighted_lower_sums
from rank_lab.losses.presets import ROD, happier, happier_f, rod_ndcg
from rank_lab.memory import CrossBatchMemory, MemoryLoss
from rank_lab.metrics.hierarchy.metrics import h_average_precision, hierarchical_ndcg
from rank_lab.metrics.hierarchy.relevance import hap_relevance, shared_level
from rank_lab.ranking import Heaviside

LOSSES = (SupHAP, SmoothHAP, SupNDCG)


def _batch(seed: int, b: int = 20, n_fine: int = 8, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    fine = torch.randint(0, n_fine, (b,), generator=g)
    lab = torch.stack([fine, fine // 2, fine // 4], 1)
    emb = torch.randn(b, 5, generator=g, dtype=dtype)
    return emb, lab


@pytest.mark.parametrize("cls", LOSSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("include_self", [False, True])
def test_chunked_equals_direct_values_and_gradients(cls, include_self):
    emb, lab = _batch(0)
    ref_emb, ref_lab = _batch(1, b=30)
    for args in ((lab,), (lab, ref_emb, ref_lab)):
        e1 = emb.clone().requires_grad_(True)
        e2 = emb.clone().requires_grad_(True)
        a = cls(max_elements=64, query_role="positive" if include_self else "excluded")(e1, *args)
        b = cls(impl="direct", query_role="positive" if include_self else "excluded")(e2, *args)
        a.backward()
        b.backward()
        assert a.item() == pytest.approx(b.item(), abs=1e-12)
        assert torch.allclose(e1.grad, e2.grad, atol=1e-10)


def _explicit(scores, levels):
    keep = (levels > 0).any(1)
    return scores[keep], levels[keep]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.sampled_from([1.0, 3.0]))
def test_upper_bounds_on_tie_free_scores(seed, n_levels, alpha):
    """L_Sup-H-AP >= 1 - H-AP and L_Sup-NDCG >= 1 - NDCG (thesis §4.2.3-4.2.4), per query."""
    g = torch.Generator().manual_seed(seed)
    lv = torch.randint(0, n_levels + 1, (4, 15), generator=g)
    lv[:, 0] = n_levels
    s = torch.rand(4, 15, generator=g, dtype=torch.float64) * 2 - 1  # continuous: no ties
    sup = SupHAP(alpha=alpha, reduction="none").forward_levels(s, lv, n_levels=n_levels)
    exact = 1 - h_average_precision(s, hap_relevance(lv, n_levels, alpha))
    assert bool((sup >= exact - 1e-12).all())
    nd = SupNDCG(reduction="none").forward_levels(s, lv, n_levels=n_levels)
    assert bool((nd >= 1 - hierarchical_ndcg(s, lv) - 1e-12).all())


def test_single_level_reduces_to_sup_ap():
    emb, lab = _batch(2)
    y = lab[:, 0]
    assert float(SupHAP()(emb, y[:, None])) == pytest.approx(float(SupAP()(emb, y)), abs=1e-12)
    ref_emb, ref_lab = _batch(3, b=30)
    a = SupHAP()(emb, y[:, None], ref_emb, ref_lab[:, :1])
    assert float(a) == pytest.approx(float(SupAP()(emb, y, ref_emb, ref_lab[:, 0])), abs=1e-12)
    # (B,) is L = 1
    assert float(SupHAP()(emb, y)) == pytest.approx(float(SupAP()(emb, y)), abs=1e-12)


def test_perfect_separation_gives_small_loss_and_exact_h_rank():
    # scores already sorted by level with margins >> delta: Sup-H-AP is close to 1 - H-AP = 0
    lv = torch.tensor([[3, 3, 2, 2, 1, 0, 0]])
    s = torch.tensor([[0.9, 0.8, 0.6, 0.5, 0.2, -0.5, -0.6]], dtype=torch.float64)
    loss = SupHAP().forward_levels(s, lv, n_levels=3)
    assert 0.0 <= float(loss) < 1e-3
    # the exact H-rank numerator: weighted sum over less relevant positives ranked above
    rel = hap_relevance(lv, 3)
    s_bad = torch.tensor([[0.1, 0.8, 0.6, 0.5, 0.2, -0.5, -0.6]], dtype=torch.float64)
    w = weighted_lower_sums(
        s_bad,
        rel,
        torch.ones_like(lv, dtype=torch.bool),
        torch.tensor([0]),
        torch.tensor([0]),
        Heaviside(),
    )
    assert float(w) == pytest.approx(2 * float(rel[0, 2]) + float(rel[0, 4]))


@pytest.mark.parametrize("cls", LOSSES, ids=lambda c: c.__name__)
def test_gradcheck_float64(cls):
    g = torch.Generator().manual_seed(7)
    lv = torch.tensor([[2, 2, 1, 0, 1, 0], [2, 1, 1, 2, 0, 0]])
    # inside the sigmoid region
    s = (torch.rand(2, 6, generator=g, dtype=torch.float64) * 0.06).requires_grad_(True)
    loss = cls(tau=0.05)
    assert torch.autograd.gradcheck(
        lambda x: loss.forward_levels(x, lv, n_levels=2), (s,), eps=1e-7, atol=1e-5
    )


def test_gradients_push_less_relevant_items_down():
    lv = torch.tensor([[2, 1, 0]])
    # both inversions
    s = torch.tensor([[0.50, 0.55, 0.60]], dtype=torch.float64, requires_grad=True)
    SupHAP().forward_levels(s, lv, n_levels=2).backward()
    assert s.grad[0, 0] < 0 and s.grad[0, 2] > 0  # fine positive up, negative down
    s2 = s.detach().clone().requires_grad_(True)
    SupNDCG().forward_levels(s2, lv, n_levels=2).backward()
    assert s2.grad[0, 0] < 0 and s2.grad[0, 2] > 0


def test_reference_call_equals_explicit_levels_and_memory_wrapper():
    emb, lab = _batch(3, b=12)
    ref_emb, ref_lab = _batch(4, b=25)
    slots = torch.full((12,), -1)
    slots[:3] = torch.tensor([0, 5, 7])
    loss = SupHAP()
    got = loss(emb, lab, ref_emb, ref_lab, ref_self_index=slots)
    e, r = F.normalize(emb, dim=1), F.normalize(ref_emb, dim=1)
    valid = torch.ones(12, 25, dtype=torch.bool)
    valid[torch.arange(3), slots[:3]] = False
    assert float(got) == pytest.approx(
        float(loss.forward_levels(e @ r.T, shared_level(lab, ref_lab), valid, 3)), abs=1e-12
    )
    mem = MemoryLoss(SupHAP(), CrossBatchMemory(40, 5, n_levels=3))
    x = emb.float().requires_grad_(True)
    out = mem(x, lab)
    out.backward()
    assert torch.isfinite(x.grad).all() and len(mem.memory) == 12


def test_presets_and_build_loss():
    h = happier(n_classes=8, dim=5)
    assert (
        isinstance(h, ROD) and h.weights == pytest.approx((0.9, 0.1)) and h.rank_loss.alpha == 1.0
    )
    assert (
        happier_f(8, 5, dataset="sop").rank_loss.alpha == 5.0
        and happier_f(8, 5, dataset="inat_base").rank_loss.alpha == 3.0
    )
    assert isinstance(rod_ndcg(8, 5).rank_loss, SupNDCG)
    emb, lab = _batch(5)
    for name in ("happier", "happier_f", "rod_ndcg"):
        val = build_loss(name, n_classes=8, dim=5)(emb.float(), lab)
        assert torch.isfinite(val)
    for name in ("sup_hap", "smooth_hap", "sup_ndcg"):
        assert torch.isfinite(build_loss(name)(emb, lab))
    with pytest.raises(ValueError, match="n_classes"):
        happier()
    with pytest.raises(ValueError, match="HAPPIER_F"):
        happier_f(8, 5, dataset="cub")
    wap = SupHAP(relevance="weighted_ap", weights=[0.2, 0.3, 0.5])
    assert torch.isfinite(wap(emb, lab))
    with pytest.raises(ValueError, match="weights"):
        SupHAP(relevance="weighted_ap")


def test_sigma_loss_is_the_sum_over_levels():
    emb, lab = _batch(6)
    s = sigma_loss("sup_ap", 3)
    ref = sum(float(SupAP(hierarchy_level=lev)(emb, lab)) for lev in range(3))
    assert float(s(emb, lab)) == pytest.approx(ref, abs=1e-12)
    nsm = sigma_loss("norm_softmax", 3, level_classes=[8, 4, 2], dim=5, weights=[1.0, 0.5, 0.0])
    assert isinstance(nsm, SigmaLoss) and not nsm.uses_references
    assert torch.isfinite(nsm(emb.float(), lab))
    ref_emb, ref_lab = _batch(7, b=30)
    assert torch.isfinite(sigma_loss("triplet", 3, mining="semihard")(emb, lab, ref_emb, ref_lab))
    # dim only reaches proxy losses
    via_name = build_loss("sigma", base="sup_ap", n_levels=3, dim=5)
    assert float(via_name(emb, lab)) == pytest.approx(ref, abs=1e-12)
    with pytest.raises(ValueError, match="level_classes"):
        sigma_loss("norm_softmax", 3, level_classes=[8, 4], dim=5)


def _csl_reference(emb, lab, proxies, table, margins, scale):
    v = F.normalize(emb, dim=1)
    p = F.normalize(proxies, dim=1)
    total = 0.0
    for lev in range(lab.shape[1]):
        per = []
        for i in range(emb.shape[0]):
            pos = float(v[i] @ p[lab[i, 0]])
            negs = [float(v[i] @ p[c]) for c in range(p.shape[0]) if table[c, lev] != lab[i, lev]]
            lse = (
                torch.logsumexp(scale * torch.tensor(negs, dtype=torch.float64), 0)
                if negs
                else torch.tensor(-1e9)
            )
            per.append(float(F.softplus(lse - scale * pos + scale * margins[lev])))
        total += sum(per) / len(per)
    return total


def test_csl_matches_independent_formula_and_learns_paths():
    emb, lab = _batch(8, b=16)
    table = torch.tensor([[c, c // 2, c // 4] for c in range(8)])
    loss = CSLLoss(8, 5, hierarchy=table)
    got = loss(emb.float(), lab).item()
    ref = _csl_reference(
        emb.double(), lab, loss.proxies.detach().double(), table, loss.margins, loss.scale
    )
    assert got == pytest.approx(ref, rel=1e-4)
    lazy = CSLLoss(8, 5, n_levels=3)
    lazy.proxies.data.copy_(loss.proxies.data)
    lazy(emb.float(), lab)  # records the paths it sees
    seen = torch.unique(lab[:, 0])
    assert torch.equal(lazy.proxy_labels[seen], table[seen])
    with pytest.raises(ValueError, match="two label paths"):
        lazy(emb.float()[:2], torch.tensor([[int(seen[0]), 3, 3], [int(seen[0]), 3, 3]]))
    single_root = torch.stack([lab[:, 0], lab[:, 1], torch.zeros_like(lab[:, 0])], 1)
    x = emb.float().requires_grad_(True)
    CSLLoss(8, 5, n_levels=3)(x, single_root).backward()  # no negative at the root level
    assert torch.isfinite(x.grad).all()
    assert torch.isfinite(build_loss("csl", n_classes=8, dim=5, n_levels=3)(emb.float(), lab))


def test_training_steps_improve_h_ap():
    torch.manual_seed(0)
    emb, lab = _batch(9, b=32)
    x = emb.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=0.05)
    lv = shared_level(lab, lab)
    keep = ~torch.eye(32, dtype=torch.bool)
    lv_off = lv[keep].view(32, 31)

    def hap():
        v = F.normalize(x.detach(), dim=1)
        s = (v @ v.T)[keep].view(32, 31)
        return float(h_average_precision(s, hap_relevance(lv_off, 3)).mean())

    before = hap()
    for _ in range(30):
        opt.zero_grad()
        SupHAP()(x, lab).backward()
        opt.step()
    assert hap() > before + 0.1


def test_bad_inputs():
    emb, lab = _batch(10, b=6)
    with pytest.raises(ValueError, match="no query has a relevant item"):
        SupHAP()(emb, torch.stack([torch.arange(6)] * 3, 1) * torch.tensor([1, 100, 10_000]))
    with pytest.raises(TypeError, match="integers"):
        SupHAP().forward_levels(torch.randn(2, 3), torch.ones(2, 3) * 0.5)
    with pytest.raises(ValueError, match="n_levels"):
        SupHAP().forward_levels(torch.randn(2, 3), torch.tensor([[0, 1, 3], [0, 1, 1]]), n_levels=2)
    with pytest.raises(ValueError, match="non-negative"):
        SupHAP().forward_relevance(torch.randn(2, 3), -torch.ones(2, 3))
    with pytest.raises(ValueError, match="alpha"):
        SupHAP(alpha=0.0)
    with pytest.raises(ValueError, match="NaN"):
        SupNDCG()(torch.full((6, 5), float("nan")), lab)
    with pytest.raises(ValueError, match="n_levels"):
        CSLLoss(8, 5)
    with pytest.raises(ValueError, match="levels"):
        CSLLoss(8, 5, n_levels=2)(emb.float(), lab)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():  # pragma: no cover - run on the GPU machine
    emb, lab = _batch(11, b=64)
    for cls in LOSSES:
        e_cpu = emb.clone().requires_grad_(True)
        e_gpu = emb.cuda().requires_grad_(True)
        a, b = cls()(e_cpu, lab), cls()(e_gpu, lab.cuda())
        a.backward()
        b.backward()
        assert a.item() == pytest.approx(b.item(), abs=1e-8)
        assert torch.allclose(e_cpu.grad, e_gpu.grad.cpu(), atol=1e-8)
