"""Stage 1 of the certified neighbour search (:mod:`rank_lab.metrics.certified`): the reduced-precision
inputs with their error bound, thread-parallel tiles, reused score buffers and row selections.

Internal module: the names are shared by the certified-search modules, not part of the public API.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from queue import SimpleQueue

import numpy as np
import torch

from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.chunking import torch_threads
from rank_lab.metrics.exact_scores import exact_matmul
from rank_lab.metrics.score_bounds import reduced_copy, reduced_matmul, score_bound, threshold

__all__ = ["BufferPool", "Stage1", "run_parallel", "kth_largest", "block_size"]


def block_size(width: int, kmax: int) -> int:
    """Items per block of the tiled scan's block maxima: a power of two <= 64 leaving >= 4 kmax blocks per tile."""
    b = 1
    while b < 64 and (2 * b) * 4 * kmax <= width:
        b *= 2
    return b


class BufferPool:
    """Score buffers reused across tiles on the CPU, one per thread.

    A fresh tile of scores costs page faults about as long as the product itself (the allocator
    returns large blocks to the system); reusing one buffer per thread removes them. On other
    devices :meth:`take` yields None (the caching allocator already reuses memory).
    """

    def __init__(self, numel: int, dtype: torch.dtype, dev: torch.device, n_items: int) -> None:
        self.queue: SimpleQueue = SimpleQueue()
        self.cpu = dev.type == "cpu"
        if self.cpu:
            for _ in range(max(1, min(torch.get_num_threads(), n_items))):
                self.queue.put(torch.empty(numel, dtype=dtype))

    @contextlib.contextmanager
    def take(self) -> Iterator[torch.Tensor | None]:
        """A flat buffer for the duration of the block (None off the CPU)."""
        if not self.cpu:
            yield None  # pragma: no cover - GPU only
            return
        buf = self.queue.get()
        try:
            yield buf
        finally:
            self.queue.put(buf)


class Stage1:
    """Stage-1 inputs on the compute device and the per-query bound."""

    def __init__(self, q: torch.Tensor, g: torch.Tensor, fmt: torch.dtype, symmetric: bool) -> None:
        self.work = q.dtype
        self.fmt = fmt
        self.d = q.shape[1]
        q64 = q.to(torch.float64).norm(dim=1)
        g64 = g.to(torch.float64).norm(dim=1)
        if fmt == self.work:
            self.qr, self.gr = q, g
            self.q_scale = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
            g_scale = 0
            qn, qe, gn, ge = q64, torch.zeros_like(q64), g64, torch.zeros_like(g64)
        else:
            self.gr, gs, gn, ge = reduced_copy(g, fmt, per_row_scale=False)
            if symmetric:
                self.qr, self.q_scale, qn, qe = self.gr, gs, gn, ge
            else:
                self.qr, self.q_scale, qn, qe = reduced_copy(q, fmt, per_row_scale=True)
            g_scale = int(gs[0]) if gs.numel() else 0
        self.exp = (self.q_scale + g_scale).to(torch.float64)  # stage-1 scores are 2^exp times too large
        self.out_fmt = torch.float32 if fmt == torch.float32 else fmt
        flush = torch.ldexp(torch.ones_like(q64), -self.exp)
        sample = reduced_matmul(self.qr[:1], self.gr[:1])[1] if fmt != self.work else self.work
        self.out_fmt = sample
        self.a, self.c, self.eta = score_bound(q64 * 1.0, qn, qe, float(g64.max()), float(gn.max()), float(ge.max()),
                                               self.d, self.work, fmt, sample, flush)
        self.cmp = torch.float64 if self.work == torch.float64 else torch.float32

    def sure_thresholds(self, kth_scaled: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For rows whose k-th stage-1 score is ``kth``: ``(sure, H)``.

        ``H = hi(kth) + A`` (float64, unscaled) is an upper bound of the k-th canonical score, and an
        item with stage-1 score ``>= sure`` (scaled units, rounded up) has ``lo(s^) - A >= H``: its
        canonical score reaches the k-th one whatever the rounding.
        """
        e = self.exp[rows]
        u = torch.ldexp(kth_scaled.to(torch.float64), -e)
        a, eta = self.a[rows], self.eta[rows]
        h = u + self.c * u.abs() + eta + a
        h = h + 2.0**-40 * (u.abs() + a + eta)
        y = h + a + eta
        x = torch.where(y >= 0, y / (1.0 - self.c), y / (1.0 + self.c))
        x = torch.ldexp(x + 2.0**-40 * (y.abs() + x.abs()), e)
        up = x.to(self.cmp)
        up = torch.where(up.to(torch.float64) < x, torch.nextafter(up, torch.full_like(up, torch.inf)), up)
        return up, h

    def thresholds(self, lam_scaled: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Stage-1 thresholds (scaled units, comparison dtype) of ``rows`` from their ``lam``."""
        e = self.exp[rows]
        lam = torch.ldexp(lam_scaled.to(torch.float64), -e)
        t = threshold(lam, self.a[rows], self.c, self.eta[rows], torch.float64)
        scaled = torch.ldexp(t, e)
        down = scaled.to(self.cmp)
        return torch.where(down.to(torch.float64) > scaled, torch.nextafter(down, torch.full_like(down, -torch.inf)), down)


def kth_largest(s: torch.Tensor, kq: torch.Tensor) -> torch.Tensor:
    """The ``kq[r]``-th largest entry of every row of ``s`` (a selection, not a sort)."""
    if s.device.type == "cpu":
        a = s.to(torch.float64 if s.dtype == torch.float64 else torch.float32).numpy()
        n = a.shape[1]
        kth = sorted({n - int(k) for k in kq.tolist()})
        part = np.partition(a, kth, axis=1)
        return torch.from_numpy(part[np.arange(a.shape[0]), n - kq.numpy()])
    kmax = int(kq.max())  # pragma: no cover - GPU only
    return torch.topk(s.float() if s.dtype != torch.float64 else s, kmax, dim=1).values.gather(1, (kq - 1).to(s.device)[:, None])[:, 0]


def run_parallel(fn: Callable[[object], None], items: list, show: bool, dev: torch.device) -> None:
    """``fn`` on every item inside :func:`exact_matmul`: on the CPU in ``torch.get_num_threads()``
    Python threads, each with single-threaded torch (no OpenMP barrier per small op); in order on GPUs."""
    threads = max(1, torch.get_num_threads())
    with exact_matmul():
        if dev.type != "cpu" or threads == 1 or len(items) == 1:
            for it in progress_bar(items, len(items), show, "certified search"):
                fn(it)
            return
        with torch_threads(1), ThreadPoolExecutor(max_workers=threads) as pool:
            for _ in progress_bar(pool.map(fn, items), len(items), show, "certified search"):
                pass

