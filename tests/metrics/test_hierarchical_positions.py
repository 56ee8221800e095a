"""rank_lab.metrics.hierarchical_positions: the metrics from the sorted positives on a hand-worked
query (Ramzi thesis ch. 4), dense and packed forms, against the per-query functions of
rank_lab.metrics.hierarchical_metrics on the explicit row.

The forms at scale are tested through the route (test_hierarchical_route.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from rank_lab.metrics.hierarchical_metrics import average_set_intersection
from rank_lab.metrics.hierarchical_positions import (
    HIERARCHICAL_METRICS,
    check_ks_wanted,
    sorted_positive_metrics,
    sorted_positive_metrics_packed,
)

# one query, L = 2; the ranked row (scores 5 > 4 > 3 > 2 > 1) has levels 2, 0, 1, 1, 0:
# positives A (level 2, position 1), B and C (level 1, positions 3 and 4); two negatives.
LV = torch.tensor([[2, 1, 1]])
GE = torch.tensor([[0, 1, 1]])  # negatives ranked before each positive
VALS = torch.tensor([[5.0, 3.0, 2.0]], dtype=torch.float64)
COUNTS = torch.tensor([[2, 2, 1]])  # |Omega^(0)|, |Omega^(1)|, |Omega^(2)|
KS = [1, 3]


def _both() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    valid = torch.ones_like(LV, dtype=torch.bool)
    pos = (torch.arange(1, 4) + GE).to(torch.float64)
    wanted = set(HIERARCHICAL_METRICS)
    dense = sorted_positive_metrics(LV, valid, pos, VALS, COUNTS, 2, KS, wanted, 1.0)
    packed = sorted_positive_metrics_packed(LV, valid, GE, VALS, COUNTS, 2, KS, wanted, 1.0)
    return dense, packed


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
        assert float(out["ASI"]) == pytest.approx(float(average_set_intersection(row, levels, 2)), abs=1e-15)


def test_dense_and_packed_forms_agree() -> None:
    dense, packed = _both()
    assert dense.keys() == packed.keys()
    for name, v in dense.items():
        torch.testing.assert_close(packed[name], v, atol=1e-15, rtol=0)


def test_check_ks_wanted_names_the_argument() -> None:
    assert check_ks_wanted((3, 1, 3), {"H-AP"}, 5) == ([1, 3], {"H-AP"})
    with pytest.raises(ValueError, match="larger than the 5 items"):
        check_ks_wanted((6,), {"H-AP"}, 5)
    with pytest.raises(ValueError, match="wanted must be a non-empty set"):
        check_ks_wanted((1,), {"mAP"}, 5)
    with pytest.raises(TypeError, match="ks must be a sequence"):
        check_ks_wanted(1, {"H-AP"}, 5)


def test_the_former_homes_still_import_the_same_objects() -> None:
    """Split from hierarchical_route (formerly hierarchical_engine): listed in one ``__all__`` only."""
    import rank_lab.metrics.engine as engine
    import rank_lab.metrics.hierarchical_counting as counting
    import rank_lab.metrics.hierarchical_engine as oldest
    import rank_lab.metrics.hierarchical_positions as positions
    import rank_lab.metrics.hierarchical_route as former

    for module in (counting, positions):
        for name in module.__all__:
            assert getattr(former, name) is getattr(module, name) is getattr(oldest, name)
            assert name not in former.__all__ and name not in oldest.__all__
    assert engine.HIERARCHICAL_METRICS is HIERARCHICAL_METRICS and "HIERARCHICAL_METRICS" not in engine.__all__
