"""Evaluation at gallery scale: rank_lab's certified counting route against a bare GEMM and faiss.

Issue 28 (docs/decisions.md): exact retrieval figures whose cost does not grow with k. For each size
N (queries = gallery, self excluded, d = 512 clustered unit vectors with SOP-like classes of 2-12
items in 12 super-classes) the script times, each in a fresh subprocess (its own peak memory):

* ``bare GEMM``: the N x N product in the stage-1 format the engine uses on this device (bfloat16 on
  CPUs with native bfloat16, float32 otherwise and on CUDA), in blocks of rows, nothing else: the
  floor of any exact evaluation;
* ``faiss k=K``: a flat ``IndexFlatIP`` built and searched with the K a neighbour-list protocol
  needs (the largest k plus the query itself plus one, as the issue's k = 1,002 for R@1000);
* ``rank_lab <protocol>``: :func:`rank_lab.metrics.retrieval_metrics` with ``precision="auto"``
  (bfloat16 stage 1 on CPUs with native bfloat16 once ``N^2 d >= 2^33``, e.g. N = 10,000 at d =
  512), and the same with ``precision="exact"`` (stage 1 in float32): their per-query values must be
  identical, bit for bit -- any difference makes the script exit with status 1. Each worker
  process first evaluates 1,536 items of its task untimed (same metrics, same stage-1 format), so
  that loading the compiled kernels from numba's cache (once per process) is not counted.

Protocols: ``SOP`` (R@1/10/100/1000 + mAP@R, Stanford Online Products) and ``iNat`` (R@1/4/16/32 +
mAP@R, iNaturalist 2018); then H-AP / ASI / NDCG-h at N = 60,000 with 2 levels (the data of
``bench_hierarchical.py``). The output ends with a table ready for benchmarks/README.md, the
machine's load average (``os.getloadavg``) before and after, and the goals of issue 28:

* SOP protocol at 60,502 and iNat protocol at 136,093: at most 1.5x the bare GEMM, at least 2.5x
  faster than faiss;
* H-AP / ASI / NDCG-h at 60,000: at most 2x the bare GEMM;
* peak memory under 2 GiB at 60,502 and 4 GiB at 136,093, whatever the ks;
* identical per-query values to the exact route, every size, every protocol.

Run by hand (never in CI), on an idle machine for the recorded figures::

    python benchmarks/bench_metrics.py                         # N = 10,000, 60,502, 136,093; H-AP at 60,000
    python benchmarks/bench_metrics.py --sizes 10000 --hap-sizes 10000
    python benchmarks/bench_metrics.py --quick                 # N = 3,000, d = 128: a smoke run
    python benchmarks/bench_metrics.py --device cuda
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PROTOCOLS = {"SOP": (1, 10, 100, 1000), "iNat": (1, 4, 16, 32)}
HIER = ("H-AP", "ASI", "NDCG-h")
GOALS = {"SOP": 60502, "iNat": 136093}


def sop_like(n: int, d: int, seed: int = 0, n_super: int = 12, gamma: float = 2.6):
    """Clustered unit vectors: classes of 2-12 items (uniform) in ``n_super`` super-classes.

    ``x = normalize(0.8 c_super + c_class + gamma z)`` with Gaussian centres and noise of norm about
    1: same-class cosine about 0.2, hard negatives within the super-class (R@1 about 0.7 and mAP@R
    about
    0.3 at N = 60,502 for ``gamma = 2.6``, the range of a trained SOP model).
    """
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(2, 13, (n // 2 + 2,), generator=g)
    n_cls = int((torch.cumsum(sizes, 0) < n).sum()) + 1
    y = torch.repeat_interleave(torch.arange(n_cls), sizes[:n_cls])[:n]
    sup = torch.randint(0, n_super, (n_cls,), generator=g)
    cs = torch.randn(n_super, d, generator=g) / d**0.5
    cc = torch.randn(n_cls, d, generator=g) / d**0.5
    z = torch.randn(n, d, generator=g) / d**0.5
    x = F.normalize(0.8 * cs[sup[y]] + cc[y] + gamma * z, dim=1)
    perm = torch.randperm(n, generator=g)
    return x[perm], y[perm]


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # pragma: no cover


def _stage1_format(n: int, d: int, device: str):
    import torch

    from rank_lab.metrics.engine.scores.bound import resolve_precision

    return resolve_precision("auto", torch.float32, torch.device(device), work=n * n * d)


def _worker(task: str, n: int, d: int, device: str, extra: str, out_file: str) -> dict:
    import torch

    if task == "hap":
        from bench_hierarchical import eval_data

        x, y = eval_data(n, d)
    else:
        x, y = sop_like(n, d)
    if device == "cuda":
        x, y = x.cuda(), y.cuda()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = _rss_mib()
    t0 = time.perf_counter()
    out: dict = {}
    if task == "gemm":
        fmt = _stage1_format(n, d, device)
        xr = x.to(fmt)
        t0 = time.perf_counter()  # the product only (the copy to the format is part of any route)
        for i in range(0, n, 4096):
            xr[i : i + 4096] @ xr.T
        out = {"format": str(fmt).replace("torch.", "")}
    elif task == "faiss":
        import faiss
        import numpy as np
        import torch.nn.functional as F

        xn = np.ascontiguousarray(F.normalize(x.float(), dim=1).cpu().numpy())
        index = faiss.IndexFlatIP(xn.shape[1])
        if device == "cuda" and hasattr(
            faiss, "StandardGpuResources"
        ):  # pragma: no cover - GPU only
            index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
        index.add(xn)
        index.search(xn, int(extra))
        out = {"k": int(extra)}
    else:
        from rank_lab.metrics import retrieval_metrics

        precision, protocol = extra.split(":")
        # once per process, before the clock: the compiled kernels of this task's path (its
        # stage-1 format, its metrics, rows with many positives for H-AP) are loaded from numba's
        # cache (tenths of a second each on a loaded machine), which no later call pays again
        if task == "hap":
            from bench_hierarchical import eval_data

            warm = eval_data(1536, d, seed=1)  # coarse classes of ~128: the many-positives form
            warm_kw = {"ks": (1,), "metrics": HIER}
        else:
            warm = sop_like(1536, d, seed=1)
            warm_kw = {"ks": PROTOCOLS[protocol], "metrics": ("R@k", "mAP@R")}
        fmt = _stage1_format(n, d, device)
        warm_precision = "exact" if precision == "exact" or fmt == x.dtype else "bf16"
        retrieval_metrics(
            warm[0].to(x.device),
            warm[1].to(x.device),
            precision=warm_precision,
            device=device,
            progress=False,
            **warm_kw,
        )
        t0 = time.perf_counter()
        if task == "hap":
            res = retrieval_metrics(
                x,
                y,
                ks=(1,),
                metrics=HIER,
                precision=precision,
                device=device,
                progress=False,
                per_query=True,
            )
        else:
            res = retrieval_metrics(
                x,
                y,
                ks=PROTOCOLS[protocol],
                metrics=("R@k", "mAP@R"),
                precision=precision,
                device=device,
                progress=False,
                per_query=True,
            )
        torch.save(res.pop("per_query"), out_file)
        out = {k: v for k, v in res.items() if isinstance(v, float)}
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    return {"seconds": seconds, "peak_mib": peak, **out}


def _run(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:120]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--hap-sizes", type=int, nargs="*", default=None)
    parser.add_argument("--protocols", nargs="*", default=list(PROTOCOLS), choices=list(PROTOCOLS))
    parser.add_argument("--no-faiss", action="store_true", help="skip the faiss rows")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        task, n, d, device, extra, out = args.worker
        print(json.dumps(_worker(task, int(n), int(d), device, extra, out)))
        return 0
    import torch

    sizes = args.sizes or ([3000] if args.quick else [10000, 60502, 136093])
    hap_sizes = (
        args.hap_sizes if args.hap_sizes is not None else ([3000] if args.quick else [60000])
    )
    dim = args.dim or (128 if args.quick else 512)
    load_before = os.getloadavg()
    header = (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, d = {dim}; "
        f"load average before {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}"
    )
    print(header, flush=True)
    tmp = tempfile.mkdtemp(prefix="bench_metrics_")
    rows: list[dict] = []
    failures: list[str] = []

    def record(
        n: int,
        protocol: str,
        method: str,
        res: dict,
        gemm: float | None,
        faiss_s: float | None,
        same: str = "",
    ) -> None:
        row = {"N": n, "protocol": protocol, "method": method, **res, "same": same}
        if "seconds" in res and gemm:
            row["x_gemm"] = res["seconds"] / gemm
        if "seconds" in res and faiss_s:
            row["faiss_x"] = faiss_s / res["seconds"]
        rows.append(row)
        if "error" in res:
            failures.append(f"N={n} {protocol} {method}: {res['error']}")
        secs = f"{res['seconds']:9.2f}" if "seconds" in res else f"  {res.get('error', '')}"
        peak = f"{res['peak_mib']:9.0f} MiB" if "peak_mib" in res else " " * 13
        x_gemm = (
            f"{row['x_gemm']:6.2f}x GEMM"
            if "x_gemm" in row and not method.startswith("bare")
            else " " * 11
        )
        x_faiss = f"{row['faiss_x']:6.2f}x faiss" if "faiss_x" in row else " " * 12
        print(
            f"{n:>7} {protocol:>6} {method:>24} {secs} {peak} {x_gemm} {x_faiss} {same}", flush=True
        )

    def identical(a_file: str, b_file: str) -> str:
        if not (os.path.exists(a_file) and os.path.exists(b_file)):
            return "-"
        a, b = torch.load(a_file), torch.load(b_file)
        ok = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        return "yes" if ok else "NO"

    for n in sizes:
        gemm = _run(["--worker", "gemm", str(n), str(dim), args.device, "-", "-"])
        record(n, "-", f"bare GEMM ({gemm.get('format', '?')})", gemm, gemm.get("seconds"), None)
        for protocol in args.protocols:
            ks = PROTOCOLS[protocol]
            faiss_s = None
            if _faiss_available() and not args.no_faiss:
                k = min(n - 1, ks[-1] + 2)
                fr = _run(["--worker", "faiss", str(n), str(dim), args.device, str(k), "-"])
                record(n, protocol, f"faiss IndexFlatIP k={k}", fr, gemm.get("seconds"), None)
                faiss_s = fr.get("seconds")
            files = {}
            for precision in ("auto", "exact"):
                files[precision] = os.path.join(tmp, f"{protocol}_{n}_{precision}.pt")
                res = _run(
                    [
                        "--worker",
                        "eval",
                        str(n),
                        str(dim),
                        args.device,
                        f"{precision}:{protocol}",
                        files[precision],
                    ]
                )
                same = identical(files["auto"], files["exact"]) if precision == "exact" else ""
                if same == "NO":
                    failures.append(
                        f"N={n} {protocol}: per-query values of precision='auto' and 'exact' differ"
                    )
                record(
                    n, protocol, f"rank_lab {precision}", res, gemm.get("seconds"), faiss_s, same
                )
    for n in hap_sizes:
        gemm = _run(["--worker", "gemm", str(n), str(dim), args.device, "-", "-"])
        record(n, "H", f"bare GEMM ({gemm.get('format', '?')})", gemm, gemm.get("seconds"), None)
        files = {}
        for precision in ("auto", "exact"):
            files[precision] = os.path.join(tmp, f"hap_{n}_{precision}.pt")
            res = _run(
                [
                    "--worker",
                    "hap",
                    str(n),
                    str(dim),
                    args.device,
                    f"{precision}:H",
                    files[precision],
                ]
            )
            same = identical(files["auto"], files["exact"]) if precision == "exact" else ""
            if same == "NO":
                failures.append(
                    f"N={n} H-AP/ASI/NDCG-h: per-query values of precision='auto' and 'exact' "
                    "differ"
                )
            record(n, "H", f"rank_lab {precision}", res, gemm.get("seconds"), None, same)
    load_after = os.getloadavg()

    print(
        "\n"
        + header.replace("load average before", "load average before")
        + f"; after {load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f}\n"
    )
    print(
        "| N | protocol | method | seconds | peak MiB | x bare GEMM | faiss s / this | figures | "
        "identical to exact |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        figs = ", ".join(
            f"{k} {r[k]:.4f}" for k in ("R@1", "R@1000", "R@32", "mAP@R", *HIER) if k in r
        )
        cells = [
            f"{r['N']:,}",
            r["protocol"],
            r["method"],
            f"{r['seconds']:.2f}" if "seconds" in r else r.get("error", "-"),
            f"{r['peak_mib']:.0f}" if "peak_mib" in r else "-",
            f"{r['x_gemm']:.2f}" if "x_gemm" in r and not r["method"].startswith("bare") else "-",
            f"{r['faiss_x']:.2f}" if "faiss_x" in r else "-",
            figs or "-",
            r["same"] or "-",
        ]
        print("| " + " | ".join(cells) + " |")
    print("\n| goal (issue 28) | measured | verdict |\n|---|---|---|")
    for protocol, n in GOALS.items():
        r = next(
            (
                r
                for r in rows
                if r["N"] == n and r["protocol"] == protocol and r["method"] == "rank_lab auto"
            ),
            None,
        )
        if r is None or "seconds" not in r:
            continue
        ok_g = r.get("x_gemm", 9.9) <= 1.5
        ok_f = r.get("faiss_x", 0.0) >= 2.5
        print(
            f"| {protocol} protocol at {n:,}: <= 1.5x bare GEMM | "
            f"{r.get('x_gemm', float('nan')):.2f}x | {'met' if ok_g else 'not met'} |"
        )
        if "faiss_x" in r:
            print(
                f"| {protocol} protocol at {n:,}: >= 2.5x faster than faiss | {r['faiss_x']:.2f}x "
                f"| {'met' if ok_f else 'not met'} |"
            )
    for n, limit in ((60502, 2048), (136093, 4096)):
        peaks = [
            r["peak_mib"]
            for r in rows
            if r["N"] == n and r["method"].startswith("rank_lab") and "peak_mib" in r
        ]
        if peaks:
            print(
                f"| peak memory at {n:,} < {limit // 1024} GiB | {max(peaks):.0f} MiB | "
                f"{'met' if max(peaks) < limit else 'not met'} |"
            )
    for r in rows:
        if r["protocol"] == "H" and r["method"] == "rank_lab auto" and "x_gemm" in r:
            print(
                f"| H-AP / ASI / NDCG-h at {r['N']:,}: <= 2x bare GEMM | {r['x_gemm']:.2f}x | "
                f"{'met' if r['x_gemm'] <= 2 else 'not met'} |"
            )
    same = [r["same"] for r in rows if r["same"]]
    print(
        f"| identical per-query values, every size and protocol | {same.count('yes')} of "
        f"{len(same)} | {'met' if same and all(s == 'yes' for s in same) else 'not met'} |"
    )
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
