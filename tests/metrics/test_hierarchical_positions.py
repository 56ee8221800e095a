"""rank_lab.metrics.engine.formulas.levels: the metrics from the sorted positives on a hand-worked
query (Ramzi thesis ch. 4), against the per-query functions of rank_lab.metrics.hierarchy.metrics on
the explicit row.

The formulas at scale are tested through the route (test_hierarchical_route.py,
test_counting_route.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from rank_lab.metrics.engine.formulas.positions import LevelPositions
from rank_lab.metrics.engine.formulas.registry import get_metric, list_metrics
from rank_lab.metrics.hierarchy.metrics import average_set_intersection

# one query, L = 2; the ranked row (scores 5 > 4 > 3 > 2 > 1) has levels 2, 0, 1, 1, 0:
# positives A (level 2, position 1), B and C (level 1, positions 3 and 4); two negatives.
LV = torch.tensor([[2, 1, 1]])
GE = torch.tensor([[0, 1, 1]])  # negatives ranked before each positive
VALS = torch.tensor([[5.0, 3.0, 2.0]], dtype=torch.float64)
COUNTS = torch.tensor([[2, 2, 1]])  # |Omega^(0)|, |Omega^(1)|, |Omega^(2)|
KS = [1, 3]


def _both() -> tuple[dict[str, torch.Tensor], ...]:
    valid = torch.ones_like(LV, dtype=torch.bool)
    p = LevelPositions(LV, valid, GE, VALS, COUNTS, 2, 1.0)
    out: dict[str, torch.Tensor] = {}
    for name in list_metrics(family="hierarchical"):
        out.update(get_metric(name).compute(p, tuple(KS)))
    return (out,)


def test_hand_worked_query_in_both_forms() -> None:
    """Eq. 4.7: rel(A) = (2/2) / 1 = 1, rel(B) = rel(C) = (1/2) / 2 = 1/4, sum 3/2.

    H-rank (Eq. 4.2): A 1, B 1/4 + 1/4, C 3/4; H-AP (Eq. 4.3) = (1/1 + (1/2)/3 + (3/4)/4) / (3/2)
    = (1 + 1/6 + 3/16) / (3/2) = 65/72.
    """
    for out in _both():
        assert float(out["H-AP"]) == pytest.approx(65 / 72, abs=1e-15)
        assert float(out["AP@level2"]) == 1.0  # the fine AP: A first
        assert float(out["AP@level1"]) == pytest.approx((1 + 2 / 3 + 3 / 4) / 3, abs=1e-15)
        dcg = 3.0 + 1 / math.log2(4) + 1 / math.log2(5)  # gains 2^l - 1 at positions 1, 3, 4
        idcg = 3.0 + 1 / math.log2(3) + 1 / math.log2(4)
        assert float(out["NDCG-h"]) == pytest.approx(dcg / idcg, abs=1e-15)
        assert float(out["H-R@1"]) == pytest.approx(2 / 3, abs=1e-15)
        assert float(out["H-R@3"]) == pytest.approx(5 / 6, abs=1e-15)
        # top 3 = A, a negative (height L = 2), B (height L - 1 = 1)
        assert (float(out["MS_sum@1"]), float(out["MS_n@1"])) == (0.0, 0.0)
        assert (float(out["MS_sum@3"]), float(out["MS_n@3"])) == (3.0, 2.0)
        row = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0]], dtype=torch.float64)
        levels = torch.tensor([[2, 0, 1, 1, 0]])
        assert float(out["ASI"]) == pytest.approx(
            float(average_set_intersection(row, levels, 2)), abs=1e-15
        )
