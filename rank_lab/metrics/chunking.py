"""Chunking and progress helpers shared by the evaluation routes of :mod:`rank_lab.metrics`.

The engine (:mod:`rank_lab.metrics.engine`), the hierarchical route
(:mod:`rank_lab.metrics.hierarchical_route`) and the certified neighbour search
(:mod:`rank_lab.metrics.certified`) process queries in blocks of rows whose size follows a memory
budget; they share these two helpers (a module of its own so that none of them imports another
one's private names, issue 17).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

import torch

from rank_lab._progress import tqdm
from rank_lab._validation import check_float, check_positive_int

__all__ = ["progress", "chunk_rows", "torch_threads"]


def progress(iterable: Iterable, total: int, show: bool, desc: str) -> Iterable:
    """``iterable`` wrapped in a tqdm bar when ``show`` (left as is otherwise).

    Args:
        iterable: what to iterate over.
        total: its length (for the bar).
        show: whether to draw the bar.
        desc: the bar's label.
    """
    if not show:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False)


def chunk_rows(n_cols: int, max_memory_mb: float, chunk_size: int | None = None, *, bytes_per_item: int = 24,
               max_rows: int = 4096) -> int:
    """Rows per chunk: ``chunk_size`` when given, else as many as fit ``max_memory_mb``.

    Args:
        n_cols: columns of one row of the chunk's work arrays (e.g. the gallery size N).
        max_memory_mb: memory budget of one chunk, in MiB.
        chunk_size: explicit rows per chunk (a positive int) or None.
        bytes_per_item: bytes the route holds per (row, column) pair (scores, masks, counts).
        max_rows: upper limit of the derived size.

    Returns:
        A positive int.

    Raises:
        ValueError / TypeError: a bad argument, named.
    """
    if chunk_size is not None:
        return check_positive_int(chunk_size, "chunk_size")
    n_cols = check_positive_int(n_cols, "n_cols")
    max_memory_mb = check_float(max_memory_mb, "max_memory_mb", low=0, low_open=True)
    per_row = max(1, check_positive_int(bytes_per_item, "bytes_per_item") * n_cols)
    return max(1, min(int(max_rows), int(max_memory_mb * 2**20 // per_row)))


def torch_threads(n: int) -> AbstractContextManager[None]:
    """A context manager that runs a block with ``n`` torch intra-op threads, then restores them.

    The routes use ``torch_threads(1)`` around work spread over Python threads (one tile or block of
    rows each): every small op then runs without an OpenMP barrier, which on a shared, loaded
    machine costs more than the op itself, and the cores stay busy with independent tiles.

    Raises:
        ValueError / TypeError: ``n`` is not a positive int.
    """
    n = check_positive_int(n, "n")

    @contextmanager
    def block() -> Iterator[None]:
        saved = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(saved)

    return block()
