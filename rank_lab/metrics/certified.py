"""Certified two-stage neighbour search: reduced-precision candidates, exact re-scoring.

:func:`certified_neighbours` returns, for every query, **every** gallery item whose canonical score
(:func:`rank_lab.metrics.score_bounds.canonical_scores`) is at least the query's k-th canonical
score -- the top k, extended by the items tied with the k-th -- sorted by decreasing score, ties by
increasing index. Two stages:

1. **Stage 1** scores every (query, item) pair in a fast format (bfloat16 on CPUs with native
   bfloat16 dot products, float16 on CUDA, or the working precision itself: the *exact route*)
   tile by tile (a tile is a block of queries times a block of items; with queries = gallery and
   self-exclusion only the tiles on and above the diagonal are computed, each serving both
   orientations). A lower bound ``lam`` of each query's k-th stage-1 score is kept up to date from
   block maxima (the k-th largest of k disjoint blocks' maxima is at most the k-th largest score),
   and every item with ``s^ >= hi^-1(lo(lam) - 2A)`` is kept as a candidate, ``A`` being the bound
   of :func:`rank_lab.metrics.score_bounds.score_bound` ("within twice the bound of the k-th
   score", with the output rounding ``lo``/``hi`` around it). Since ``lam`` only grows, the final
   candidate set contains every item whose canonical score reaches the k-th canonical score.
2. **Stage 2** computes the canonical score of every candidate and keeps the top k and their ties.

A query whose reduced-precision candidate set exceeds ``max(4k, k + 512)`` items (a neighbourhood
denser than the bound can separate) is scanned again by the exact route. Because both routes end
in the same canonical scores and keep *all* items tied with the k-th, their lists are identical:
the precision changes the time, never the result (``docs/decisions.md``, 2026-11-26).

Stage 1 can also be a flat float32 index (faiss, or any ``knn(q, g, k, exclude_self)`` following
:func:`rank_lab.metrics.knn_search`'s contract): its lists are lengthened until the last returned
score is below the threshold.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from queue import SimpleQueue

import numpy as np
import torch

from rank_lab._validation import check_embeddings, check_positive_int
from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.chunking import torch_threads
from rank_lab.metrics.score_bounds import (
    canonical_scores,
    exact_matmul,
    reduced_copy,
    reduced_matmul,
    resolve_precision,
    score_bound,
    threshold,
)

__all__ = ["NeighbourLists", "certified_neighbours"]

KnnFn = Callable[[torch.Tensor, torch.Tensor, int, bool], tuple[torch.Tensor, torch.Tensor]]
_AUTO_MIN_WORK = 2**33  # precision="auto" takes a reduced format only when Q * N * d is at least this
_TILE_KMAX = 128  # longer lists are searched by whole rows (block maxima need 4k blocks per tile)
_NAMES = {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass
class NeighbourLists:
    """Per-query neighbour lists in one flat layout (CSR-like), on the CPU.

    Attributes:
        offsets: ``(Q + 1,)`` long; query q's entries are ``offsets[q]:offsets[q + 1]``.
        indices: ``(M,)`` long gallery indices.
        scores: ``(M,)`` canonical scores (float32, or float64 for float64 inputs).
        k: the k asked (per query: ``(Q,)`` long).
        precision: stage-1 format used (``"bf16"``, ``"fp16"``, ``"fp32"``, ``"fp64"``; ``"knn"``
            for an index).
        n_rescanned: queries whose reduced-precision candidates were too many (rescanned exactly).
        n_candidates: canonical scores computed.
    """

    offsets: torch.Tensor
    indices: torch.Tensor
    scores: torch.Tensor
    k: torch.Tensor
    precision: str
    n_rescanned: int
    n_candidates: int

    @property
    def rows(self) -> torch.Tensor:
        """``(M,)`` query index of every entry."""
        counts = self.offsets[1:] - self.offsets[:-1]
        return torch.repeat_interleave(torch.arange(counts.shape[0]), counts)

    def topk(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``k`` entries of every list: ``(scores (Q, k), indices (Q, k))``."""
        pos = self.offsets[:-1, None] + torch.arange(k)[None, :]
        return self.scores[pos], self.indices[pos]


def _block_size(width: int, kmax: int) -> int:
    b = 1
    while b < 64 and (2 * b) * 4 * kmax <= width:
        b *= 2
    return b


class _Stage1:
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


def _scan(st: _Stage1, rows: torch.Tensor, kq: torch.Tensor, self_cols: torch.Tensor | None, symmetric: bool,
          tile: int, show: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage-1 candidates ``(rows, cols, s^ scaled, k-th s^ of each row)`` of the queries ``rows``."""
    dev = st.gr.device
    n_g = st.gr.shape[0]
    nq = rows.shape[0]
    kmax = int(kq.max())
    b = _block_size(min(tile, n_g), kmax)
    g_pad = -n_g % b
    gr = torch.cat([st.gr, st.gr.new_zeros(g_pad, st.d)]) if g_pad else st.gr
    qr = st.qr[rows] if not symmetric else gr
    n_rows = nq + (g_pad if symmetric else 0)
    tile = max(b, tile // b * b)
    if kmax > _TILE_KMAX and not symmetric:  # long lists: whole rows, exact k-th stage-1 score
        own = None if self_cols is None else self_cols.to(dev)
        return _scan_rows(st, qr, gr, n_g, kq, own, rows.to(dev), tile, show)
    buf = torch.full((n_rows, kmax), -torch.inf, dtype=st.cmp, device=dev)
    kidx = torch.cat([kq - 1, kq.new_zeros(n_rows - nq)]).to(dev)
    lam = torch.full((n_rows,), -torch.inf, dtype=st.cmp, device=dev)
    own = None
    if self_cols is not None:
        own = torch.cat([self_cols, torch.full((n_rows - nq,), -1, dtype=torch.long)]).to(dev)
    out_r: list[torch.Tensor] = []
    out_c: list[torch.Tensor] = []
    out_v: list[torch.Tensor] = []
    row_ids = rows.to(dev) if not symmetric else torch.arange(n_rows, device=dev).clamp(max=nq - 1)
    bands = list(range(0, n_rows if symmetric else nq, tile))
    cols_t = list(range(0, gr.shape[0], tile))
    work = [(i0, j0) for i0 in bands for j0 in cols_t if not symmetric or j0 >= i0]

    def update(rsel: slice, bm: torch.Tensor) -> torch.Tensor:
        merged = torch.topk(torch.cat([buf[rsel], bm], 1), kmax, dim=1).values
        buf[rsel] = merged
        lam[rsel] = merged.gather(1, kidx[rsel, None])[:, 0]
        return st.thresholds(lam[rsel], row_ids[rsel])

    def extract(vals: torch.Tensor, bm: torch.Tensor, thr: torch.Tensor, r0: int, c0: int, transposed: bool) -> None:
        rb, jb = torch.nonzero(bm >= thr[:, None], as_tuple=True)
        if rb.numel() == 0:
            return
        blocks = vals.view(vals.shape[0], -1, b)[rb, jb] if not transposed else vals.view(-1, b, vals.shape[1])[jb, :, rb]
        mi, t = torch.nonzero(blocks >= thr[rb, None], as_tuple=True)  # compared in float32 (promotion)
        out_r.append(r0 + rb[mi])
        out_c.append(c0 + jb[mi] * b + t)
        out_v.append(blocks[mi, t].to(st.cmp))

    lock = threading.Lock()

    def tile_work(ij: tuple[int, int]) -> None:
        i0, j0 = ij
        i1, j1 = min(i0 + tile, n_rows if symmetric else nq), min(j0 + tile, gr.shape[0])
        s, _ = reduced_matmul(qr[i0:i1], gr[j0:j1])
        if own is not None:
            r = torch.arange(i1 - i0, device=dev)
            c = own[i0:i1] - j0
            hit = (c >= 0) & (c < j1 - j0)
            s[r[hit], c[hit]] = -torch.inf
        if j1 > n_g:
            s[:, n_g - j0 :] = -torch.inf
        if symmetric and i1 > nq:
            s[nq - i0 :, :] = -torch.inf
        bm = s.view(i1 - i0, -1, b).amax(-1).to(st.cmp)  # exact: reduced values are float32 numbers
        both = symmetric and j0 > i0
        bmt = s.view(-1, b, j1 - j0).amax(1).T.to(st.cmp) if both else None
        with lock:  # the running bounds and the candidate lists are shared by the tiles
            thr = update(slice(i0, i1), bm)
            extract(s, bm, thr, i0, j0, False)
            if bmt is not None:
                thr_t = update(slice(j0, j1), bmt)
                extract(s, bmt, thr_t, j0, i0, True)

    _run_parallel(tile_work, work, show, dev)
    r = torch.cat(out_r) if out_r else torch.zeros(0, dtype=torch.long, device=dev)
    c = torch.cat(out_c) if out_c else torch.zeros(0, dtype=torch.long, device=dev)
    v = torch.cat(out_v) if out_v else torch.zeros(0, dtype=st.cmp, device=dev)
    final = st.thresholds(lam, row_ids)  # lam only grew: the last thresholds are the tightest valid ones
    keep = (v >= final[r]) & (r < nq) & (c < n_g) & (v > -torch.inf)  # never the query itself or padding
    r, c, v = r[keep], c[keep], v[keep]
    return r, c, v, _kth_of_candidates(r, v, kq.to(dev), nq)


def _kth_of_candidates(r: torch.Tensor, v: torch.Tensor, kq: torch.Tensor, nq: int) -> torch.Tensor:
    """The ``kq[row]``-th largest candidate value of every row (candidates hold every row's top k)."""
    order = torch.argsort(-v, stable=True)
    order = order[torch.argsort(r[order], stable=True)]
    counts = torch.bincount(r, minlength=nq)
    if bool((counts < kq).any()):
        bad = int(torch.nonzero(counts < kq)[0])
        raise RuntimeError(f"certified search kept {int(counts[bad])} < k={int(kq[bad])} candidates for query {bad}: "
                           "the stage-1 error bound was violated (please report)")
    start = torch.cumsum(counts, 0) - counts
    return v[order][start + kq - 1]


def _kth_largest(s: torch.Tensor, kq: torch.Tensor) -> torch.Tensor:
    """The ``kq[r]``-th largest entry of every row of ``s`` (a selection, not a sort)."""
    if s.device.type == "cpu":
        a = s.to(torch.float64 if s.dtype == torch.float64 else torch.float32).numpy()
        n = a.shape[1]
        kth = sorted({n - int(k) for k in kq.tolist()})
        part = np.partition(a, kth, axis=1)
        return torch.from_numpy(part[np.arange(a.shape[0]), n - kq.numpy()])
    kmax = int(kq.max())  # pragma: no cover - GPU only
    return torch.topk(s.float() if s.dtype != torch.float64 else s, kmax, dim=1).values.gather(1, (kq - 1).to(s.device)[:, None])[:, 0]


def _scan_rows(st: _Stage1, qr: torch.Tensor, gr: torch.Tensor, n_g: int, kq: torch.Tensor, own: torch.Tensor | None,
               row_ids: torch.Tensor, tile: int, show: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 1 by whole rows: the exact k-th stage-1 score of each row, then every item above the threshold."""
    dev = gr.device
    nq = qr.shape[0]
    band = max(1, min(nq, tile * tile // max(1, gr.shape[0])))
    starts = range(0, nq, band)
    parts: dict[int, tuple[torch.Tensor, ...]] = {}
    buffers: SimpleQueue = SimpleQueue()  # CPU: one score buffer per thread (fresh pages cost as much as the product)
    if dev.type == "cpu":
        for _ in range(max(1, min(torch.get_num_threads(), len(starts)))):
            buffers.put(torch.empty(band, gr.shape[0], dtype=st.out_fmt))

    def band_work(i0: int) -> None:
        if dev.type == "cpu":
            buf = buffers.get()
            try:
                cpu_band(i0, buf)
            finally:
                buffers.put(buf)
            return
        i1 = min(i0 + band, nq)  # pragma: no cover - GPU only
        s, _ = reduced_matmul(qr[i0:i1], gr)  # pragma: no cover
        if own is not None:  # pragma: no cover
            r = torch.arange(i1 - i0, device=dev)
            c = own[i0:i1]
            hit = (c >= 0) & (c < gr.shape[0])
            s[r[hit], c[hit]] = -torch.inf
        if gr.shape[0] > n_g:  # pragma: no cover
            s[:, n_g:] = -torch.inf
        lam = _kth_largest(s, kq[i0:i1]).to(dev)  # pragma: no cover
        thr = st.thresholds(lam, row_ids[i0:i1])  # pragma: no cover
        rr, cc = torch.nonzero((s >= thr[:, None]) & (s > -torch.inf), as_tuple=True)  # pragma: no cover
        parts[i0] = (i0 + rr, cc, s[rr, cc].to(st.cmp), lam.to(st.cmp))  # pragma: no cover

    def cpu_band(i0: int, buf: torch.Tensor) -> None:
        i1 = min(i0 + band, nq)
        s = torch.mm(qr[i0:i1], gr.T, out=buf[: i1 - i0])  # reduced_matmul on the CPU, into the buffer
        if own is not None:
            r = torch.arange(i1 - i0, device=dev)
            c = own[i0:i1]
            hit = (c >= 0) & (c < gr.shape[0])
            s[r[hit], c[hit]] = -torch.inf
        if gr.shape[0] > n_g:
            s[:, n_g:] = -torch.inf
        rr, cc, vv, lam = _rows_above_kth(st, s, kq[i0:i1], row_ids[i0:i1])
        parts[i0] = (i0 + rr, cc, vv, lam)

    _run_parallel(band_work, list(starts), show, dev)
    out = [parts[i0] for i0 in starts]
    return tuple(torch.cat([p[j] for p in out]) for j in range(4))  # type: ignore[return-value]


def _sample_stride(k: int, n: int) -> int:
    """Column stride of the sample that gives a lower bound of the k-th largest (1: no sample).

    The sample keeps ``ceil(1.5 k / stride) >= 64`` items above its threshold, so that a threshold
    taken from it is, in practice, exceeded by more than ``k`` items of the whole row.
    """
    return max(1, min(16, (3 * k) // 128, n // 4))


def _rows_above_kth(st: _Stage1, s: torch.Tensor, kq: torch.Tensor,
                    row_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """CPU stage 1 of a band of whole rows: ``(rows, cols, s^, k-th s^)`` of every item above the threshold.

    The same output as a full selection of each row's k-th stage-1 score followed by a threshold
    pass, found without the full selection: ``t``, the ``ceil(1.5 k / stride)``-th largest of every
    ``stride``-th column, is a lower bound of the row's k-th largest as soon as at least ``k`` items
    of the row reach it (checked); all items above ``threshold(t)`` are then kept, the row's exact
    k-th largest is taken among them (they hold its top k), and the list is cut at
    ``threshold(k-th)``. Rows whose check fails (fewer than ``k`` items reach ``t``) get the full
    selection. One pass over the band beyond the matmul, instead of a selection and two passes.
    """
    a = s.numpy() if s.dtype in (torch.float32, torch.float64) else s.float().numpy()
    nb, n = a.shape
    k = kq.numpy()
    stride = _sample_stride(int(k.min()), n)
    if stride > 1:
        sample = np.ascontiguousarray(a[:, ::stride])
        m = sample.shape[1]
        ks = np.minimum(m, -(-3 * k // (2 * stride)))
        t = _kth_largest(torch.from_numpy(sample), torch.from_numpy(ks)).to(st.cmp)
    else:
        t = _kth_largest(s, kq).to(st.cmp)
    t = torch.where(torch.isfinite(t), t, torch.full_like(t, torch.finfo(st.cmp).min))
    thr = st.thresholds(t, row_ids).numpy()
    flat = np.flatnonzero(a >= thr[:, None])
    rr, cc = flat // n, flat % n
    vv = a.reshape(-1)[flat]
    finite = vv > -np.inf
    rr, cc, vv = rr[finite], cc[finite], vv[finite]
    reach = np.bincount(rr[vv >= t.numpy()[rr]], minlength=nb)
    ok = reach >= k
    kth = np.empty(nb, dtype=a.dtype)
    if ok.any():
        counts = np.bincount(rr, minlength=nb)
        width = int(counts.max())
        start = np.cumsum(counts) - counts
        padded = np.full((nb, width), -np.inf, dtype=a.dtype)
        padded[rr, np.arange(rr.shape[0]) - start[rr]] = vv
        rows_ok = np.flatnonzero(ok)
        kth[rows_ok] = _kth_largest(torch.from_numpy(padded[rows_ok]), kq[rows_ok]).numpy()
    bad = np.flatnonzero(~ok)
    if bad.size:  # the sample over-estimated: full selection on these rows
        kth[bad] = _kth_largest(s[bad], kq[bad]).numpy()
        thr_bad = st.thresholds(torch.from_numpy(kth[bad]).to(st.cmp), row_ids[bad]).numpy()
        fb = np.flatnonzero(a[bad] >= thr_bad[:, None])
        rb, cb = bad[fb // n], fb % n
        vb = a[rb, cb]
        keep_b = vb > -np.inf
        drop = ~ok[rr]
        rr = np.concatenate([rr[~drop], rb[keep_b]])
        cc = np.concatenate([cc[~drop], cb[keep_b]])
        vv = np.concatenate([vv[~drop], vb[keep_b]])
    kth_t = torch.from_numpy(kth).to(st.cmp)
    final = st.thresholds(kth_t, row_ids).numpy()
    keep = vv >= final[rr]
    rr, cc, vv = rr[keep], cc[keep], vv[keep]
    order = np.lexsort((cc, rr)) if bad.size else None
    if order is not None:
        rr, cc, vv = rr[order], cc[order], vv[order]
    return (torch.from_numpy(rr), torch.from_numpy(cc), torch.from_numpy(vv).to(st.cmp), kth_t)


def _run_parallel(fn: Callable[[object], None], items: list, show: bool, dev: torch.device) -> None:
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


def _scan_knn(knn: KnnFn, st: _Stage1, q: torch.Tensor, g: torch.Tensor, kq: torch.Tensor,
              exclude_self: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidates from a flat float32 index: lists lengthened until their last score is below the threshold."""
    nq, n_g = q.shape[0], g.shape[0]
    n_avail = n_g - int(exclude_self)
    kmax = int(kq.max())
    todo = torch.arange(nq)
    width = min(n_avail, kmax + max(8, kmax // 4))
    first = True
    out_r, out_c, out_v = [], [], []
    kth = torch.empty(nq, dtype=torch.float64)
    while todo.numel():
        if first:
            s, i = knn(q, g, width, exclude_self)
        else:  # a subset of queries: search one more item and drop the query itself by index
            s, i = knn(q[todo], g, min(n_g, width + int(exclude_self)), False)
        s, i = s.cpu().to(torch.float64), i.cpu().long()
        last = s[:, -1]
        if exclude_self and not first:
            own = i == todo[:, None]
            s = torch.where(own, torch.full_like(s, -torch.inf), s)
        lam = torch.sort(s, dim=1, descending=True).values.gather(1, (kq[todo] - 1)[:, None])[:, 0]
        thr = threshold(lam, st.a[todo].cpu(), st.c, st.eta[todo].cpu(), torch.float64)
        done = (last < thr) | (torch.isfinite(s).sum(1) >= n_avail)
        kth[todo[done]] = lam[done]
        keep = (s >= thr[:, None]) & torch.isfinite(s) & done[:, None]
        rr, cc = torch.nonzero(keep, as_tuple=True)
        out_r.append(todo[rr])
        out_c.append(i[rr, cc])
        out_v.append(s[rr, cc])
        todo = todo[~done]
        width = min(n_avail, 2 * width)
        first = False
    return torch.cat(out_r), torch.cat(out_c), torch.cat(out_v), kth


def certified_neighbours(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    k: int | torch.Tensor,
    *,
    exclude_self: bool = False,
    precision: str = "auto",
    knn: KnnFn | None = None,
    device: torch.device | str | None = None,
    tile: int = 4096,
    ordered: bool = True,
    progress: bool | None = None,
    check: bool = True,
) -> NeighbourLists:
    """The certified top-k (with ties) of every query (module docstring).

    Args:
        queries: ``(Q, d)``; float64 if either set is float64, else float32 (the working precision).
        gallery: ``(N, d)``.
        k: list length, an int or ``(Q,)`` long per query (``<= N``, ``<= N - 1`` with ``exclude_self``).
        exclude_self: the queries are the gallery; query i never lists item i.
        precision: see :func:`rank_lab.metrics.score_bounds.resolve_precision`; ``"auto"`` stays exact
            for small products (``Q N d < 2^33``), where the reduced copies would not pay off.
        knn: a flat float32 index used for stage 1 instead of the tiled matmul.
        device: compute device.
        tile: queries (and items) per tile.
        ordered: ``True``: lists by decreasing canonical score, ties by increasing index, every
            score canonical. ``False``: the same *sets* by increasing index; only the items the
            bound cannot place are re-scored (the others' ``scores`` hold a certified lower bound of
            their canonical score) -- the cheap form for long lists (e.g. truncated diffusion).
        progress: tqdm bar over the tiles (default: more than 16 tiles).
        check: validate the embeddings (``False`` for callers that did: finite 2-D floating tensors).

    Returns:
        :class:`NeighbourLists`.

    Raises:
        ValueError / TypeError: a bad argument, named.
    """
    same = queries is gallery
    if check:
        queries = check_embeddings(queries, "queries")
        gallery = queries if same else check_embeddings(gallery, "gallery")
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}")
    work = torch.float64 if torch.float64 in (queries.dtype, gallery.dtype) else torch.float32
    if exclude_self and queries.shape[0] != gallery.shape[0]:
        raise ValueError(f"exclude_self needs queries and gallery of the same length, got {queries.shape[0]} and {gallery.shape[0]}")
    n_avail = gallery.shape[0] - int(bool(exclude_self))
    if isinstance(k, torch.Tensor):
        if k.ndim != 1 or k.shape[0] != queries.shape[0] or k.is_floating_point() or k.dtype == torch.bool:
            raise ValueError(f"k must be an int or a ({queries.shape[0]},) integer tensor, got {k.dtype} {tuple(k.shape)}")
        kq = k.cpu().long()
    else:
        kq = torch.full((queries.shape[0],), check_positive_int(k, "k"), dtype=torch.long)
    if int(kq.min()) < 1 or int(kq.max()) > n_avail:
        raise ValueError(f"k must lie in [1, {n_avail}] (gallery items available), got range [{int(kq.min())}, {int(kq.max())}]")
    tile = check_positive_int(tile, "tile")
    dev = torch.device("cpu") if device is None else torch.device(device)
    q = queries.to(dev, work)
    g = q if same else gallery.to(dev, work)
    nq, n_g = q.shape[0], g.shape[0]
    kmax = int(kq.max())
    symmetric = exclude_self and kmax <= _TILE_KMAX and q.shape == g.shape and (q is g or bool(torch.equal(q, g)))
    show = math.ceil(nq / tile) * math.ceil(n_g / tile) > 16 if progress is None else bool(progress)
    self_cols = torch.arange(nq) if exclude_self else None
    rescanned = 0
    if knn is not None:
        st = _Stage1(q, g, torch.float32, False)
        rows, cols, vals, kth = _scan_knn(knn, st, q, g, kq, exclude_self)
        rows, cols, vals, kth = rows.to(dev), cols.to(dev), vals.to(dev), kth.to(dev)
        sure_thr, h_k = st.sure_thresholds(kth, torch.arange(nq, device=dev))
        name = "knn"
    else:
        if precision == "auto" and nq * n_g * q.shape[1] < _AUTO_MIN_WORK:
            precision = "exact"  # small products: the reduced copies and the probe would cost more than they save
        fmt = resolve_precision(precision, work, dev)
        st = _Stage1(q, g, fmt, symmetric)
        rows, cols, vals, kth = _scan(st, torch.arange(nq), kq, self_cols, symmetric, tile, show)
        sure_thr, h_k = st.sure_thresholds(kth, torch.arange(nq, device=dev))
        name = _NAMES[fmt]
        if fmt != work:
            counts = torch.bincount(rows, minlength=nq).cpu()
            cap = torch.clamp(4 * kq, min=kq + 512)
            over = torch.nonzero(counts > cap).flatten()
            if over.numel():
                rescanned = int(over.numel())
                over_d = over.to(dev)
                exact = _Stage1(q[over_d], g, work, False)
                r2, c2, v2, k2 = _scan(exact, torch.arange(over.numel()), kq[over], None if self_cols is None else over,
                                       False, tile, False)
                s2, h2 = exact.sure_thresholds(k2, torch.arange(over.numel(), device=dev))
                keep = (counts <= cap).to(dev)[rows]
                rows, cols = torch.cat([rows[keep], over_d[r2]]), torch.cat([cols[keep], c2])
                vals = torch.cat([vals[keep], v2.to(vals.dtype)])
                sure_thr, h_k = sure_thr.clone(), h_k.clone()
                sure_thr[over_d], h_k[over_d] = s2.to(sure_thr.dtype), h2
    if ordered:
        rows, cols = rows.cpu(), cols.cpu()
        scores = canonical_scores(q, g, rows.to(dev), cols.to(dev), check=False).cpu()
        n_canon = int(rows.numel())
        order = torch.argsort(cols, stable=True)
        order = order[torch.argsort(-scores[order], stable=True)]
        order = order[torch.argsort(rows[order], stable=True)]
        rows, cols, scores = rows[order], cols[order], scores[order]
        counts = torch.bincount(rows, minlength=nq)
        start = torch.cumsum(counts, 0) - counts
        keep = scores >= scores[start + kq - 1][rows]
    else:
        sure = vals >= sure_thr[rows]
        rows, cols, scores, keep, n_canon = _certified_sets(q, g, rows, cols, sure, h_k, kq, dev)
    rows, cols, scores = rows[keep], cols[keep], scores[keep]
    kept = torch.bincount(rows, minlength=nq)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(kept, 0)])
    return NeighbourLists(offsets, cols, scores, kq, name, rescanned, n_canon)


def _certified_sets(q, g, rows, cols, sure, h_k, kq, dev):
    """Set mode: ``T = {j : s_j >= t_K}`` re-scoring only the candidates the bounds cannot place.

    ``H`` (``h_k``), an upper bound of the k-th canonical score ``t_K``; ``sure`` candidates have
    ``L_j >= H`` and are in T (``c`` of them); with ``e_m`` the ``m = k - c``-th largest canonical
    score of the others, ``t_K = min(e_m, H)`` (``H`` when ``m <= 0``): the others are in T iff
    ``s_j >= t_K``. Sure members get ``H`` (a lower bound of their score) as score.
    """
    nq = kq.shape[0]
    amb = torch.nonzero(~sure).flatten()
    ra = rows[amb]
    exact = canonical_scores(q, g, ra, cols[amb], check=False).to(torch.float64)
    n_sure = torch.bincount(rows[sure], minlength=nq).cpu()
    m = (kq - n_sure).to(dev)
    o = torch.argsort(-exact, stable=True)
    o = o[torch.argsort(ra[o], stable=True)]
    n_amb = torch.bincount(ra, minlength=nq)
    a_start = torch.cumsum(n_amb, 0) - n_amb
    e_m = torch.full((nq,), torch.inf, dtype=torch.float64, device=dev)
    has_m = m >= 1
    if bool(has_m.any()):
        e_m[has_m] = exact[o][(a_start + m - 1)[has_m]]
    t_k = torch.minimum(e_m, h_k)
    keep = sure.clone()
    keep[amb] = exact >= t_k[ra]
    scores = h_k.to(q.dtype)[rows]
    scores = torch.where(scores.to(torch.float64) > h_k[rows], torch.nextafter(scores, torch.full_like(scores, -torch.inf)), scores)
    scores[amb] = exact.to(q.dtype)
    rows, cols, scores, keep = rows.cpu(), cols.cpu(), scores.cpu(), keep.cpu()
    key = rows * (int(cols.max()) + 1 if cols.numel() else 1) + cols
    if key.numel() > 1 and not bool((key[1:] > key[:-1]).all()):
        order = torch.argsort(key)
        rows, cols, scores, keep = rows[order], cols[order], scores[order], keep[order]
    return rows, cols, scores, keep, int(amb.numel())
