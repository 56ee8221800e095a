"""Few-shot retrieval and classification by retrieval: episode throughput, adapted description of a
base, and the Mahalanobis classifier, each against a reference run in the same process.

Rows:

* ``train episode``  -- one rCNAPS training step (support -> FiLM parameters -> adapted batch of
  ``N m`` images -> class-specific Smooth-AP, eq. 4.13 -> backward -> Adam), episodes/s; the
  reference is the plain (unadapted) Smooth-AP step on the same batch, so the ratio is the cost
  of the adaptation machinery. ``tiny`` is the smoke-mode CNN, ``resnet18`` the thesis' network.
* ``describe base``  -- the base described once per target class (the few-shot retrieval
  protocol): ``T`` tasks mixed in one pass (:func:`rank_lab.fewshot.rcnaps_describe_tasks`) vs a
  loop of one pass per task (reference).
* ``mahalanobis``    -- :class:`rank_lab.fewshot.MahalanobisClassifier` (Cholesky, batched
  quadratic forms, query chunks) vs the Simple CNAPS code's way (``torch.inverse`` per class and a
  ``repeat`` of every query for every class, the reference), for a land-use sized problem.

Run by hand::

    python benchmarks/bench_fewshot.py --quick            # < 30 s on a CPU
    python benchmarks/bench_fewshot.py                    # thesis sizes where the device allows
    python benchmarks/bench_fewshot.py --device cuda

"rate" is episodes/s (train), images described/s (describe) or queries/s (mahalanobis).
"peak MiB" is ``torch.cuda.max_memory_allocated`` on CUDA and the growth of the process' peak RSS
on the CPU (the first row that needs the memory pays for it; read CPU figures as indicative).
"""

from __future__ import annotations

import argparse
import time

import torch


def _peak_reset(dev: torch.device) -> float:
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return 0.0
    return _rss_peak()


def _rss_peak() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0  # pragma: no cover


def _peak(dev: torch.device, base: float) -> float:
    if dev.type == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    return _rss_peak() - base


def _timeit(fn, dev: torch.device, reps: int) -> tuple[float, float]:
    fn()  # warm-up
    base = _peak_reset(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps, _peak(dev, base)


def bench_train(
    backbone: str, size: int, n_way: int, m: int, k: int, dev: torch.device, reps: int
) -> list[tuple]:
    from rank_lab.fewshot import build_rcnaps, class_specific_smooth_ap
    from rank_lab.losses import SmoothAP

    torch.manual_seed(0)
    model = build_rcnaps(
        backbone,
        stem_stride=2,
        encoder_width=32 if backbone == "tiny" else 64,
        encoder_depth=4 if backbone == "tiny" else 5,
    ).to(dev)
    x = torch.rand(n_way * m, 3, size, size, device=dev)
    s = torch.rand(k, 3, size, size, device=dev)
    y = torch.arange(n_way, device=dev).repeat_interleave(m)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    plain_loss = SmoothAP()
    model.train()

    def adapted():
        loss = class_specific_smooth_ap(model(x, s), y, 0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    model.set_train_backbone(True)
    opt_plain = torch.optim.Adam(
        [p for n, p in model.named_parameters() if n.startswith("extractor.")], lr=1e-4
    )

    def plain():
        loss = plain_loss(model(x), y)
        opt_plain.zero_grad(set_to_none=True)
        loss.backward()
        opt_plain.step()

    t_ref, m_ref = _timeit(plain, dev, reps)
    model.set_train_backbone(False)
    model.train()
    t, mem = _timeit(adapted, dev, reps)
    what = f"{backbone} {size}px N*m={n_way * m} k={k}"
    return [
        ("train episode", what, "rCNAPS (eq. 4.13)", t, 1 / t, mem, t_ref / t),
        ("train episode", what, "plain Smooth-AP (ref)", t_ref, 1 / t_ref, m_ref, 1.0),
    ]


def bench_describe(
    backbone: str, size: int, n: int, tasks: int, dev: torch.device, reps: int
) -> list[tuple]:
    from rank_lab.fewshot import build_rcnaps, rcnaps_describe, rcnaps_describe_tasks

    torch.manual_seed(0)
    model = build_rcnaps(backbone, stem_stride=2, encoder_width=32, encoder_depth=4).to(dev).eval()
    images = torch.rand(n, 3, size, size)
    sup = torch.rand(tasks, 5, 3, size, size)
    describe = rcnaps_describe(model, images, batch_size=256, device=dev)
    t_ref, m_ref = _timeit(lambda: [describe(sup[t]) for t in range(tasks)], dev, reps)
    t, mem = _timeit(
        lambda: rcnaps_describe_tasks(model, images, sup, batch_size=1024, device=dev), dev, reps
    )
    what = f"{backbone} {size}px n={n} T={tasks}"
    return [
        ("describe base", what, "T tasks per pass", t, tasks * n / t, mem, t_ref / t),
        ("describe base", what, "one pass per task (ref)", t_ref, tasks * n / t_ref, m_ref, 1.0),
    ]


def _simplecnaps_reference(
    support: torch.Tensor, labels: torch.Tensor, queries: torch.Tensor
) -> torch.Tensor:
    """The Simple CNAPS code's classifier (inverse per class, queries repeated per class)."""

    def cov(x):
        x = x.t()
        x = x - x.mean(1, keepdim=True)
        return x @ x.t() / (x.shape[1] - 1)

    task = cov(support)
    means, precs = [], []
    for c in torch.unique(labels):
        xc = support[labels == c]
        lam = xc.shape[0] / (xc.shape[0] + 1)
        means.append(xc.mean(0))
        precs.append(
            torch.inverse(
                lam * cov(xc)
                + (1 - lam) * task
                + torch.eye(support.shape[1], device=support.device, dtype=support.dtype)
            )
        )
    means, precs = torch.stack(means), torch.stack(precs)
    c, q = means.shape[0], queries.shape[0]
    rep_t = queries.repeat(1, c).view(-1, means.shape[1])
    rep_m = means.repeat(q, 1)
    diff = (rep_m - rep_t).view(q, c, -1).permute(1, 0, 2)
    return -(torch.matmul(diff, precs) * diff).sum(2).t()


def bench_mahalanobis(
    c: int, k: int, d: int, nq: int, dev: torch.device, reps: int, max_ref_gib: float
) -> list[tuple]:
    from rank_lab.fewshot import MahalanobisClassifier

    g = torch.Generator().manual_seed(0)
    support = torch.nn.functional.normalize(
        torch.randn(c * k, d, generator=g, dtype=torch.float64), dim=1
    ).to(dev)
    labels = torch.arange(c).repeat_interleave(k).to(dev)
    queries = torch.nn.functional.normalize(
        torch.randn(nq, d, generator=g, dtype=torch.float64), dim=1
    ).to(dev)
    what = f"C={c} k={k} D={d} queries={nq}"
    t, mem = _timeit(
        lambda: MahalanobisClassifier(half=False).fit(support, labels).logits(queries), dev, reps
    )
    ref_gib = 3 * nq * c * d * 8 / 2**30
    if ref_gib > max_ref_gib:
        return [
            ("mahalanobis", what, "rank_lab (Cholesky, chunks)", t, nq / t, mem, float("nan")),
            (
                "mahalanobis",
                what,
                f"Simple CNAPS code: skipped (~{ref_gib:.1f} GiB)",
                float("nan"),
                float("nan"),
                float("nan"),
                1.0,
            ),
        ]
    t_ref, m_ref = _timeit(lambda: _simplecnaps_reference(support, labels, queries), dev, reps)
    ours = MahalanobisClassifier(half=False).fit(support, labels).logits(queries)
    err = float((ours - _simplecnaps_reference(support, labels, queries)).abs().max())
    return [
        (
            "mahalanobis",
            what,
            f"rank_lab (Cholesky, chunks), max diff {err:.1e}",
            t,
            nq / t,
            mem,
            t_ref / t,
        ),
        ("mahalanobis", what, "Simple CNAPS code (ref)", t_ref, nq / t_ref, m_ref, 1.0),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (< 30 s on a CPU)")
    ap.add_argument("--device", default=None, help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads on the CPU")
    ap.add_argument(
        "--max-ref-gib",
        type=float,
        default=4.0,
        help="skip the Simple CNAPS reference above this memory",
    )
    args = ap.parse_args()
    from rank_lab.utils import get_device

    dev = get_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    reps = args.reps or (2 if args.quick else 5)
    rows: list[tuple] = []
    if args.quick:
        rows += bench_train("tiny", 24, 4, 6, 5, dev, reps)
        rows += bench_train("resnet18", 32, 2, 4, 5, dev, reps)
        rows += bench_describe("tiny", 24, 120, 10, dev, reps)
        rows += bench_mahalanobis(21, 5, 128, 2000, dev, reps, args.max_ref_gib)
    else:
        big = 320 if dev.type == "cuda" else 128
        rows += bench_train("tiny", 32, 6, 10, 5, dev, reps)
        rows += bench_train("resnet18", big, 6, 10, 5, dev, reps)  # thesis: 320 px, N m = 60, k = 5
        rows += bench_describe("tiny", 32, 2000, 58, dev, reps)  # ALEGORIA: 58 classes
        rows += bench_mahalanobis(45, 5, 512, 31500, dev, reps, args.max_ref_gib)  # RESISC45, 512-d
    print(f"device: {dev} | threads: {torch.get_num_threads()} | reps: {reps}")
    print(
        f"{'row':<14} {'size':<30} {'method':<46} {'sec/call':>9} {'rate':>10} {'peak MiB':>9} "
        f"{'x vs ref':>8}"
    )
    for row, size, method, t, rate, mem, ratio in rows:
        print(
            f"{row:<14} {size:<30} {method:<46} {t:>9.4f} {rate:>10.1f} {mem:>9.1f} {ratio:>8.2f}"
        )


if __name__ == "__main__":
    main()
