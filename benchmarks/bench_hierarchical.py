"""Hierarchical evaluation and loss: time and peak memory of rank_lab vs direct implementations.

Usage::

    python benchmarks/bench_hierarchical.py            # evaluation at N = 10,000 and 60,000; loss B = 256
    python benchmarks/bench_hierarchical.py --quick    # N = 1,000 / 2,000 and B = 64: about 30 s on 2 cores
    python benchmarks/bench_hierarchical.py --device cuda --memories 0 4096 16384 59551

1. **Evaluation** (H-AP, ASI, NDCG-h, AP@level; queries = gallery, self excluded) on an SOP-like
   task: L = 2, about 5 images per fine class, 12 super-classes, d = 512. Methods:

   * ``rank_lab``: :func:`rank_lab.metrics.retrieval_metrics` (chunked; counts the negatives ranked
     before every positive instead of sorting rows; :mod:`rank_lab.metrics.engine.routes.counting`);
   * ``sorted-rows``: the direct evaluation of the official code, done in chunks of rows so that it
     fits in memory: every row of scores is sorted (worst-case ties) and the metrics are read from
     the sorted relevance (:mod:`rank_lab.metrics.hierarchy.metrics` per-query functions);
   * ``naive``: the full ``N x N`` score and level matrices at once (skipped when too large).

2. **Loss** (Sup-H-AP forward + backward, B embeddings of d = 512 against the batch plus a
   cross-batch memory holding it): ``rank_lab`` (only rows of positives, chunked, ``O(B P N)``) vs
   ``direct`` (the official ``B x N x N`` formulation), skipped above ``--direct-limit-gb``.

Each measurement runs in a forked process (CPU: growth of the peak resident set; CUDA:
``torch.cuda.max_memory_allocated``). On CPU the resident set also holds what glibc keeps after
freeing the chunks' temporaries (its dynamic mmap threshold moves large blocks to the heap, which
fragments): ``--fixed-mmap-threshold`` fixes the threshold in the measuring process (``mallopt``) so
that the peak reflects the tensors actually alive, at the price of slower allocations.
"""  # noqa: E501

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rank_lab.losses import SupHAP  # noqa: E402
from rank_lab.metrics import retrieval_metrics  # noqa: E402
from rank_lab.metrics.hierarchy.metrics import (  # noqa: E402
    ap_per_level,
    average_set_intersection,
    h_average_precision,
    hierarchical_ndcg,
)
from rank_lab.metrics.hierarchy.relevance import hap_relevance, shared_level  # noqa: E402

EVAL_METRICS = ("H-AP", "ASI", "NDCG-h", "AP@level")
_FIXED_MMAP = False  # set by main(); read in the forked children


def eval_data(n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """SOP-like: ~5 images per fine class, 12 super-classes, hierarchical Gaussian centres."""
    g = torch.Generator().manual_seed(seed)
    n_fine = max(24, n // 5)
    coarse_of = torch.arange(n_fine) % 12
    centres = 2.0 * torch.randn(12, d, generator=g)[coarse_of] + torch.randn(n_fine, d, generator=g)
    fine = torch.randint(0, n_fine, (n,), generator=g)
    x = centres[fine] + 2.0 * torch.randn(n, d, generator=g)
    return x, torch.stack([fine, coarse_of[fine]], 1)


def _sorted_rows(x: torch.Tensor, y: torch.Tensor, device: str, chunk: int) -> dict[str, float]:
    xn = F.normalize(x.to(device), dim=1)
    yd = y.to(device)
    sums = {"H-AP": 0.0, "ASI": 0.0, "NDCG-h": 0.0, "AP@level1": 0.0, "AP@level2": 0.0}
    count = 0
    n = x.shape[0]
    for a in range(0, n, chunk):
        s = xn[a : a + chunk] @ xn.T
        lv = shared_level(yd[a : a + chunk], yd)
        rows = torch.arange(s.shape[0], device=device)
        keep = torch.ones_like(s, dtype=torch.bool)
        keep[rows, rows + a] = False
        s, lv = s[keep].view(s.shape[0], n - 1), lv[keep].view(s.shape[0], n - 1)
        has = (lv == 2).any(1)
        s, lv = s[has], lv[has]
        sums["H-AP"] += float(h_average_precision(s, hap_relevance(lv, 2)).sum())
        sums["ASI"] += float(average_set_intersection(s, lv, 2).sum())
        sums["NDCG-h"] += float(hierarchical_ndcg(s, lv).sum())
        apl = ap_per_level(s, lv, 2).sum(0)
        sums["AP@level1"] += float(apl[0])
        sums["AP@level2"] += float(apl[1])
        count += int(has.sum())
    return {k: v / count for k, v in sums.items()}


def measure_eval(method: str, n: int, d: int, device: str) -> dict:
    x, y = eval_data(n, d)
    if device == "cuda":
        x, y = x.cuda(), y.cuda()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    if method == "rank_lab":
        res = retrieval_metrics(x, y, ks=(1,), metrics=EVAL_METRICS, device=device, progress=False)
    elif method == "sorted-rows":
        res = _sorted_rows(x, y, device, chunk=max(1, (64 * 2**20) // (8 * n)))
    else:  # naive: the whole N x N problem at once
        res = _sorted_rows(x, y, device, chunk=n)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {
        "seconds": time.perf_counter() - t0,
        "peak_mb": peak / 2**20,
        "H-AP": res["H-AP"],
        "ASI": res["ASI"],
    }


def loss_inputs(b: int, n_mem: int, d: int, device: str, seed: int = 0):
    """A hierarchical batch (2 super-classes, 4 images per class) and a memory that holds it."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(b, d, generator=g)
    fine = torch.arange(b) // 4
    lab = torch.stack([fine, (fine >= b // 8).long()], 1)  # two super-classes, as the SOP sampler
    if n_mem == 0:
        return emb.to(device), lab.to(device), None, None, None
    n_fine = max(b // 4, n_mem // 5)
    rf = torch.randint(0, n_fine, (n_mem,), generator=g)
    ref_lab = torch.stack([rf, rf % 12], 1)
    ref = torch.randn(n_mem, d, generator=g)
    ref[:b], ref_lab[:b] = emb, lab
    return (
        emb.to(device),
        lab.to(device),
        ref.to(device),
        ref_lab.to(device),
        torch.arange(b, device=device),
    )


def measure_loss(impl: str, b: int, n_mem: int, d: int, device: str, repeats: int) -> dict:
    loss = SupHAP(impl=impl)
    emb, lab, ref, ref_lab, self_index = loss_inputs(b, n_mem, d, device)
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times, value = [], 0.0
    for _ in range(repeats + 1):
        e = emb.clone().requires_grad_()
        t0 = time.perf_counter()
        out = loss(e, lab) if ref is None else loss(e, lab, ref, ref_lab, ref_self_index=self_index)
        out.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        value = float(out.detach())
    peak = (
        torch.cuda.max_memory_allocated()
        if device == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ) - base
    return {"time_ms": 1e3 * statistics.median(times[1:]), "peak_mb": peak / 2**20, "loss": value}


def _child(conn, fn, args, threads) -> None:  # pragma: no cover - runs in a forked process
    try:
        torch.set_num_threads(threads)
        if _FIXED_MMAP:
            import ctypes

            # M_MMAP_THRESHOLD: fixed, no dynamic adjustment
            ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)
        conn.send(fn(*args))
    except Exception as exc:
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    conn.close()


def isolated(fn, args, device: str, threads: int) -> dict:
    if device == "cuda":
        return fn(*args)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, threads))
    proc.start()
    res = parent.recv() if parent.poll(7200) else {"error": "timeout"}
    proc.join()
    if proc.exitcode not in (0, None) and "error" not in res:
        res = {"error": f"child exited with {proc.exitcode} (out of memory?)"}
    return res


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sizes", type=int, nargs="+", default=[10000, 60000])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--memories", type=int, nargs="+", default=[0, 1024, 4096])
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--naive-limit-gb", type=float, default=4.0)
    p.add_argument(
        "--sorted-max-n",
        type=int,
        default=20000,
        help="skip sorted-rows above this N (minutes on a CPU)",
    )
    p.add_argument("--direct-limit-gb", type=float, default=4.0)
    p.add_argument(
        "--fixed-mmap-threshold",
        action="store_true",
        help="CPU: glibc mmap threshold fixed at 64 KiB in the children",
    )
    args = p.parse_args(argv)
    global _FIXED_MMAP
    _FIXED_MMAP = bool(args.fixed_mmap_threshold)
    if args.quick:
        args.sizes, args.batch_size, args.memories, args.dim, args.repeats = (
            [1000, 2000],
            64,
            [0, 256],
            64,
            1,
        )
        args.naive_limit_gb = 0.1
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but no CUDA device is available")

    print(
        f"== evaluation (H-AP, ASI, NDCG-h, AP@level)  device={args.device} threads={args.threads} "
        f"d={args.dim}"
    )
    head = (
        f"{'N':>7} {'method':>12} {'seconds':>9} {'peak MiB':>9} {'x faster':>9} {'H-AP':>8} "
        f"{'ASI':>8}"
    )
    print(head + "\n" + "-" * len(head))
    for n in args.sizes:
        rows = {}
        for m in ("rank_lab", "sorted-rows", "naive"):
            if m == "naive" and 20 * n * n / 2**30 > args.naive_limit_gb:
                rows[m] = {"skipped": f"~{20 * n * n / 2**30:.1f} GB for the N x N matrices"}
            elif m == "sorted-rows" and n > args.sorted_max_n:
                rows[m] = {"skipped": f"N > --sorted-max-n={args.sorted_max_n}"}
            else:
                rows[m] = isolated(
                    measure_eval, (m, n, args.dim, args.device), args.device, args.threads
                )
        ref = rows["sorted-rows"].get("seconds")
        for m, r in rows.items():
            if "seconds" not in r:
                print(f"{n:>7} {m:>12}   {r.get('skipped') or r.get('error')}")
                continue
            x = f"{ref / r['seconds']:.2f}" if ref else "-"
            print(
                f"{n:>7} {m:>12} {r['seconds']:>9.2f} {r['peak_mb']:>9.0f} {x:>9} "
                f"{r['H-AP']:>8.4f} {r['ASI']:>8.4f}"
            )
        sys.stdout.flush()
    print("'x faster' = sorted-rows seconds / this method's seconds.\n")

    b = args.batch_size
    print(
        f"== Sup-H-AP loss, forward + backward, B={b}, memory holding the batch (N = memory or B)"
    )
    head = (
        f"{'memory':>7}{'N':>7} | {'rank_lab ms':>11}{'MB':>8} | {'direct ms':>10}{'MB':>8} | "
        f"{'time x':>7}{'mem x':>7}  note"
    )
    print(head + "\n" + "-" * len(head))
    for n_mem in args.memories:
        n = n_mem or b
        eff = isolated(
            measure_loss,
            ("efficient", b, n_mem, args.dim, args.device, args.repeats),
            args.device,
            args.threads,
        )
        est = 12 * b * n * n * 8 / 2**30
        direct, note = None, ""
        if est > args.direct_limit_gb:
            note = f"direct skipped: ~{est:.0f} GB (B x N x N)"
        else:
            direct = isolated(
                measure_loss,
                ("direct", b, n_mem, args.dim, args.device, args.repeats),
                args.device,
                args.threads,
            )
            if "error" in direct:
                note, direct = f"direct failed: {direct['error']}", None
        if "error" in eff:
            print(f"{n_mem:>7}{n:>7} | rank_lab failed: {eff['error']}")
            continue
        if direct is None:
            print(
                f"{n_mem:>7}{n:>7} | {eff['time_ms']:>11.1f}{eff['peak_mb']:>8.1f} | "
                f"{'-':>10}{'-':>8} | {'-':>7}{'-':>7}  {note}"
            )
        else:
            agree = abs(eff["loss"] - direct["loss"]) < 1e-4
            mem_x = direct["peak_mb"] / eff["peak_mb"] if eff["peak_mb"] > 1 else float("nan")
            print(
                f"{n_mem:>7}{n:>7} | {eff['time_ms']:>11.1f}{eff['peak_mb']:>8.1f} | "
                f"{direct['time_ms']:>10.1f}{direct['peak_mb']:>8.1f} | "
                f"{direct['time_ms'] / eff['time_ms']:>7.1f}{mem_x:>7.1f}  "
                f"{'values agree' if agree else 'VALUES DIFFER'}"
            )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
