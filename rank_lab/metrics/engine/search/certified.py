"""Certified two-stage neighbour search: reduced-precision candidates, exact re-scoring.

:func:`certified_neighbours` returns, for every query, **every** gallery item whose canonical score
(:func:`rank_lab.metrics.engine.scores.exact.canonical_scores`) is at least the query's k-th
canonical score -- the top k, extended by the items tied with the k-th -- sorted by decreasing
score, ties by increasing index. Two stages:

1. **Stage 1** scores every (query, item) pair in a fast format (bfloat16 on CPUs with native
   bfloat16 dot products, or the working precision itself: the *exact route*)
   tile by tile (a tile is a block of queries times a block of items; with queries = gallery and
   self-exclusion only the tiles on and above the diagonal are computed, each serving both
   orientations). A lower bound ``lam`` of each query's k-th stage-1 score is kept up to date from
   block maxima (the k-th largest of k disjoint blocks' maxima is at most the k-th largest score),
   and every item with ``s^ >= hi^-1(lo(lam) - 2A)`` is kept as a candidate, ``A`` being the bound
   of :func:`rank_lab.metrics.engine.scores.bound.score_bound` ("within twice the bound of the k-th
   score", with the output rounding ``lo``/``hi`` around it). Since ``lam`` only grows, the final
   candidate set contains every item whose canonical score reaches the k-th canonical score.
2. **Stage 2** computes the canonical score of every candidate and keeps the top k and their ties.

A query whose reduced-precision candidate set exceeds ``max(4k, k + 512)`` items (a neighbourhood
denser than the bound can separate) is scanned again by the exact route. Because both routes end
in the same canonical scores and keep *all* items tied with the k-th, their lists are identical:
the precision changes the time, never the result (``docs/decisions.md``, 2026-11-26).

Stage 1 can also be a flat float32 index (faiss, or any ``knn(q, g, k, exclude_self)`` following
:func:`rank_lab.metrics.knn_search`'s contract, :mod:`rank_lab.metrics.engine.search.index`): its
lists are lengthened until the last returned score is below the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rank_lab._validation import check_embeddings, check_positive_int
from rank_lab.metrics.engine.scores._stage1 import Stage1
from rank_lab.metrics.engine.scores.bound import PRECISIONS, check_products_fit, resolve_precision
from rank_lab.metrics.engine.scores.exact import canonical_pairs, exact_matmul
from rank_lab.metrics.engine.search._tiles import TILE_KMAX, scan_tiles
from rank_lab.metrics.engine.search.index import IndexStage1, index_stage1, scan_knn

__all__ = ["NeighbourLists", "certified_neighbours"]

_NAMES = {
    torch.float64: "fp64",
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
}


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


def certified_neighbours(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    k: int | torch.Tensor,
    *,
    exclude_self: bool = False,
    precision: str = "auto",
    device: torch.device | str | None = None,
    tile: int = 4096,
    ordered: bool = True,
    progress: bool | None = None,
) -> NeighbourLists:
    """The certified top-k (with ties) of every query (module docstring).

    Args:
        queries: ``(Q, d)``; float64 if either set is float64, else float32 (the working precision).
        gallery: ``(N, d)``.
        k: list length, an int or ``(Q,)`` long per query (``<= N``, ``<= N - 1`` with
            ``exclude_self``).
        exclude_self: the queries are the gallery; query i never lists item i.
        precision: one of :data:`~rank_lab.metrics.engine.scores.bound.PRECISIONS`
            (:func:`~rank_lab.metrics.engine.scores.bound.resolve_precision`); ``"auto"`` stays
            exact for small products (``Q N d < 2^33``), where the reduced copies would not pay off.
        device: compute device (default: the CPU).
        tile: queries (and items) per tile.
        ordered: ``True``: lists by decreasing canonical score, ties by increasing index, every
            score canonical. ``False``: the same *sets* by increasing index; only the items the
            bound cannot place are re-scored (the others' ``scores`` hold a certified lower bound of
            their canonical score) -- the cheap form for long lists (e.g. truncated diffusion).
        progress: tqdm bar over the tiles (default: more than 16 tiles).

    Returns:
        :class:`NeighbourLists`.

    Raises:
        ValueError / TypeError: a bad argument, named.
    """
    same = queries is gallery
    queries = check_embeddings(queries, "queries").detach()
    gallery = queries if same else check_embeddings(gallery, "gallery").detach()
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"queries have d={queries.shape[1]} but gallery has d={gallery.shape[1]}")
    if not isinstance(exclude_self, bool):
        raise TypeError(f"exclude_self must be a bool, got {type(exclude_self).__name__}")
    if exclude_self and queries.shape[0] != gallery.shape[0]:
        raise ValueError(
            f"exclude_self needs queries and gallery of the same length, got {queries.shape[0]} "
            f"and {gallery.shape[0]}"
        )
    n_avail = gallery.shape[0] - int(exclude_self)
    if isinstance(k, torch.Tensor):
        if (
            k.ndim != 1
            or k.shape[0] != queries.shape[0]
            or k.is_floating_point()
            or k.is_complex()
            or k.dtype == torch.bool
        ):
            raise ValueError(
                f"k must be an int or a ({queries.shape[0]},) integer tensor, got {k.dtype} "
                f"{tuple(k.shape)}"
            )
        kq = k.detach().cpu().long()
    else:
        kq = torch.full((queries.shape[0],), check_positive_int(k, "k"), dtype=torch.long)
    if n_avail < 1 or int(kq.min()) < 1 or int(kq.max()) > n_avail:
        raise ValueError(
            f"k must lie in [1, {n_avail}] (gallery items available), got range [{int(kq.min())}, "
            f"{int(kq.max())}]"
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    tile = check_positive_int(tile, "tile")
    if not isinstance(ordered, bool):
        raise TypeError(f"ordered must be a bool, got {type(ordered).__name__}")
    dev = torch.device("cpu") if device is None else torch.device(device)
    work = torch.float64 if torch.float64 in (queries.dtype, gallery.dtype) else torch.float32
    with exact_matmul():  # no autocast, no TF32 for anything below (restored on exit)
        q = queries.to(dev, work)
        g = q if same else gallery.to(dev, work)
        check_products_fit(
            float(q.double().norm(dim=1).max()),
            float(g.double().norm(dim=1).max()),
            work,
            ("queries", "gallery"),
        )
        return certified_lists(
            q,
            g,
            kq,
            exclude_self=exclude_self,
            precision=precision,
            device=dev,
            tile=tile,
            ordered=ordered,
            progress=progress,
        )


def certified_lists(
    q: torch.Tensor,
    g: torch.Tensor,
    kq: torch.Tensor,
    *,
    exclude_self: bool,
    precision: str,
    device: torch.device,
    tile: int,
    ordered: bool = True,
    progress: bool | None = None,
    index: IndexStage1 | None = None,
) -> NeighbourLists:
    """:func:`certified_neighbours` on validated inputs (kernel): ``q``, ``g`` finite, of the
    working dtype, on ``device``, products that fit; ``kq`` ``(Q,)`` long on the CPU in
    ``[1, n_avail]``; ``index``: a flat index for stage 1 instead of the tiled matmul."""
    dev = device
    nq, n_g = q.shape[0], g.shape[0]
    work = q.dtype
    kmax = int(kq.max())
    symmetric = (
        exclude_self
        and kmax <= TILE_KMAX
        and q.shape == g.shape
        and (q is g or bool(torch.equal(q, g)))
    )
    show = math.ceil(nq / tile) * math.ceil(n_g / tile) > 16 if progress is None else bool(progress)
    self_cols = torch.arange(nq) if exclude_self else None
    rescanned = 0
    if index is not None:
        st = index_stage1(index, q, g)
        rows, cols, vals, kth = scan_knn(index, st, q, g, kq, exclude_self)
        rows, cols, vals, kth = rows.to(dev), cols.to(dev), vals.to(dev), kth.to(dev)
        sure_thr, h_k = st.sure_thresholds(kth, torch.arange(nq, device=dev))
        name = "knn"
    else:
        fmt = resolve_precision(precision, work, dev, work=nq * n_g * q.shape[1])
        st = Stage1(q, g, fmt, symmetric)
        rows, cols, vals, kth = scan_tiles(
            st, torch.arange(nq), kq, self_cols, symmetric, tile, show
        )
        sure_thr, h_k = st.sure_thresholds(kth, torch.arange(nq, device=dev))
        name = _NAMES[fmt]
        if fmt != work:
            counts = torch.bincount(rows, minlength=nq).cpu()
            cap = torch.clamp(4 * kq, min=kq + 512)
            over = torch.nonzero(counts > cap).flatten()
            if over.numel():
                rescanned = int(over.numel())
                over_d = over.to(dev)
                exact = Stage1(q[over_d], g, work, False)
                r2, c2, v2, k2 = scan_tiles(
                    exact,
                    torch.arange(over.numel()),
                    kq[over],
                    None if self_cols is None else over,
                    False,
                    tile,
                    False,
                )
                s2, h2 = exact.sure_thresholds(k2, torch.arange(over.numel(), device=dev))
                keep = (counts <= cap).to(dev)[rows]
                rows, cols = torch.cat([rows[keep], over_d[r2]]), torch.cat([cols[keep], c2])
                vals = torch.cat([vals[keep], v2.to(vals.dtype)])
                sure_thr, h_k = sure_thr.clone(), h_k.clone()
                sure_thr[over_d], h_k[over_d] = s2.to(sure_thr.dtype), h2
    return _finish(q, g, rows, cols, vals, sure_thr, h_k, kq, ordered, dev, name, rescanned)


def _finish(
    q: torch.Tensor,
    g: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    vals: torch.Tensor,
    sure_thr: torch.Tensor,
    h_k: torch.Tensor,
    kq: torch.Tensor,
    ordered: bool,
    dev: torch.device,
    name: str,
    rescanned: int,
) -> NeighbourLists:
    """Stage 2: the lists from the stage-1 candidates (canonical scores where the bound cannot
    decide)."""
    nq = q.shape[0]
    if ordered:
        rows, cols = rows.cpu(), cols.cpu()
        scores = canonical_pairs(q, g, rows.to(dev), cols.to(dev)).cpu()
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
    if not bool(keep.all()):
        at = torch.nonzero(keep).flatten()  # one selection for the three arrays
        rows, cols, scores = (_take(x, at) for x in (rows, cols, scores))
    kept = torch.bincount(rows, minlength=nq)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(kept, 0)])
    return NeighbourLists(offsets, cols, scores, kq, name, rescanned, n_canon)


def _take(x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """``x[at]`` (numpy's take on the CPU: faster than torch's advanced indexing for long
    arrays)."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.take(x.numpy(), at.numpy()))
    return x[at]  # pragma: no cover - GPU only


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
    exact = canonical_pairs(q, g, ra, cols[amb]).to(torch.float64)
    n_sure = (torch.bincount(rows, minlength=nq) - torch.bincount(ra, minlength=nq)).cpu()
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
    # per row: H rounded down to the working dtype (a lower bound of the sure scores)
    low = h_k.to(q.dtype)
    low = torch.where(
        low.to(torch.float64) > h_k, torch.nextafter(low, torch.full_like(low, -torch.inf)), low
    )
    scores = low[rows]
    scores[amb] = exact.to(q.dtype)
    rows, cols, scores, keep = rows.cpu(), cols.cpu(), scores.cpu(), keep.cpu()
    sorted_ = rows.numel() < 2 or bool(
        ((rows[1:] > rows[:-1]) | ((rows[1:] == rows[:-1]) & (cols[1:] > cols[:-1]))).all()
    )
    if not sorted_:
        key = rows * (int(cols.max()) + 1) + cols
        order = torch.argsort(key)
        rows, cols, scores, keep = rows[order], cols[order], scores[order], keep[order]
    return rows, cols, scores, keep, int(amb.numel())
