"""Compiled CPU kernels of the certified counting route (numba; GPUs run the torch form of the
route).

Internal module of :mod:`rank_lab.metrics.engine.routes.counting` (inputs trusted). Each kernel
works row by row on a block of queries, releases the GIL (blocks run in Python threads) and computes
in one fixed order per row, so a row's result does not depend on its block or thread:

* :func:`emit_above` -- one pass over a block of stage-1 scores: every item at or above its row's
  threshold, outside the row's positive range and not the query itself (blocks of 64 items without
  a hit are skipped after one vectorised comparison). 16-bit scores are compared as their int16 /
  uint16 bit patterns, which order them like their values on either side of zero.
* :func:`emit_later` -- the half-product route's hand-over: a band's block read by column (the
  scores of queries = gallery are symmetric), every pair at or above the later query's cut, grouped
  by query.
* :func:`canonical_cpu` -- the canonical score of pairs: elementwise float products (no fused
  multiply-add), the fixed pairwise tree; bit-identical to
  :func:`~rank_lab.metrics.engine.scores.exact.canonical_pairs`.
* :func:`range_scan` -- per row, the lowest stage-1 score of its positives (the threshold of the
  negatives that can matter) and how many reach a guessed cut.
* :func:`large_rows` -- rows with many positives: the positives in canonical order (key desc, kind
  asc) with the negatives ranked before each. The items are ordered by a counting sort on their
  16-bit stage-1 keys and grouped by equal score; only groups whose interval overlaps one of another
  kind are re-scored and sorted, every other group is placed as a block (no comparison sort of the
  bulk, no per-item interval).
* :func:`small_scan`, :func:`small_finish` -- rows with few positives: every positive re-scored,
  each negative placed by the positives' stage-1 limits, the doubtful ones re-scored where the
  metrics need them.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "emit_above",
    "emit_later",
    "bf16_keys",
    "sample_kth",
    "canonical_cpu",
    "range_scan",
    "large_rows",
    "small_scan",
    "small_finish",
]

_MARGIN = 2.0**-40
_SCAN = 64  # items per block of the counting route's scan


@numba.njit(cache=True, nogil=True)
def bf16_keys(bits: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Order-preserving int64 keys of 16-bit float bit patterns (int16 views of bfloat16 or
    float16): ``key(a) < key(b)`` iff ``a < b`` for non-NaN values (``-0`` just below ``+0``); NaN
    keys lie above ``+inf``. The map is its own inverse on the int16 range."""
    out = np.empty(bits.shape[0], dtype=np.int64)
    for i in range(bits.shape[0]):
        v = np.int64(bits[i])
        out[i] = v ^ ((v >> 15) & 0x7FFF)
    return out


@numba.njit(cache=True, nogil=True)
def _any_at_least(row: np.ndarray, j0: int, th: np.int16) -> bool:  # pragma: no cover - compiled
    """Whether ``row[j0:j0 + _SCAN] >= th`` anywhere (int16; one vectorised or over the block)."""
    hit = np.int16(0)
    for j in range(j0, j0 + _SCAN):
        hit |= np.int16(row[j] >= th)
    return hit != 0


@numba.njit(cache=True, nogil=True)
def _any_at_most(row: np.ndarray, j0: int, th: np.uint16) -> bool:  # pragma: no cover - compiled
    """Whether ``uint16(row[j0:j0 + _SCAN]) <= th`` anywhere (one vectorised or over the block)."""
    hit = np.int16(0)
    for j in range(j0, j0 + _SCAN):
        hit |= np.int16(np.uint16(row[j]) <= th)
    return hit != 0


@numba.njit(cache=True, nogil=True)
def emit_above(
    s: np.ndarray,
    thr: np.ndarray,
    range_a: np.ndarray,
    range_b: np.ndarray,
    self_col: np.ndarray,
    out_r: np.ndarray,
    out_c: np.ndarray,
    is_bits: bool,
) -> int:  # pragma: no cover - compiled
    """Items ``(r, j)`` of ``s (c, N)`` with ``key(s[r, j]) >= thr[r]``, ``j`` outside
    ``[range_a[r], range_b[r])`` and ``j != self_col[r]`` (-1: none), written to ``out_r``/``out_c``
    up to their length. ``s`` holds int16 bits of bfloat16 / float16 (``thr``: int64 keys) or
    floats (``thr``: same dtype; NaN scores are emitted). Returns the number of items found (more
    than the capacity: call again).

    16-bit scores are compared without computing their keys: for a threshold key ``t >= 0`` the
    keys at or above it are the int16 bit patterns ``>= t`` (negative patterns are negative
    numbers); for ``t < 0`` they are the patterns whose uint16 value is at most ``t ^ 0x7FFF``
    (every non-negative number, and the negative ones of magnitude at most that of ``t``). Blocks
    of :data:`_SCAN` items with no hit are skipped after one vectorised comparison.
    """
    c, n = s.shape
    count = 0
    cap = out_r.shape[0]
    for r in range(c):
        t = thr[r]
        a, b, own = range_a[r], range_b[r], self_col[r]
        row = s[r]
        signed, th16, tu16 = True, np.int16(0), np.uint16(0)
        if is_bits:
            ti = np.int64(t)  # an int64 key (this form is also typed for float scores)
            if ti > 32767:
                continue
            signed = ti >= 0
            th16 = np.int16(ti if signed else 0)
            tu16 = np.uint16(0xFFFF if ti < -32768 else (0 if signed else (ti ^ 0x7FFF) & 0xFFFF))
        for j0 in range(0, n, _SCAN):
            j1 = min(j0 + _SCAN, n)
            if is_bits and j1 - j0 == _SCAN:
                if signed and not _any_at_least(row, j0, th16):
                    continue
                if not signed and not _any_at_most(row, j0, tu16):
                    continue
            elif not is_bits:
                hits = 0  # a vectorised count over the block (no branch per item)
                for j in range(j0, j1):
                    hits += not (row[j] < t)
                if hits == 0:
                    continue
            for j in range(j0, j1):
                if is_bits:
                    above = row[j] >= th16 if signed else np.uint16(row[j]) <= tu16
                else:
                    above = not (row[j] < t)
                if above and (j < a or j >= b) and j != own:
                    if count < cap:
                        out_r[count] = r
                        out_c[count] = j
                    count += 1
    return count


@numba.njit(cache=True, nogil=True)
def sample_kth(
    s: np.ndarray, is_bits: bool, stride: int, m: np.ndarray, self_col: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """Per row, the ``m[r]``-th largest of every ``stride``-th score (the query itself left out;
    ``-inf`` when the sample is shorter): a guess of a lower bound of the row's k-th largest score,
    which the caller verifies (at least k items must reach it). For 16-bit scores (``is_bits``:
    int16 bits of bfloat16 / float16) the result is the order key of that score (the caller maps it
    back), found by a two-pass radix selection on the keys; floats take ``np.partition``."""
    c, n = s.shape
    out = np.full(c, -np.inf)
    cols = np.arange(0, n, stride)
    buf = np.empty(cols.shape[0], dtype=np.float64)
    hi_hist = np.zeros(256, dtype=np.int64)
    lo_hist = np.zeros(256, dtype=np.int64)
    for r in range(c):
        own = self_col[r]
        if is_bits:
            hi_hist[:] = 0
            k = 0
            for j in cols:
                if j == own:
                    continue
                v = np.int64(s[r, j])
                key = (v ^ ((v >> 15) & 0x7FFF)) + 32768  # 0 .. 65535
                hi_hist[key >> 8] += 1
                k += 1
            if m[r] < 1 or m[r] > k:
                continue
            need, top = m[r], 255
            while hi_hist[top] < need:
                need -= hi_hist[top]
                top -= 1
            lo_hist[:] = 0
            for j in cols:
                if j == own:
                    continue
                v = np.int64(s[r, j])
                key = (v ^ ((v >> 15) & 0x7FFF)) + 32768
                if key >> 8 == top:
                    lo_hist[key & 0xFF] += 1
            low = 255
            while lo_hist[low] < need:
                need -= lo_hist[low]
                low -= 1
            out[r] = (top << 8) + low - 32768
            continue
        k = 0
        for j in cols:
            if j == own:
                continue
            buf[k] = s[r, j]
            k += 1
        if m[r] < 1 or m[r] > k:
            continue
        part = np.partition(buf[:k], k - m[r])
        out[r] = part[k - m[r]]
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _put(
    tb: np.ndarray, jb: np.ndarray, vb: np.ndarray, cnt: int, t: int, j: int, v: float
) -> int:  # pragma: no cover - compiled
    """One handed-over item at ``cnt`` (room checked by the caller); returns ``cnt + 1``."""
    tb[cnt] = t
    jb[cnt] = j
    vb[cnt] = v
    return cnt + 1


@numba.njit(cache=True, nogil=True)
def _block_min(th: np.ndarray, j0: int) -> np.int16:  # pragma: no cover - compiled
    """The smallest of ``th[j0:j0 + _SCAN]`` (int16; one vectorised min)."""
    m = th[j0]
    for j in range(j0, j0 + _SCAN):
        m = min(m, th[j])
    return m


@numba.njit(cache=True, nogil=True)
def _grow(
    tb: np.ndarray, jb: np.ndarray, vb: np.ndarray, cnt: int, need: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The three buffers of :func:`emit_later` with room for ``need`` items (the first ``cnt``
    kept; at least twice the room)."""
    cap = max(2 * tb.shape[0], need)
    tb2, jb2, vb2 = np.empty(cap, tb.dtype), np.empty(cap, jb.dtype), np.empty(cap, vb.dtype)
    tb2[:cnt], jb2[:cnt], vb2[:cnt] = tb[:cnt], jb[:cnt], vb[:cnt]
    return tb2, jb2, vb2


@numba.njit(cache=True, nogil=True)
def emit_later(
    s: np.ndarray,
    is_bits: bool,
    r0: int,
    col0: int,
    r1: int,
    first: np.ndarray,
    thr: np.ndarray,
    thr16: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The hand-over of the half-product route (queries = gallery: scores are symmetric).

    ``s (c, n)`` holds the stage-1 scores of a band's rows ``r0 + i`` with the columns
    ``col0 + jj``; read by column, it holds the scores of the later queries ``r = col0 + jj >= r1``
    with the gallery items ``j = r0 + i``. Every pair with ``r >= first[i]`` and a score at or
    above ``thr[r]`` (int64 order keys of 16-bit scores when ``is_bits``, else floats of the
    scores' dtype; NaN scores are handed over) is handed to query ``r``. ``thr16``: ``thr`` as
    int16 (16-bit scores): when every later query's key is non-negative, the int16 bits are
    compared directly, as :func:`emit_above` does, a vectorised or over blocks of :data:`_SCAN`.

    Returns:
        ``(off, cols, vals)``: the items of query ``r1 + t`` are ``cols[off[t]:off[t + 1]]``
        (int32 gallery columns, increasing) with their stage-1 scores ``vals`` (raw).
    """
    c, n = s.shape
    signed = is_bits
    if is_bits:
        for jj in range(r1 - col0, n):
            if thr[col0 + jj] < 0:
                signed = False
                break
    th16 = thr16[col0:]
    thf = thr[col0:]
    bmin = np.empty(n // _SCAN, dtype=th16.dtype)  # the lowest threshold of each block
    for bk in range(n // _SCAN):
        bmin[bk] = _block_min(th16, bk * _SCAN)
    tb = np.empty(4096 + 16 * c + n, dtype=np.int32)
    jb = np.empty(tb.shape[0], dtype=np.int32)
    vb = np.empty(tb.shape[0], dtype=s.dtype)
    cnt = 0
    for i in range(c):
        row = s[i]
        s0 = max(first[i], r1) - col0
        if cnt + n - s0 > tb.shape[0]:  # room for the whole row: no check per item
            tb, jb, vb = _grow(tb, jb, vb, cnt, cnt + n)
        if signed:
            # blocks of _SCAN aligned on the block's columns, each first compared with its lowest
            # threshold (one vectorised comparison with a constant); the head and tail item by item
            b0 = -(-s0 // _SCAN)
            b1 = n // _SCAN
            if b0 > b1:
                b0 = b1 = 0
            for jj in range(s0, min(b0 * _SCAN, n)):
                if row[jj] >= th16[jj]:
                    cnt = _put(tb, jb, vb, cnt, col0 + jj - r1, r0 + i, row[jj])
            for bk in range(b0, b1):
                jj0 = bk * _SCAN
                if not _any_at_least(row, jj0, bmin[bk]):
                    continue
                for jj in range(jj0, jj0 + _SCAN):
                    if row[jj] >= th16[jj]:
                        cnt = _put(tb, jb, vb, cnt, col0 + jj - r1, r0 + i, row[jj])
            for jj in range(max(s0, b1 * _SCAN), n):
                if row[jj] >= th16[jj]:
                    cnt = _put(tb, jb, vb, cnt, col0 + jj - r1, r0 + i, row[jj])
            continue
        for jj in range(s0, n):  # keys of either sign, or float scores
            if is_bits:
                w = np.int64(row[jj])
                above = (w ^ ((w >> 15) & 0x7FFF)) >= thf[jj]
            else:
                above = not (row[jj] < thf[jj])
            if above:
                cnt = _put(tb, jb, vb, cnt, col0 + jj - r1, r0 + i, row[jj])
    n_t = col0 + n - r1
    off = np.zeros(n_t + 1, dtype=np.int64)
    for m in range(cnt):
        off[tb[m] + 1] += 1
    for t in range(n_t):
        off[t + 1] += off[t]
    at = off[:-1].copy()
    cols = np.empty(cnt, dtype=np.int32)
    vals = np.empty(cnt, dtype=s.dtype)
    for m in range(cnt):  # a stable counting sort by query: columns stay increasing
        t = tb[m]
        cols[at[t]] = jb[m]
        vals[at[t]] = vb[m]
        at[t] += 1
    return off, cols, vals


@numba.njit(cache=True, nogil=True)
def canonical_cpu(
    q: np.ndarray, g: np.ndarray, rows: np.ndarray, cols: np.ndarray, width: int, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out[m]`` = the canonical score of ``(q[rows[m]], g[cols[m]])``: products rounded to the
    inputs' dtype, zero-padded to ``width = 2^h``, summed by the fixed pairwise tree (the first
    level adds the two halves' products, each rounded first: no fused multiply-add)."""
    a = np.empty(max(width // 2, 1), dtype=q.dtype)
    b = np.empty(max(width // 2, 1), dtype=q.dtype)
    for m in range(rows.shape[0]):
        out[m] = _canonical_one(q[rows[m]], g[cols[m]], a, b, width)


@numba.njit(cache=True, nogil=True)
def _interval(
    u: float, a: float, eta: float, c: float
) -> tuple[float, float]:  # pragma: no cover - compiled
    w = c * abs(u) + eta + a
    m = _MARGIN * (abs(u) + w)
    return u - w - m, u + w + m


@numba.njit(cache=True, nogil=True)
def _sure_limits(
    t: float, a: float, eta: float, c: float, scale: float
) -> tuple[float, float]:  # pragma: no cover - compiled
    """Stage-1 limits ``(A, B)`` (scaled units) of a canonical score ``t``: an item with stage-1
    score ``v > A`` has ``lo(v) > t`` (surely above), one with ``v < B`` has ``hi(v) < t`` (surely
    below).

    Inverses of the increasing :func:`_interval` ends ``lo(u) = u (1 -+ c') - E``,
    ``hi(u) = u (1 +- c')
    + E`` (``c' = c + m + c m``, ``E = (eta + a)(1 + m)``, ``m = 2^-40``; the sign follows ``u``),
    widened by ``2^-30`` relative for this float64 arithmetic. ``scale`` takes unscaled to scaled
    units.
    """
    if t == -np.inf:
        return -np.inf, -np.inf
    cc = c + _MARGIN + c * _MARGIN
    e = (eta + a) * (1.0 + _MARGIN)
    x = t + e
    up = x / (1.0 - cc) if x >= 0 else x / (1.0 + cc)
    y = t - e
    down = y / (1.0 + cc) if y >= 0 else y / (1.0 - cc)
    w = 2.0**-30
    return (up + w * abs(up) + w * e) * scale, (down - w * abs(down) - w * e) * scale


@numba.njit(cache=True, nogil=True)
def range_scan(
    s: np.ndarray,
    is_bits: bool,
    table: np.ndarray,
    range_a: np.ndarray,
    range_b: np.ndarray,
    self_col: np.ndarray,
    guess: np.ndarray,
    lowest: np.ndarray,
    reach: np.ndarray,
) -> bool:  # pragma: no cover - compiled
    """Per row, over its positives (columns ``[range_a[r], range_b[r])`` less ``self_col[r]``): the
    lowest stage-1 score ``lowest[r]`` (``+inf`` without positives) and how many score at least
    ``guess[r]`` (``reach[r]``). ``s``: int16 bits of bfloat16 / float16 (``is_bits``; ``table``
    maps the bits, as uint16, to float32 values) or floats. Returns False for a NaN score."""
    for r in range(s.shape[0]):
        own, gs = self_col[r], guess[r]
        low = np.inf
        cnt = 0
        for j in range(range_a[r], range_b[r]):
            if j == own:
                continue
            v = np.float64(table[np.uint16(s[r, j])]) if is_bits else np.float64(s[r, j])
            if v != v:
                return False
            low = min(low, v)
            cnt += v >= gs
        lowest[r] = low
        reach[r] = cnt
    return True


@numba.njit(cache=True, nogil=True)
def _sort_run(key: np.ndarray, kind: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Indices of ``(key, kind)`` in canonical order: key descending, ties by kind ascending
    (insertion sort for short runs, two stable sorts otherwise)."""
    n = key.shape[0]
    if n > 24:
        by_kind = np.argsort(kind, kind="mergesort")
        return by_kind[np.argsort(-key[by_kind], kind="mergesort")]
    idx = np.arange(n)
    for t in range(1, n):
        x = idx[t]
        u = t
        while u > 0 and (
            key[idx[u - 1]] < key[x] or (key[idx[u - 1]] == key[x] and kind[idx[u - 1]] > kind[x])
        ):
            idx[u] = idx[u - 1]
            u -= 1
        idx[u] = x
    return idx


@numba.njit(cache=True, nogil=True)
def large_rows(
    s: np.ndarray,
    is_bits: bool,
    table: np.ndarray,
    range_a: np.ndarray,
    range_b: np.ndarray,
    self_col: np.ndarray,
    lab_q: np.ndarray,
    ref_lab: np.ndarray,
    neg_off: np.ndarray,
    neg_col: np.ndarray,
    cut: np.ndarray,
    exp: np.ndarray,
    bound_a: np.ndarray,
    bound_eta: np.ndarray,
    c_out: float,
    q: np.ndarray,
    q_rows: np.ndarray,
    g: np.ndarray,
    width: int,
    lv_out: np.ndarray,
    ge_out: np.ndarray,
    key_out: np.ndarray,
    bad: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Steps 3-4 of the counting route for rows with many positives: each row's positives in
    canonical order (score desc, level asc), the negatives ranked before each, and their keys.

    Row ``r``'s items are its positives -- the columns ``[range_a[r], range_b[r])`` but
    ``self_col[r]``, of level ``1 +`` the number of finer label columns of ``ref_lab`` that match
    ``lab_q[r]`` from the coarse side -- and its kept negatives ``neg_col[neg_off[r]:neg_off[r +
    1]]``. A positive whose stage-1 score is below ``cut[r]`` lies beyond the K-th score: it only
    has to come after every kept item (key ``-inf``; it counts as a negative for the overlap test,
    as its place among the negatives does not matter).

    Per row, without a comparison sort of the bulk:

    1. the items are grouped by equal stage-1 score: a histogram of their 16-bit keys (the scores
       of a row span a few hundred bfloat16 values; a wide span, or float scores, take
       ``np.argsort``). A group is what the bound sees as one item: one interval ``[lo, hi]``
       (:func:`_interval`), computed once, the number of its items and their kind (or "mixed");
    2. two pointers over the groups give each group's window (the groups whose interval overlaps
       its own): a group is re-scored (:func:`_canonical_one`, each item) when its window holds
       an item of another kind;
    3. walking the groups by decreasing score, a group placed by its score is one block of items
       of one kind -- a count of negatives, or positives that share the count -- and a maximal run
       of re-scored groups is sorted by (canonical score desc, kind asc). Two items of different
       kinds in different blocks have disjoint intervals (a group between two overlapping
       intervals overlaps both, so it would be re-scored and join their run), so the result is
       the canonical order up to the order of items of one kind, which no count depends on.

    Writes ``lv_out[r]`` (levels of the sorted positives, 0 padding), ``ge_out[r]`` (negatives
    before each), ``key_out[r]`` (the canonical score where computed, the unscaled stage-1 score
    elsewhere, ``-inf`` beyond the cut and for padding). ``s``: int16 bits of bfloat16 / float16
    (``is_bits``; ``table``: their float32 values) or floats; ``exp``: stage-1 scores are ``2^exp``
    times the unscaled ones; ``bound_a``, ``bound_eta``, ``c_out``: the bound; ``q[q_rows[r]]``,
    ``g``: the working-precision rows of the canonical score (``width = 2^h``). Returns 0, or -1
    for a NaN stage-1 score, or -2 for a canonical score outside its interval (``bad = [score, lo,
    hi]``).
    """
    c = s.shape[0]
    n_levels = lab_q.shape[1]
    m_max = 1
    for r in range(c):
        m_max = max(m_max, max(range_b[r] - range_a[r], 0) + neg_off[r + 1] - neg_off[r])
    # per item of the row
    key = np.empty(m_max, dtype=np.int64)  # 16-bit order key (0 .. 65535)
    val = np.empty(m_max)  # stage-1 score (scaled)
    kind = np.empty(m_max, dtype=np.int64)  # 0: negative, l >= 1: positive of level l
    col = np.empty(m_max, dtype=np.int64)
    beyond = np.empty(m_max, dtype=np.bool_)
    grp = np.empty(m_max, dtype=np.int64)  # its group (the sort form)
    order = np.empty(m_max, dtype=np.int64)
    # per group of the row, by increasing score
    g_u = np.empty(m_max)  # unscaled score
    g_lo = np.empty(m_max)
    g_hi = np.empty(m_max)
    g_n = np.empty(m_max, dtype=np.int64)  # items placed in the walk (beyond the cut: not)
    g_kind = np.empty(m_max, dtype=np.int64)  # kind of the overlap test, -1: mixed
    g_flag = np.empty(m_max, dtype=np.bool_)
    g_off = np.empty(m_max + 1, dtype=np.int64)  # first slot of a re-scored group in run_*
    nd = np.empty(m_max, dtype=np.int64)
    pd = np.empty(m_max, dtype=np.int64)
    run_key = np.empty(m_max)
    run_kind = np.empty(m_max, dtype=np.int64)
    n_beyond = np.zeros(n_levels + 1, dtype=np.int64)
    # per 16-bit key (the histogram form): items placed, kind (-2: none, -1: mixed), group
    b_n = np.zeros(65536 if is_bits else 1, dtype=np.int64)
    b_kind = np.full(65536 if is_bits else 1, -2, dtype=np.int64)
    b_grp = np.empty(65536 if is_bits else 1, dtype=np.int64)
    wa = np.empty(max(width // 2, 1), dtype=q.dtype)
    wb = np.empty(max(width // 2, 1), dtype=q.dtype)
    for r in range(c):
        scale = 2.0 ** (-exp[r])
        a_r, eta_r = bound_a[r], bound_eta[r]
        own, cut_r = self_col[r], cut[r]
        n_beyond[:] = 0
        # the items: positives with their levels, then the kept negatives
        m = 0
        kmin, kmax = 65536, -1
        for t in range(range_a[r], range_b[r] + neg_off[r + 1] - neg_off[r]):
            positive = t < range_b[r]
            j = t if positive else neg_col[neg_off[r] + t - range_b[r]]
            if j == own:
                continue
            lev = 0
            if positive:
                lev = 1
                for lc in range(n_levels - 2, -1, -1):
                    if lab_q[r, lc] != ref_lab[j, lc]:
                        break
                    lev += 1
            k = 0
            if is_bits:
                w = np.int64(s[r, j])
                k = (w ^ ((w >> 15) & 0x7FFF)) + 32768
                key[m] = k
                kmin, kmax = min(kmin, k), max(kmax, k)
                v = np.float64(table[np.uint16(s[r, j])])
            else:
                v = np.float64(s[r, j])
            if v != v:
                return -1
            val[m], kind[m], col[m] = v, lev, j
            out = positive and v < cut_r
            beyond[m] = out
            if out:
                n_beyond[lev] += 1
            if is_bits:  # the histogram of the keys: items placed and their kind
                fk = 0 if out else lev
                if b_kind[k] == -2:
                    b_kind[k] = fk
                elif b_kind[k] != fk:
                    b_kind[k] = -1
                b_n[k] += not out
            m += 1
        # 1. groups of equal score, in increasing order, with their count and kind
        n_g = 0
        hist = is_bits and m > 0 and kmax - kmin + 1 <= 4 * m + 4096
        if hist:  # the non-empty keys of the histogram
            for k in range(kmin, kmax + 1):
                if b_kind[k] == -2:
                    continue
                w = k - 32768
                bits = w ^ ((w >> 15) & 0x7FFF)
                g_u[n_g] = np.float64(table[np.uint16(bits)]) * scale
                g_n[n_g], g_kind[n_g] = b_n[k], b_kind[k]
                b_grp[k] = n_g
                b_n[k], b_kind[k] = 0, -2  # ready for the next row
                n_g += 1
        elif m > 0:  # a wide span: a sort of the scores
            if is_bits:
                for i in range(m):
                    b_n[key[i]], b_kind[key[i]] = 0, -2
            order[:m] = np.argsort(val[:m])
            for p in range(m):
                i = order[p]
                if p == 0 or val[i] != val[order[p - 1]]:
                    g_u[n_g], g_n[n_g], g_kind[n_g] = val[i] * scale, 0, -2
                    n_g += 1
                fk = 0 if beyond[i] else kind[i]
                gi = n_g - 1
                if g_kind[gi] == -2:
                    g_kind[gi] = fk
                elif g_kind[gi] != fk:
                    g_kind[gi] = -1
                g_n[gi] += not beyond[i]
                grp[i] = gi
        for gi in range(n_g):
            g_lo[gi], g_hi[gi] = _interval(g_u[gi], a_r, eta_r, c_out)
        # 2. the groups whose window holds another kind (mixed groups always)
        if n_g > 0:
            nd[n_g - 1] = n_g
            for gi in range(n_g - 2, -1, -1):
                nd[gi] = gi + 1 if g_kind[gi + 1] != g_kind[gi] else nd[gi + 1]
            pd[0] = -1
            for gi in range(1, n_g):
                pd[gi] = gi - 1 if g_kind[gi - 1] != g_kind[gi] else pd[gi - 1]
        left, right, n_run = 0, 0, 0
        for gi in range(n_g):
            while left < n_g and g_hi[left] < g_lo[gi]:
                left += 1
            while right < n_g and g_lo[right] <= g_hi[gi]:
                right += 1
            g_flag[gi] = g_kind[gi] == -1 or nd[gi] < right or pd[gi] >= left
            g_off[gi] = n_run
            if g_flag[gi]:
                n_run += g_n[gi]
        g_off[n_g] = n_run
        if n_run > 0:  # the canonical scores of the re-scored groups' items (in column order)
            qi = q[q_rows[r]]
            for gi in range(n_g):
                nd[gi] = g_off[gi]  # next free slot of the group
            for i in range(m):
                gi = b_grp[key[i]] if hist else grp[i]
                if not g_flag[gi] or beyond[i]:
                    continue
                x = _canonical_one(qi, g[col[i]], wa, wb, width)
                if x < g_lo[gi] or x > g_hi[gi]:
                    bad[0], bad[1], bad[2] = x, g_lo[gi], g_hi[gi]
                    return -2
                run_key[nd[gi]], run_kind[nd[gi]] = x, kind[i]
                nd[gi] += 1
        # 3. the groups by decreasing score
        slot, negs = 0, 0
        gi = n_g - 1
        while gi >= 0:
            if not g_flag[gi]:  # one kind: a block
                if g_kind[gi] == 0:
                    negs += g_n[gi]
                else:
                    for _ in range(g_n[gi]):
                        lv_out[r, slot], ge_out[r, slot] = g_kind[gi], negs
                        key_out[r, slot] = g_u[gi]
                        slot += 1
                gi -= 1
                continue
            top = gi
            while gi >= 0 and g_flag[gi]:
                gi -= 1
            p0, p1 = g_off[gi + 1], g_off[top + 1]
            for t in _sort_run(run_key[p0:p1], run_kind[p0:p1]):
                k = run_kind[p0 + t]
                if k == 0:
                    negs += 1
                else:
                    lv_out[r, slot], ge_out[r, slot] = k, negs
                    key_out[r, slot] = run_key[p0 + t]
                    slot += 1
        # beyond the cut: after every kept item, by level
        for lev in range(1, n_levels + 1):
            for _ in range(n_beyond[lev]):
                lv_out[r, slot], ge_out[r, slot], key_out[r, slot] = lev, negs, -np.inf
                slot += 1
        for t in range(slot, lv_out.shape[1]):
            lv_out[r, t], ge_out[r, t], key_out[r, t] = 0, 0, -np.inf
    return 0


@numba.njit(cache=True, nogil=True)
def _canonical_one(
    qi: np.ndarray, gi: np.ndarray, a: np.ndarray, b: np.ndarray, width: int
) -> float:  # pragma: no cover - compiled
    """The canonical score of one pair: products rounded to the inputs' dtype, zero-padded to
    ``width = 2^h``, summed by the fixed pairwise tree (``a``, ``b``: work buffers of
    ``width / 2``)."""
    d = qi.shape[0]
    if width == 1:
        return qi[0] * gi[0]
    h0 = width // 2
    for i in range(h0):
        a[i] = qi[i] * gi[i] if i < d else 0
    for i in range(h0):
        b[i] = qi[i + h0] * gi[i + h0] if i + h0 < d else 0
    for i in range(h0):
        a[i] = a[i] + b[i]
    h = h0 // 2
    while h >= 1:
        for i in range(h):
            a[i] = a[i] + a[i + h]
        h //= 2
    return a[0]


@numba.njit(cache=True, nogil=True, inline="always")
def _place(
    v: float,
    r: int,
    j: int,
    lims: tuple,
    hist: np.ndarray,
    maybe: np.ndarray,
    pre: np.ndarray,
    amb: tuple,
    n_amb: int,
) -> int:  # pragma: no cover - compiled
    """One kept negative of row ``r`` (column ``j``, stage-1 score ``v``) in :func:`small_scan`:
    counted before the positives surely above it, or recorded as doubtful (``amb``) between the
    first positive not surely above it and the first surely below it. Returns the new count of
    doubtful negatives (beyond the arrays' room: counted only)."""
    lim_a, lim_b, p, scale, a_r, eta_r, c_out = lims
    ia = 0  # positives surely above the item (their score exceeds its hi)
    while ia < p and v < lim_b[ia]:
        ia += 1
    ib = ia  # positives not surely below it (their score reaches its lo)
    while ib < p and not (v > lim_a[ib]):
        ib += 1
    if ia == ib:
        hist[r, ia] += 1
        return n_amb
    amb_row, amb_col, amb_lo, amb_hi, amb_a, amb_b, amb_need = amb
    if n_amb < amb_col.shape[0]:
        lo, hi = _interval(v * scale, a_r, eta_r, c_out)
        amb_row[n_amb], amb_col[n_amb], amb_lo[n_amb], amb_hi[n_amb] = r, j, lo, hi
        amb_a[n_amb], amb_b[n_amb], amb_need[n_amb] = ia, ib, False
    maybe[ia] += 1
    maybe[ib] -= 1
    pre[ib] += 1
    return n_amb + 1


@numba.njit(cache=True, nogil=True)
def small_scan(
    s: np.ndarray,
    is_bits: bool,
    table: np.ndarray,
    thr: np.ndarray,
    range_a: np.ndarray,
    range_b: np.ndarray,
    self_col: np.ndarray,
    pos_col: np.ndarray,
    pos_level: np.ndarray,
    cut: np.ndarray,
    guess: np.ndarray,
    exact_depth: np.ndarray,
    cutoffs: np.ndarray,
    exp: np.ndarray,
    bound_a: np.ndarray,
    bound_eta: np.ndarray,
    c_out: float,
    q: np.ndarray,
    q_rows: np.ndarray,
    g: np.ndarray,
    width: int,
    keys: np.ndarray,
    lvs: np.ndarray,
    n_pos: np.ndarray,
    hist: np.ndarray,
    amb_row: np.ndarray,
    amb_col: np.ndarray,
    amb_lo: np.ndarray,
    amb_hi: np.ndarray,
    amb_a: np.ndarray,
    amb_b: np.ndarray,
    amb_need: np.ndarray,
    reach: np.ndarray,
    bad: np.ndarray,
    col0: int,
    in_off: np.ndarray,
    in_col: np.ndarray,
    in_val: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """First half of the rows with few positives: the positives in canonical order, each negative
    placed or recorded as doubtful, and which doubtful negatives the metrics need resolved (no sort
    of a row).

    Every positive of row ``r`` (columns ``pos_col[r]``, levels ``pos_level[r]`` > 0) gets its
    canonical score -- or ``-inf`` when its stage-1 score is below ``cut[r]`` (it lies beyond the
    K-th score and only has to come after the items above it) -- and the positives are ordered by
    (score desc, level asc) into ``keys[r]``, ``lvs[r]`` (``n_pos[r]`` of them). Each negative at or
    above ``thr[r]`` (a scan of the row, outside ``[range_a, range_b)`` and ``self_col``) is
    compared with per-positive stage-1 limits: the positives surely above it and surely below it are
    known (``hist[r, i]`` counts the negatives placed just before slot ``i``); the positives in
    between are in doubt, and the negative is recorded (``amb_*``: row, column, interval, first and
    end slot of the doubt).
    After the scan, each positive's position lies in ``[min, max]``; a doubtful negative must be
    re-scored (``amb_need``) when one of its doubtful positives needs an exact position -- ``min <=
    exact_depth[r]`` -- or a comparison with a cut-off ``k`` of ``cutoffs`` (``min <= k < max``).
    ``reach[r]`` counts the negatives with stage-1 score ``>= guess[r]`` (the caller's check of the
    cut).

    ``s``: the block's stage-1 scores of gallery columns ``col0, col0 + 1, ...`` (column indices
    are global), int16 bits of bfloat16 / float16 (``is_bits``; ``table`` maps the bits, as uint16,
    to float32 values; ``thr`` int64 order keys) or floats (``thr`` in their dtype); the columns
    before ``col0`` that row ``r`` needs come as items ``in_col[in_off[p, r]:in_off[p, r + 1]]``
    of every part ``p``, with stage-1 scores ``in_val`` (the half-product route; otherwise
    ``col0 = 0`` and no items); ``exp``: scores are ``2^exp`` times the unscaled ones;
    ``bound_a``, ``bound_eta``, ``c_out``: the bound. Returns the number of doubtful negatives
    (their arrays must hold them: a larger count asks the caller for room), or -1 for a NaN stage-1
    score, or -2 for a canonical score outside its interval (``bad = [score, lo, hi]``).
    """
    c, n = s.shape
    wa = np.empty(max(width // 2, 1), dtype=q.dtype)
    wb = np.empty(max(width // 2, 1), dtype=q.dtype)
    n_max = pos_col.shape[1]
    # doubtful negatives: +1 at their first doubtful slot, -1 after
    maybe = np.zeros(n_max + 1, dtype=np.int64)
    # doubtful negatives surely before slot i: +1 at their end slot
    pre = np.zeros(n_max + 1, dtype=np.int64)
    lim_a = np.empty(n_max)  # per positive: stage-1 scores above lim_a are surely above it
    lim_b = np.empty(n_max)  # ... below lim_b surely below it
    need = np.zeros(n_max, dtype=np.bool_)
    amb = (amb_row, amb_col, amb_lo, amb_hi, amb_a, amb_b, amb_need)
    n_amb = 0
    for r in range(c):
        qi = q[q_rows[r]]
        scale = 2.0 ** (-exp[r])
        a_r, eta_r = bound_a[r], bound_eta[r]
        p = 0
        for k in range(n_max):
            lev = pos_level[r, k]
            if lev <= 0:
                continue
            j = pos_col[r, k]
            v = table[np.uint16(s[r, j - col0])] if is_bits else s[r, j - col0]
            if v != v:
                return -1
            if v < cut[r]:
                x = -np.inf
            else:
                x = _canonical_one(qi, g[j], wa, wb, width)
                lo, hi = _interval(v * scale, a_r, eta_r, c_out)
                if x < lo or x > hi:
                    bad[0], bad[1], bad[2] = x, lo, hi
                    return -2
            t = p  # insertion by (score desc, level asc)
            while t > 0 and (keys[r, t - 1] < x or (keys[r, t - 1] == x and lvs[r, t - 1] > lev)):
                keys[r, t] = keys[r, t - 1]
                lvs[r, t] = lvs[r, t - 1]
                t -= 1
            keys[r, t] = x
            lvs[r, t] = lev
            p += 1
        n_pos[r] = p
        for t in range(p + 1):
            hist[r, t] = 0
            maybe[t] = 0
            pre[t] = 0
        inv = 1.0 / scale
        for t in range(p):
            lim_a[t], lim_b[t] = _sure_limits(keys[r, t], a_r, eta_r, c_out, inv)
        first_amb = n_amb
        th, aa, bb, own, gs = thr[r], range_a[r], range_b[r], self_col[r], guess[r]
        lims = (lim_a, lim_b, p, scale, a_r, eta_r, c_out)
        # the columns before col0 (half-product route): items already at or above a lower cut
        for part in range(in_off.shape[0]):
            for m in range(in_off[part, r], in_off[part, r + 1]):
                x16 = in_val[m]
                if is_bits:
                    w = np.int64(x16)
                    if (w ^ ((w >> 15) & 0x7FFF)) < th:
                        continue
                    v = table[np.uint16(x16)]
                else:
                    v = x16
                    if v < th:
                        continue
                if v != v:
                    return -1
                if v >= gs:
                    reach[r] += 1
                n_amb = _place(v, r, in_col[m], lims, hist, maybe, pre, amb, n_amb)
        row = s[r]
        fast = is_bits and 0 <= th <= 32767  # non-negative keys are the int16 bits themselves
        th16 = np.int16(th if fast else 0)
        for j0 in range(0, n, _SCAN):
            j1 = min(j0 + _SCAN, n)
            if fast:  # one vectorised int16 comparison per item, or-ed over the block
                hit16 = np.int16(0)
                if j1 - j0 == _SCAN:  # a full block: a constant trip count the compiler vectorises
                    for j in range(j0, j0 + _SCAN):
                        hit16 |= np.int16(row[j] >= th16)
                else:
                    for j in range(j0, j1):
                        hit16 |= np.int16(row[j] >= th16)
                if hit16 == 0:
                    continue
            else:
                hits = 0
                if is_bits:
                    for j in range(j0, j1):
                        w = np.int64(row[j])
                        hits += (w ^ ((w >> 15) & 0x7FFF)) >= th
                else:
                    for j in range(j0, j1):
                        hits += not (row[j] < th)
                if hits == 0:
                    continue
            for j in range(j0, j1):
                if is_bits:
                    w = np.int64(row[j])
                    if (w ^ ((w >> 15) & 0x7FFF)) < th:
                        continue
                    v = table[np.uint16(row[j])]
                else:
                    v = row[j]
                    if v < th:
                        continue
                jg = j + col0
                if (jg >= aa and jg < bb) or jg == own:
                    continue
                if v != v:
                    return -1
                if v >= gs:
                    reach[r] += 1
                n_amb = _place(v, r, jg, lims, hist, maybe, pre, amb, n_amb)
        if n_amb > amb_col.shape[0]:
            # no room: the caller calls again with more (the counts of this call are discarded)
            continue
        # the bounds [lo_pos, hi_pos] of each position: decided negatives, the doubtful ones surely
        # before (end slot <= i), and the doubtful ones
        sure, doubt, surely_doubtful = 0, 0, 0
        for i in range(p):
            sure += hist[r, i]
            surely_doubtful += pre[i]
            doubt += maybe[i]
            lo_pos = i + 1 + sure + surely_doubtful
            hi_pos = lo_pos + doubt
            nd = lo_pos <= exact_depth[r]
            if not nd and doubt > 0:
                for k in cutoffs:
                    if lo_pos <= k and k < hi_pos:
                        nd = True
                        break
            need[i] = nd and doubt > 0
        for m in range(first_amb, n_amb):
            for i in range(amb_a[m], amb_b[m]):
                if need[i]:
                    amb_need[m] = True
                    break
    return n_amb


@numba.njit(cache=True, nogil=True)
def small_finish(
    keys: np.ndarray,
    lvs: np.ndarray,
    n_pos: np.ndarray,
    hist: np.ndarray,
    amb_row: np.ndarray,
    amb_a: np.ndarray,
    amb_b: np.ndarray,
    amb_need: np.ndarray,
    amb_exact: np.ndarray,
    lv_out: np.ndarray,
    ge_out: np.ndarray,
    key_out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Second half: each doubtful negative placed -- by its canonical score ``amb_exact`` where it
    was needed (before the positives whose score is at most its own), else after its doubtful
    positives -- and the positives' slots written (level, negatives before, key)."""
    for m in range(amb_row.shape[0]):
        r, ia, ib = amb_row[m], amb_a[m], amb_b[m]
        if amb_need[m]:
            x = amb_exact[m]
            i = ia
            while i < ib and keys[r, i] > x:
                i += 1
            hist[r, i] += 1
        else:
            hist[r, ib] += 1
    for r in range(keys.shape[0]):
        negs = 0
        for t in range(n_pos[r]):
            negs += hist[r, t]
            lv_out[r, t] = lvs[r, t]
            ge_out[r, t] = negs
            key_out[r, t] = keys[r, t]
