"""Global pooling layers: MAC, SPoC, GeM limits, R-MAC regions (Gominski thesis §3.4.1, digest
§2.2)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.models.pooling import MAC, POOLINGS, RMAC, GeM, SPoC, build_pooling, rmac_regions


def _cirtorch_rmac_reference(x: torch.Tensor, L: int = 3, eps: float = 1e-6) -> torch.Tensor:
    """Independent port of cirtorch's ``rmac`` (region loops written out as in the original)."""
    ovr = 0.4
    steps = torch.tensor([2, 3, 4, 5, 6, 7], dtype=torch.float64)
    W, H = x.size(3), x.size(2)
    w = min(W, H)
    b = (max(H, W) - w) / (steps - 1)
    _, idx = torch.min(torch.abs(((w**2 - w * b) / w**2) - ovr), 0)
    Wd = Hd = 0
    if H < W:
        Wd = idx.item() + 1
    elif H > W:
        Hd = idx.item() + 1
    v = F.max_pool2d(x, (x.size(-2), x.size(-1)))
    v = v / (torch.norm(v, p=2, dim=1, keepdim=True) + eps)
    for l in range(1, L + 1):  # noqa: E741
        wl = math.floor(2 * w / (l + 1))
        wl2 = math.floor(wl / 2 - 1)
        bw = 0 if l + Wd == 1 else (W - wl) / (l + Wd - 1)
        cenW = torch.floor(wl2 + torch.arange(l + Wd, dtype=torch.float64) * bw) - wl2
        bh = 0 if l + Hd == 1 else (H - wl) / (l + Hd - 1)
        cenH = torch.floor(wl2 + torch.arange(l + Hd, dtype=torch.float64) * bh) - wl2
        for i_ in cenH.tolist():
            for j_ in cenW.tolist():
                if wl == 0:
                    continue
                R = x[:, :, int(i_) : int(i_) + wl, int(j_) : int(j_) + wl]
                vt = F.max_pool2d(R, (R.size(-2), R.size(-1)))
                v = v + vt / (torch.norm(vt, p=2, dim=1, keepdim=True) + eps)
    return v.flatten(1)


def test_mac_spoc_hand_worked() -> None:
    x = torch.tensor([[[[1.0, 2.0], [3.0, 6.0]], [[0.0, 0.0], [0.0, 4.0]]]])  # (1, 2, 2, 2)
    assert torch.equal(MAC()(x), torch.tensor([[6.0, 4.0]]))
    assert torch.equal(SPoC()(x), torch.tensor([[3.0, 1.0]]))


def test_gem_limits() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 8, 5, 7, generator=g, dtype=torch.float64) + 0.05
    # p = 1 is SPoC (average pooling)
    torch.testing.assert_close(GeM(p=1.0, learnable=False)(x), SPoC()(x))
    # p -> inf tends to MAC: max * (1/HW)^(1/p) <= GeM_p <= max (the digest's "1e-2 at p = 200"
    # only holds for maps with HW < e^2 ~ 7.4 positions; here HW = 35 so the bound is the test)
    mac = MAC()(x)
    for p in (50.0, 200.0, 2000.0):
        gem = GeM(p=p, learnable=False)(x)
        assert bool((gem <= mac * (1 + 1e-12)).all())
        assert bool((gem >= mac * (1 / 35) ** (1 / p) * (1 - 1e-12)).all())
    assert ((GeM(p=2000.0, learnable=False)(x) - mac).abs() / mac).max() < 2e-3
    # p = 3 lies between the mean and the max, channel-wise
    mid = GeM(p=3.0, learnable=False)(x)
    assert bool((mid >= SPoC()(x) - 1e-12).all()) and bool((mid <= MAC()(x) + 1e-12).all())


@settings(max_examples=25, deadline=None)
@given(p1=st.floats(0.5, 8.0), p2=st.floats(0.5, 8.0), seed=st.integers(0, 1000))
def test_gem_monotone_in_p(p1: float, p2: float, seed: int) -> None:
    """The power mean is non-decreasing in p (for positive activations)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 4, 3, 3, generator=g, dtype=torch.float64) + 0.01
    lo, hi = sorted((p1, p2))
    a = GeM(p=lo, learnable=False)(x)
    b = GeM(p=hi, learnable=False)(x)
    assert bool((a <= b + 1e-10).all())


def test_gem_gradient_wrt_p() -> None:
    x = torch.rand(2, 3, 4, 4, dtype=torch.float64) + 0.1
    layer = GeM(p=3.0).double()
    torch.autograd.gradcheck(
        lambda p: x.clamp(min=1e-6).pow(p).mean(dim=(-2, -1)).pow(1 / p),
        (layer.p.detach().clone().requires_grad_(),),
    )
    out = layer(x).sum()
    out.backward()
    assert layer.p.grad is not None and torch.isfinite(layer.p.grad)


def test_mac_shift_invariance() -> None:
    x = torch.zeros(1, 2, 9, 9)
    x[0, :, 2, 3] = torch.tensor([5.0, 1.0])
    y = torch.roll(x, shifts=(4, 3), dims=(2, 3))
    assert torch.equal(MAC()(x), MAC()(y))


def test_rmac_region_count_square() -> None:
    # Tolias et al.: 1 + 4 + 9 = 14 regions for a square map at L = 3
    regions = rmac_regions(10, 10, levels=3)
    assert len(regions) == 14
    assert [r[2] for r in regions].count(10) == 1  # level 1 = the whole map
    sides = sorted({r[2] for r in regions})
    assert sides == [5, 6, 10]  # floor(2w/(l+1)) = 10, 6, 5
    # cirtorch adds the global MAC: for a square map it equals the l = 1 region, 15 summed terms
    x = torch.rand(2, 4, 10, 10)
    global_only = MAC()(x) / (MAC()(x).norm(dim=1, keepdim=True) + 1e-6)
    with_global = RMAC(include_global=True)(x)
    without = RMAC(include_global=False)(x)
    torch.testing.assert_close(with_global - without, global_only)


@pytest.mark.parametrize(
    "hw", [(7, 7), (7, 10), (10, 7), (3, 17), (12, 5), (1, 1), (2, 9), (30, 40)]
)
def test_rmac_regions_inside_map(hw: tuple[int, int]) -> None:
    h, w = hw
    for top, left, side in rmac_regions(h, w):
        assert 0 <= top and top + side <= h
        assert 0 <= left and left + side <= w
        assert side >= 1


def test_rmac_region_count_rectangular() -> None:
    # 7 x 10: w = 7, b = 3/(steps-1); overlap criterion picks steps = 2 -> one extra region per
    # level
    # along the long side: (1x2) + (2x3) + (3x4) = 20 regions
    assert len(rmac_regions(7, 10)) == 20
    assert len(rmac_regions(10, 7)) == 20


@pytest.mark.parametrize("hw", [(7, 7), (7, 10), (11, 6), (16, 23), (5, 5), (4, 13)])
def test_rmac_matches_cirtorch(hw: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(hw[0] * 100 + hw[1])
    x = torch.rand(3, 6, *hw, generator=g, dtype=torch.float64)
    torch.testing.assert_close(RMAC()(x), _cirtorch_rmac_reference(x))


def test_build_pooling_and_errors() -> None:
    assert isinstance(build_pooling("RMAC"), RMAC)
    assert isinstance(build_pooling("gem", p=2.0), GeM)
    assert "rmac" in POOLINGS
    with pytest.raises(ValueError, match="unknown pooling"):
        build_pooling("vlad")
    with pytest.raises(ValueError, match="feature map"):
        RMAC()(torch.rand(3, 4))
    with pytest.raises(ValueError, match="levels"):
        RMAC(levels=0)
    with pytest.raises(ValueError, match="overlap"):
        rmac_regions(5, 5, overlap=1.5)
    with pytest.raises(ValueError, match="p must be"):
        GeM(p=0.0)
