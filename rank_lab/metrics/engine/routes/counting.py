"""The certified counting route: every metric of the engine, at a cost that does not grow with k.

A metric reads a query's ranking only through the positions of its relevant items (binary) or of
its positives with their levels (hierarchical, Ramzi thesis ch. 4): how many items score above
each of them. The route computes exactly these counts, by the canonical score, from a fast
stage-1 matmul and the bound of :mod:`rank_lab.metrics.engine.scores.bound` -- count what is surely
above, ignore what is surely below, re-score exactly only what the bound cannot place:

1. The gallery is permuted by its coarsest label, so that a query's positives (level >= 1: same
   coarsest label; for binary metrics the fine label is the only level) are one contiguous column
   range; the level-set sizes come from label counts alone.
2. For a block of queries, the stage-1 scores ``(c, N)`` (bfloat16 on CPUs with native bfloat16
   dot products, else the working precision;
   :class:`~rank_lab.metrics.engine.scores._stage1.Stage1`).
   The positives' scores are read from their range. A negative can change a count only if it can
   reach the lowest positive: every negative below ``threshold(lowest positive)`` is dropped
   without a second look (one compare per item), the others are kept with their score.
3. Each kept item's canonical score lies in its interval ``[lo(s^) - A, hi(s^) + A]``. Two items of
   different kinds (a negative and a positive, or positives of different levels) can only be
   misordered by stage 1 if their intervals overlap: exactly those items are re-scored with the
   canonical score (:func:`~rank_lab.metrics.engine.scores.exact.canonical_pairs`); every other
   pair is ordered by the intervals, and pairs of one kind need no order. A canonical score
   outside its interval stops the route with an error in words (the bound was violated).
4. The kept items are sorted by (key desc, kind asc) -- the key being the canonical score where it
   was computed, the stage-1 score elsewhere (both inside the item's interval, so every pair of
   different kinds is in canonical order, ties broken against relevance) -- and each positive's
   position is its place in that order:
   :class:`~rank_lab.metrics.engine.formulas.positions.LevelPositions`.

When the queries are the gallery and every metric reads the first K positions only (R@k, mAP@R,
...), the route computes about half the product (:class:`_HalfProduct`): a stage-1 score certifies
a pair whichever of its two items is the query, so each block of queries computes its columns from
its first positive on, and the earlier blocks hand it the items of the earlier columns that reach
a cut fixed in advance (a guessed, then verified, bound of the K-th score).

The positions are those of the canonical ranking whatever the precision, the block size or the
device; the registered metrics read them (:mod:`rank_lab.metrics.engine.formulas.registry`), so
the per-query values are bit-identical to the exact route and to the neighbour-list route. Memory:
one block of stage-1 scores and the kept items, ``O(c N)`` -- never ``N x N``, and independent of
the cut-offs ``ks`` -- plus, on the half-product route, the handed-over items (about ``1.5 K`` a
query, ``K`` the deepest position the metrics read). Internal route of
:func:`rank_lab.metrics.retrieval_metrics` (which checks the request).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from rank_lab.metrics.engine._blocks import BufferPool, chunk_rows, run_parallel
from rank_lab.metrics.engine.formulas.positions import LevelPositions
from rank_lab.metrics.engine.routes._kernels import (
    bf16_keys,
    canonical_cpu,
    emit_above,
    emit_later,
    large_rows,
    range_scan,
    sample_kth,
    small_finish,
    small_scan,
)
from rank_lab.metrics.engine.routes.request import MetricsRequest
from rank_lab.metrics.engine.scores._stage1 import Stage1
from rank_lab.metrics.engine.scores.bound import resolve_precision
from rank_lab.metrics.engine.scores.exact import canonical_pairs, exact_matmul, tree_depth

__all__: list[str] = []  # a route of retrieval_metrics (which checks the request)

#: The CPU runs the compiled kernels of :mod:`~rank_lab.metrics.engine.routes._kernels`; False runs
#: the torch form (the GPU's) on the CPU too (the tests compare both).
USE_KERNELS = True
#: Blocks whose rows have at most this many positives re-score every positive (one pass per row).
SMALL_POSITIVES = 64


def level_counts(lab: torch.Tensor, ref_lab: torch.Tensor, exclude_self: bool) -> torch.Tensor:
    """``|Omega^(l)|`` of every query, ``(Q, L + 1)`` long, from label counts (no scores).

    Level ``>= l`` means that the ``l`` coarsest label columns match (``"lca"`` levels of
    :func:`~rank_lab.metrics.hierarchy.relevance.shared_level`); the query itself is not counted
    with ``exclude_self``.
    """
    n_levels = lab.shape[1]
    n_ge = torch.zeros(lab.shape[0], n_levels + 2, dtype=torch.long)
    n_ge[:, 0] = ref_lab.shape[0]
    for lev in range(1, n_levels + 1):  # level >= lev: the lev coarsest columns match
        both = torch.cat([ref_lab[:, n_levels - lev :], lab[:, n_levels - lev :]])
        _, inv = torch.unique(both, dim=0, return_inverse=True)
        sizes = torch.bincount(inv[: ref_lab.shape[0]], minlength=int(inv.max()) + 1)
        n_ge[:, lev] = sizes[inv[ref_lab.shape[0] :]]
    if exclude_self:
        n_ge[:, : n_levels + 1] -= 1
    return n_ge[:, :-1] - n_ge[:, 1:]


class _Plan:
    """The permuted layout and the stage-1 inputs shared by every block of one request."""

    def __init__(self, req: MetricsRequest) -> None:
        dev = req.device
        self.n_levels = req.n_levels if req.hierarchical else 1
        lab = req.labels if req.hierarchical else req.labels[:, :1]
        ref_lab = req.gallery_labels if req.hierarchical else req.gallery_labels[:, :1]
        self.g_order = torch.argsort(ref_lab[:, -1], stable=True)
        self.q_order = self.g_order if req.same else torch.argsort(lab[:, -1], stable=True)
        self.gp = req.gallery[self.g_order.to(dev)]
        self.qp = self.gp if req.same else req.queries[self.q_order.to(dev)]
        self.lab_q = lab[self.q_order]
        self.ref_lab = ref_lab[self.g_order]
        # the same, contiguous int64 for the kernels
        self.lab_q_np = np.ascontiguousarray(self.lab_q.numpy(), dtype=np.int64)
        self.ref_lab_np = np.ascontiguousarray(self.ref_lab.numpy(), dtype=np.int64)
        coarse, sizes = torch.unique_consecutive(self.ref_lab[:, -1], return_counts=True)
        starts = torch.cumsum(sizes, 0) - sizes
        k = torch.searchsorted(coarse, self.lab_q[:, -1].contiguous()).clamp(
            max=max(coarse.numel() - 1, 0)
        )
        present = coarse[k] == self.lab_q[:, -1]
        self.range_a = torch.where(present, starts[k], torch.zeros_like(k))
        self.range_b = torch.where(present, starts[k] + sizes[k], torch.zeros_like(k))
        self.self_col = None
        if req.exclude_self:
            inv = torch.empty_like(self.g_order)
            inv[self.g_order] = torch.arange(self.g_order.numel())
            self.self_col = inv[self.q_order]
        self.counts = level_counts(self.lab_q, self.ref_lab, req.exclude_self)
        nq, n_g, d = self.qp.shape[0], self.gp.shape[0], self.qp.shape[1]
        fmt = resolve_precision(req.precision, self.qp.dtype, dev, work=nq * n_g * d)
        self.st = Stage1(self.qp, self.gp, fmt, req.same)
        self._tables: dict[torch.dtype, np.ndarray] = {}
        self.last_doubtful = 0  # capacity hint of the doubtful-negatives buffers
        # capacity hint of the emitted-items buffers (grows with what blocks kept)
        self.last_emitted = 0
        # metrics of depth "k" / "R" read the first max(k, R) positions only: negatives below the
        # K-th score cannot change them (positions beyond K then read as "beyond K", which is all
        # they use)
        depths = req.depths
        shallow = depths <= {"k", "R", "cutoff"} and not req.hierarchical
        self.list_depth = (max(req.ks) if req.ks else 1) if shallow else None
        # positions the metrics need exactly (beyond them, only comparisons with the cut-offs ks)
        big = np.iinfo(np.int64).max // 4
        self.exact_depth = (max(req.ks) if req.ks and "k" in depths else 0) if shallow else big
        self.exact_to_r = shallow and "R" in depths
        self.cutoffs = np.array(
            sorted(req.ks) if shallow and "cutoff" in depths else [], dtype=np.int64
        )

    def bits_table(self, dtype: torch.dtype) -> np.ndarray:
        """float32 value of every 16-bit pattern of ``dtype`` (indexed by the bits as uint16)."""
        if dtype not in self._tables:
            bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
            self._tables[dtype] = bits.view(dtype).float().numpy()
        return self._tables[dtype]


#: Same-set requests whose K (the deepest position the metrics read) is at most this share of N
#: take the half-product route (the hand-over holds about 1.5 K items a row); small N always does.
HALF_MAX_DEPTH = 0.25
HALF_SMALL_N = 2048
#: ... and at most this many blocks (each block takes the lists of every earlier one).
HALF_MAX_BLOCKS = 1024


def _half_applies(plan: _Plan, req: MetricsRequest) -> bool:
    """Whether :class:`_HalfProduct` serves ``req``: the queries are the gallery, the compiled
    kernels run (CPU), every metric reads the first K positions only, no row has more than
    :data:`SMALL_POSITIVES` positives, and K is small against N."""
    if not (req.same and req.device.type == "cpu" and USE_KERNELS):
        return False
    if plan.list_depth is None:
        return False
    n = plan.gp.shape[0]
    widest = int((plan.range_b - plan.range_a).max()) if n else 0
    if widest > SMALL_POSITIVES:
        return False
    return n <= HALF_SMALL_N or max(plan.list_depth, widest) <= HALF_MAX_DEPTH * n


class _HalfProduct:
    """The same-set route (queries = gallery): about half the product.

    Stage-1 scores certify the canonical score of a pair whichever of its two rows is the query
    (the bound and the scale are symmetric, the canonical score too), so the block of queries
    ``r0:r1`` computes its scores with the columns from its first positive on only
    (:meth:`first_col`); the items of the earlier columns come from the earlier blocks, which read
    their own block by column and hand each later query its items at or above a cut fixed in
    advance (:meth:`hand_over`): the threshold of a guessed lower bound of the query's K-th stage-1
    score, from a product with every ``stride``-th gallery row. A query whose guess fails the
    check of :func:`_small_rows` (fewer than K items reach it) gets its whole row of scores. The
    positions, hence every per-query value, are those of the full route.
    """

    def __init__(self, plan: _Plan, req: MetricsRequest, starts: list[int]) -> None:
        st = plan.st
        n = plan.gp.shape[0]
        self.plan, self.n = plan, n
        self.starts = starts
        first = plan.range_a[torch.tensor(starts, dtype=torch.long)].numpy()
        self._first = dict(zip(starts, first.tolist(), strict=True))
        # the first column of each query's block (non-decreasing with the query)
        self.lim = np.repeat(first, np.diff(np.append(starts, n)))
        self.is_bits = st.out_fmt in _BITS
        self._done = {r0: threading.Event() for r0 in starts}
        # per block: (first query, offsets, columns, scores) of what it handed over
        self._lists: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        self._waiting = set(starts)  # blocks that have not taken their items yet
        own = plan.self_col is not None
        n_pos = (plan.range_b - plan.range_a) - int(own)
        self.k_row = torch.clamp(n_pos, min=plan.list_depth)
        stride = max(1, min(32, n // 256))
        m = torch.clamp(-(-3 * self.k_row // (2 * stride)), min=8).numpy()
        cols = torch.arange(0, n, stride)
        g_sample = st.gr[cols.to(st.gr.device)].contiguous()
        r_all = np.arange(n)
        own_s = np.where(own & (r_all % stride == 0), r_all // stride, -1)
        guess = torch.empty(n, dtype=torch.float64)
        step = 4096

        def sample(a: int) -> None:  # the m-th largest of the sampled scores of queries a:a+step
            b = min(a + step, n)
            s = st.product(st.qr[a:b], g_sample)
            s_np = s.view(torch.int16).numpy() if self.is_bits else s.numpy()
            got = torch.from_numpy(sample_kth(s_np, self.is_bits, 1, m[a:b], own_s[a:b]))
            guess[a:b] = _from_keys(got, s.dtype) if self.is_bits else got

        run_parallel(sample, list(range(0, n, step)), False, req.device)
        self.guess = guess
        rows = torch.arange(n)
        fin = torch.isfinite(guess)
        cut = st.thresholds(torch.where(fin, guess, torch.zeros_like(guess)).to(st.cmp), rows)
        cut = torch.where(fin, cut.double(), torch.full_like(guess, -torch.inf))
        cut = torch.where(n_pos > 0, cut, torch.full_like(cut, torch.inf))
        self.thr = _thresholds_as(st.out_fmt, cut)
        # non-negative keys as the int16 bits they are (the kernel's fast comparison)
        self.thr16 = np.clip(self.thr, 0, 32767).astype(np.int16) if self.is_bits else self.thr

    def first_col(self, r0: int) -> int:
        """The first gallery column of the block that starts at query ``r0``."""
        return int(self._first[r0])

    def hand_over(self, r0: int, r1: int, s: torch.Tensor) -> None:
        """Read the block of queries ``r0:r1`` by column: the items of every later query
        (:func:`~rank_lab.metrics.engine.routes._kernels.emit_later`)."""
        col0 = self.first_col(r0)
        s_np = s.view(torch.int16).numpy() if self.is_bits else s.numpy()
        # gallery item j goes to the queries whose block starts after it
        first = np.searchsorted(self.lim, np.arange(r0, r1), side="right")
        off, cols, vals = emit_later(s_np, self.is_bits, r0, col0, r1, first, self.thr, self.thr16)
        self._lists[r0] = (r1, off, cols, vals)
        self._done[r0].set()

    def release(self, r0: int) -> None:
        """The block of ``r0`` ended (or failed): the later blocks stop waiting for it."""
        self._done[r0].set()

    def _forget(self, r0: int) -> None:
        """The block of ``r0`` took its items: every list drops the queries before the first
        block still waiting once they are half of its items (each list is copied a few times)."""
        with self._lock:
            self._waiting.discard(r0)
            front = min(self._waiting, default=self.n)
            for b0, (lo, off, col, val) in list(self._lists.items()):
                dead = int(off[min(front, self.n) - lo]) if front > lo else 0
                if 2 * dead > int(off[-1]) or front >= self.n:
                    keep = off[max(front, lo) - lo :]
                    self._lists[b0] = (
                        max(front, lo),
                        keep - keep[0],
                        col[keep[0] :].copy(),
                        val[keep[0] :].copy(),
                    )

    def handed_over(self, r0: int, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The items handed to queries ``r0:r0 + c`` by the earlier blocks, in the form of
        :func:`~rank_lab.metrics.engine.routes._kernels.small_scan` (``in_off (parts, c + 1)``,
        ``in_col``, ``in_val``); waits for those blocks."""
        parts = [b0 for b0 in self.starts if b0 < r0]
        in_off = np.zeros((max(len(parts), 1), c + 1), dtype=np.int64)
        cols, vals, base = [], [], 0
        for p, b0 in enumerate(parts):
            self._done[b0].wait()
            if b0 not in self._lists:
                raise RuntimeError("an earlier block of the retrieval metrics failed")
            lo, off, col, val = self._lists[b0]
            o = off[r0 - lo : r0 - lo + c + 1]
            in_off[p] = o - o[0] + base
            cols.append(col[o[0] : o[-1]])
            vals.append(val[o[0] : o[-1]])
            base += int(o[-1] - o[0])
        self._forget(r0)
        if not parts:
            fmt = torch.int16 if self.is_bits else self.plan.st.out_fmt
            return in_off, np.zeros(0, dtype=np.int32), torch.empty(0, dtype=fmt).numpy()
        return in_off, np.concatenate(cols), np.concatenate(vals)


def counting_route(req: MetricsRequest) -> dict[str, dict[str, torch.Tensor]]:
    """Per-query values of every metric of ``req`` (module docstring).

    Returns:
        ``{metric name: {key: (Q,) float64}}`` on the CPU, in the order of the queries.
    """
    plan = _Plan(req)
    dev = req.device
    nq, n_g = plan.qp.shape[0], plan.gp.shape[0]
    threads = max(1, torch.get_num_threads()) if dev.type == "cpu" else 1
    half_route = _half_applies(plan, req)
    # the half-product route holds one block of stage-1 scores per thread and little else per item
    per_item = torch.empty(0, dtype=plan.st.out_fmt).element_size() if half_route else 8
    band = chunk_rows(
        n_g, req.max_memory_mb / threads, req.chunk_size, bytes_per_item=per_item, max_rows=1024
    )
    if half_route and -(-nq // band) > HALF_MAX_BLOCKS:  # each block reads every earlier one's list
        half_route = False
        band = chunk_rows(
            n_g, req.max_memory_mb / threads, req.chunk_size, bytes_per_item=8, max_rows=1024
        )
    starts = list(range(0, nq, band))
    show = len(starts) > 16 if req.progress is None else bool(req.progress)
    pool = BufferPool(band * n_g, plan.st.out_fmt, dev, len(starts))
    results: dict[int, dict[str, dict[str, torch.Tensor]]] = {}
    with exact_matmul():
        half = _HalfProduct(plan, req, starts) if half_route else None

    def work(r0: int) -> None:
        r1 = min(r0 + band, nq)
        try:
            with pool.take() as flat:
                positions = _block_positions(plan, req, r0, r1, flat, half)
        finally:
            if half is not None:  # a failed block must not leave the later ones waiting
                half.release(r0)
        binary = positions.binary() if any(m.family == "binary" for m in req.metrics) else None
        results[r0] = {
            m.name: {
                key: v.cpu()
                for key, v in m.compute(
                    binary if m.family == "binary" else positions, req.ks
                ).items()
            }
            for m in req.metrics
        }

    with exact_matmul():
        run_parallel(work, starts, show, dev, "retrieval metrics")
    out: dict[str, dict[str, torch.Tensor]] = {}
    for metric in req.metrics:
        out[metric.name] = {}
        for key in results[starts[0]][metric.name]:
            val = torch.cat([results[r0][metric.name][key] for r0 in starts])
            unperm = torch.empty_like(val)
            unperm[plan.q_order] = val
            out[metric.name][key] = unperm
    return out


def _block_positions(
    plan: _Plan,
    req: MetricsRequest,
    r0: int,
    r1: int,
    flat: torch.Tensor | None,
    half: _HalfProduct | None = None,
) -> LevelPositions:
    """The positives of queries ``r0:r1`` (permuted order) in canonical order, with their
    positions (``half``: the same-set route of :class:`_HalfProduct`)."""
    st = plan.st
    dev = req.device
    n_g = plan.gp.shape[0]
    c = r1 - r0
    rows = torch.arange(r0, r1, device=dev)
    col0 = half.first_col(r0) if half is not None else 0
    s = st.product(st.qr[r0:r1], st.gr[col0:], flat)
    if half is not None:
        half.hand_over(r0, r1, s)
    a, b = plan.range_a[r0:r1], plan.range_b[r0:r1]
    width = max(int((b - a).max()), 1)
    if dev.type == "cpu" and USE_KERNELS and width > SMALL_POSITIVES:
        return _large_rows(plan, req, r0, rows, s, a, b, width)
    idx = a[:, None] + torch.arange(width)[None, :]
    in_range = idx < b[:, None]
    idx = idx.clamp(max=n_g - 1)
    idx_d = idx.to(dev)
    pv = s.gather(1, (idx - col0).clamp(min=0).to(dev)).to(st.cmp)
    level = torch.ones(c, width, dtype=torch.long)
    match = torch.ones(c, width, dtype=torch.bool)
    lab_q = plan.lab_q[r0:r1]
    for col in range(plan.n_levels - 2, -1, -1):  # level = 1 + the finer columns that match too
        match &= lab_q[:, col, None] == plan.ref_lab[idx, col]
        level += match
    level = torch.where(in_range, level, torch.zeros_like(level))
    if plan.self_col is not None:
        level = torch.where(idx == plan.self_col[r0:r1, None], torch.zeros_like(level), level)
    level_d = level.to(dev)
    is_pos = level_d > 0
    # negatives that can reach the lowest positive (the others cannot change any count)
    lowest = torch.where(is_pos, pv, torch.full_like(pv, torch.inf)).amin(1)
    has_pos = torch.isfinite(lowest)
    thr = st.thresholds(torch.where(has_pos, lowest, torch.zeros_like(lowest)), rows)
    thr = torch.where(has_pos, thr, torch.full_like(thr, torch.inf))
    if dev.type == "cpu" and USE_KERNELS:
        return _small_block(plan, req, r0, rows, s, pv, level_d, idx_d, thr, has_pos, a, b, half)
    for g0, g1 in _groups(a, b):
        s[g0:g1, int(a[g0]) : int(b[g0])] = -torch.inf
    if plan.self_col is not None:
        s[torch.arange(c, device=dev), plan.self_col[r0:r1].to(dev)] = -torch.inf
    rr, cc = torch.nonzero(~(s < thr[:, None]), as_tuple=True)  # compared after promotion; NaN kept
    nv = s[rr, cc].to(st.cmp)
    _check_no_nan(nv, pv)
    return _resolve(plan, req, r0, rows, pv, level_d, idx_d, rr, cc, nv)


def _check_no_nan(*values: torch.Tensor) -> None:
    if any(bool(torch.isnan(v).any()) for v in values):
        raise RuntimeError(
            "the stage-1 matmul returned NaN scores from finite embeddings whose products cannot "
            "overflow: the matmul is broken on this device; rerun with precision='exact' and "
            "report it"
        )


_BITS = (torch.bfloat16, torch.float16)  # scores read as int16 bit patterns by the kernels


def _from_keys(keys: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The 16-bit float values of order keys (float64 holding ints; ``-inf`` stays ``-inf``)."""
    finite = torch.isfinite(keys)
    k = torch.where(finite, keys, torch.zeros_like(keys)).long()
    bits = (k ^ ((k >> 15) & 0x7FFF)).to(torch.int16)
    vals = bits.view(dtype).to(torch.float64)
    return torch.where(finite, vals, keys)


def _thresholds_as(dtype: torch.dtype, thr: torch.Tensor) -> np.ndarray:
    """Row thresholds in the comparison form of
    :func:`~rank_lab.metrics.engine.routes._kernels.emit_above` for scores of ``dtype``: int64 keys
    of the smallest 16-bit float >= ``thr`` for bfloat16 / float16 (``-0`` when ``thr`` is zero:
    ``-0 >= 0``), else ``thr`` in ``dtype`` rounded down (``s >= thr`` keeps its meaning). Rows
    without positives (``thr = inf``) emit nothing; ``thr = -inf`` keeps every finite score."""
    if dtype in _BITS:
        near = thr.to(dtype)
        keys = bf16_keys(near.view(torch.int16).numpy()) + (near.to(thr.dtype) < thr).numpy()
        keys = np.where(thr.numpy() == 0, -1, keys)  # the key of -0, just below +0's
        keys = np.where(thr.numpy() == -np.inf, np.int64(-1) << 40, keys)
        return np.where(thr.numpy() == np.inf, np.int64(1) << 40, keys)
    down = thr.to(dtype)
    down = torch.where(
        down.to(thr.dtype) > thr, torch.nextafter(down, torch.full_like(down, -torch.inf)), down
    )
    return down.numpy()


def _emit(
    plan: _Plan,
    s: torch.Tensor,
    s_np: np.ndarray,
    thr: torch.Tensor,
    a: np.ndarray,
    b: np.ndarray,
    own: np.ndarray,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept negatives ``(rows, cols)`` of a block:
    :func:`~rank_lab.metrics.engine.routes._kernels.emit_above`."""
    thr_np = _thresholds_as(s.dtype, thr)
    cap = max(64 * s_np.shape[0], plan.last_emitted)
    while True:
        out_r, out_c = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
        n = emit_above(s_np, thr_np, a, b, own, out_r, out_c, s.dtype in _BITS)
        if n <= cap:
            break
        cap = n
    plan.last_emitted = max(plan.last_emitted, n + n // 4)
    return torch.from_numpy(out_r[:n]), torch.from_numpy(out_c[:n])


def _own_cols(plan: _Plan, r0: int, c: int) -> np.ndarray:
    """The query's own gallery column of each row of the block (-1: none)."""
    if plan.self_col is not None:
        return plan.self_col[r0 : r0 + c].numpy()
    return np.full(c, -1, dtype=np.int64)


def _guess_kth(
    plan: _Plan, s: torch.Tensor, s_np: np.ndarray, n_pos: torch.Tensor, own: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """For metrics that read the first ``K`` positions only (``plan.list_depth``): each row's
    ``K = max(list_depth, R)`` and a guess of a lower bound of its K-th stage-1 score (scaled, in
    the scores' values; ``-inf`` where the sample is too short), to be verified by the caller (at
    least K items must reach it).

    The guess is the m-th largest of every 16th score (m >= 8: it estimates the (16 m)-th largest
    of the row); for small K it sits a little below the K-th score.
    """
    k_row = torch.clamp(n_pos, min=plan.list_depth)
    stride = max(1, min(16, s.shape[1] // 32))
    m = torch.clamp(-(-3 * k_row // (2 * stride)), min=8)
    guess = torch.from_numpy(sample_kth(s_np, s.dtype in _BITS, stride, m.numpy(), own))
    if s.dtype in _BITS:
        guess = _from_keys(guess, s.dtype)
    return k_row, guess


def _cut_at(
    st: Stage1, guess: torch.Tensor, rows: torch.Tensor, has_pos: torch.Tensor, thr: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cut, cap_rows)``: the stage-1 threshold below which an item cannot reach the guessed
    K-th score, and the rows where it removes more than the lowest positive's threshold ``thr``."""
    cut = st.thresholds(
        torch.where(torch.isfinite(guess), guess, torch.zeros_like(guess)).to(st.cmp), rows
    )
    cut = torch.where(torch.isfinite(guess), cut, torch.full_like(cut, -torch.inf))
    return cut, has_pos & (cut > thr)


def _small_block(
    plan: _Plan,
    req: MetricsRequest,
    r0: int,
    rows: torch.Tensor,
    s: torch.Tensor,
    pv: torch.Tensor,
    level: torch.Tensor,
    idx: torch.Tensor,
    thr: torch.Tensor,
    has_pos: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    half: _HalfProduct | None = None,
) -> LevelPositions:
    """Steps 2-4 of the module docstring on a block whose rows have at most
    :data:`SMALL_POSITIVES` positives, with the compiled kernels (CPU): :func:`_small_rows`
    (``half``: the block holds the columns from ``half.first_col(r0)`` on, and the earlier bands
    hand over the items before them)."""
    c = pv.shape[0]
    s_np = s.view(torch.int16).numpy() if s.dtype in _BITS else s.numpy()
    own = _own_cols(plan, r0, c)
    is_pos = level > 0
    use, cut, cap_rows, guess, k_row = thr, None, None, None, None
    if half is not None:  # the guesses of the K-th scores came first (they cut the hand-over)
        k_row, guess = half.k_row[r0 : r0 + c], half.guess[r0 : r0 + c]
    elif plan.list_depth is not None:  # every metric reads the first K positions only
        k_row, guess = _guess_kth(plan, s, s_np, is_pos.sum(1), own)
    if k_row is not None:
        cut, cap_rows = _cut_at(plan.st, guess, rows, has_pos, thr)
        use = torch.where(cap_rows, cut, thr)
    return _small_rows(
        plan,
        req,
        r0,
        rows,
        s,
        s_np,
        pv,
        level,
        idx,
        thr,
        use,
        cut,
        cap_rows,
        guess,
        k_row,
        own,
        a.numpy(),
        b.numpy(),
        half,
    )


def _large_rows(
    plan: _Plan,
    req: MetricsRequest,
    r0: int,
    rows: torch.Tensor,
    s: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    width: int,
) -> LevelPositions:
    """Steps 2-4 of the module docstring on a block with a row of many positives (CPU): the lowest
    positive's threshold (:func:`~rank_lab.metrics.engine.routes._kernels.range_scan`), the kept
    negatives (:func:`_emit`), then the order of each row's items by a counting sort of their 16-bit
    keys (:func:`~rank_lab.metrics.engine.routes._kernels.large_rows`): no ``(c, P)`` tensor
    is built before the positions themselves."""
    st = plan.st
    c = s.shape[0]
    is_bits = s.dtype in _BITS
    s_np = s.view(torch.int16).numpy() if is_bits else s.numpy()
    table = plan.bits_table(s.dtype) if is_bits else np.zeros(1, dtype=np.float32)
    own = _own_cols(plan, r0, c)
    a_np, b_np = a.numpy(), b.numpy()
    n_pos = (b - a) - ((torch.from_numpy(own) >= a) & (torch.from_numpy(own) < b)).long()
    has_pos = n_pos > 0
    guess = torch.full((c,), torch.inf, dtype=torch.float64)
    k_row = None
    if plan.list_depth is not None:  # every metric reads the first K positions only
        k_row, guess = _guess_kth(plan, s, s_np, n_pos, own)
    lowest, reach_pos = np.empty(c), np.empty(c, dtype=np.int64)
    if not range_scan(s_np, is_bits, table, a_np, b_np, own, guess.numpy(), lowest, reach_pos):
        _check_no_nan(torch.tensor([float("nan")]))
    # negatives that can reach the lowest positive (the others cannot change any count)
    low = torch.from_numpy(lowest).to(st.cmp)
    thr = st.thresholds(torch.where(has_pos, low, torch.zeros_like(low)), rows)
    thr = torch.where(has_pos, thr, torch.full_like(thr, torch.inf))
    use, cap_rows = thr, None
    if k_row is not None:
        cut, cap_rows = _cut_at(st, guess, rows, has_pos, thr)
        use = torch.where(cap_rows, cut, thr)
    rr, cc = _emit(plan, s, s_np, use, a_np, b_np, own)
    if cap_rows is not None and bool(cap_rows.any()):
        # the guess is a lower bound of the K-th score only if at least K items reach it
        nv = s[rr, cc].to(st.cmp)
        _check_no_nan(nv)
        reach = torch.bincount(rr[nv >= guess.to(st.cmp)[rr]], minlength=c)
        bad = torch.nonzero(cap_rows & (reach + torch.from_numpy(reach_pos) < k_row)).flatten()
        # those rows keep every negative that can reach their lowest positive, and no cut
        if bad.numel():
            cap_rows = cap_rows.clone()
            cap_rows[bad] = False
            bn = bad.numpy()
            br, bc = _emit(plan, s[bad], s_np[bn], thr[bad], a_np[bn], b_np[bn], own[bn])
            keep = ~torch.isin(rr, bad)
            rr, cc = torch.cat([rr[keep], bad[br]]), torch.cat([cc[keep], bc])
            order = torch.argsort(rr, stable=True)
            rr, cc = rr[order], cc[order]
    neg_off = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(np.bincount(rr.numpy(), minlength=c), out=neg_off[1:])
    cut_np = np.full(c, -np.inf)
    if cap_rows is not None:
        cut_np = torch.where(cap_rows, cut.double(), torch.full_like(cut.double(), -torch.inf))
        cut_np = cut_np.numpy()
    lv = np.empty((c, width), dtype=np.int64)
    ge = np.empty((c, width), dtype=np.int64)
    keys = np.empty((c, width))
    bad_val = np.zeros(3)
    status = large_rows(
        s_np,
        is_bits,
        table,
        a_np,
        b_np,
        own,
        plan.lab_q_np[r0 : r0 + c],
        plan.ref_lab_np,
        neg_off,
        cc.numpy(),
        cut_np,
        st.exp[rows].numpy(),
        st.a[rows].numpy(),
        st.eta[rows].numpy(),
        float(st.c),
        plan.qp.numpy(),
        np.arange(r0, r0 + c, dtype=np.int64),
        plan.gp.numpy(),
        1 << tree_depth(plan.qp.shape[1]),
        lv,
        ge,
        keys,
        bad_val,
    )
    if status == -1:
        _check_no_nan(torch.tensor([float("nan")]))
    if status == -2:
        _bound_violated(float(bad_val[0]), float(bad_val[1]), float(bad_val[2]))
    lv_t = torch.from_numpy(lv)
    return LevelPositions(
        lv_t,
        lv_t > 0,
        torch.from_numpy(ge),
        torch.from_numpy(keys),
        plan.counts[r0 : r0 + c],
        plan.n_levels,
        req.alpha,
    )


def _small_rows(
    plan: _Plan,
    req: MetricsRequest,
    r0: int,
    rows: torch.Tensor,
    s: torch.Tensor,
    s_np: np.ndarray,
    pv: torch.Tensor,
    level: torch.Tensor,
    idx: torch.Tensor,
    thr: torch.Tensor,
    use: torch.Tensor,
    cut: torch.Tensor | None,
    cap_rows: torch.Tensor | None,
    guess: torch.Tensor | None,
    k_row: torch.Tensor | None,
    own: np.ndarray,
    a_np: np.ndarray,
    b_np: np.ndarray,
    half: _HalfProduct | None,
) -> LevelPositions:
    """A block whose rows have few positives: every positive re-scored, each negative placed by the
    positives' stage-1 limits, the doubtful ones re-scored in gallery order where the metrics need
    them (:func:`~rank_lab.metrics.engine.routes._kernels.small_scan`, then ``small_finish``).
    With ``half``, ``s`` holds the columns from ``half.first_col(r0)`` on and the earlier columns'
    items come from :meth:`_HalfProduct.handed_over`; rows whose guessed cut fails get their whole
    row of scores."""
    st = plan.st
    c, width = pv.shape
    is_bits = s.dtype in _BITS
    table = plan.bits_table(s.dtype) if is_bits else np.zeros(1, dtype=np.float32)
    lv = np.zeros((c, width), dtype=np.int64)
    ge = np.zeros((c, width), dtype=np.int64)
    keys = np.full((c, width), -np.inf)
    reach = np.zeros(c, dtype=np.int64)
    bad = np.zeros(3)
    none = np.full(c, -np.inf)
    cut_np = (
        torch.where(cap_rows, cut, torch.full_like(cut, -torch.inf)).double().numpy()
        if cut is not None
        else none
    )
    guess_np = guess.double().numpy() if guess is not None else none
    lev_np, col_np = level.numpy(), idx.numpy()
    q_rows = np.arange(r0, r0 + c, dtype=np.int64)
    args = (
        st.exp[rows].numpy(),
        st.a[rows].numpy(),
        st.eta[rows].numpy(),
        float(st.c),
        plan.qp.numpy(),
    )
    width2 = 1 << tree_depth(plan.qp.shape[1])
    n_pos = level.gt(0).sum(1).numpy()
    depth = np.maximum(n_pos if plan.exact_to_r else np.zeros_like(n_pos), plan.exact_depth)

    g_np = plan.gp.numpy()

    col0 = half.first_col(r0) if half is not None else 0
    # no items handed over (the full route)
    none_in = (
        np.zeros((1, c + 1), dtype=np.int64),
        np.zeros(0, dtype=np.int32),
        np.zeros(0, s_np.dtype),
    )

    def run(
        sel: np.ndarray | slice,
        thr_rows: torch.Tensor,
        cut_rows: np.ndarray,
        scores: np.ndarray,
        col0: int,
        inbox: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        # a slice: the whole block, without copying the scores
        k = c if isinstance(sel, slice) else sel.size
        keys_w, lvs_w = np.empty((k, width)), np.empty((k, width), dtype=np.int64)
        n_pos_w, hist_w = np.zeros(k, dtype=np.int64), np.zeros((k, width + 1), dtype=np.int64)
        reach_w = np.zeros(k, dtype=np.int64)
        cap = max(16 * k, plan.last_doubtful)
        while True:
            amb = (
                np.empty(cap, dtype=np.int64),
                np.empty(cap, dtype=np.int64),
                np.empty(cap),
                np.empty(cap),
                np.empty(cap, dtype=np.int64),
                np.empty(cap, dtype=np.int64),
                np.empty(cap, dtype=np.bool_),
            )
            reach_w[:] = 0
            n_amb = small_scan(
                scores,
                is_bits,
                table,
                _thresholds_as(s.dtype, thr_rows),
                a_np[sel],
                b_np[sel],
                own[sel],
                col_np[sel],
                lev_np[sel],
                cut_rows,
                guess_np[sel],
                depth[sel],
                plan.cutoffs,
                args[0][sel],
                args[1][sel],
                args[2][sel],
                args[3],
                args[4],
                q_rows[sel],
                g_np,
                width2,
                keys_w,
                lvs_w,
                n_pos_w,
                hist_w,
                *amb,
                reach_w,
                bad,
                col0,
                *inbox,
            )
            if n_amb == -1:
                _check_no_nan(torch.tensor([float("nan")]))
            if n_amb == -2:
                _bound_violated(float(bad[0]), float(bad[1]), float(bad[2]))
            if n_amb <= cap:
                break
            cap = n_amb
        plan.last_doubtful = max(plan.last_doubtful, n_amb + n_amb // 4)
        amb = tuple(x[:n_amb] for x in amb)
        exact = np.zeros(n_amb)
        todo = np.flatnonzero(amb[6])
        # the needed re-scores, in gallery order (each gallery row read once per block)
        if todo.size:
            todo = todo[np.argsort(amb[1][todo], kind="stable")]
            vals = np.empty(todo.size, dtype=g_np.dtype)
            canonical_cpu(args[4], g_np, q_rows[sel][amb[0][todo]], amb[1][todo], width2, vals)
            lo, hi = amb[2][todo], amb[3][todo]
            off = (vals < lo) | (vals > hi)
            if off.any():
                i = int(np.flatnonzero(off)[0])
                _bound_violated(float(vals[i]), float(lo[i]), float(hi[i]))
            exact[todo] = vals
        small_finish(
            keys_w, lvs_w, n_pos_w, hist_w, amb[0], amb[4], amb[5], amb[6], exact, *out[:3]
        )
        out[3][:] = reach_w

    out = (lv, ge, keys, reach)
    inbox = half.handed_over(r0, c) if half is not None else none_in
    run(slice(None), use, cut_np, s_np, col0, inbox)
    if cap_rows is not None and bool(cap_rows.any()):
        # the guess is a lower bound of the K-th score only if at least K items reach it
        reach_t = torch.from_numpy(reach) + (level.gt(0) & (pv >= guess.to(pv.dtype)[:, None])).sum(
            1
        )
        failed = torch.nonzero(cap_rows & (reach_t < k_row)).flatten().numpy()
        if failed.size:  # those rows keep every negative that can reach their lowest positive
            f = failed.size
            out = (
                np.zeros((f, width), dtype=np.int64),
                np.zeros((f, width), dtype=np.int64),
                np.full((f, width), -np.inf),
                np.zeros(f, dtype=np.int64),
            )
            if half is None:
                full = s_np[failed]
            else:  # the whole rows (the hand-over was cut at the guess)
                sf = st.product(st.qr[rows[torch.from_numpy(failed)]], st.gr)
                full = sf.view(torch.int16).numpy() if is_bits else sf.numpy()
            empty = (np.zeros((1, f + 1), dtype=np.int64), none_in[1], none_in[2])
            run(failed, thr[torch.from_numpy(failed)], none[failed], full, 0, empty)
            lv[failed], ge[failed], keys[failed] = out[0], out[1], out[2]
    lv_t = torch.from_numpy(lv)
    return LevelPositions(
        lv_t,
        lv_t > 0,
        torch.from_numpy(ge),
        torch.from_numpy(keys),
        plan.counts[r0 : r0 + c],
        plan.n_levels,
        req.alpha,
    )


def _bound_violated(exact: float, lo: float, hi: float) -> None:
    raise RuntimeError(
        f"the canonical score {exact:.9g} of a query and a gallery item lies outside the interval "
        f"[{lo:.9g}, {hi:.9g}] its stage-1 score certified: the stage-1 matmul broke its error "
        "bound (it does not accumulate as the bound assumes); rerun with precision='exact' and "
        "report it"
    )


def _groups(a: torch.Tensor, b: torch.Tensor) -> list[tuple[int, int]]:
    """Runs of consecutive rows that share one positive range ``[a, b)``."""
    if a.numel() == 0:
        return []
    cut = [
        0,
        *(torch.nonzero((a[1:] != a[:-1]) | (b[1:] != b[:-1])).flatten() + 1).tolist(),
        a.numel(),
    ]
    return list(zip(cut[:-1], cut[1:], strict=True))


def _resolve(
    plan: _Plan,
    req: MetricsRequest,
    r0: int,
    rows: torch.Tensor,
    pv: torch.Tensor,
    level: torch.Tensor,
    idx: torch.Tensor,
    rr: torch.Tensor,
    cc: torch.Tensor,
    nv: torch.Tensor,
) -> LevelPositions:
    """Steps 3 and 4 of the module docstring on one block: re-score what overlaps, sort, count."""
    st = plan.st
    dev = pv.device
    c, width = pv.shape
    n_kinds = plan.n_levels + 1
    n_neg = torch.bincount(rr, minlength=c)
    h = int(n_neg.max()) if rr.numel() else 0
    m = width + h
    # one padded row of items per query: the positives, then the kept negatives
    v = torch.full((c, m), torch.inf, dtype=st.cmp, device=dev)
    kind = torch.full((c, m), -1, dtype=torch.long, device=dev)
    col = torch.zeros((c, m), dtype=torch.long, device=dev)
    is_pos = level > 0
    v[:, :width] = torch.where(is_pos, pv, v[:, :width])
    kind[:, :width] = torch.where(is_pos, level, kind[:, :width])
    col[:, :width] = idx
    if rr.numel():
        start = torch.cumsum(n_neg, 0) - n_neg
        slot = width + torch.arange(rr.numel(), device=dev) - start[rr]
        v[rr, slot], kind[rr, slot], col[rr, slot] = nv, 0, cc
    real = kind >= 0
    row_ids = rows[:, None].expand(c, m)
    lo, hi = st.intervals(torch.where(real, v, torch.zeros_like(v)), row_ids)
    lo = torch.where(real, lo, torch.full_like(lo, torch.inf))
    hi = torch.where(real, hi, torch.full_like(hi, torch.inf))
    # items whose interval overlaps one of another kind (a window of the order by stage-1 score)
    order = torch.argsort(v, dim=1, stable=True)
    lo_s, hi_s, kind_s = lo.gather(1, order), hi.gather(1, order), kind.gather(1, order)
    j_hi = torch.searchsorted(lo_s, hi_s, right=True)  # items with lo <= hi_i: [0, j_hi)
    j_lo = torch.searchsorted(hi_s, lo_s, right=False)  # items with hi >= lo_i: [j_lo, m)
    onehot = torch.zeros(c, m + 1, n_kinds, dtype=torch.int32, device=dev)
    real_s = kind_s >= 0
    onehot[:, 1:].scatter_(2, kind_s.clamp(min=0)[..., None], real_s[..., None].to(torch.int32))
    pref = onehot.cumsum(1)
    hi_idx = j_hi.clamp(max=m)[..., None].expand(c, m, n_kinds)
    lo_idx = j_lo.clamp(max=m)[..., None].expand(c, m, n_kinds)
    # (c, m, kinds), window [j_lo, j_hi)
    in_window = pref.gather(1, hi_idx) - pref.gather(1, lo_idx)
    own = in_window.gather(2, kind_s.clamp(min=0)[..., None])[..., 0]
    flag_s = real_s & (in_window.sum(2) > own)
    flag = torch.zeros_like(flag_s).scatter_(1, order, flag_s)
    keys = torch.where(
        real,
        st.unscaled(torch.where(real, v, torch.zeros_like(v)), row_ids),
        torch.full(v.shape, -torch.inf, dtype=torch.float64, device=dev),
    )
    fr, fc = torch.nonzero(flag, as_tuple=True)
    if fr.numel():
        exact = canonical_pairs(plan.qp, plan.gp, rows[fr], col[fr, fc]).to(torch.float64)
        bad = (exact < lo[fr, fc]) | (exact > hi[fr, fc])
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            _bound_violated(float(exact[i]), float(lo[fr[i], fc[i]]), float(hi[fr[i], fc[i]]))
        keys[fr, fc] = exact
    # canonical order: key desc, ties by kind asc (negatives, then positives by increasing level)
    o1 = torch.argsort(torch.where(real, kind, torch.full_like(kind, n_kinds)), dim=1, stable=True)
    o2 = torch.argsort(keys.gather(1, o1), dim=1, descending=True, stable=True)
    final = o1.gather(1, o2)
    kind_f, keys_f = kind.gather(1, final), keys.gather(1, final)
    pos_f = kind_f >= 1
    rank = torch.cumsum(pos_f.long(), 1)
    place = torch.arange(1, m + 1, device=dev)[None, :]
    pr, pc = torch.nonzero(pos_f, as_tuple=True)
    slot = rank[pr, pc] - 1
    lv_out = torch.zeros(c, width, dtype=torch.long, device=dev)
    ge_out = torch.zeros(c, width, dtype=torch.long, device=dev)
    key_out = torch.full((c, width), -torch.inf, dtype=torch.float64, device=dev)
    lv_out[pr, slot] = kind_f[pr, pc]
    ge_out[pr, slot] = place.expand(c, m)[pr, pc] - rank[pr, pc]
    key_out[pr, slot] = keys_f[pr, pc]
    counts = plan.counts[r0 : r0 + c].to(dev)
    return LevelPositions(lv_out, lv_out > 0, ge_out, key_out, counts, plan.n_levels, req.alpha)
