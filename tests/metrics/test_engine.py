"""The evaluation engine against the per-query metrics on explicit score matrices (which are
themselves checked against a brute force over tie orderings), for both backends, with ties,
duplicates, chunking and bad input."""

from __future__ import annotations

import pytest
import torch

from rank_lab.metrics import (
    ap_at_k,
    average_precision,
    faiss_available,
    knn_search,
    map_at_r,
    ndcg,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    retrieval_metrics,
    true_recall_at_k,
)

BACKENDS = ["torch"] + (["faiss"] if faiss_available() else [])
ALL = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR", "mAP", "NDCG")
KNN = ("R@k", "P@k", "TR@k", "AP@k", "mAP@R", "MRR")


def _reference(q, ql, g, gl, ks, exclude_self):
    """Per-query metrics from the explicit (Q, N) score matrix, self column removed by index."""
    s = q @ g.T
    t = ql[:, None] == gl[None, :]
    if exclude_self:
        n = s.shape[0]
        keep = ~torch.eye(n, dtype=torch.bool)
        s = s[keep].view(n, n - 1)
        t = t[keep].view(n, n - 1)
    has = t.any(1)
    s, t = s[has], t[has]
    out = {
        "mAP@R": map_at_r(s, t),
        "mAP": average_precision(s, t),
        "MRR": reciprocal_rank(s, t),
        "NDCG": ndcg(s, t.double()),
    }
    for k in ks:
        out[f"R@{k}"] = recall_at_k(s, t, k)
        out[f"P@{k}"] = precision_at_k(s, t, k)
        out[f"TR@{k}"] = true_recall_at_k(s, t, k)
        out[f"mAP@{k}"] = ap_at_k(s, t, k)
    return {name: float(v.double().mean()) for name, v in out.items()}, int((~has).sum())


def _tied_data(n: int, d: int, n_classes: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, d), generator=g).double()  # coarse values: many tied scores
    y = torch.randint(0, n_classes, (n,), generator=g)
    return x, y


ROUTES = [("torch", ALL), ("torch", KNN)] + ([("faiss", KNN)] if faiss_available() else [])


@pytest.mark.parametrize(("backend", "metrics"), ROUTES, ids=[f"{b}-{len(m)}" for b, m in ROUTES])
@pytest.mark.parametrize("seed", range(4))
def test_engine_matches_per_query_metrics_with_ties(
    backend: str, metrics: tuple, seed: int
) -> None:
    """Counting route (full-list metrics) and neighbour-list route (torch, faiss) vs sorting."""
    x, y = _tied_data(60, 4, 6, seed)
    ks = (1, 3, 10)
    got = retrieval_metrics(
        x, y, ks=ks, metrics=metrics, normalize=False, backend=backend, device="cpu", chunk_size=7
    )
    ref, skipped = _reference(x, y, x, y, ks, exclude_self=True)
    assert got["n_skipped"] == skipped
    for name, value in got.items():
        if name in ("n_queries", "n_skipped"):
            continue
        assert value == pytest.approx(ref[name], abs=1e-9), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_engine_query_gallery_form(backend: str) -> None:
    q, ql = _tied_data(25, 5, 4, 10)
    g, gl = _tied_data(40, 5, 4, 11)
    got = retrieval_metrics(
        q, ql, g, gl, ks=(1, 5), metrics=KNN, normalize=False, backend=backend, device="cpu"
    )
    ref, _ = _reference(q, ql, g, gl, (1, 5), exclude_self=False)
    for name in ("R@1", "R@5", "P@5", "mAP@R", "MRR"):
        assert got[name] == pytest.approx(ref[name], abs=1e-9), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_self_excluded_by_index_not_by_dropping_first_neighbour(backend: str) -> None:
    # items 0 and 1 are identical but of different classes; item 2 is item 0's true positive.
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    y = torch.tensor([0, 1, 0, 1])
    res = retrieval_metrics(
        x, y, ks=(1,), metrics=("R@k",), backend=backend, device="cpu", per_query=True
    )
    # query 0: its duplicate (class 1) ties with itself; removing "the first neighbour" could drop
    # the duplicate instead of the query; by index, query 0's first neighbour is the wrong-class
    # duplicate.
    assert res["per_query"]["R@1"].tolist()[0] == 0.0
    scores, idx = knn_search(x, x, 1, exclude_self=True, backend=backend, device="cpu")
    assert idx[:, 0].tolist()[:2] == [1, 0]


def test_faiss_and_torch_agree_on_random_data() -> None:
    if not faiss_available():
        pytest.skip("faiss not installed")  # pragma: no cover
    torch.manual_seed(0)
    x, y = torch.randn(500, 16), torch.randint(0, 25, (500,))
    a = retrieval_metrics(x, y, ks=(1, 4, 16), metrics=KNN, backend="torch", device="cpu")
    b = retrieval_metrics(x, y, ks=(1, 4, 16), metrics=KNN, backend="faiss", device="cpu")
    for name in a:
        assert a[name] == pytest.approx(b[name], abs=1e-6), name


def test_chunk_size_does_not_change_results() -> None:
    torch.manual_seed(1)
    x, y = torch.randn(123, 8), torch.randint(0, 9, (123,))
    a = retrieval_metrics(x, y, metrics=ALL, ks=(1, 2), backend="torch", device="cpu", chunk_size=1)
    b = retrieval_metrics(
        x, y, metrics=ALL, ks=(1, 2), backend="torch", device="cpu", chunk_size=1000
    )
    assert a == pytest.approx(b)


def test_hierarchical_labels_use_the_fine_column() -> None:
    torch.manual_seed(2)
    x, fine = torch.randn(50, 4), torch.randint(0, 5, (50,))
    labels = torch.stack([fine, fine // 2], 1)
    assert retrieval_metrics(x, labels, ks=(1,)) == pytest.approx(
        retrieval_metrics(x, fine, ks=(1,))
    )


def test_no_positive_queries_skipped_or_raised() -> None:
    x = torch.randn(5, 3)
    y = torch.tensor([0, 0, 1, 1, 2])  # the class-2 item has no positive
    res = retrieval_metrics(x, y, ks=(1,), backend="torch")
    assert res["n_skipped"] == 1 and res["n_queries"] == 4
    with pytest.raises(ValueError, match="no relevant item"):
        retrieval_metrics(x, y, ks=(1,), no_positive="raise")
    with pytest.raises(ValueError, match="every metric is undefined"):
        retrieval_metrics(x, torch.arange(5), ks=(1,))


def test_bad_inputs() -> None:
    x, y = torch.randn(10, 3), torch.randint(0, 3, (10,))
    with pytest.raises(ValueError, match="labels has 9 rows"):
        retrieval_metrics(x, y[:9])
    with pytest.raises(ValueError, match="NaN or inf"):
        retrieval_metrics(torch.full((10, 3), float("inf")), y)
    with pytest.raises(ValueError, match="larger than the number of gallery items"):
        retrieval_metrics(x, y, ks=(10,))
    with pytest.raises(ValueError, match="unknown metrics"):
        retrieval_metrics(x, y, metrics=("R@k", "bogus"))
    with pytest.raises(ValueError, match="d=3"):
        retrieval_metrics(x, y, torch.randn(4, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="together"):
        retrieval_metrics(x, y, x)
    with pytest.raises(TypeError, match="integers"):
        retrieval_metrics(x, y.float())
    with pytest.raises(ValueError, match="empty"):
        retrieval_metrics(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="backend"):
        knn_search(x, x, 2, backend="annoy")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:  # pragma: no cover - run on the GPU machine
    torch.manual_seed(3)
    x, y = torch.randn(3000, 32), torch.randint(0, 100, (3000,))
    a = retrieval_metrics(x, y, metrics=ALL, ks=(1, 10), backend="torch", device="cpu")
    b = retrieval_metrics(
        x.cuda(), y.cuda(), metrics=ALL, ks=(1, 10), backend="torch", device="cuda"
    )
    for name in a:
        assert a[name] == pytest.approx(b[name], abs=1e-4), name
    if faiss_available():
        c = retrieval_metrics(
            x.cuda(), y.cuda(), metrics=KNN, ks=(1, 10), backend="faiss", device="cuda"
        )
        assert c["R@1"] == pytest.approx(a["R@1"], abs=1e-4)


def test_custom_knn_function_is_used_and_gives_the_same_results() -> None:
    torch.manual_seed(5)
    x, y = torch.randn(200, 8), torch.randint(0, 20, (200,))
    calls = []

    def knn(q, g, k, exclude_self):
        calls.append(k)
        return knn_search(q, g, k, exclude_self=exclude_self, backend="torch", device="cpu")

    a = retrieval_metrics(x, y, ks=(1, 5), knn=knn, device="cpu")
    b = retrieval_metrics(x, y, ks=(1, 5), backend="torch", device="cpu")
    assert calls and a == pytest.approx(b)
