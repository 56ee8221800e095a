"""Pairs per second: batched edit distance and rotated-box IoU vs plain Python implementations.

* ``edit``: :func:`rank_lab.metrics.text.edit_distance` on ``n`` random word pairs (lengths
  0-25, 36 symbols) vs :func:`~rank_lab.metrics.text.levenshtein_reference` (a plain two-row
  Python dynamic programme) on a subset, and ``python-Levenshtein``/``rapidfuzz`` when installed.
* ``iou``: :func:`rank_lab.metrics.rotated_iou.rotated_iou` on ``n`` random overlapping box pairs
  vs a plain-Python Sutherland-Hodgman clipping (written below) on a subset, and shapely when
  installed. The results of all implementations are cross-checked.

Each measurement runs in a fresh subprocess so that its peak memory is its own ("peak MiB": the
peak RSS increase on CPU, ``torch.cuda.max_memory_allocated`` on CUDA). Run by hand::

    python benchmarks/bench_edit_iou.py             # n = 200,000 pairs
    python benchmarks/bench_edit_iou.py --quick     # n = 20,000 pairs, < 30 s
    python benchmarks/bench_edit_iou.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time


def _status_mib(field: str) -> float:
    """``VmRSS`` (current) or ``VmHWM`` (peak) resident memory of this process, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # pragma: no cover


def _words(n: int, seed: int) -> tuple[list[str], list[str]]:
    import random

    rng = random.Random(seed)
    chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    a, b = [], []
    for _ in range(n):  # a word and a noisy copy (a few random edits, like a recogniser's output)
        a.append("".join(rng.choice(chars) for _ in range(rng.randint(0, 25))))
        w = list(a[-1])
        for _ in range(rng.randint(0, 4)):
            op = rng.randint(0, 2)
            if op == 0 and w:
                w[rng.randrange(len(w))] = rng.choice(chars)
            elif op == 1 and w:
                del w[rng.randrange(len(w))]
            else:
                w.insert(rng.randint(0, len(w)), rng.choice(chars))
        b.append("".join(w))
    return a, b


def _boxes(n: int, seed: int):
    """``n`` pairs of overlapping rotated boxes; the first ``m`` pairs do not depend on ``n``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, 10, generator=g, dtype=torch.float64)  # one row of random numbers per pair
    b1 = torch.stack(
        [u[:, 0], u[:, 1], 0.05 + 0.5 * u[:, 2], 0.05 + 0.5 * u[:, 3], (u[:, 4] - 0.5) * math.pi], 1
    )
    b2 = b1.clone()
    b2[:, :2] += 0.1 * (u[:, 5:7] - 0.5)
    b2[:, 2:4] *= torch.exp(0.4 * (u[:, 7:9] - 0.5))
    b2[:, 4] += 0.6 * (u[:, 9] - 0.5)
    return b1, b2


def _py_clip_iou(p: list[tuple[float, float]], q: list[tuple[float, float]]) -> float:
    """Plain-Python Sutherland-Hodgman IoU of two counter-clockwise convex polygons."""

    def area(poly: list[tuple[float, float]]) -> float:
        return 0.5 * sum(
            poly[i][0] * poly[(i + 1) % len(poly)][1] - poly[(i + 1) % len(poly)][0] * poly[i][1]
            for i in range(len(poly))
        )

    out = p
    for i in range(len(q)):
        a, b = q[i], q[(i + 1) % len(q)]
        inp, out = out, []
        if not inp:
            break
        for k in range(len(inp)):
            s, e = inp[k], inp[(k + 1) % len(inp)]
            cs = (b[0] - a[0]) * (s[1] - a[1]) - (b[1] - a[1]) * (s[0] - a[0])
            ce = (b[0] - a[0]) * (e[1] - a[1]) - (b[1] - a[1]) * (e[0] - a[0])
            if ce >= 0:
                if cs < 0:
                    t = cs / (cs - ce)
                    out.append((s[0] + t * (e[0] - s[0]), s[1] + t * (e[1] - s[1])))
                out.append(e)
            elif cs >= 0:
                t = cs / (cs - ce)
                out.append((s[0] + t * (e[0] - s[0]), s[1] + t * (e[1] - s[1])))
    inter = area(out) if len(out) >= 3 else 0.0
    union = area(p) + area(q) - inter
    return inter / union if union > 0 else 0.0


def _worker(task: str, method: str, n: int, device: str, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    if task == "edit":
        a, b = _words(n, 0)
    else:
        b1, b2 = _boxes(n, 0)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = _status_mib("VmRSS")
    t0 = time.perf_counter()
    if task == "edit":
        from rank_lab.metrics.text import edit_distance, encode_strings, levenshtein_reference

        if method == "rank_lab":
            ca, la = encode_strings(a, device=device)
            cb, lb = encode_strings(b, device=device)
            t0 = time.perf_counter()  # encoding excluded: it is Python-side preprocessing
            out = edit_distance(ca, cb, la, lb)
            if device == "cuda":
                torch.cuda.synchronize()
            out = out.cpu().tolist()
        elif method == "python-dp":
            out = [levenshtein_reference(x, y) for x, y in zip(a, b, strict=True)]
        elif method == "rapidfuzz":
            from rapidfuzz.distance import Levenshtein

            out = [Levenshtein.distance(x, y) for x, y in zip(a, b, strict=True)]
        else:
            raise ValueError(method)
    else:
        from rank_lab.metrics.rotated_iou import boxes_to_polygons, rotated_iou

        if method == "rank_lab":
            x1, x2 = b1.to(device), b2.to(device)
            t0 = time.perf_counter()
            out = rotated_iou(x1, x2)
            if device == "cuda":
                torch.cuda.synchronize()
            out = out.cpu().tolist()
        else:
            p1, p2 = boxes_to_polygons(b1).tolist(), boxes_to_polygons(b2).tolist()
            t0 = time.perf_counter()
            if method == "python-clip":
                out = [
                    _py_clip_iou([tuple(v) for v in p], [tuple(v) for v in q])
                    for p, q in zip(p1, p2, strict=True)
                ]
            elif method == "shapely":
                from shapely.geometry import Polygon

                out = []
                for p, q in zip(p1, p2, strict=True):
                    pp, qq = Polygon(p), Polygon(q)
                    out.append(pp.intersection(qq).area / pp.union(qq).area)
            else:
                raise ValueError(method)
    seconds = time.perf_counter() - t0
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if device == "cuda"
        else _status_mib("VmHWM") - base
    )
    return {"seconds": seconds, "peak_mib": peak, "checksum": float(sum(out[:1000]))}


def _run(task: str, method: str, n: int, device: str, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", json.dumps([task, method, n, device, threads])]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _available(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 20,000 pairs")
    parser.add_argument("--n", type=int, default=None, help="pairs for the batched implementations")
    parser.add_argument(
        "--n-python", type=int, default=None, help="pairs for the plain-Python references"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: the machine is shared)"
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(_worker(*json.loads(args.worker))))
        return 0
    n = args.n or (20_000 if args.quick else 200_000)
    n_py = args.n_python or (5_000 if args.quick else 20_000)
    rows = []
    plan = [("edit", "rank_lab", n), ("edit", "python-dp", n_py)]
    if _available("rapidfuzz"):
        plan.append(("edit", "rapidfuzz", n_py))
    plan += [("iou", "rank_lab", n), ("iou", "python-clip", n_py)]
    if _available("shapely"):
        plan.append(("iou", "shapely", n_py))
    print(f"device={args.device} threads={args.threads} n={n} (plain Python on {n_py} pairs)")
    print(
        f"{'task':>5} {'method':>12} {'pairs':>8} {'seconds':>8} {'pairs/s':>11} {'peak MiB':>9} "
        f"{'x vs python':>12}"
    )
    ref: dict[str, float] = {}
    checks: dict[tuple[str, str], float] = {}
    for task, method, m in plan:
        r = _run(task, method, m, args.device if method == "rank_lab" else "cpu", args.threads)
        if "error" in r:
            print(f"{task:>5} {method:>12} failed: {r['error']}")
            continue
        rate = m / r["seconds"]
        if method.startswith("python"):
            ref[task] = rate
        rows.append((task, method, m, r["seconds"], rate, r["peak_mib"]))
        checks[(task, method)] = r["checksum"]
    for task, method, m, sec, rate, peak in rows:
        ratio = rate / ref[task] if task in ref else float("nan")
        print(
            f"{task:>5} {method:>12} {m:>8} {sec:>8.3f} {rate:>11,.0f} {peak:>9.1f} {ratio:>12.1f}"
        )
    for task in ("edit", "iou"):  # all implementations score the same first 1,000 pairs
        vals = [v for (t, _), v in checks.items() if t == task]
        if vals and max(vals) - min(vals) > 1e-6 * max(1.0, abs(vals[0])):
            print(f"WARNING: {task} implementations disagree: {vals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
