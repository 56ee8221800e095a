"""Whole-row stage 1 of the certified neighbour search, for long lists (``k > TILE_KMAX``).

Internal module of :mod:`rank_lab.metrics.engine.search.certified` (inputs trusted).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from rank_lab.metrics.engine._blocks import BufferPool, run_parallel
from rank_lab.metrics.engine.scores._stage1 import Stage1
from rank_lab.metrics.engine.scores.exact import exact_matmul

__all__ = ["scan_rows", "rows_above_kth", "select_above", "sample_stride", "kth_largest"]


def kth_largest(s: torch.Tensor, kq: torch.Tensor) -> torch.Tensor:
    """The ``kq[r]``-th largest entry of every row of ``s`` (a selection, not a sort)."""
    if s.device.type == "cpu":
        a = s.to(torch.float64 if s.dtype == torch.float64 else torch.float32).numpy()
        n = a.shape[1]
        kth = sorted({n - int(k) for k in kq.tolist()})
        part = np.partition(a, kth, axis=1)
        return torch.from_numpy(part[np.arange(a.shape[0]), n - kq.numpy()])
    kmax = int(kq.max())  # pragma: no cover - GPU only
    top = torch.topk(s.float() if s.dtype != torch.float64 else s, kmax, dim=1).values
    return top.gather(1, (kq - 1).to(s.device)[:, None])[:, 0]


def scan_rows(
    st: Stage1,
    qr: torch.Tensor,
    gr: torch.Tensor,
    n_g: int,
    kq: torch.Tensor,
    own: torch.Tensor | None,
    row_ids: torch.Tensor,
    tile: int,
    show: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 1 by whole rows: the exact k-th stage-1 score of each row, then every item above the
    threshold."""
    dev = gr.device
    nq = qr.shape[0]
    band = max(1, min(nq, tile * tile // max(1, gr.shape[0])))
    workers = max(1, torch.get_num_threads()) if dev.type == "cpu" else 1
    rounds = -(-nq // (band * workers))  # as many bands per thread, none left alone at the end
    band = max(1, -(-nq // (rounds * workers)))
    starts = range(0, nq, band)
    parts: dict[int, tuple[torch.Tensor, ...]] = {}
    pool = BufferPool(band * gr.shape[0], st.out_fmt, dev, len(starts))

    def band_work(i0: int) -> None:
        i1 = min(i0 + band, nq)
        with pool.take() as flat:
            s = st.product(qr[i0:i1], gr, flat)
            if own is not None:
                r = torch.arange(i1 - i0, device=dev)
                c = own[i0:i1]
                hit = (c >= 0) & (c < gr.shape[0])
                s[r[hit], c[hit]] = -torch.inf
            if gr.shape[0] > n_g:
                s[:, n_g:] = -torch.inf
            if dev.type == "cpu":
                rr, cc, vv, lam = rows_above_kth(st, s, kq[i0:i1], row_ids[i0:i1])
                parts[i0] = (i0 + rr, cc, vv, lam)
                return
        lam = kth_largest(s, kq[i0:i1]).to(dev)  # pragma: no cover - GPU only
        thr = st.thresholds(lam, row_ids[i0:i1])  # pragma: no cover
        rr, cc = torch.nonzero(
            (s >= thr[:, None]) & (s > -torch.inf), as_tuple=True
        )  # pragma: no cover
        parts[i0] = (i0 + rr, cc, s[rr, cc].to(st.cmp), lam.to(st.cmp))  # pragma: no cover

    with exact_matmul():
        run_parallel(band_work, list(starts), show, dev)
    out = [parts[i0] for i0 in starts]
    return tuple(torch.cat([p[j] for p in out]) for j in range(4))  # type: ignore[return-value]


def check_no_nan(v: np.ndarray) -> None:
    """Refuse NaN stage-1 scores in words (finite inputs whose products fit cannot give one)."""
    if np.isnan(v).any():
        raise RuntimeError(
            "the stage-1 matmul returned NaN scores from finite embeddings whose products cannot "
            "overflow: the matmul is broken on this device; rerun with precision='exact' and "
            "report it"
        )


def sample_stride(k: int, n: int) -> int:
    """Column stride of the sample that gives a lower bound of the k-th largest (1: no sample).

    The sample keeps ``ceil(1.5 k / stride) >= 64`` items above its threshold, so that a threshold
    taken from it is, in practice, exceeded by more than ``k`` items of the whole row.
    """
    return max(1, min(16, (3 * k) // 128, n // 4))


def rows_above_kth(
    st: Stage1, s: torch.Tensor, kq: torch.Tensor, row_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """CPU stage 1 of a band of whole rows: ``(rows, cols, s^, k-th s^)`` of every item above the
    threshold.

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
    stride = sample_stride(int(k.min()), n)
    if stride > 1:
        sample = np.ascontiguousarray(a[:, ::stride])
        m = sample.shape[1]
        ks = np.minimum(m, -(-3 * k // (2 * stride)))
        t = kth_largest(torch.from_numpy(sample), torch.from_numpy(ks)).to(st.cmp)
    else:
        t = kth_largest(s, kq).to(st.cmp)
    t = torch.where(torch.isfinite(t), t, torch.full_like(t, torch.finfo(st.cmp).min))
    thr = st.thresholds(t, row_ids).numpy()
    flat = np.flatnonzero(~(a < thr[:, None]))  # NaN stage-1 scores are kept (and refused below)
    vv = np.take(a.reshape(-1), flat)
    check_no_nan(vv)
    finite = vv > -np.inf  # the query itself and padding columns hold -inf
    if not finite.all():
        flat, vv = flat[finite], vv[finite]
    rr, cc = np.divmod(flat, n)
    return select_above(st, rr, cc, vv, t.numpy(), k, row_ids, lambda bad: a[bad])


def select_above(
    st: Stage1,
    rr: np.ndarray,
    cc: np.ndarray,
    vv: np.ndarray,
    t: np.ndarray,
    k: np.ndarray,
    row_ids: torch.Tensor,
    full_rows: Callable[[np.ndarray], np.ndarray],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The certified stage-1 lists of rows whose items above ``threshold(t)`` are known.

    Args:
        st: the stage-1 bounds.
        rr, cc, vv: ``(M,)`` local row, column and stage-1 score of every item of the band whose
            score reaches ``threshold(t[row])`` (finite scores only).
        t: ``(B,)`` per-row guess of a lower bound of the k-th largest score.
        k: ``(B,)`` list lengths.
        row_ids: ``(B,)`` the rows' indices into ``st``'s bounds.
        full_rows: local rows -> their whole stage-1 score rows ``(len, n)`` (numpy), for the rows
            whose guess fails (fewer than ``k`` items reach ``t``).

    Returns:
        ``(rows, cols, s^, k-th s^)``: every item with ``s^ >= threshold(k-th s^)``, sorted by row
        then column, and the exact k-th largest stage-1 score of each row.
    """
    nb = k.shape[0]
    dtype = vv.dtype
    reach = np.bincount(rr[vv >= t[rr]], minlength=nb)
    ok = reach >= k
    kth = np.empty(nb, dtype=dtype)
    if ok.any():
        counts = np.bincount(rr, minlength=nb)
        width = int(counts.max())
        start = np.cumsum(counts) - counts
        padded = np.full((nb, width), -np.inf, dtype=dtype)
        padded[rr, np.arange(rr.shape[0]) - start[rr]] = vv
        rows_ok = np.flatnonzero(ok)
        kth[rows_ok] = kth_largest(
            torch.from_numpy(padded[rows_ok]), torch.from_numpy(k[rows_ok])
        ).numpy()
    bad = np.flatnonzero(~ok)
    if bad.size:  # the guess over-estimated: full selection on these rows
        a_bad = full_rows(bad)
        n = a_bad.shape[1]
        kth[bad] = kth_largest(torch.from_numpy(a_bad), torch.from_numpy(k[bad])).numpy()
        thr_bad = st.thresholds(torch.from_numpy(kth[bad]).to(st.cmp), row_ids[bad]).numpy()
        fb = np.flatnonzero(a_bad >= thr_bad[:, None])
        vb = np.take(a_bad.reshape(-1), fb)
        rb, cb = np.divmod(fb, n)
        keep_b = vb > -np.inf
        drop = ~ok[rr]
        rr = np.concatenate([rr[~drop], bad[rb[keep_b]]])
        cc = np.concatenate([cc[~drop], cb[keep_b]])
        vv = np.concatenate([vv[~drop], vb[keep_b]])
    kth_t = torch.from_numpy(kth).to(st.cmp)
    final = st.thresholds(kth_t, row_ids).numpy()
    keep = np.flatnonzero(vv >= np.take(final, rr))
    rr, cc, vv = np.take(rr, keep), np.take(cc, keep), np.take(vv, keep)
    if rr.size > 1 and not ((rr[1:] > rr[:-1]) | ((rr[1:] == rr[:-1]) & (cc[1:] > cc[:-1]))).all():
        order = np.lexsort((cc, rr))
        rr, cc, vv = rr[order], cc[order], vv[order]
    return (torch.from_numpy(rr), torch.from_numpy(cc), torch.from_numpy(vv).to(st.cmp), kth_t)
