"""rank_lab.metrics.engine.scores.exact: the canonical score's fixed pairwise tree on hand-worked
float32 sums and the tree depth.

The canonical score against an independent pairwise tree, its batching invariance and the
``exact_matmul`` guard are tested with the certified search in test_certified.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from rank_lab.metrics.engine.scores.exact import canonical_scores, tree_depth


@pytest.mark.parametrize(("d", "h"), [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (512, 9), (513, 10)])
def test_tree_depth_is_the_ceiling_of_log2(d: int, h: int) -> None:
    assert tree_depth(d) == h


def test_canonical_score_follows_the_fixed_tree_on_hand_worked_sums() -> None:
    """d = 3, zero-padded to D = 4; a = 2^-24 is half an ulp of 1 in float32.

    g = (1, a, a): products (1, a, a, 0) -> (1 + a, a + 0) = (1, a) (ties to even) -> 1 + a = 1.
    g = (a, 1, a): products (a, 1, a, 0) -> (a + a, 1 + 0) = (2a, 1) -> 1 + 2^-23, exactly.
    The real inner product is 1 + 2^-23 in both cases: the tree fixes which rounding happens.
    """
    a = 2.0**-24
    q = torch.ones(1, 3)
    g = torch.tensor([[1.0, a, a], [a, 1.0, a]])
    s = canonical_scores(q, g, torch.tensor([0, 0]), torch.tensor([0, 1]))
    assert s.dtype == torch.float32
    assert s.tolist() == [1.0, 1.0 + 2.0**-23]
    u = 2.0**-24
    gamma = 3 * u / (1 - 3 * u)  # gamma_{h+1}, h = 2
    bound = gamma * math.sqrt(3) * float(g[0].double().norm())
    assert abs(float(s[0]) - (1.0 + 2.0**-23)) <= bound
