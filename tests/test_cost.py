"""The full-mode cost guard: FLOP counts by hand, estimates, and the refusal on a CPU."""

from __future__ import annotations

import pytest
import torch

import rank_lab.cost as cost_mod
from rank_lab.cost import (
    CPU_FLOPS,
    GPU_FLOPS,
    CostEstimate,
    FullRunOnCPUError,
    declared_cost,
    format_duration,
    forward_flops,
    guard_full_run,
    training_cost,
)
from rank_lab.models import TinyCNN

# TinyCNN(1, 16) on 8x8: conv 1->16 and 16->32 at 8x8, then 32->64 at 4x4 (3x3 kernels, 2 FLOPs per
# MAC)
TINY_FLOPS = 2 * 9 * (16 * 1 * 64 + 32 * 16 * 64 + 64 * 32 * 16)


def test_forward_flops_by_hand() -> None:
    assert forward_flops("tiny_cnn", 8, in_channels=1) == TINY_FLOPS
    assert forward_flops("mlp", 8, in_channels=1) == 2 * (64 * 256 + 256 * 256)
    net = TinyCNN(1, 16)
    w = net.features[0].weight.detach().clone()
    assert forward_flops(net, (8, 8), in_channels=1) == TINY_FLOPS
    assert net.features[0].weight.device.type == "cpu" and torch.equal(net.features[0].weight, w)
    r50 = forward_flops("resnet50", 224)  # 4.1 GMACs (timm / torchvision model cards)
    assert 2 * 4.0e9 < r50 < 2 * 4.2e9


def test_forward_flops_at_a_one_pixel_final_map() -> None:
    # ResNet-50 on 32 px CIFAR images ends on a 1 x 1 map: batch norm must count it in eval mode
    # (in training mode it refuses one image there); the count scales with the pixels
    r32 = forward_flops("resnet50", 32)
    assert r32 > 0
    assert abs(r32 / forward_flops("resnet50", 224) - (32 / 224) ** 2) < 0.01
    with pytest.raises(ValueError, match="image_size"):
        forward_flops("tiny_cnn", 0)


def test_training_cost_arithmetic_and_published_sizes() -> None:
    c = training_cost(
        "tiny_cnn",
        8,
        in_channels=1,
        epochs=2,
        train_images=100,
        test_images=50,
        evaluations=3,
        runs=2,
    )
    total = 2 * (3 * 2 * 100 + 3 * 50) * TINY_FLOPS
    assert c.cpu_seconds == pytest.approx(total / CPU_FLOPS) and c.gpu_seconds == pytest.approx(
        total / GPU_FLOPS
    )
    assert "100 training images" in c.description and "tiny_cnn" in c.description
    sop = training_cost("tiny_cnn", 8, in_channels=1, epochs=1, dataset="SOP")
    assert sop.cpu_seconds == pytest.approx((3 * 59_551 + 60_502) * TINY_FLOPS / CPU_FLOPS)
    with pytest.raises(ValueError, match="train_images"):
        training_cost("tiny_cnn", 8, epochs=1, dataset="unknown_set")
    with pytest.raises(ValueError, match="epochs"):
        training_cost("tiny_cnn", 8, epochs=-1, dataset="sop")


def test_format_duration() -> None:
    assert [format_duration(s) for s in (42, 720, 3.5 * 3600, 3 * 86400)] == [
        "42 s",
        "12 min",
        "3.5 h",
        "3.0 days",
    ]
    assert format_duration(float("inf")) == "forever"


def test_smoke_and_short_full_runs_pass(capsys: pytest.CaptureFixture[str]) -> None:
    c = declared_cost(600, "toy sweeps")
    assert guard_full_run(True, "cpu", c) == {"mode": "smoke", "device": "cpu", **c.as_dict()}
    rec = guard_full_run(False, "cpu", c)
    assert rec["mode"] == "full" and rec["allowed_on_cpu"] is True
    assert "roughly 10 min (toy sweeps)" in capsys.readouterr().out


def test_long_full_run_on_cpu_stops_with_the_estimate_and_the_ways_on() -> None:
    c = training_cost("resnet50", 224, epochs=100, dataset="sop")
    assert c.cpu_seconds > 10 * 86400
    with pytest.raises(FullRunOnCPUError) as info:
        guard_full_run(False, "cpu", c)
    msg = str(info.value)
    assert format_duration(c.cpu_seconds) in msg and format_duration(c.gpu_seconds) in msg
    assert "GPU" in msg and "smoke=True" in msg and "allow_cpu_full=True" in msg and "59,551" in msg
    assert guard_full_run(False, "cpu", c, allow_cpu_full=True)["allowed_on_cpu"] is True
    with pytest.raises(FullRunOnCPUError):
        guard_full_run(False, "cpu", declared_cost(61, "x"), budget_s=60)
    with pytest.raises(TypeError, match="CostEstimate"):
        guard_full_run(False, "cpu", 5.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cpu_seconds"):
        declared_cost(-1, "x")


def test_on_a_gpu_the_run_goes_ahead(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cost_mod, "get_device", lambda d: torch.device("cuda"))
    c = CostEstimate(1e7, 7200.0, "big")
    rec = guard_full_run(False, None, c)
    assert rec["device"] == "cuda" and "allowed_on_cpu" not in rec
    assert "roughly 2.0 h on a GPU" in capsys.readouterr().out


def test_memory_estimate_counts_weights_optimiser_state_and_saved_outputs() -> None:
    """A hand-worked module: 25 parameters, leaf outputs 4 + 5 + 5 per image of 1 x 2 x 2 = 4
    values."""
    from torch import nn

    from rank_lab.cost import memory_estimate

    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 5), nn.ReLU())
    # training: 16 bytes per parameter (weight, gradient, two Adam moments) + 4 bytes per saved
    # value
    assert memory_estimate(net, 2, 3, in_channels=1) == 16 * 25 + 4 * 3 * (4 + 5 + 5 + 4)
    # inference: the weights and two consecutive outputs of the largest layer
    assert memory_estimate(net, 2, 3, in_channels=1, training=False) == 4 * 25 + 8 * 3 * 5
    assert next(net.parameters()).device.type == "cpu"  # measured on a meta copy
    big = memory_estimate("resnet50", 224, 64)
    assert 2 * 2**30 < big < 40 * 2**30  # an order of magnitude: GBs for ResNet-50, batch 64
    assert memory_estimate("resnet50", 224, 128) > big
    with pytest.raises(ValueError, match="batch_size"):
        memory_estimate(net, 2, 0, in_channels=1)
    with pytest.raises(TypeError, match="training"):
        memory_estimate(net, 2, 1, in_channels=1, training="yes")
