"""rank_lab.metrics.engine.routes: both routes of the engine on a hand-worked tied example.

The routes against the per-query metrics on explicit score matrices, and their agreement at
scale, are tested through the engine (test_engine.py, test_certified.py, test_counting_route.py).
"""

from __future__ import annotations

import math

import pytest
import torch

import rank_lab.metrics.engine.evaluate as E
from rank_lab.metrics import retrieval_metrics

# items 0 and 1 are identical but of different classes; item 2 ties 0.8 with both of them
X = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
Y = torch.tensor([0, 1, 0, 1])
# worst-case positions of each query's one relevant item (itself excluded by index):
# q0: item 1 (1.0, irrelevant), item 2 (0.8, relevant) -> 2
# q1: item 0 (1.0), item 2 (0.8), item 3 (0.0, relevant) -> 3
# q2: items 0 (relevant) and 1 tie at 0.8: the irrelevant one first -> 2
# q3: item 2 (0.6), then items 0 and 1 tie at 0.0: item 1 (relevant) after item 0 -> 3
POSITIONS = [2, 3, 2, 3]


def route(monkeypatch: pytest.MonkeyPatch, name: str, *args, **kwargs) -> dict:
    """``retrieval_metrics`` on one route: ``"counting"`` or ``"lists"`` (for the metrics lists can
    serve)."""
    monkeypatch.setattr(E, "NEIGHBOUR_LIST_MAX_K", 0 if name == "counting" else 10**9)
    try:
        return retrieval_metrics(*args, per_query=True, device="cpu", **kwargs)["per_query"]
    finally:
        monkeypatch.undo()


def test_counting_route_hand_worked(monkeypatch) -> None:
    out = route(
        monkeypatch, "counting", X, Y, ks=(1, 2), metrics=("R@k", "mAP@R", "MRR", "mAP", "NDCG")
    )
    assert out["R@1"].tolist() == [0.0] * 4
    assert out["R@2"].tolist() == [float(p <= 2) for p in POSITIONS]
    assert out["mAP@R"].tolist() == [0.0] * 4  # R = 1 and no query has its positive first
    assert out["MRR"].tolist() == [1 / p for p in POSITIONS]
    assert out["mAP"].tolist() == [1 / p for p in POSITIONS]  # one relevant item: AP = 1 / position
    assert out["NDCG"].tolist() == [1 / math.log2(1 + p) for p in POSITIONS]


def test_neighbour_list_route_hand_worked_and_equal_to_counting(monkeypatch) -> None:
    """Lists of length K = max(k, R) = 2: queries 1 and 3 get their MRR from the exact count beyond
    the list."""
    kw = dict(ks=(1, 2), metrics=("R@k", "mAP@R", "MRR"), precision="exact")
    lists = route(monkeypatch, "lists", X, Y, **kw)
    assert lists["MRR"].tolist() == [1 / p for p in POSITIONS]
    counted = route(monkeypatch, "counting", X, Y, **kw)
    assert lists.keys() == counted.keys()
    for name, v in counted.items():
        assert torch.equal(lists[name], v), name
