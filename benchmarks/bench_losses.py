"""Forward+backward time and peak memory of the rank losses: rank_lab (row kernel) vs direct (Q x N
x N).

Usage::

    python benchmarks/bench_losses.py            # B in {64, 128, 256} x memory in {0, 4096, 16384}
    python benchmarks/bench_losses.py --quick    # a small grid, < 30 s on a 2-core CPU
    python benchmarks/bench_losses.py --device cuda --memories 0 16384 59551   # SOP-size memory on a GPU

Setting (the papers' training): a batch of B embeddings (d = 512, m = 4 images per class) queries
the batch plus a memory of past embeddings (XBM, enqueue-then-read: the memory holds the batch,
so N = memory size, or N = B without memory). Memory labels come from a pool of ``N / 5`` classes
(about 5 images per class, as SOP), so a query has ~3 in-batch and a few memory positives.

Peak memory: on CPU each measurement runs in a forked child process and reports the growth of its
maximum resident set size during the timed calls (inputs excluded); on CUDA,
``torch.cuda.max_memory_allocated`` minus the inputs. The direct implementation builds
``Q x N x N`` tensors (several of them, forward and backward); it is skipped where its estimate
exceeds ``--direct-limit-gb``, with the estimate in the table.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rank_lab.losses import SmoothAP, SupAP, SupRecallAtK  # noqa: E402

LOSSES = {"sup_ap": SupAP, "smooth_ap": SmoothAP, "sup_recall": SupRecallAtK}
#: float32 copies of Q x N x N held at once by the direct forward + backward (diff, masks, step
#: pieces, saved tensors): measured ~10 for SupAP, used for the skip estimate.
DIRECT_COPIES = 10


def make_inputs(b: int, n_mem: int, d: int, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(b, d, generator=gen)
    lab = torch.arange(b) // 4
    if n_mem == 0:
        return emb.to(device), lab.to(device), None, None, None
    n_cls = max(b // 4, n_mem // 5)
    ref = torch.randn(n_mem, d, generator=gen)
    ref_lab = torch.randint(0, n_cls, (n_mem,), generator=gen)
    ref[:b] = emb  # enqueue-then-read: the batch is in the memory
    ref_lab[:b] = lab
    return (
        emb.to(device),
        lab.to(device),
        ref.to(device),
        ref_lab.to(device),
        torch.arange(b, device=device),
    )


def run_once(loss, emb, lab, ref, ref_lab, self_index) -> float:
    e = emb.clone().requires_grad_()
    t0 = time.perf_counter()
    if ref is None:
        out = loss(e, lab)
    else:
        out = loss(e, lab, ref, ref_lab, ref_self_index=self_index)
    out.backward()
    if e.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(name: str, impl: str, b: int, n_mem: int, d: int, device: str, repeats: int) -> dict:
    torch.manual_seed(0)
    loss = LOSSES[name](impl=impl)
    emb, lab, ref, ref_lab, self_index = make_inputs(b, n_mem, d, device)
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = [run_once(loss, emb, lab, ref, ref_lab, self_index) for _ in range(repeats + 1)][1:]
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"time_ms": 1e3 * statistics.median(times), "peak_mb": peak / 2**20}


def _child(conn, *args) -> None:  # pragma: no cover - runs in a forked process
    try:
        torch.set_num_threads(args[-1])
        conn.send(measure(*args[:-1]))
    except Exception as exc:  # report, do not hang the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    conn.close()


def measure_isolated(name, impl, b, n_mem, d, device, repeats, threads) -> dict:
    if device == "cuda":
        return measure(name, impl, b, n_mem, d, device, repeats)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child, args=(child, name, impl, b, n_mem, d, device, repeats, threads)
    )
    proc.start()
    res = parent.recv() if parent.poll(3600) else {"error": "timeout"}
    proc.join()
    if proc.exitcode not in (0, None) and "error" not in res:
        res = {"error": f"child exited with {proc.exitcode} (out of memory?)"}
    return res


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="small grid (B=64, memory 0 and 512), < 30 s"
    )
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--memories", type=int, nargs="+", default=[0, 4096, 16384])
    p.add_argument(
        "--losses", nargs="+", default=["sup_ap", "smooth_ap", "sup_recall"], choices=sorted(LOSSES)
    )
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument(
        "--direct-limit-gb",
        type=float,
        default=4.0,
        help="skip the direct implementation above this estimate",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.batch_sizes, args.memories, args.losses, args.repeats = [64], [0, 512], ["sup_ap"], 1
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but no CUDA device is available")

    print(
        f"device={args.device} threads={args.threads} d={args.dim} repeats={args.repeats} (median "
        "time of fwd+bwd)"
    )
    header = (
        f"{'loss':<11}{'B':>5}{'memory':>8}{'N':>7} | {'rank_lab ms':>11}{'MB':>9} | "
        f"{'direct ms':>10}{'MB':>9} | {'time x':>7}{'mem x':>7}  note"
    )
    print(header)
    print("-" * len(header))
    for name in args.losses:
        for b in args.batch_sizes:
            for n_mem in args.memories:
                n = n_mem if n_mem else b
                eff = measure_isolated(
                    name, "efficient", b, n_mem, args.dim, args.device, args.repeats, args.threads
                )
                est_gb = DIRECT_COPIES * b * n * n * 4 / 2**30
                note = ""
                if est_gb > args.direct_limit_gb:
                    direct = None
                    note = f"direct skipped: ~{est_gb:.0f} GB (Q x N x N)"
                else:
                    direct = measure_isolated(
                        name, "direct", b, n_mem, args.dim, args.device, args.repeats, args.threads
                    )
                    if "error" in direct:
                        note, direct = f"direct failed: {direct['error']}", None
                if "error" in eff:
                    print(f"{name:<11}{b:>5}{n_mem:>8}{n:>7} | rank_lab failed: {eff['error']}")
                    continue
                e_ms, e_mb = eff["time_ms"], eff["peak_mb"]
                if direct is None:
                    print(
                        f"{name:<11}{b:>5}{n_mem:>8}{n:>7} | {e_ms:>11.1f}{e_mb:>9.1f} | "
                        f"{'-':>10}{'-':>9} | {'-':>7}{'-':>7}  {note}"
                    )
                else:
                    d_ms, d_mb = direct["time_ms"], direct["peak_mb"]
                    mem_x = d_mb / e_mb if e_mb > 1 else float("nan")
                    print(
                        f"{name:<11}{b:>5}{n_mem:>8}{n:>7} | {e_ms:>11.1f}{e_mb:>9.1f} | "
                        f"{d_ms:>10.1f}{d_mb:>9.1f} | {d_ms / e_ms:>7.1f}{mem_x:>7.1f}  {note}"
                    )
                sys.stdout.flush()


if __name__ == "__main__":
    main()
