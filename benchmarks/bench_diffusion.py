"""Benchmark: offline diffusion (Iscen et al., CG on the sparse graph) against dense / scipy references.

For ``n`` gallery descriptors (``d = 128``, clustered on the sphere) it reports, each step in a fresh
process so that its peak memory (``ru_maxrss`` increase) is its own:

* ``graph``: the offline kNN affinity graph (faiss kNN, mutual ``[s]^gamma``, ``D^-1/2 W D^-1/2``);
* ``offline``: diffusion of ``B`` gallery items as queries (``rank_lab``: batched CG, 20 iterations,
  sparse products), with the projected time for all ``n`` items;
* ``scipy-cg``: the same systems solved one by one with ``scipy.sparse.linalg.cg`` (same budget);
* ``dense``: a dense ``n x n`` normalised graph and ``numpy.linalg.solve`` for the same ``B``
  right-hand sides -- the straightforward implementation; skipped (and said so) when its two
  ``n x n`` float64 matrices exceed ``--dense-max-gb``;
* ``query``: the query-time form for new queries, full graph and truncated to ``R = 1000``.

Run by hand (never in the tests)::

    python benchmarks/bench_diffusion.py            # n = 10,000 and 100,000
    python benchmarks/bench_diffusion.py --quick    # n = 2,000, < 30 s
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
from typing import Any


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


def _task(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spl
    import torch

    from rank_lab.retrieval.diffusion import build_graph, diffuse, diffusion_search, query_vectors

    torch.set_num_threads(cfg["threads"])
    n, d, k, b, alpha, iters = cfg["n"], cfg["d"], cfg["k"], cfg["b"], cfg["alpha"], cfg["iters"]
    x = _data(n, d, cfg["seed"])
    out: dict[str, Any] = {}
    if name == "graph":
        base = _peak_mb()
        t = time.perf_counter()
        g = build_graph(x, k=k)
        out["time"] = time.perf_counter() - t
        out["peak_mb"] = _peak_mb() - base
        out["nnz"] = g.affinity.nnz
        out["graph_mb"] = g.nbytes() / 2**20
        with open(cfg["cache"], "wb") as f:
            pickle.dump(g, f)
        return out
    with open(cfg["cache"], "rb") as f:
        g = pickle.load(f)
    rows = np.arange(b)
    y = sp.csr_matrix(g.affinity[rows].shape)
    sv = torch.cat([torch.ones(b, 1), g.knn_scores[:b, : cfg["kq"] - 1].float()], 1).clamp_min(0).pow(3).numpy()
    iv = torch.cat([torch.arange(b)[:, None], g.knn_indices[:b, : cfg["kq"] - 1]], 1).numpy()
    y = sp.csr_matrix((sv.ravel(), (np.repeat(rows, cfg["kq"]), iv.ravel())), shape=(b, n))
    base = _peak_mb()
    if name == "offline":
        t = time.perf_counter()
        f = diffuse(g, y, alpha=alpha, iters=iters, tol=1e-6, batch_size=256, device="cpu", progress=False)
        out["time"] = time.perf_counter() - t
        out["check"] = float(f.sum())
    elif name == "scipy-cg":
        a = (sp.identity(n, format="csr") - alpha * g.normalized).tocsr()
        t = time.perf_counter()
        tot = 0.0
        for i in range(b):
            try:
                sol, _ = spl.cg(a, y[i].toarray().ravel(), rtol=1e-6, maxiter=iters)
            except TypeError:  # scipy < 1.12
                sol, _ = spl.cg(a, y[i].toarray().ravel(), tol=1e-6, maxiter=iters)
            tot += float(sol.sum())
        out["time"] = time.perf_counter() - t
        out["check"] = (1 - alpha) * tot
    elif name == "dense":
        t = time.perf_counter()
        s = g.normalized.toarray()
        a = np.eye(n) - alpha * s
        del s
        sol = np.linalg.solve(a, y.toarray().T)
        out["time"] = time.perf_counter() - t
        out["check"] = float((1 - alpha) * sol.sum())
    elif name == "query":
        q = _data(cfg["q"], d, cfg["seed"] + 1)
        t = time.perf_counter()
        query_vectors(g, q, cfg["kq"])
        out["knn_ms"] = 1000 * (time.perf_counter() - t) / cfg["q"]
        t = time.perf_counter()
        diffusion_search(g, q, alpha=alpha, kq=cfg["kq"], iters=iters, truncate=None, topk=100, device="cpu")
        out["full_ms"] = 1000 * (time.perf_counter() - t) / cfg["q"]
        t = time.perf_counter()
        diffusion_search(g, q, alpha=alpha, kq=cfg["kq"], iters=iters, truncate=min(1000, n), topk=100, device="cpu")
        out["trunc_ms"] = 1000 * (time.perf_counter() - t) / cfg["q"]
        out["time"] = 0.0
    out["peak_mb"] = _peak_mb() - base
    return out


def _run(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_task, (name, cfg))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="n = 2,000 only (< 30 s)")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--kq", type=int, default=10)
    p.add_argument("--alpha", type=float, default=0.99)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--batch", type=int, default=256, help="gallery items diffused as queries (B)")
    p.add_argument("--scipy-batch", type=int, default=64, help="systems solved one by one by scipy")
    p.add_argument("--queries", type=int, default=50, help="new queries for the query-time form")
    p.add_argument("--dense-max-gb", type=float, default=4.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: robust on shared CPUs)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    sizes = [2000] if a.quick else a.sizes
    if a.quick:
        a.batch, a.scipy_batch, a.queries = 128, 32, 20
    print(f"bench_diffusion: d={a.dim} k={a.k} kq={a.kq} alpha={a.alpha} iters={a.iters} B={a.batch} "
          f"threads={a.threads} (times in seconds, peak = increase of the process' max RSS)")
    rows = []
    tmp = tempfile.mkdtemp(prefix="bench_diffusion_")
    for n in sizes:
        cfg = {"n": n, "d": a.dim, "k": a.k, "kq": a.kq, "alpha": a.alpha, "iters": a.iters, "b": min(a.batch, n),
               "q": a.queries, "seed": a.seed, "threads": a.threads, "cache": os.path.join(tmp, f"graph_{n}.pkl")}
        gr = _run("graph", cfg)
        rows.append((n, "graph (kNN + mutual affinity + norm.)", gr["time"], None, gr["peak_mb"], f"nnz={gr['nnz']:,}, {gr['graph_mb']:.0f} MiB"))
        off = _run("offline", cfg)
        b = cfg["b"]
        per = off["time"] / b
        rows.append((n, f"offline diffusion, rank_lab CG (B={b})", off["time"], per, off["peak_mb"], f"all n projected: {per * n:.0f} s"))
        sc_cfg = dict(cfg, b=min(a.scipy_batch, n))
        sc = _run("scipy-cg", sc_cfg)
        sper = sc["time"] / sc_cfg["b"]
        rows.append((n, f"  scipy.sparse.linalg.cg one by one (B={sc_cfg['b']})", sc["time"], sper, sc["peak_mb"], f"x{sper / per:.1f} slower per query"))
        need_gb = 2 * n * n * 8 / 2**30
        if need_gb <= a.dense_max_gb:
            de = _run("dense", cfg)
            dper = de["time"] / b
            rows.append((n, f"  dense n x n + numpy.linalg.solve (B={b})", de["time"], dper, de["peak_mb"], f"x{dper / per:.1f} per query; check {de['check']:.4g} vs {off['check']:.4g}"))
        else:
            rows.append((n, "  dense n x n + numpy.linalg.solve", None, None, None, f"SKIPPED: needs {need_gb:.0f} GiB for two n x n float64 matrices"))
        qt = _run("query", cfg)
        rows.append((n, f"query time: kNN of {a.queries} new queries", None, qt["knn_ms"] / 1000, None, ""))
        rows.append((n, "query time: full-graph CG diffusion", None, qt["full_ms"] / 1000, qt["peak_mb"], ""))
        rows.append((n, "query time: truncated R=1000", None, qt["trunc_ms"] / 1000, None, f"x{qt['full_ms'] / max(qt['trunc_ms'], 1e-9):.1f} faster than full"))
        os.remove(cfg["cache"])
    print(f"{'n':>8} | {'step':<50} | {'time s':>8} | {'per query ms':>12} | {'peak MiB':>8} | notes")
    print("-" * 130)
    for n, step, t, per, peak, note in rows:
        ts = f"{t:8.2f}" if t is not None else f"{'-':>8}"
        ps = f"{1000 * per:12.2f}" if per is not None else f"{'-':>12}"
        ms = f"{peak:8.0f}" if peak is not None else f"{'-':>8}"
        print(f"{n:>8,} | {step:<50} | {ts} | {ps} | {ms} | {note}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
