"""How the engine cuts its work: rows per block, threads, reused buffers, progress bars.

Internal module of :mod:`rank_lab.metrics.engine` (the lowest floor of the engine): every route
processes queries in blocks of rows whose size follows a memory budget, spreads independent blocks
over Python threads with single-threaded torch, and reuses one score buffer per thread. Inputs are
validated by the public entry points (``retrieval_metrics``, ``knn_search``, ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from queue import SimpleQueue

import torch

from rank_lab._progress import tqdm

__all__ = ["progress", "chunk_rows", "torch_threads", "run_parallel", "BufferPool"]


def progress(iterable: Iterable, total: int, show: bool, desc: str) -> Iterable:
    """``iterable`` wrapped in a tqdm bar when ``show`` (left as is otherwise)."""
    if not show:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False)


def chunk_rows(
    n_cols: int,
    max_memory_mb: float,
    chunk_size: int | None = None,
    *,
    bytes_per_item: int = 24,
    max_rows: int = 4096,
) -> int:
    """Rows per block: ``chunk_size`` when given, else as many as fit ``max_memory_mb``.

    Args:
        n_cols: columns of one row of the block's work arrays (e.g. the gallery size N), >= 1.
        max_memory_mb: memory budget of one block, in MiB (> 0).
        chunk_size: explicit rows per block (a positive int) or None.
        bytes_per_item: bytes the route holds per (row, column) pair (scores, masks, counts).
        max_rows: upper limit of the derived size.

    Returns:
        A positive int.
    """
    if chunk_size is not None:
        return int(chunk_size)
    per_row = max(1, int(bytes_per_item) * int(n_cols))
    return max(1, min(int(max_rows), int(max_memory_mb * 2**20 // per_row)))


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` torch intra-op threads, then restore the previous number.

    The routes use ``torch_threads(1)`` around work spread over Python threads (one tile or block
    of rows each): every small op then runs without an OpenMP barrier, which on a shared, loaded
    machine costs more than the op itself, and the cores stay busy with independent blocks.
    """
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def run_parallel(
    fn: Callable[[object], None],
    items: list,
    show: bool,
    dev: torch.device,
    desc: str = "certified search",
) -> None:
    """``fn`` on every item: on the CPU in ``torch.get_num_threads()`` Python threads, each with
    single-threaded torch (no OpenMP barrier per small op) and gradual underflow; in order on GPUs.

    The caller holds :func:`~rank_lab.metrics.engine.scores.exact.exact_matmul` around the call:
    the matmul flags it pins are process-wide, and autocast is off in new threads.
    """
    threads = max(1, torch.get_num_threads())
    if dev.type != "cpu" or threads == 1 or len(items) == 1:
        for it in progress(items, len(items), show, desc):
            fn(it)
        return

    def work(it: object) -> None:
        torch.set_flush_denormal(False)  # per thread: the canonical score keeps subnormals
        fn(it)

    with torch_threads(1), ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in progress(pool.map(work, items), len(items), show, desc):
            pass


class BufferPool:
    """Score buffers reused across blocks on the CPU, one per thread.

    A fresh block of scores costs page faults about as long as the product itself (the allocator
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
