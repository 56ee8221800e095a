"""Tests of rank_lab.memory: the XBM cross-batch memory (FIFO, enqueue-then-read, activation,
weights)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rank_lab.losses import ContrastiveLoss, NormSoftmaxLoss, SupAP, roadmap_tpami
from rank_lab.memory import CrossBatchMemory, MemoryLoss


def _batch(seed, b=8, d=4, n_cls=2, offset=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=gen, dtype=torch.float64), torch.arange(b) % n_cls + offset


def test_fifo_order_wraparound_and_slots():
    mem = CrossBatchMemory(size=5, dim=2, dtype=torch.float64)
    assert len(mem) == 0 and not mem.is_full
    rows = lambda v: torch.tensor([[float(x), 0.0] for x in v], dtype=torch.float64)  # noqa: E731
    assert mem.enqueue(rows([1, 2, 3]), torch.tensor([1, 2, 3])).tolist() == [0, 1, 2]
    # 6 overwrites 1
    assert mem.enqueue(rows([4, 5, 6]), torch.tensor([4, 5, 6])).tolist() == [3, 4, 0]
    emb, lab, slot_to_row = mem.get()
    assert mem.is_full and sorted(lab.tolist()) == [2, 3, 4, 5, 6]
    assert emb[slot_to_row[0], 0].item() == 6.0
    # a batch larger than the memory keeps its last `size` items; the others get slot -1
    slots = mem.enqueue(rows(range(10, 17)), torch.arange(10, 17))
    assert slots[:2].tolist() == [-1, -1] and sorted(mem.get()[1].tolist()) == [12, 13, 14, 15, 16]
    mem.reset()
    assert len(mem) == 0


def test_unique_mode_one_slot_per_item_and_state_dict_round_trip():
    mem = CrossBatchMemory(size=6, dim=2, unique=True)
    mem.enqueue(torch.ones(3, 2), torch.tensor([0, 1, 2]), keys=torch.tensor([4, 0, 2]))
    mem.enqueue(2 * torch.ones(2, 2), torch.tensor([7, 8]), keys=torch.tensor([4, 5]))
    emb, lab, slot_to_row = mem.get()
    assert (
        len(mem) == 4 and lab[slot_to_row[4]].item() == 7 and emb[slot_to_row[4], 0].item() == 2.0
    )
    other = CrossBatchMemory(size=6, dim=2, unique=True)
    other.load_state_dict(mem.state_dict())
    assert torch.equal(other.get()[0], emb) and len(other) == 4
    with pytest.raises(ValueError, match="keys"):
        mem.enqueue(torch.ones(1, 2), torch.tensor([0]))
    with pytest.raises(ValueError, match="keys"):
        mem.enqueue(torch.ones(1, 2), torch.tensor([0]), keys=torch.tensor([6]))


def test_enqueue_validates_inputs_and_detaches():
    mem = CrossBatchMemory(size=4, dim=3, n_levels=2)
    e = torch.randn(2, 3, requires_grad=True)
    mem.enqueue(e, torch.tensor([[0, 1], [1, 1]]))
    assert not mem.get()[0].requires_grad
    with pytest.raises(ValueError, match="dimension"):
        mem.enqueue(torch.randn(2, 5), torch.tensor([[0, 1], [1, 1]]))
    with pytest.raises(ValueError, match="n_levels"):
        mem.enqueue(torch.randn(2, 3), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="embeddings"):
        mem.enqueue(torch.full((2, 3), float("nan")), torch.tensor([[0, 1], [1, 1]]))


def test_enqueue_then_read_first_step_equals_in_batch_loss():
    # after the first enqueue the memory holds exactly the (normalised, detached) batch; the query's
    # own copy is excluded through ref_self_index, so the memory loss equals the in-batch loss
    emb, lab = _batch(0)
    for loss in (SupAP(), ContrastiveLoss()):
        mem = CrossBatchMemory(size=32, dim=4, dtype=torch.float64)
        wrapped = MemoryLoss(loss, mem, batch_weight=0.0, memory_weight=1.0)
        assert wrapped(emb, lab).item() == pytest.approx(loss(emb, lab).item(), abs=1e-12)


def test_memory_loss_value_is_weighted_sum_and_gradient_reaches_only_the_batch():
    mem = CrossBatchMemory(size=20, dim=4, dtype=torch.float64)
    loss = SupAP()
    wrapped = MemoryLoss(loss, mem)  # (batch + memory) / 2, official ROADMAP code
    old_e, old_l = _batch(1)
    wrapped(old_e, old_l)
    emb, lab = _batch(2)
    emb.requires_grad_()
    out = wrapped(emb, lab)
    # manual: enqueue then read; the new batch sits in slots 8..15
    ref = torch.cat([F.normalize(old_e, dim=1), F.normalize(emb.detach(), dim=1)])
    ref_lab = torch.cat([old_l, lab])
    want = 0.5 * loss(emb, lab) + 0.5 * loss(
        emb, lab, ref, ref_lab, ref_self_index=torch.arange(8, 16)
    )
    assert out.item() == pytest.approx(want.item(), abs=1e-12)
    out.backward()
    assert emb.grad is not None and not mem.embeddings.requires_grad


def test_activation_after_epochs_and_eval_mode():
    mem = CrossBatchMemory(size=16, dim=4, dtype=torch.float64)
    loss = SupAP()
    wrapped = MemoryLoss(loss, mem, activate_after=2)
    emb, lab = _batch(3)
    wrapped.set_epoch(1)
    assert not wrapped.active
    assert wrapped(emb, lab).item() == pytest.approx(loss(emb, lab).item()) and len(mem) == 0
    wrapped.set_epoch(2)
    wrapped(emb, lab)
    assert wrapped.active and len(mem) == 8
    wrapped.eval()
    wrapped(emb, lab)
    assert len(mem) == 8  # nothing enqueued in eval mode


def test_proxy_loss_never_uses_the_memory_and_rod_matches_official_weighting():
    emb, lab = _batch(4)
    ns = NormSoftmaxLoss(2, 4).double()
    mem = CrossBatchMemory(size=16, dim=4, dtype=torch.float64)
    wrapped = MemoryLoss(ns, mem)
    assert not wrapped.active and wrapped(emb, lab).item() == pytest.approx(ns(emb, lab).item())
    assert len(mem) == 0
    # ROD in a memory: (1 - lam) (SupAP_b + SupAP_m) / 2 + lam * proxy(batch)
    rod = roadmap_tpami(n_classes=2, dim=4, lam=0.1).double()
    mem2 = CrossBatchMemory(size=16, dim=4, dtype=torch.float64)
    out = MemoryLoss(rod, mem2)(emb, lab)
    sup = rod.rank_loss
    en = F.normalize(emb, dim=1)
    want = 0.9 * 0.5 * (
        sup(emb, lab) + sup(emb, lab, en, lab, ref_self_index=torch.arange(8))
    ) + 0.1 * rod.dg_loss(emb, lab)
    assert out.item() == pytest.approx(want.item(), abs=1e-12)


def test_memory_provides_positives_missing_from_the_batch():
    # a batch of distinct classes has no in-batch positive; the memory (filled by an earlier batch
    # of the same classes) makes the rank loss defined
    mem = CrossBatchMemory(size=16, dim=4, dtype=torch.float64)
    loss = SupAP()
    wrapped = MemoryLoss(loss, mem, batch_weight=0.0, memory_weight=1.0)
    e1, _ = _batch(5, b=4)
    lab = torch.arange(4)
    with pytest.raises(ValueError, match="no query has a positive"):
        wrapped(e1, lab)  # first step: the memory holds only the queries themselves (excluded)
    e2, _ = _batch(6, b=4)
    out = wrapped(e2, lab)
    assert torch.isfinite(out) and 0 < out.item() < 1


def test_query_role_positive_keeps_the_own_copy():
    emb, lab = _batch(7)
    mem = CrossBatchMemory(size=16, dim=4, dtype=torch.float64)
    keep = SupAP(query_role="positive")
    out = MemoryLoss(keep, mem, batch_weight=0.0, memory_weight=1.0)(emb, lab)
    assert out.item() == pytest.approx(keep(emb, lab).item(), abs=1e-12)
    with pytest.raises(ValueError, match="batch_weight"):
        MemoryLoss(keep, mem, batch_weight=-1.0)
