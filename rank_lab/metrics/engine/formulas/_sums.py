"""Compiled CPU forms of the dense row sums of the hierarchical formulas (numba).

Internal module of :mod:`rank_lab.metrics.engine.formulas` (inputs trusted, CPU arrays). The
hierarchical metrics read every positive of a row (a whole coarse class: thousands per query at
gallery scale); their torch forms build several ``(c, P)`` temporaries per sum (positions,
gathers, scatters, cumulative sums), which cost more than the stage-1 scores of the block. Each
kernel here makes one pass per row and performs **the same floating-point operations in the same
order** as the torch form it replaces -- products of the same operands, sums accumulated left to
right from 0 like :func:`~rank_lab.metrics.engine.formulas.positions.row_sums` -- so its results
are bit-identical (``tests/metrics/test_level_sums.py``). Tables that involve a transcendental
function (``1 / log2(1 + n)``) are computed by torch and passed in, never recomputed here.

* :func:`rank_over_position` -- ``sum_i i * t[pos_i]`` over the valid positives (``t = 1/n``:
  the sum of precisions of AP / H-AP).
* :func:`table_sum` -- ``sum_i t[pos_i]`` over the valid positives (``t``: NDCG discounts).
* :func:`asi_bulk` -- ASI's sum over ``n <= |Omega+|`` of the level-1 set intersection
  ``min(a_1(n), b_1(n)) / n``.
* :func:`pack_high` -- the positives of level >= 2 packed to the left with their ranks and
  positions.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["rank_over_position", "table_sum", "asi_bulk", "pack_high"]


@numba.njit(cache=True, nogil=True)
def rank_over_position(
    lv: np.ndarray, ge: np.ndarray, valid: np.ndarray, table: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out[r] = sum_i (i + 1) * (table[pos_i] if valid[r, i] else 0)``, ``pos_i = i + 1 +
    ge[r, i]``, accumulated left to right (``row_sums(rank * inv)``)."""
    for r in range(lv.shape[0]):
        acc = 0.0
        for i in range(lv.shape[1]):
            x = table[i + 1 + ge[r, i]] if valid[r, i] else 0.0
            acc += np.float64(i + 1) * x
        out[r] = acc


@numba.njit(cache=True, nogil=True)
def table_sum(
    ge: np.ndarray, valid: np.ndarray, table: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out[r] = sum_i (table[pos_i] if valid[r, i] else 0)``, accumulated left to right."""
    for r in range(ge.shape[0]):
        acc = 0.0
        for i in range(ge.shape[1]):
            acc += table[i + 1 + ge[r, i]] if valid[r, i] else 0.0
        out[r] = acc


@numba.njit(cache=True, nogil=True)
def asi_bulk(
    lv: np.ndarray,
    ge: np.ndarray,
    valid: np.ndarray,
    n_pos: np.ndarray,
    n_high: np.ndarray,
    n_level1: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """ASI's level-1 sum (:func:`~rank_lab.metrics.engine.formulas.levels.asi`): for ``n = 1 ..
    P`` (the block's width), ``min(a(n) - a_hi(n), b(n)) * table[n]`` where ``n <= n_pos[r]``,
    else 0, accumulated left to right; ``a(n)``: valid positives at positions ``<= n``,
    ``a_hi(n)``: those of level >= 2, ``b(n) = min(max(n - n_high, 0), n_level1)``."""
    c, width = lv.shape
    hit = np.zeros(width + 2, dtype=np.int64)
    hhit = np.zeros(width + 2, dtype=np.int64)
    for r in range(c):
        hit[:] = 0
        hhit[:] = 0
        for i in range(width):
            p = min(i + 1 + ge[r, i], width + 1)
            if valid[r, i]:
                hit[p] += 1
            if lv[r, i] >= 2:
                hhit[p] += 1
        acc = 0.0
        a_all, a_hi = 0, 0
        for n in range(1, width + 1):
            a_all += hit[n]
            a_hi += hhit[n]
            if n <= n_pos[r]:
                b = min(max(n - n_high[r], 0), n_level1[r])
                acc += np.float64(min(a_all - a_hi, b)) * table[n]
        out[r] = acc


@numba.njit(cache=True, nogil=True)
def pack_high(lv: np.ndarray, ge: np.ndarray) -> tuple:  # pragma: no cover - compiled
    """The positives of level >= 2 of every row, packed to the left in their order:
    ``(level, rank, pos)`` ``(c, P2)`` int64 (``P2 = max(1, most per row)``; padding: level 0,
    rank 1, pos 1)."""
    c, width = lv.shape
    p2 = 1
    for r in range(c):
        k = 0
        for i in range(width):
            k += lv[r, i] >= 2
        p2 = max(p2, k)
    out_lv = np.zeros((c, p2), dtype=np.int64)
    out_rank = np.ones((c, p2), dtype=np.int64)
    out_pos = np.ones((c, p2), dtype=np.int64)
    for r in range(c):
        k = 0
        for i in range(width):
            if lv[r, i] >= 2:
                out_lv[r, k], out_rank[r, k], out_pos[r, k] = lv[r, i], i + 1, i + 1 + ge[r, i]
                k += 1
    return out_lv, out_rank, out_pos
