"""Hierarchical codes and the multi-label relevance of Algorithm 1 (Ramzi thesis §4.2.2.2):
hand-worked values and the input checks (split from test_hierarchical_metrics.py)."""

from __future__ import annotations

import pytest
import torch

from rank_lab.metrics.hierarchy.codes import (
    lca_distance,
    multilabel_relevance,
    multilabel_relevance_matrix,
    parse_code,
)
from rank_lab.metrics.hierarchy.metrics import h_average_precision


def test_multilabel_relevance_algorithm_1():
    assert (
        lca_distance("1.1.1", "1.1.1") == 0
        and lca_distance("1.1.1", "1.1.2") == 1
        and lca_distance("1.1.1", "1.2.1") == 2
    )
    # query {1.1.1, 2.1.1}, item {1.1.2, 3.1.1}: label 1 earns L - 1 = 2, label 2 earns 0 -> 2 /
    # (2 * 3)
    assert multilabel_relevance(["1.1.1", "2.1.1"], ["1.1.2", "3.1.1"], 3) == pytest.approx(1 / 3)
    assert multilabel_relevance(
        ["1.1.1", "2.1.1"], ["2.1.1", "1.1.1", "4.4.4"], 3
    ) == pytest.approx(1.0)
    assert multilabel_relevance([(1, 1, 1)], [(2, 1, 1)], 3) == 0.0
    m = multilabel_relevance_matrix([["1.1.1"], ["2.1.1"]], [["1.1.1"], ["1.2.1"], ["2.1.2"]], 3)
    assert torch.allclose(m, torch.tensor([[1, 1 / 3, 0], [0, 0, 2 / 3]], dtype=torch.float64))
    s = torch.tensor([[3.0, 2.0, 1.0]])
    # ranked by decreasing relevance
    assert float(h_average_precision(s, m[:1])) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="levels"):
        lca_distance("1.1", "1.1.1")


def test_codes_are_checked_naming_the_argument():
    with pytest.raises(TypeError, match="code must be a dotted string"):
        parse_code(5)
    with pytest.raises(ValueError, match=r"b = '01.04' has 2 levels but n_levels = 3"):
        lca_distance("01.03.05", "01.04")
    with pytest.raises(ValueError, match="item_codes is empty"):
        multilabel_relevance(["01.03"], [], 2)
    with pytest.raises(ValueError, match="query_sets must be a non-empty"):
        multilabel_relevance_matrix([], [["01.03"]], 2)  # was a silent (0, 1) matrix
