"""Benchmark: offline diffusion of every database item (Iscen et al., truncation R = 1,000) and the
query-time form, against the previous per-item implementation run in the same process tree.

For ``n`` gallery descriptors (``d = 128``, clustered on the sphere, 50 per cluster) it reports,
each step in a fresh process so that its peak memory (``ru_maxrss`` increase) is its own:

* ``graph``: the offline kNN affinity graph (kNN, mutual ``[s]^gamma``, ``D^-1/2 W D^-1/2``);
* ``offline, rank_lab``: :func:`rank_lab.retrieval.diffusion.offline_diffusion` with
  ``truncate=1000, topk=100`` on **all** n items (batched block-diagonal CG, certified candidate
  sets), in milliseconds per item;
* ``offline, previous``: the implementation it replaces (faiss top-R, then per item a cosine over
  the gallery, ``W[C][:, C]``, one CG, a dense length-n row and a top-k over n), on the first
  ``--old-items`` items only (it is linear in the items); the top-100 lists of those items are
  compared with the new ones ("same rankings": identical where the scores differ by more than the
  CG tolerance);
* ``query``: the query-time form for new queries, truncated to R = 1000, new and previous.

Run by hand (never in the tests)::

    python benchmarks/bench_diffusion.py            # n = 10,000 and 50,000
    python benchmarks/bench_diffusion.py --quick    # n = 2,000, < 1 min

Goal (issue 19): offline diffusion of all 50,000 items at most 0.5 ms per item on this CPU, same
rankings; the query-time form at least as fast as before.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _data(n: int, d: int, seed: int):
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    n_clusters = max(10, n // 50)
    centres = rng.normal(size=(n_clusters, d))
    x = centres[rng.integers(0, n_clusters, n)] + 0.9 * rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return torch.from_numpy(x.astype(np.float32))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------- the previous implementation


def _old_truncated_one(graph, y_row, cand, cand_scores, alpha, iters, tol):
    """One query: sub-graph ``W[C][:, C]``, normalised, CG, dense length-n row (previous code)."""
    import numpy as np
    import torch

    from rank_lab.retrieval.diffusion_graph import conjugate_gradient
    from rank_lab.retrieval.graph import normalize_graph, sparse_operator

    sub = graph.affinity[cand][:, cand]
    s_op = sparse_operator(normalize_graph(sub), "cpu", torch.float64)
    b = torch.from_numpy(y_row[cand])[:, None]
    f, _ = conjugate_gradient(lambda v: v - alpha * s_op(v), b, iters=iters, tol=tol)
    f = (1 - alpha) * f[:, 0].numpy()
    out = np.full(graph.n, -np.inf)
    out[cand] = f
    rest = np.ones(graph.n, dtype=bool)
    rest[cand] = False
    out[rest] = f.min() - 3.0 + np.clip(cand_scores[rest], -1.0, 1.0)
    return out


def _faiss_top(gallery, queries, r):
    import faiss
    import numpy as np

    index = faiss.IndexFlatIP(gallery.shape[1])
    index.add(np.ascontiguousarray(gallery.numpy()))
    return index.search(np.ascontiguousarray(queries.numpy()), r)[1]


def _old_offline(
    graph, items: int, kq: int, r: int, alpha: float, iters: int, tol: float, topk: int
):
    """The previous ``offline_diffusion(truncate=r, topk=topk)`` restricted to the first ``items``
    items."""
    import numpy as np
    import scipy.sparse as sp
    import torch

    n = graph.n
    sv = torch.cat(
        [
            (graph.gallery * graph.gallery).sum(1, keepdim=True).double(),
            graph.knn_scores[:, : kq - 1].double(),
        ],
        1,
    )
    iv = torch.cat([torch.arange(n)[:, None], graph.knn_indices[:, : kq - 1]], 1)
    y = sp.csr_matrix(
        (
            sv.clamp_min(0).pow(graph.gamma).numpy().ravel(),
            (np.repeat(np.arange(n), kq), iv.numpy().ravel()),
        ),
        shape=(n, n),
    )
    cand = _faiss_top(graph.gallery, graph.gallery[:items], r)
    vals, idx = [], []
    for i in range(items):
        cos = (graph.gallery @ graph.gallery[i]).double().numpy()
        c = np.unique(np.concatenate([cand[i], iv[i].numpy()]))
        f = torch.from_numpy(
            _old_truncated_one(graph, y[i].toarray().ravel(), c, cos, alpha, iters, tol)
        )
        v, ix = torch.topk(f, topk)
        vals.append(v.float())
        idx.append(ix)
    return torch.stack(vals), torch.stack(idx)


def _old_query(graph, queries, kq: int, r: int, alpha: float, iters: int, tol: float, topk: int):
    """The previous truncated ``diffusion_search``: one query at a time."""
    import numpy as np
    import torch

    from rank_lab.retrieval.diffusion_graph import query_vectors

    y, _ = query_vectors(graph, queries, kq)
    cand = _faiss_top(graph.gallery, queries, r)
    out = []
    for qi in range(queries.shape[0]):
        cos = (graph.gallery @ queries[qi]).double().numpy()
        out.append(
            _old_truncated_one(graph, y[qi].toarray().ravel(), cand[qi], cos, alpha, iters, tol)
        )
    return torch.topk(torch.from_numpy(np.stack(out)).float(), topk, dim=1)


# ---------------------------------------------------------------- tasks


def _task(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    import torch

    from rank_lab.retrieval.diffusion import diffusion_search, offline_diffusion
    from rank_lab.retrieval.diffusion_graph import build_graph

    torch.set_num_threads(cfg["threads"])
    n, d = cfg["n"], cfg["d"]
    x = _data(n, d, cfg["seed"])
    out: dict[str, Any] = {}
    if name == "graph":
        base = _peak_mb()
        t = time.perf_counter()
        g = build_graph(x, k=cfg["k"], progress=False)
        out["time"] = time.perf_counter() - t
        out["peak_mb"] = _peak_mb() - base
        out["nnz"] = g.affinity.nnz
        with open(cfg["cache"], "wb") as f:
            pickle.dump(g, f)
        return out
    with open(cfg["cache"], "rb") as f:
        g = pickle.load(f)
    base = _peak_mb()
    kw = {"alpha": cfg["alpha"], "kq": cfg["kq"], "iters": cfg["iters"], "tol": 1e-6}
    if name == "offline":
        t = time.perf_counter()
        v, i = offline_diffusion(g, truncate=cfg["r"], topk=100, device="cpu", **kw)
        out["time"] = time.perf_counter() - t
        torch.save((v[: cfg["old_items"]], i[: cfg["old_items"]]), cfg["cache"] + ".new.pt")
    elif name == "offline-old":
        t = time.perf_counter()
        v, i = _old_offline(
            g, cfg["old_items"], cfg["kq"], cfg["r"], cfg["alpha"], cfg["iters"], 1e-6, 100
        )
        out["time"] = time.perf_counter() - t
        torch.save((v, i), cfg["cache"] + ".old.pt")
    elif name == "query":
        q = _data(cfg["q"], d, cfg["seed"] + 1)
        t = time.perf_counter()
        diffusion_search(g, q, truncate=min(cfg["r"], n), topk=100, device="cpu", **kw)
        out["time"] = time.perf_counter() - t
    elif name == "query-old":
        q = _data(cfg["q"], d, cfg["seed"] + 1)
        t = time.perf_counter()
        _old_query(g, q, cfg["kq"], min(cfg["r"], n), cfg["alpha"], cfg["iters"], 1e-6, 100)
        out["time"] = time.perf_counter() - t
    out["peak_mb"] = _peak_mb() - base
    return out


def _run(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_task, (name, cfg))


def _compare(cfg: dict[str, Any]) -> str:
    """Top-100 lists of the new and previous offline diffusion on the same items."""
    import torch

    vn, i_n = torch.load(cfg["cache"] + ".new.pt")
    vo, io = torch.load(cfg["cache"] + ".old.pt")
    dv = float((vn - vo).abs().max())
    same = 0
    for a in range(vn.shape[0]):
        gaps = (vo[a, :-1] - vo[a, 1:]).abs()
        # positions whose neighbours are more than 1e-5 apart
        ok = torch.ones(100, dtype=torch.bool)
        ok[:-1] &= gaps > 1e-5
        ok[1:] &= gaps > 1e-5
        same += int(torch.equal(i_n[a][ok], io[a][ok]))
    return (
        f"max |score diff| {dv:.1e}; top-100 identical (ties within 1e-5 aside) for "
        f"{same}/{vn.shape[0]} items"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="n = 2,000 only")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--kq", type=int, default=10)
    p.add_argument("--alpha", type=float, default=0.99)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--truncate", type=int, default=1000)
    p.add_argument(
        "--old-items", type=int, default=500, help="items diffused by the previous implementation"
    )
    p.add_argument(
        "--queries",
        type=int,
        default=1000,
        help=(
            "new queries for the query-time form (1,000: a tenth of a second is too short to time)"
        ),
    )
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    sizes = [2000] if a.quick else a.sizes
    if a.quick:
        a.old_items, a.queries = 200, 100
    print(
        f"bench_diffusion: d={a.dim} k={a.k} kq={a.kq} alpha={a.alpha} iters={a.iters} "
        f"R={a.truncate} threads={a.threads} load average={os.getloadavg()[0]:.2f}"
    )
    head = f"{'n':>7} | {'step':<44} | {'time s':>8} | {'ms / item':>9} | {'peak MiB':>8} | notes"
    print(head + "\n" + "-" * 120)
    tmp = tempfile.mkdtemp(prefix="bench_diffusion_")
    for n in sizes:
        cfg = {
            "n": n,
            "d": a.dim,
            "k": a.k,
            "kq": a.kq,
            "alpha": a.alpha,
            "iters": a.iters,
            "r": min(a.truncate, n),
            "old_items": min(a.old_items, n),
            "q": a.queries,
            "seed": a.seed,
            "threads": a.threads,
            "cache": os.path.join(tmp, f"graph_{n}.pkl"),
        }
        gr = _run("graph", cfg)
        print(
            f"{n:>7} | {'graph (kNN + mutual affinity + norm.)':<44} | {gr['time']:8.2f} | "
            f"{'-':>9} | {gr['peak_mb']:8.0f} | nnz={gr['nnz']:,}"
        )
        new = _run("offline", cfg)
        per_new = 1000 * new["time"] / n
        print(
            f"{n:>7} | {'offline, rank_lab (all n items)':<44} | {new['time']:8.2f} | "
            f"{per_new:9.3f} | {new['peak_mb']:8.0f} | load {os.getloadavg()[0]:.2f}"
        )
        old = _run("offline-old", cfg)
        per_old = 1000 * old["time"] / cfg["old_items"]
        print(
            f"{n:>7} | {'offline, previous (first ' + str(cfg['old_items']) + ' items)':<44} | "
            f"{old['time']:8.2f} | {per_old:9.3f} | {old['peak_mb']:8.0f} | "
            f"x{per_old / per_new:.1f} slower per item; all n projected {per_old * n / 1000:.0f} s"
        )
        print(f"{n:>7} | {'':<44} | {'':>8} | {'':>9} | {'':>8} | {_compare(cfg)}")
        qn, qo = _run("query", cfg), _run("query-old", cfg)
        pq_new, pq_old = 1000 * qn["time"] / a.queries, 1000 * qo["time"] / a.queries
        print(
            f"{n:>7} | {f'query time, rank_lab ({a.queries} new queries)':<44} | {qn['time']:8.2f} "
            f"| {pq_new:9.3f} | {qn['peak_mb']:8.0f} | x{pq_old / pq_new:.1f} faster than previous"
        )
        print(
            f"{n:>7} | {'query time, previous':<44} | {qo['time']:8.2f} | {pq_old:9.3f} | "
            f"{qo['peak_mb']:8.0f} |"
        )
        sys.stdout.flush()
        for suffix in ("", ".new.pt", ".old.pt"):
            if os.path.exists(cfg["cache"] + suffix):
                os.remove(cfg["cache"] + suffix)


if __name__ == "__main__":
    main()
