"""Tiled stage 1 of the certified neighbour search, and stage 1 from a flat float32 index.

Internal module of :mod:`rank_lab.metrics.certified`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from rank_lab.metrics._certified_rows import scan_rows
from rank_lab.metrics._certified_stage1 import BufferPool, Stage1, block_size, run_parallel
from rank_lab.metrics.score_bounds import reduced_matmul, threshold

__all__ = ["KnnFn", "TILE_KMAX", "scan_tiles", "kth_of_candidates", "scan_knn"]

KnnFn = Callable[[torch.Tensor, torch.Tensor, int, bool], tuple[torch.Tensor, torch.Tensor]]
TILE_KMAX = 128  # longer lists are searched by whole rows (block maxima need 4k blocks per tile)


def scan_tiles(st: Stage1, rows: torch.Tensor, kq: torch.Tensor, self_cols: torch.Tensor | None, symmetric: bool,
          tile: int, show: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage-1 candidates ``(rows, cols, s^ scaled, k-th s^ of each row)`` of the queries ``rows``."""
    dev = st.gr.device
    n_g = st.gr.shape[0]
    nq = rows.shape[0]
    kmax = int(kq.max())
    b = block_size(min(tile, n_g), kmax)
    g_pad = -n_g % b
    gr = torch.cat([st.gr, st.gr.new_zeros(g_pad, st.d)]) if g_pad else st.gr
    qr = st.qr[rows] if not symmetric else gr
    n_rows = nq + (g_pad if symmetric else 0)
    tile = max(b, tile // b * b)
    if kmax > TILE_KMAX and not symmetric:  # long lists: whole rows, exact k-th stage-1 score
        own = None if self_cols is None else self_cols.to(dev)
        return scan_rows(st, qr, gr, n_g, kq, own, rows.to(dev), tile, show)
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

    pool = BufferPool(tile * tile, st.out_fmt, dev, len(work))

    def tile_work(ij: tuple[int, int]) -> None:
        with pool.take() as flat:
            scan_tile(ij, flat)

    def scan_tile(ij: tuple[int, int], flat: torch.Tensor | None) -> None:
        i0, j0 = ij
        i1, j1 = min(i0 + tile, n_rows if symmetric else nq), min(j0 + tile, gr.shape[0])
        if flat is not None:  # CPU: into a reused buffer (fresh pages cost as much as the product)
            s = torch.mm(qr[i0:i1], gr[j0:j1].T, out=flat[: (i1 - i0) * (j1 - j0)].view(i1 - i0, j1 - j0))
        else:
            s, _ = reduced_matmul(qr[i0:i1], gr[j0:j1])  # pragma: no cover - GPU only
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

    run_parallel(tile_work, work, show, dev)
    r = torch.cat(out_r) if out_r else torch.zeros(0, dtype=torch.long, device=dev)
    c = torch.cat(out_c) if out_c else torch.zeros(0, dtype=torch.long, device=dev)
    v = torch.cat(out_v) if out_v else torch.zeros(0, dtype=st.cmp, device=dev)
    final = st.thresholds(lam, row_ids)  # lam only grew: the last thresholds are the tightest valid ones
    keep = (v >= final[r]) & (r < nq) & (c < n_g) & (v > -torch.inf)  # never the query itself or padding
    r, c, v = r[keep], c[keep], v[keep]
    return r, c, v, kth_of_candidates(r, v, kq.to(dev), nq)



def kth_of_candidates(r: torch.Tensor, v: torch.Tensor, kq: torch.Tensor, nq: int) -> torch.Tensor:
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



def scan_knn(knn: KnnFn, st: Stage1, q: torch.Tensor, g: torch.Tensor, kq: torch.Tensor,
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

