"""Tests of multistage back-propagation (rank_lab.train.multistage), Section 5.3.2 of the Patel
thesis."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rank_lab.losses import SmoothRecallAtK
from rank_lab.models.backbones import lock_batchnorm
from rank_lab.models.recall_head import RecallEmbedder, RecallHead
from rank_lab.train.multistage import (
    embed_in_chunks,
    fit_multistage,
    multistage_backward,
    multistage_step,
)


def small_cnn(dropout: float = 0.0) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Conv2d(4, 6, 3, padding=1),
    )


def data(b=24, n_classes=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, 1, 6, 6, generator=g, dtype=dtype)
    y = torch.arange(n_classes).repeat_interleave(b // n_classes)
    return x, y


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gradient_equals_single_pass_float64():
    torch.manual_seed(0)
    model = RecallEmbedder(small_cnn(), in_dim=6, embed_dim=5).double()
    model.train()  # BN is locked in eval mode by RecallEmbedder, as in the thesis
    x, y = data()
    loss_fn = SmoothRecallAtK(ks=(1, 2, 4), tau=0.05)

    model.zero_grad()
    ref = loss_fn(model(x), y)
    ref.backward()
    g_ref = grads(model)

    model.zero_grad()
    out = multistage_backward(model, x, y, loss_fn, chunk_size=5)
    g_ms = grads(model)
    assert float(out.loss) == pytest.approx(float(ref.detach()), abs=1e-12)
    assert g_ref.keys() == g_ms.keys() and len(g_ref) > 0
    assert "backbone.1.weight" not in g_ms  # BN affine frozen
    for name in g_ref:
        torch.testing.assert_close(g_ms[name], g_ref[name], atol=1e-10, rtol=0)


def test_chunk_size_does_not_matter_and_grads_accumulate():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 16), nn.Tanh(), nn.Linear(16, 8)).double()
    x, y = data(seed=1)
    loss_fn = SmoothRecallAtK(tau=0.1)
    results = []
    for chunk in (1, 7, 24, 100):
        model.zero_grad()
        multistage_backward(model, x, y, loss_fn, chunk_size=chunk)
        results.append(grads(model))
    for r in results[1:]:
        for name in r:
            torch.testing.assert_close(r[name], results[0][name], atol=1e-10, rtol=0)
    # a second call without zero_grad accumulates (like .backward())
    multistage_backward(model, x, y, loss_fn, chunk_size=7)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, 2 * results[-1][name], atol=1e-10, rtol=0)


def test_dropout_rng_replay_matches_chunked_graph_and_leaves_rng_in_place():
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(36, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 8)
    ).double()
    model.train()
    x, y = data(seed=2)
    loss_fn = SmoothRecallAtK(tau=0.1)
    chunk = 8

    # reference: the same chunked forward kept in one graph, same RNG stream
    torch.manual_seed(123)
    model.zero_grad()
    emb = torch.cat([model(x[i : i + chunk]) for i in range(0, x.shape[0], chunk)])
    loss = loss_fn(emb, y)
    loss.backward()
    g_ref = grads(model)
    after_ref = torch.rand(3)

    torch.manual_seed(123)
    model.zero_grad()
    out = multistage_backward(
        model, x, y, loss_fn, chunk_size=chunk, check_consistency=True, atol=1e-12
    )
    after_ms = torch.rand(3)
    assert float(out.loss) == pytest.approx(float(loss.detach()), abs=1e-12)
    for name in g_ref:
        torch.testing.assert_close(grads(model)[name], g_ref[name], atol=1e-10, rtol=0)
    torch.testing.assert_close(after_ms, after_ref)  # the RNG advanced exactly as one forward

    # without replaying the RNG the second forward draws other masks: detected
    with pytest.raises(RuntimeError, match="differs"):
        multistage_backward(
            model, x, y, loss_fn, chunk_size=chunk, restore_rng=False, check_consistency=True
        )


def test_training_mode_batchnorm_updates_running_stats_once():
    torch.manual_seed(3)
    model = nn.Sequential(small_cnn(), nn.AdaptiveAvgPool2d(1), nn.Flatten()).double()
    model.train()
    x, y = data(seed=3)
    loss_fn = SmoothRecallAtK(tau=0.1)
    bn = model[0][1]
    twin = nn.Sequential(small_cnn(), nn.AdaptiveAvgPool2d(1), nn.Flatten()).double()
    twin.load_state_dict(model.state_dict())
    twin.train()
    with torch.no_grad():
        for i in range(0, 24, 6):
            twin(x[i : i + 6])  # one update per chunk, as a single chunked pass would do
    multistage_backward(model, x, y, loss_fn, chunk_size=6, check_consistency=True, atol=1e-12)
    torch.testing.assert_close(bn.running_mean, twin[0][1].running_mean)
    assert int(bn.num_batches_tracked) == 4


def test_lock_batchnorm_survives_train_and_loss_parameters_get_gradients():
    model = small_cnn()
    lock_batchnorm(model, freeze_affine=False)
    model.train()
    bn = model[1]
    before = bn.running_mean.clone()
    model(torch.randn(4, 1, 6, 6))
    assert torch.equal(bn.running_mean, before) and bn.weight.requires_grad

    # a loss with its own parameter: its gradient is the single-pass one
    torch.manual_seed(4)
    net = nn.Sequential(nn.Flatten(), nn.Linear(36, 8)).double()
    proj = nn.Linear(8, 8, bias=False).double()
    x, y = data(seed=4)
    rs = SmoothRecallAtK(tau=0.1)

    def loss_fn(e, lab):
        return rs(proj(e), lab)

    loss_fn(net(x), y).backward()
    g_ref = proj.weight.grad.clone()
    proj.zero_grad()
    net.zero_grad()
    multistage_backward(net, x, y, loss_fn, chunk_size=5)
    torch.testing.assert_close(proj.weight.grad, g_ref, atol=1e-10, rtol=0)


def test_first_pass_has_no_graph_and_chunks_are_bounded():
    seen: list[tuple[int, bool]] = []

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(36, 8).double()

        def forward(self, x):
            seen.append((x.shape[0], torch.is_grad_enabled()))
            return F.normalize(self.lin(x.flatten(1)), dim=1)

    x, y = data(b=30, seed=5)
    multistage_backward(Spy(), x, y, SmoothRecallAtK(tau=0.1), chunk_size=8)
    assert [s for s, _ in seen] == [8, 8, 8, 6] * 2
    assert [g for _, g in seen] == [False] * 4 + [True] * 4


def test_large_cpu_batch_step_and_embed_in_chunks():
    # a batch of 1,000 through a small network + recall head in chunks of 100 on the CPU
    torch.manual_seed(6)
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU())
    model = nn.Sequential(backbone, RecallHead(32, 16))
    y = torch.arange(250).repeat_interleave(4)
    x = torch.randn(250, 1, 8, 8)[y] + 0.05 * torch.randn(1000, 1, 8, 8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = SmoothRecallAtK()
    before = [p.detach().clone() for p in model.parameters()]
    value = multistage_step(model, opt, x, y, loss_fn, chunk_size=100)
    assert 0.0 < value < 1.0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    e = embed_in_chunks(model, x, chunk_size=128)
    assert e.shape == (1000, 16) and not e.requires_grad
    torch.testing.assert_close(e.norm(dim=1), torch.ones(1000), atol=1e-5, rtol=0)


def test_errors():
    model = nn.Linear(4, 2)
    with pytest.raises(ValueError, match="labels"):
        multistage_backward(
            model, torch.randn(6, 4), torch.zeros(5, dtype=torch.long), lambda e, y: e.sum()
        )
    with pytest.raises(ValueError, match="non-empty"):
        multistage_backward(
            model, torch.randn(0, 4), torch.zeros(0, dtype=torch.long), lambda e, y: e.sum()
        )
    with pytest.raises(ValueError, match="scalar"):
        multistage_backward(
            model, torch.randn(6, 4), torch.zeros(6, dtype=torch.long), lambda e, y: e
        )
    with pytest.raises(ValueError, match="chunk_size"):
        multistage_backward(
            model,
            torch.randn(6, 4),
            torch.zeros(6, dtype=torch.long),
            lambda e, y: e.sum(),
            chunk_size=0,
        )
    with pytest.raises(TypeError, match="inputs"):
        multistage_backward(model, [1, 2], torch.zeros(2, dtype=torch.long), lambda e, y: e.sum())


def test_recall_head_shapes_and_whitening():
    head = RecallHead(6, 4).double()
    assert head(torch.randn(3, 6, 5, 5, dtype=torch.float64)).shape == (3, 4)
    out = head(torch.randn(3, 6, dtype=torch.float64))
    torch.testing.assert_close(out.norm(dim=1), torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="channels"):
        head(torch.randn(3, 5))
    with pytest.raises(ValueError, match="shape"):
        head(torch.randn(3, 6, 2))
    feats = torch.randn(200, 6, dtype=torch.float64) @ torch.randn(6, 6, dtype=torch.float64)
    w = RecallHead(6, 4, layer_norm=False).double()
    w.init_whitening(feats)
    z = w.fc(feats)
    torch.testing.assert_close(z.mean(0), torch.zeros(4, dtype=torch.float64), atol=1e-8, rtol=0)
    torch.testing.assert_close(torch.cov(z.T), torch.eye(4, dtype=torch.float64), atol=1e-4, rtol=0)


def test_fit_multistage_trains():
    torch.manual_seed(7)
    y = torch.arange(20).repeat_interleave(6)
    x = torch.randn(20, 16)[y] + 0.3 * torch.randn(120, 16)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    hist = fit_multistage(
        model, SmoothRecallAtK(ks=(1, 2, 4)), x, y, batch_size=40, steps=30, chunk_size=16, lr=1e-2
    )
    assert len(hist) == 30 and sum(hist[-5:]) / 5 < sum(hist[:5]) / 5
