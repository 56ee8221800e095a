"""The compiled row sums of the hierarchical formulas (rank_lab.metrics.engine.formulas._sums) give
the same bits as their torch forms (the GPU's), on adversarial positions: padding, rows without
positives, rows of one level, all-high rows, negatives before every positive, positions far beyond
the width, tied keys across levels (the non-monotone H-AP re-sort), one to four levels."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rank_lab.metrics.engine.formulas.positions as P
from rank_lab.metrics.engine.formulas.positions import LevelPositions
from rank_lab.metrics.engine.formulas.registry import get_metric

HIER = ("H-AP", "ASI", "NDCG-h", "AP@level", "H-R@k", "MS@k")


def _positions(seed: int, c: int, width: int, n_levels: int, alpha: float) -> LevelPositions:
    """Random positions with the route's invariants: each row's positives (lv > 0) first, sorted by
    key desc then level asc, negatives before each non-decreasing; counts from the levels plus
    level-0 items."""
    g = torch.Generator().manual_seed(seed)
    lv = torch.zeros(c, width, dtype=torch.long)
    ge = torch.zeros(c, width, dtype=torch.long)
    keys = torch.full((c, width), -torch.inf, dtype=torch.float64)
    counts = torch.zeros(c, n_levels + 1, dtype=torch.long)
    for r in range(c):
        mode = r % 6
        n = (
            0
            if mode == 0
            else (width if mode == 1 else int(torch.randint(1, width + 1, (1,), generator=g)))
        )
        if mode == 2:  # one level only
            levels = torch.full((n,), int(torch.randint(1, n_levels + 1, (1,), generator=g)))
        elif mode == 3:  # all of the finest level
            levels = torch.full((n,), n_levels)
        else:
            levels = torch.randint(1, n_levels + 1, (n,), generator=g)
        # few distinct keys: ties within and across levels
        k = torch.randint(0, 1 + n // 3, (n,), generator=g).double()
        order = sorted(range(n), key=lambda i: (-float(k[i]), int(levels[i])))
        lv[r, :n] = levels[order]
        keys[r, :n] = k[order]
        if mode == 4:  # many negatives before everything
            gaps = torch.randint(0, 50, (n,), generator=g)
        else:
            gaps = (torch.rand(n, generator=g) < 0.3).long() * torch.randint(
                0, 4, (n,), generator=g
            )
        ge[r, :n] = torch.cumsum(gaps, 0)
        for lev in range(1, n_levels + 1):
            counts[r, lev] = int((lv[r, :n] == lev).sum())
        counts[r, 0] = int(ge[r, n - 1]) + int(torch.randint(0, 5, (1,), generator=g)) if n else 7
    return LevelPositions(lv, lv > 0, ge, keys, counts, n_levels, alpha)


def _values(p: LevelPositions, ks: tuple[int, ...], kernels: bool, monkeypatch) -> dict:
    monkeypatch.setattr(P, "USE_KERNELS", kernels)
    fresh = LevelPositions(p.lv, p.valid, p.ge, p.keys, p.counts, p.n_levels, p.alpha)
    out = {}
    for name in HIER:
        out.update(get_metric(name).compute(fresh, ks))
    out["s_all"], out["high"] = fresh.s_all, torch.cat(fresh.high[:3], 1).double()
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("n_levels", [1, 2, 3, 4])
@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_compiled_sums_equal_the_torch_forms(n_levels, alpha, monkeypatch):
    for seed, (c, width) in enumerate(((1, 1), (7, 5), (30, 40), (12, 130))):
        p = _positions(seed + 10 * n_levels, c, width, n_levels, alpha)
        ks = (1, 3, width + 5)
        want = _values(p, ks, False, monkeypatch)
        got = _values(p, ks, True, monkeypatch)
        assert got.keys() == want.keys()
        for name, v in want.items():
            assert torch.equal(got[name], v), (n_levels, alpha, seed, name)


def test_compiled_sums_of_a_block_without_positives(monkeypatch):
    lv = torch.zeros(3, 0, dtype=torch.long)
    p = LevelPositions(lv, lv > 0, lv.clone(), lv.double(), torch.tensor([[5, 0, 0]] * 3), 2, 1.0)
    want = _values(p, (1,), False, monkeypatch)
    got = _values(p, (1,), True, monkeypatch)
    for name, v in want.items():
        assert torch.equal(got[name], v), name


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    c=st.integers(1, 6),
    width=st.integers(1, 70),
    n_levels=st.integers(1, 3),
)
def test_compiled_sums_property(seed, c, width, n_levels):
    p = _positions(seed, c, width, n_levels, 1.0)
    with pytest.MonkeyPatch.context() as mp:
        want = _values(p, (2, 9), False, mp)
        got = _values(p, (2, 9), True, mp)
    for name, v in want.items():
        assert torch.equal(got[name], v), name
