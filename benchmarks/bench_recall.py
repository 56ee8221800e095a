"""RS@k forward + backward: time and peak memory of rank_lab's O(B^2 m) implementation vs the direct
O(B^3) formulation, at batch sizes B = 512, 1024, 4096 (m = 4 images per class).

Methods (each measurement runs in a fresh subprocess so that its peak memory is its own):

* ``rs@k``          -- :class:`rank_lab.losses.SmoothRecallAtK` (RS@k: the ranks of the positives
                       only, ``B (m - 1)`` rows against ``B`` items, in blocks of the device's
                       default ``max_elements`` with a recomputing backward);
* ``rs@k blocks1M`` -- the same with ``max_elements=2**20`` (smaller blocks);
* ``rs@k+simix``    -- with SiMix (batch virtually grown to ``B + 6 B / 4``, the thesis' k set);
* ``direct``        -- :class:`rank_lab.losses.SmoothRecallAtK` with ``impl="direct"``, the
                       ``(B, B, B)`` pairwise-difference formulation of the papers' code (the
                       reference); skipped when its estimated memory exceeds ``--max-direct-gb``.

Run by hand::

    python benchmarks/bench_recall.py            # B = 512, 1024, 4096, d = 512
    python benchmarks/bench_recall.py --quick    # B = 128, 256, 512, d = 128, direct up to 256
    python benchmarks/bench_recall.py --device cuda

"peak MiB" is the peak RSS minus the RSS once the batch exists (CPU) or
``torch.cuda.max_memory_allocated`` (CUDA); ratios are against ``direct`` at the same B when it ran.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

METHODS = ("rs@k", "rs@k blocks1M", "rs@k+simix", "direct")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0  # pragma: no cover


def _loss(method: str):
    from rank_lab.losses.recall import DEFAULT_KS_SIMIX, SmoothRecallAtK

    if method == "rs@k":
        return SmoothRecallAtK()
    if method == "rs@k blocks1M":
        return SmoothRecallAtK(max_elements=2**20)
    if method == "rs@k+simix":
        return SmoothRecallAtK(ks=DEFAULT_KS_SIMIX, simix=True, seed=0)
    if method == "direct":
        return SmoothRecallAtK(impl="direct")
    raise ValueError(method)


def _worker(method: str, b: int, d: int, device: str, reps: int) -> dict:
    import torch

    torch.manual_seed(0)
    y = torch.arange(b // 4).repeat_interleave(4)
    x = torch.randn(b // 4, d)[y] + 0.7 * torch.randn(b, d)
    x, y = x.to(device), y.to(device)
    loss_fn = _loss(method)
    warm = x[:16].clone().requires_grad_(True)  # warm-up (thread pools, kernels) outside the timing
    loss_fn(warm, y[:16]).backward()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = _rss_mib()
    times = []
    value = float("nan")
    for _ in range(reps):
        e = x.clone().requires_grad_(True)
        t0 = time.perf_counter()
        loss = loss_fn(e, y)
        loss.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        value = float(loss.detach())
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    times.sort()
    return {"time_s": times[len(times) // 2], "peak_mib": max(peak, 0.0), "loss": value}


def _run(method: str, b: int, d: int, device: str, reps: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, str(b), str(d), device, str(reps)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="B = 128, 256, 512 and d = 128")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--dim", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument(
        "--max-direct-gb",
        type=float,
        default=None,
        help="skip direct when B^3 x 16 bytes exceeds this (default 4; 0.5 with --quick)",
    )
    p.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        method, b, d, device, reps = args.worker
        print(json.dumps(_worker(method, int(b), int(d), device, int(reps))))
        return
    sizes = args.sizes or ([128, 256, 512] if args.quick else [512, 1024, 4096])
    d = args.dim or (128 if args.quick else 512)
    reps = args.reps or (1 if args.quick else 3)
    max_direct = (
        args.max_direct_gb if args.max_direct_gb is not None else (0.5 if args.quick else 4.0)
    )
    print(f"RS@k forward+backward, m = 4, d = {d}, device = {args.device}, median of {reps}")
    print(
        f"{'B':>6} {'method':<15} {'time (s)':>9} {'peak MiB':>9} {'time/direct':>12} "
        f"{'mem/direct':>11} {'loss':>8}"
    )
    for b in sizes:
        rows = {}
        for method in METHODS:
            if method == "direct" and b**3 * 16 / 2**30 > max_direct:
                rows[method] = {
                    "error": f"skipped (needs ~{b**3 * 16 / 2**30:.0f} GiB > --max-direct-gb)"
                }
                continue
            rows[method] = _run(method, b, d, args.device, reps)
        ref = rows.get("direct", {})
        for method, r in rows.items():
            if "error" in r:
                print(f"{b:>6} {method:<15} {r['error']}")
                continue
            rt = f"{r['time_s'] / ref['time_s']:.3f}" if "time_s" in ref else "-"
            rm = f"{r['peak_mib'] / max(ref['peak_mib'], 1e-9):.3f}" if "peak_mib" in ref else "-"
            print(
                f"{b:>6} {method:<15} {r['time_s']:>9.3f} {r['peak_mib']:>9.1f} {rt:>12} {rm:>11} "
                f"{r['loss']:>8.4f}"
            )


if __name__ == "__main__":
    main()
