"""Tiled stage 1 of the certified neighbour search (short lists, ``k <= TILE_KMAX``).

Internal module of :mod:`rank_lab.metrics.engine.search.certified` (inputs trusted).
"""

from __future__ import annotations

import threading

import torch

from rank_lab.metrics.engine._blocks import BufferPool, run_parallel
from rank_lab.metrics.engine.scores._stage1 import Stage1
from rank_lab.metrics.engine.scores.exact import exact_matmul
from rank_lab.metrics.engine.search._rows import scan_rows

__all__ = ["TILE_KMAX", "scan_tiles", "kth_of_candidates", "block_size"]

TILE_KMAX = 128  # longer lists are searched by whole rows (block maxima need 4k blocks per tile)


def block_size(width: int, kmax: int) -> int:
    """Items per block of the tiled scan's block maxima: a power of two <= 64 leaving >= 4 kmax
    blocks per tile."""
    b = 1
    while b < 64 and (2 * b) * 4 * kmax <= width:
        b *= 2
    return b


def scan_tiles(
    st: Stage1,
    rows: torch.Tensor,
    kq: torch.Tensor,
    self_cols: torch.Tensor | None,
    symmetric: bool,
    tile: int,
    show: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage-1 candidates ``(rows, cols, s^ scaled, k-th s^ of each row)`` of the queries
    ``rows``."""
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

    def extract(
        vals: torch.Tensor, bm: torch.Tensor, thr: torch.Tensor, r0: int, c0: int, transposed: bool
    ) -> None:
        rb, jb = torch.nonzero(bm >= thr[:, None], as_tuple=True)
        if rb.numel() == 0:
            return
        blocks = (
            vals.view(vals.shape[0], -1, b)[rb, jb]
            if not transposed
            else vals.view(-1, b, vals.shape[1])[jb, :, rb]
        )
        # compared in float32 (promotion)
        mi, t = torch.nonzero(blocks >= thr[rb, None], as_tuple=True)
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
        s = st.product(qr[i0:i1], gr[j0:j1], flat)
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
        # amax propagates NaN: one look at the block maxima sees them all
        if bool(torch.isnan(bm).any()):
            raise RuntimeError(
                "the stage-1 matmul returned NaN scores from finite embeddings whose products "
                "cannot overflow: the matmul is broken on this device; rerun with "
                "precision='exact' and report it"
            )
        with lock:  # the running bounds and the candidate lists are shared by the tiles
            thr = update(slice(i0, i1), bm)
            extract(s, bm, thr, i0, j0, False)
            if bmt is not None:
                thr_t = update(slice(j0, j1), bmt)
                extract(s, bmt, thr_t, j0, i0, True)

    with exact_matmul():
        run_parallel(tile_work, work, show, dev)
    r = torch.cat(out_r) if out_r else torch.zeros(0, dtype=torch.long, device=dev)
    c = torch.cat(out_c) if out_c else torch.zeros(0, dtype=torch.long, device=dev)
    v = torch.cat(out_v) if out_v else torch.zeros(0, dtype=st.cmp, device=dev)
    # lam only grew: the last thresholds are the tightest valid ones
    final = st.thresholds(lam, row_ids)
    # never the query itself or padding
    keep = (v >= final[r]) & (r < nq) & (c < n_g) & (v > -torch.inf)
    r, c, v = r[keep], c[keep], v[keep]
    return r, c, v, kth_of_candidates(r, v, kq.to(dev), nq)


def kth_of_candidates(r: torch.Tensor, v: torch.Tensor, kq: torch.Tensor, nq: int) -> torch.Tensor:
    """The ``kq[row]``-th largest candidate value of every row (candidates hold every row's top
    k)."""
    order = torch.argsort(-v, stable=True)
    order = order[torch.argsort(r[order], stable=True)]
    counts = torch.bincount(r, minlength=nq)
    if bool((counts < kq).any()):
        bad = int(torch.nonzero(counts < kq)[0])
        raise RuntimeError(
            f"the certified search kept {int(counts[bad])} candidates for query {bad}, fewer than "
            f"its k={int(kq[bad])}: the stage-1 scores broke their error bound (a matmul that does "
            "not accumulate as the bound assumes); rerun with precision='exact' and report it"
        )
    start = torch.cumsum(counts, 0) - counts
    return v[order][start + kq - 1]
