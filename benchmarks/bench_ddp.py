"""Training throughput of :class:`rank_lab.train.distributed.DistributedTrainer` for 1, 2, ...
processes.

What is measured: items per second of the training loop (embedding forward, all-gather, rank loss
of the *global* batch, backward, DDP all-reduce, Adam step) on the synthetic open-set task with an
MLP embedding network, at a fixed global batch, so every row trains the same model up to float32
rounding (the ``final loss`` column): the W=2 row differs from W=1 by ~1e-7 at the first step
(matmuls over 128 instead of 256 rows) and the sharp sigmoid of SupAP amplifies that to ~1e-3
after 45 steps; with a float64 network the W=1 and W=2 losses are identical at all 45 steps.
The first epoch is a warm-up; the figure is the mean over the later epochs.

On a shared CPU, pass ``--threads 1``: OpenMP threads spinning on oversubscribed cores can make
the multi-threaded rows 10-40x slower than their single-threaded selves.

Rows:

* ``plain``       -- :class:`rank_lab.train.Trainer` in this process (the reference of the ratios);
* ``ddp W=1``     -- ``torchrun --nproc_per_node=1`` (no process group: the launcher's overhead
  only);
* ``ddp W=2`` ... -- ``torchrun --nproc_per_node=W`` with gloo on the CPU (each process gets
  ``cores // W`` threads) or NCCL on ``W`` GPUs (``--device cuda``: also the per-GPU throughput
  and the scaling efficiency ``per-GPU(W) / per-GPU(1)``).

Run by hand::

    python benchmarks/bench_ddp.py --quick            # CPU, 1 and 2 processes, < 30 s on an idle 2-core box
    python benchmarks/bench_ddp.py                    # CPU, larger MLP and batch
    python benchmarks/bench_ddp.py --device cuda      # 1, 2, 4 ... GPUs (all visible ones)
    python benchmarks/bench_ddp.py --multistage 64    # also DDP + multistage back-propagation

"peak MiB" is the largest peak RSS of the processes of the row (CPU) or the largest
``torch.cuda.max_memory_allocated`` of its ranks (CUDA).
"""  # noqa: E501

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

ROOT = Path(__file__).resolve().parents[1]

SIZES = {
    "quick": {
        "data": {"n_classes": 80, "per_class": 16, "dim": 16, "input_dim": 64},
        "model": {"hidden_dims": [256, 256], "embed_dim": 64},
        "batch_size": 64,
        "epochs": 3,
    },
    "full": {
        "data": {"n_classes": 400, "per_class": 20, "dim": 32, "input_dim": 256},
        "model": {"hidden_dims": [1024, 1024], "embed_dim": 128},
        "batch_size": 256,
        "epochs": 3,
    },
    "gpu": {
        "data": {"n_classes": 2000, "per_class": 16, "dim": 64, "input_dim": 1024},
        "model": {"hidden_dims": [4096, 4096], "embed_dim": 512},
        "batch_size": 512,
        "epochs": 3,
    },
}


def _config(size: str, device: str, multistage: int | None) -> dict:
    s = SIZES[size]
    return {
        "backbone": "mlp",
        **s["model"],
        "batch_size": s["batch_size"],
        "m_per_class": 4,
        "epochs": s["epochs"],
        "lr": 1e-3,
        "loss": "sup_ap",
        "eval_every": 0,
        "progress": False,
        "device": device,
        "amp": False,
        "multistage_chunk_size": multistage,
        "seed": 0,
    }


def _stats(history: list[dict], batch: int) -> dict:
    recs = history[1:] or history  # epoch 1 = warm-up
    t = sum(r["time"] for r in recs)
    n = sum(r["n_batches"] for r in recs)
    return {
        "items_per_s": n * batch / t,
        "step_ms": 1000 * t / n,
        "final_loss": history[-1]["loss"],
    }


def _peak_mib(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args: argparse.Namespace) -> None:
    """One rank of a ``torchrun`` row: train, then rank 0 writes the row's JSON."""
    import torch

    from rank_lab.data import make_open_set
    from rank_lab.train.distributed import DistributedTrainer
    from rank_lab.train.distributed.collectives import cleanup_distributed, init_distributed

    cfg = _config(args.size, args.device, args.multistage)
    env = init_distributed(device=args.device)
    split = make_open_set(seed=0, **SIZES[args.size]["data"])
    tr = DistributedTrainer(None, None, (split.x_train, split.y_train), None, cfg, env=env)
    tr.fit()
    mine = {**_stats(tr.history, cfg["batch_size"]), "peak_mib": _peak_mib(str(tr.device))}
    rows = [mine]
    if env.is_distributed:
        rows = [None] * env.world_size
        torch.distributed.all_gather_object(rows, mine)
    if env.is_main:
        Path(args.json).write_text(
            json.dumps(
                {
                    "world": env.world_size,
                    "ranks": rows,
                    "local_batch": cfg["batch_size"] // env.world_size,
                }
            )
        )
    cleanup_distributed(env)


def _torchrun(world: int, args: argparse.Namespace, threads: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench_ddp_")) / "row.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={world}",
        str(Path(__file__).resolve()),
        "--worker",
        "--json",
        str(out),
        "--size",
        args.size,
        "--device",
        args.device,
    ]
    if args.multistage:
        cmd += ["--multistage", str(args.multistage)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun W={world} failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (< 30 s on CPU)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument(
        "--worlds",
        default=None,
        help="comma-separated process counts (default 1,2 on CPU; 1,2,4.. GPUs)",
    )
    ap.add_argument(
        "--multistage", type=int, default=None, help="train with multistage chunks of this size"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads per process for every row (default: cores // W; 1 avoids OpenMP "
        "spinning on a shared, oversubscribed machine)",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--size", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    import torch

    cuda = args.device.startswith("cuda")
    args.size = args.size or ("quick" if args.quick else ("gpu" if cuda else "full"))
    cores = os.cpu_count() or 1
    if args.worlds:
        worlds = [int(w) for w in args.worlds.split(",")]
    elif cuda:
        n = torch.cuda.device_count()
        worlds = [w for w in (1, 2, 4, 8, 16) if w <= n]
    else:
        worlds = [1, 2]
    cfg = _config(args.size, args.device, args.multistage)
    batch = cfg["batch_size"]
    print(
        f"bench_ddp: size={args.size} device={args.device} global batch={batch} "
        f"model=MLP{tuple(cfg['hidden_dims'])}->{cfg['embed_dim']} loss=sup_ap cores={cores}"
    )

    from rank_lab.data import make_open_set
    from rank_lab.train import Trainer

    t0 = time.perf_counter()
    torch.set_num_threads(args.threads or cores)
    split = make_open_set(seed=0, **SIZES[args.size]["data"])
    plain = Trainer(None, None, (split.x_train, split.y_train), None, cfg)
    plain.fit()
    ref = {**_stats(plain.history, batch), "peak_mib": _peak_mib(str(plain.device))}
    rows = [
        (
            "plain (this process)",
            1,
            batch,
            args.threads or cores,
            ref["step_ms"],
            ref["items_per_s"],
            ref["items_per_s"],
            ref["peak_mib"],
            ref["final_loss"],
        )
    ]
    for w in worlds:
        threads = 1 if cuda else (args.threads or max(1, cores // w))
        res = _torchrun(w, args, threads=threads)
        tput = min(r["items_per_s"] for r in res["ranks"])  # the slowest rank sets the pace
        step = max(r["step_ms"] for r in res["ranks"])
        rows.append(
            (
                f"ddp W={w}",
                w,
                res["local_batch"],
                threads,
                step,
                tput,
                tput / w,
                max(r["peak_mib"] for r in res["ranks"]),
                res["ranks"][0]["final_loss"],
            )
        )
    head = (
        f"{'setting':22s} {'procs':>5s} {'local B':>7s} {'thr':>3s} {'step ms':>9s} "
        f"{'items/s':>9s} {'per-proc':>9s} {'vs plain':>8s} {'peak MiB':>9s} {'final loss':>11s}"
    )
    print(head)
    print("-" * len(head))
    for name, w, lb, thr, step, tput, per, mib, loss in rows:
        print(
            f"{name:22s} {w:5d} {lb:7d} {thr:3d} {step:9.1f} {tput:9.0f} {per:9.0f} "
            f"{tput / ref['items_per_s']:8.2f}x {mib:9.0f} {loss:11.6f}"
        )
    if cuda and len(rows) > 2:
        base = rows[1][6]
        print(
            "scaling efficiency per GPU: "
            + ", ".join(f"W={r[1]}: {r[6] / base:.2f}" for r in rows[1:])
        )
    print(
        f"(total {time.perf_counter() - t0:.1f} s; the final losses agree: same global batches on "
        "every W)"
    )


if __name__ == "__main__":
    main()
