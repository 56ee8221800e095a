"""Evaluation time and peak memory: rank_lab's engine (fp32 route and certified route) against
pytorch-metric-learning's AccuracyCalculator and a bare faiss ``IndexFlatIP`` search, on R@1 and
mAP@R (the metrics they share); then H-AP / ASI / NDCG-h against a full-sort reference at N = 10,000
and alone at N = 60,000 (the full sort would take hours there).

Each measurement runs in a fresh subprocess so that its peak resident memory (CPU) or peak CUDA
memory is its own. Run by hand:

    python benchmarks/bench_metrics.py            # N = 10,000 and 60,502, d = 512; H-AP at 10,000 and 60,000
    python benchmarks/bench_metrics.py --quick    # N = 2,000 and 5,000, d = 128
    python benchmarks/bench_metrics.py --device cuda

Rows:

* ``rank_lab fp32``: :func:`rank_lab.metrics.retrieval_metrics` with ``precision="exact"`` (stage 1
  in float32, then the canonical re-scoring of the candidates);
* ``rank_lab certified``: ``precision="auto"`` (bfloat16 stage 1 on CPUs with native bfloat16,
  float16 on CUDA); its per-query values are compared bit for bit with the fp32 route's;
* ``pml``: ``AccuracyCalculator(k="max_bin_count")``, the setting its users use (the list length
  is the largest class size, enough for mAP@R); ``k=None`` (full lists) is not the fair comparison;
* ``faiss IndexFlatIP``: building the flat index and searching ``k = max_bin_count`` neighbours
  for every query, nothing else (no metric): the exact-search floor the engine is compared with.

"peak MiB" is the peak RSS minus the RSS after the data was created (CPU) or
``torch.cuda.max_memory_allocated`` (CUDA). Goals (issue 19): at N = 60,502 the certified route at
least 2x faster than AccuracyCalculator and 1.5x faster than faiss, peak <= 2 GiB, identical metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


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


def _worker(method: str, n: int, d: int, device: str, out_file: str) -> dict:
    import torch

    x, y = _data(n, d)
    if device == "cuda":
        x, y = x.cuda(), y.cuda()
        torch.cuda.reset_peak_memory_stats()
    base = _rss_mib()
    t0 = time.perf_counter()
    out: dict = {}
    if method.startswith("rank_lab"):
        from rank_lab.metrics import retrieval_metrics

        precision = "exact" if method == "rank_lab fp32" else "auto"
        res = retrieval_metrics(x, y, ks=(1,), metrics=("R@k", "mAP@R"), backend="torch", precision=precision,
                                device=device, progress=False, per_query=True)
        out = {"R@1": res["R@1"], "mAP@R": res["mAP@R"]}
        torch.save(res["per_query"], out_file)
    elif method == "pml":
        import torch.nn.functional as F
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

        calc = AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r"), k="max_bin_count",
                                  device=torch.device(device))
        xn = F.normalize(x.float(), dim=1)
        res = calc.get_accuracy(xn, y, xn, y, ref_includes_query=True)
        out = {"R@1": res["precision_at_1"], "mAP@R": res["mean_average_precision_at_r"]}
    elif method == "faiss IndexFlatIP":
        import faiss
        import numpy as np
        import torch.nn.functional as F

        xn = np.ascontiguousarray(F.normalize(x.float(), dim=1).cpu().numpy())
        k = int(torch.bincount(y.cpu()).max())  # max_bin_count: the query itself plus its class
        index = faiss.IndexFlatIP(xn.shape[1])
        index.add(xn)
        index.search(xn, k)
        out = {"k": k}
    else:
        raise ValueError(method)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    return {"seconds": seconds, "peak_mib": peak, **out}


def _hap_worker(method: str, n: int, d: int, device: str) -> dict:
    from bench_hierarchical import EVAL_METRICS, _sorted_rows, eval_data

    from rank_lab.metrics import retrieval_metrics

    x, y = eval_data(n, d)
    t0 = time.perf_counter()
    if method == "rank_lab":
        res = retrieval_metrics(x, y, ks=(1,), metrics=EVAL_METRICS, device=device, progress=False)
    else:  # every row sorted (worst-case ties) and read by the per-query functions
        res = _sorted_rows(x, y, device, chunk=max(1, (64 * 2**20) // (8 * n)))
    return {"seconds": time.perf_counter() - t0, "H-AP": res["H-AP"], "ASI": res["ASI"], "NDCG-h": res["NDCG-h"]}


def _available(method: str) -> bool:
    try:
        if method == "pml":
            import pytorch_metric_learning  # noqa: F401
        if method == "faiss IndexFlatIP":
            import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def _run(args: list[str]) -> dict:
    cmd = [sys.executable, __file__, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"skipped": "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:80]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--hap-sizes", type=int, nargs="*", default=None,
                        help="N of the H-AP / ASI / NDCG-h rows (default 10,000 and 60,000)")
    parser.add_argument("--full-sort-max-n", type=int, default=20000, help="full-sort reference only up to this N")
    parser.add_argument("--worker", nargs=5, metavar=("METHOD", "N", "D", "DEVICE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--hap-worker", nargs=4, metavar=("METHOD", "N", "D", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        method, n, d, device, out = args.worker
        print(json.dumps(_worker(method, int(n), int(d), device, out)))
        return
    if args.hap_worker:
        method, n, d, device = args.hap_worker
        print(json.dumps(_hap_worker(method, int(n), int(d), device)))
        return
    import torch

    sizes = args.sizes or ([2000, 5000] if args.quick else [10000, 60502])
    dim = args.dim or (128 if args.quick else 512)
    methods = ["rank_lab fp32", "rank_lab certified", "pml", "faiss IndexFlatIP"]
    print(f"device={args.device} d={dim} threads={torch.get_num_threads()} load average={os.getloadavg()[0]:.2f} "
          "(R@1 and mAP@R, queries = gallery, self excluded)")
    head = f"{'N':>7} {'method':>20} {'seconds':>9} {'peak MiB':>9} {'x vs pml':>9} {'x vs faiss':>10} {'R@1':>7} {'mAP@R':>7}"
    print(head + "\n" + "-" * len(head))
    tmp = tempfile.mkdtemp(prefix="bench_metrics_")
    for n in sizes:
        rows = {}
        for m in methods:
            if not _available(m):
                rows[m] = {"skipped": "not installed"}
                continue
            out = os.path.join(tmp, f"{m.replace(' ', '_')}_{n}.pt")
            rows[m] = _run(["--worker", m, str(n), str(dim), args.device, out])
            rows[m]["file"] = out
        same = "-"
        a, b = rows["rank_lab fp32"], rows["rank_lab certified"]
        if "seconds" in a and "seconds" in b:
            pa, pb = torch.load(a["file"]), torch.load(b["file"])
            same = "yes" if all(torch.equal(pa[k], pb[k]) for k in pa) else "NO"
        for m, r in rows.items():
            if "skipped" in r:
                print(f"{n:>7} {m:>20}   {r['skipped']}")
                continue
            ratio = {ref: (f"{rows[ref]['seconds'] / r['seconds']:.2f}" if "seconds" in rows.get(ref, {}) else "-")
                     for ref in ("pml", "faiss IndexFlatIP")}
            r1 = f"{r['R@1']:.4f}" if "R@1" in r else "-"
            mr = f"{r['mAP@R']:.4f}" if "mAP@R" in r else f"k={r.get('k', '-')}"
            print(f"{n:>7} {m:>20} {r['seconds']:>9.2f} {r['peak_mib']:>9.0f} {ratio['pml']:>9} {ratio['faiss IndexFlatIP']:>10} "
                  f"{r1:>7} {mr:>7}")
        print(f"{n:>7} per-query values of the certified route bit-identical to the fp32 route: {same}")
        sys.stdout.flush()
    print("'x vs pml' / 'x vs faiss' = their seconds / this row's seconds (> 1: faster).")

    hap_sizes = args.hap_sizes or ([2000] if args.quick else [10000, 60000])
    for n_hap in hap_sizes:
        print(f"\n== H-AP / ASI / NDCG-h at N = {n_hap} (L = 2, d = {dim}) against every row sorted (load average "
              f"{os.getloadavg()[0]:.2f})")
        hr = {"rank_lab": _run(["--hap-worker", "rank_lab", str(n_hap), str(dim), args.device])}
        if n_hap <= args.full_sort_max_n:
            hr["full sort"] = _run(["--hap-worker", "full sort", str(n_hap), str(dim), args.device])
        else:
            hr["full sort"] = {"skipped": f"N > --full-sort-max-n={args.full_sort_max_n} (O(N^2 log N))"}
        for m, r in hr.items():
            if "skipped" in r:
                print(f"{m:>10}   {r['skipped']}")
                continue
            ref = hr["full sort"].get("seconds")
            ratio = f"x{ref / r['seconds']:.1f} vs full sort" if ref else "(full sort not run)"
            print(f"{m:>10} {r['seconds']:>9.2f} s  {ratio}   H-AP {r['H-AP']:.6f}  ASI {r['ASI']:.6f}  "
                  f"NDCG-h {r['NDCG-h']:.6f}")
        sys.stdout.flush()

if __name__ == "__main__":
    main()
