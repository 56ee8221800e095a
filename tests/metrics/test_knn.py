"""rank_lab.metrics.engine.search.knn: knn_search against a brute force on tied integer data (both
backends) and its helpers on hand-worked values.

The invariance across precisions, shapes and devices is tested with the certified search in
test_certified.py; the engine's use of the search in test_engine.py.
"""

from __future__ import annotations

import pytest
import torch

from rank_lab.metrics.engine.search.index import faiss_knn
from rank_lab.metrics.engine.search.knn import (
    check_search_options,
    faiss_available,
    knn_search,
    search_tile,
)

BACKENDS = ["torch"] + (["faiss"] if faiss_available() else [])


def _brute_force(q: torch.Tensor, g: torch.Tensor, k: int, exclude_self: bool) -> tuple[list, list]:
    """Top k by decreasing score, ties by increasing index, in plain Python (exact integer
    scores)."""
    scores, indices = [], []
    for i, row in enumerate(q.tolist()):
        cand = [
            (-sum(a * b for a, b in zip(row, item, strict=True)), j)
            for j, item in enumerate(g.tolist())
            if not (exclude_self and j == i)
        ]
        top = sorted(cand)[:k]
        scores.append([-s for s, _ in top])
        indices.append([j for _, j in top])
    return scores, indices


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exclude_self", [False, True])
def test_knn_search_equals_a_brute_force_with_ties(backend: str, exclude_self: bool) -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-2, 3, (40, 6), generator=g).float()  # integer scores: many exact ties
    s, i = knn_search(x, x, 5, exclude_self=exclude_self, backend=backend, device="cpu")
    ref_s, ref_i = _brute_force(x, x, 5, exclude_self)
    assert i.tolist() == ref_i
    assert s.tolist() == ref_s


def test_query_gallery_form_and_float64() -> None:
    g = torch.Generator().manual_seed(8)
    q = torch.randint(-3, 4, (7, 5), generator=g).double()
    gal = torch.randint(-3, 4, (30, 5), generator=g).double()
    s, i = knn_search(q, gal, 4, device="cpu")
    ref_s, ref_i = _brute_force(q, gal, 4, False)
    assert s.dtype == torch.float64 and i.tolist() == ref_i and s.tolist() == ref_s


def test_search_tile_and_check_precision_hand_values() -> None:
    assert search_tile(256, None) == 5760  # sqrt(256 MiB / 8 B) = 5792 -> a multiple of 64
    assert search_tile(1, None) == 320  # sqrt(2^20 / 8) = 362 -> 320
    assert search_tile(1e6, None) == 8192  # capped
    assert search_tile(256, 10) == 64 and search_tile(256, 1000) == 1000
    assert check_search_options("torch", "bf16", None, 256, None) == ("torch", "bf16", None, 256.0)
    with pytest.raises(ValueError, match="precision must be one of"):
        check_search_options("torch", "fp8", None, 256, None)
    with pytest.raises(ValueError, match="needs backend='torch'"):
        check_search_options("faiss", "fp16", None, 256, None)


def test_faiss_stage_one_returns_the_float32_top_k() -> None:
    if not faiss_available():
        pytest.skip("faiss not installed")  # pragma: no cover
    g = torch.Generator().manual_seed(9)
    x = torch.randn(50, 8, generator=g)
    knn = faiss_knn(None, 256, False)
    s, i = knn.search(x, x, 3, True)
    full = (x.double() @ x.double().T).fill_diagonal_(-torch.inf)
    assert not bool((i == torch.arange(50)[:, None]).any())  # the query itself is excluded
    torch.testing.assert_close(s.double(), full.topk(3, dim=1).values, atol=1e-5, rtol=0)
