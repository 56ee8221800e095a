"""Evaluation time and peak memory: rank_lab's engine vs a naive full-matrix evaluation and, when
installed, pytorch-metric-learning's AccuracyCalculator (R@1 and mAP@R, the metrics they share).

Each measurement runs in a fresh subprocess so that its peak resident memory (CPU) or peak CUDA
memory is its own. Run by hand:

    python benchmarks/bench_metrics.py            # N = 10,000 and 60,502, d = 512
    python benchmarks/bench_metrics.py --quick    # N = 2,000 and 5,000, d = 128
    python benchmarks/bench_metrics.py --device cuda

Target (foundation issue): no slower than AccuracyCalculator on the same machine, and under 2 GiB
peak at N = 60,502. "peak MiB" is the peak RSS minus the RSS after the data was created (CPU) or
``torch.cuda.max_memory_allocated`` (CUDA).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _data(n: int, d: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    n_classes = max(2, n // 5)  # about 5 images per class, as on SOP
    y = torch.randint(0, n_classes, (n,), generator=g)
    centres = torch.randn(n_classes, d, generator=g)
    x = centres[y] + 3.0 * torch.randn(n, d, generator=g)
    return x, y


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # pragma: no cover


def _worker(method: str, n: int, d: int, device: str) -> dict:
    import torch

    x, y = _data(n, d)
    if device == "cuda":
        x, y = x.cuda(), y.cuda()
        torch.cuda.reset_peak_memory_stats()
    base = _rss_mib()
    t0 = time.perf_counter()
    if method.startswith("rank_lab"):
        from rank_lab.metrics import retrieval_metrics

        backend = method.split(":")[1]
        res = retrieval_metrics(x, y, ks=(1,), metrics=("R@k", "mAP@R"), backend=backend, device=device, progress=False)
        out = {"R@1": res["R@1"], "mAP@R": res["mAP@R"]}
    elif method == "naive":
        import torch.nn.functional as F

        from rank_lab.metrics import map_at_r, recall_at_k

        xn = F.normalize(x.float(), dim=1)
        off = ~torch.eye(n, dtype=torch.bool, device=x.device)  # drop the query's own column
        s = (xn @ xn.T)[off].view(n, n - 1)
        t = (y[:, None] == y[None, :])[off].view(n, n - 1)
        has = t.any(1)
        out = {"R@1": float(recall_at_k(s[has], t[has], 1).mean()), "mAP@R": float(map_at_r(s[has], t[has]).mean())}
    elif method == "pml":
        import torch.nn.functional as F
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

        calc = AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r"), device=torch.device(device))
        xn = F.normalize(x.float(), dim=1)
        res = calc.get_accuracy(xn, y, xn, y, ref_includes_query=True)
        out = {"R@1": res["precision_at_1"], "mAP@R": res["mean_average_precision_at_r"]}
    else:
        raise ValueError(method)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    return {"seconds": seconds, "peak_mib": peak, **out}


def _available(method: str) -> bool:
    if method == "pml":
        try:
            import pytorch_metric_learning  # noqa: F401
        except ImportError:
            return False
    if method == "rank_lab:faiss":
        from rank_lab.metrics import faiss_available

        return faiss_available()
    return True


def _ratio(rows: dict, ref: str, row: dict) -> str:
    """``ref``'s seconds over ``row``'s seconds, or ``-`` when ``ref`` did not run."""
    other = rows.get(ref)
    return f"{other['seconds'] / row['seconds']:.2f}" if other and "seconds" in other else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--pml-max-n", type=int, default=20000)
    parser.add_argument("--worker", nargs=4, metavar=("METHOD", "N", "D", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        method, n, d, device = args.worker
        print(json.dumps(_worker(method, int(n), int(d), device)))
        return
    sizes = args.sizes or ([2000, 5000] if args.quick else [10000, 60502])
    dim = args.dim or (128 if args.quick else 512)
    methods = ["rank_lab:torch", "rank_lab:faiss", "pml", "naive"]
    print(f"device={args.device} d={dim}  (R@1 and mAP@R, queries = gallery, self excluded)")
    header = f"{'N':>7} {'method':>15} {'seconds':>9} {'peak MiB':>9} {'x vs pml':>9} {'x vs naive':>10} {'R@1':>7} {'mAP@R':>7}"
    print(header)
    print("-" * len(header))
    for n in sizes:
        rows = {}
        for m in methods:
            if not _available(m):
                rows[m] = None
                continue
            naive_bytes = n * n * 26  # scores, targets, their copies and the sort's work space
            if m == "naive" and naive_bytes > 8 * 2**30:
                rows[m] = {"skipped": f"needs ~{naive_bytes / 2**30:.0f} GiB for the N x N matrices"}
                continue
            if m == "pml" and n > args.pml_max_n:
                rows[m] = {"skipped": f"N > --pml-max-n={args.pml_max_n} (its memory grows fast; raise the flag to try)"}
                continue
            cmd = [sys.executable, __file__, "--worker", m, str(n), str(dim), args.device]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                rows[m] = {"skipped": "failed: " + proc.stderr.strip().splitlines()[-1][:60]}
                continue
            rows[m] = json.loads(proc.stdout.strip().splitlines()[-1])
        for m, r in rows.items():
            if r is None:
                print(f"{n:>7} {m:>15}   (not installed)")
                continue
            if "skipped" in r:
                print(f"{n:>7} {m:>15}   skipped: {r['skipped']}")
                continue
            vs_pml, vs_naive = _ratio(rows, "pml", r), _ratio(rows, "naive", r)
            print(f"{n:>7} {m:>15} {r['seconds']:>9.2f} {r['peak_mib']:>9.0f} {vs_pml:>9} {vs_naive:>10} {r['R@1']:>7.4f} {r['mAP@R']:>7.4f}")
    print("\n'x vs pml' = pml seconds / this method's seconds (> 1: faster than pml).")


if __name__ == "__main__":
    main()
