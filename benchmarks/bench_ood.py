"""Fitting and scoring time of the OOD scorers and of HEAT, vs naive implementations, CPU and GPU.

Usage::

    python benchmarks/bench_ood.py                 # N = 50,000 train features, d = 512 (CIFAR ResNet-34)
    python benchmarks/bench_ood.py --quick         # N = 5,000, d = 128: < 30 s on a 2-core CPU
    python benchmarks/bench_ood.py --device cuda   # one device only (default: cpu, plus cuda when present)

Setting: ``N`` ID training features of dimension ``d`` from ``C = 10`` classes (post-ReLU Gaussian
clusters, as the penultimate features of a CIFAR classifier), ``M`` test features to score.

Rows (``ours`` vs ``naive``, same process, same inputs):

* ``GMM fit``: class means + tied covariance + Cholesky/whitener (:class:`ClassGaussianEnergy`) vs a
  per-class Python loop with ``numpy.cov`` and an explicit inverse.
* ``GMM / Mahalanobis score``: one matrix product with the whitened means vs
  ``(z - mu_c)^T P (z - mu_c)`` per class (``einsum``).
* ``KNN score``: chunked top-k on normalised features vs the full distance matrix sorted per row
  (naive on at most 2,000 queries, reported per 1,000 queries for both).
* ``ViM fit`` / ``ViM score``: no naive counterpart (eigendecomposition dominated).
* ``AUROC`` and ``FPR95``: sort + binary search vs the ``n_in x n_out`` pair count / a threshold
  scan.
* ``HEAT iteration``: one training step of HEAT-GMM with the thesis' model (6-layer MLP, hidden
  1024, batch 256, 20 SGLD steps), and the estimated epoch time for ``N`` features; ``HEAT score``:
  energy of ``M`` features. No naive counterpart.
* ``ResFlow iteration``: one maximum-likelihood step (4 blocks, hidden 128, batch 256) with the
  power-series / Hutchinson log-det (8 terms) vs the exact log-det from the full Jacobian;
  ``ResFlow score``: ``M`` features, no naive counterpart.

Peak memory of ``ours`` (measured before the naive run): on CPU each row runs in a forked child and
reports the growth of its maximum resident set size (inputs included); on CUDA
``torch.cuda.max_memory_allocated`` during the row (inputs included).
"""  # noqa: E501

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rank_lab.metrics.ood import auroc, fpr_at_tpr  # noqa: E402
from rank_lab.ood import KNN, ClassGaussianEnergy, HEATConfig, HybridEnergy, ViM
from rank_lab.ood.resflow import ResFlow


def make_features(n: int, m: int, d: int, c: int, device: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(c, d, generator=g)
    y = torch.randint(0, c, (n,), generator=g)
    z = torch.relu(means[y] + 0.8 * torch.randn(n, d, generator=g))
    q = torch.relu(
        means[torch.randint(0, c, (m,), generator=g)] + 1.2 * torch.randn(m, d, generator=g)
    )
    head = torch.nn.Linear(d, c)
    return z.to(device), y.to(device), q.to(device), head


def naive_gmm_fit(z: torch.Tensor, y: torch.Tensor):
    zn, yn = z.cpu().double().numpy(), y.cpu().numpy()
    means = np.stack([zn[yn == c].mean(0) for c in np.unique(yn)])
    centred = np.concatenate([zn[yn == c] - means[i] for i, c in enumerate(np.unique(yn))])
    cov = np.cov(centred.T, bias=True) + 1e-6 * np.eye(zn.shape[1])
    return means, np.linalg.inv(cov)


def naive_maha(q: torch.Tensor, means: np.ndarray, prec: np.ndarray) -> np.ndarray:
    qn = q.cpu().double().numpy()
    return np.stack([np.einsum("ni,ij,nj->n", qn - mu, prec, qn - mu) for mu in means], 1).min(1)


def naive_knn(q: torch.Tensor, bank: torch.Tensor, k: int) -> torch.Tensor:
    qn, bn = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(bank, dim=1)
    return torch.cdist(qn, bn).sort(dim=1).values[:, k - 1]


def naive_auroc(a: torch.Tensor, b: torch.Tensor, chunk: int = 2000) -> float:
    wins = 0.0
    for i in range(0, a.numel(), chunk):
        diff = b[None, :] - a[i : i + chunk, None]
        wins += float((diff > 0).sum()) + 0.5 * float((diff == 0).sum())
    return wins / (a.numel() * b.numel())


def naive_fpr(a: torch.Tensor, b: torch.Tensor, tpr: float = 0.95) -> float:
    best = 1.0
    for t in torch.unique(torch.cat([a, b])).tolist():  # every threshold, O(n) each
        if float((a <= t).double().mean()) >= tpr:
            best = min(best, float((b <= t).double().mean()))
            break
    return best


def timed(fn: Callable[[], object], device: str, repeats: int, warmup: bool = True) -> float:
    if warmup:
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def _peak(device: str, base: float) -> float:
    """MiB: CUDA max allocated, or growth of the max resident set size since ``base`` (KiB)."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024


def _row(task: str, args: argparse.Namespace, device: str, base: float = 0.0) -> dict:
    torch.manual_seed(0)
    z, y, q, head = make_features(args.n, args.m, args.d, 10, device)
    r = args.repeats
    out: dict = {"task": task, "device": device, "ours": None, "naive": None, "note": ""}

    def ours(fn: Callable[[], object], dev: str = device) -> float:
        t = timed(fn, dev, r)
        out["peak_mib"] = _peak(device, base)  # measured before any naive run
        return t

    if task == "GMM fit":
        out["ours"] = ours(lambda: ClassGaussianEnergy().fit(z, y))
        out["naive"] = timed(lambda: naive_gmm_fit(z, y), device, 1, warmup=False)
    elif task == "GMM / Mahalanobis score":
        e = ClassGaussianEnergy().fit(z, y)
        with torch.no_grad():
            out["ours"] = ours(lambda: e.mahalanobis(q).min(1).values)
            mine = e.mahalanobis(q).min(1).values.cpu().double().numpy()
        means, prec = naive_gmm_fit(z, y)
        box: dict = {}
        out["naive"] = timed(
            lambda: box.update(ref=naive_maha(q, means, prec)), device, 1, warmup=False
        )
        err = float(np.abs(mine - box["ref"]).max() / np.abs(box["ref"]).max())
        out["note"] = f"max rel. diff {err:.1e} (float32 vs float64)"
    elif task == "KNN score (per 1,000 queries)":
        knn = KNN(k=50).fit(z)
        m_naive = min(args.m, 2000)
        out["ours"] = ours(lambda: knn.score(q)) * 1000 / args.m
        out["naive"] = (
            timed(lambda: naive_knn(q[:m_naive], z, 50), device, 1, warmup=False) * 1000 / m_naive
        )
        diff = float((knn.score(q[:200]).to(device) - naive_knn(q[:200], z, 50)).abs().max())
        out["note"] = f"k = 50, max |diff| {diff:.1e}"
    elif task == "ViM fit":
        out["ours"] = ours(lambda: ViM(head.to(device), principal_dim=args.d // 2).fit(z))
    elif task == "ViM score":
        vim = ViM(head.to(device), principal_dim=args.d // 2).fit(z)
        out["ours"] = ours(lambda: vim.score(q))
    elif task == "AUROC":
        a, b = torch.randn(args.m).round(decimals=2), torch.randn(args.m).round(decimals=2) + 1
        out["ours"] = ours(lambda: auroc(a, b), "cpu")
        out["naive"] = timed(
            lambda: naive_auroc(a.to(device), b.to(device)), device, 1, warmup=False
        )
        out["note"] = f"n_in = n_out = {args.m}, |diff| {abs(auroc(a, b) - naive_auroc(a, b)):.1e}"
    elif task == "FPR95":
        a, b = torch.randn(args.m).round(decimals=2), torch.randn(args.m).round(decimals=2) + 1
        out["ours"] = ours(lambda: fpr_at_tpr(a, b), "cpu")
        out["naive"] = timed(lambda: naive_fpr(a, b), "cpu", 1, warmup=False)
        out["note"] = f"|diff| {abs(fpr_at_tpr(a, b) - naive_fpr(a, b)):.1e}"
    elif task.startswith("HEAT"):
        cfg = HEATConfig(epochs=1, batch_size=256, hidden_dim=args.hidden)
        h = HybridEnergy(ClassGaussianEnergy(1e3), args.d, cfg, normalize=True).to(device)
        zp = h.preprocess(z)
        h.prior.fit(zp, y)
        opt = torch.optim.Adam(h.residual.parameters(), lr=cfg.lr)
        gen = torch.Generator(device=device).manual_seed(0)

        def step() -> None:
            loss, _ = h.loss(zp[:256], gen)
            opt.zero_grad()
            loss.backward()
            opt.step()

        if task == "HEAT iteration":
            out["ours"] = ours(step)
            out["note"] = f"epoch of {args.n} features ~ {out['ours'] * args.n / 256:.0f} s"
        else:
            with torch.no_grad():
                out["ours"] = ours(lambda: h.energy(q))
    elif task.startswith("ResFlow"):
        rf = ResFlow(hidden_dim=128, epochs=1, device=device).fit(
            {"features": z[:512], "labels": y[:512]}
        )
        if task == "ResFlow score":
            out["ours"] = ours(lambda: rf.score(q))
        else:
            opt, yi = (
                torch.optim.Adam(rf.flow.parameters()),
                torch.searchsorted(rf.classes, y[:256]),
            )
            rf.flow.train()

            def rf_step(logdet: str) -> None:
                nll = (
                    -rf.flow.class_log_likelihood(z[:256], logdet=logdet)
                    .gather(1, yi[:, None])
                    .mean()
                )
                opt.zero_grad()
                nll.backward()
                opt.step()

            out["ours"] = ours(lambda: rf_step("series"))
            out["naive"] = timed(lambda: rf_step("exact"), device, 1, warmup=False)
            out["note"] = f"epoch of {args.n} features ~ {out['ours'] * args.n / 256:.0f} s"
    return out


def _child(task: str, args: argparse.Namespace, device: str, conn) -> None:
    torch.set_num_threads(args.threads) if args.threads else None
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    conn.send(_row(task, args, device, base))


TASKS = [
    "GMM fit",
    "GMM / Mahalanobis score",
    "KNN score (per 1,000 queries)",
    "ViM fit",
    "ViM score",
    "AUROC",
    "FPR95",
    "HEAT iteration",
    "HEAT score",
    "ResFlow iteration",
    "ResFlow score",
]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 5,000, d = 128, M = 2,000")
    p.add_argument("--n", type=int, default=50_000, help="training features")
    p.add_argument("--m", type=int, default=10_000, help="test features")
    p.add_argument("--d", type=int, default=512, help="feature dimension")
    p.add_argument(
        "--hidden", type=int, default=1024, help="HEAT MLP width (thesis: 1024 on CIFAR)"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--device", default=None, help="cpu or cuda (default: cpu, then cuda if present)"
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads on CPU (0: torch default)")
    p.add_argument("--tasks", nargs="*", default=TASKS)
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.m, args.d, args.hidden, args.repeats = 5000, 2000, 128, 256, 2
    devices = (
        [args.device] if args.device else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    )
    print(f"N = {args.n} train features, M = {args.m} test features, d = {args.d}, C = 10 classes")
    print(
        f"{'task':32s} {'device':6s} {'ours s':>9s} {'naive s':>9s} {'speed-up':>9s} "
        f"{'peak MiB':>9s}  note"
    )
    ctx = mp.get_context("fork" if sys.platform != "win32" else "spawn")
    for device in devices:
        for task in args.tasks:
            if device == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                res = _row(task, args, device)
            else:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_child, args=(task, args, device, child))
                proc.start()
                res = parent.recv()
                proc.join()
            ours, naive = res["ours"], res["naive"]
            ratio = f"{naive / ours:8.1f}x" if naive and ours else "        -"
            naive_s = f"{naive:9.4f}" if naive is not None else "        -"
            print(
                f"{task:32s} {device:6s} {ours:9.4f} {naive_s} {ratio} {res['peak_mib']:9.0f}  "
                f"{res['note']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
