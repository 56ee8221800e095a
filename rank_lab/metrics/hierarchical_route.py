"""Hierarchical metrics of the evaluation engine, in bounded memory (SOP / iNaturalist scale).

:func:`rank_lab.metrics.retrieval_metrics` calls :func:`hierarchical_route` when a hierarchical
metric is asked for (``"H-AP"``, ``"ASI"``, ``"NDCG-h"``, ``"AP@level"``, ``"H-R@k"``, ``"MS@k"``).

Every metric here depends on the ranking only through the order of the *positives* (shared level
>= 1) and, for each of them, the number of negatives (level 0) ranked before it
(:mod:`rank_lab.metrics.hierarchical_positions`: with the worst-case tie rule the position of the
i-th positive is ``i + #{negatives with score >= its score}``). The route computes exactly these
numbers, with no per-item level matrix:

1. The gallery is permuted by its coarsest label and the queries are processed in that order, so
   that a query's positives are **one contiguous column range** (level >= 1 means "same coarsest
   label", :func:`~rank_lab.metrics.hierarchical_relevance.shared_level` in ``"lca"`` mode); the level sets'
   sizes come from label counts alone (no scores).
2. For a chunk of c queries, the scores ``(c, N)`` come from one float32 (float64) matmul
   (:func:`~rank_lab.metrics.exact_scores.exact_matmul`: no TF32). The positives' scores are copied
   out with their levels (computed on their range only), the range is set to ``+inf`` and every
   row is sorted (numpy's vectorised sort, rows split over threads): the negatives come first,
   ascending. The positives are sorted by decreasing score, ties by increasing level, and a
   ``searchsorted`` of them into the row's sorted negatives gives ``#{negatives >= score}``.
3. From the sorted positive levels ``(c, P)`` and their positions, the metrics
   (:func:`~rank_lab.metrics.hierarchical_positions.sorted_positive_metrics_packed`).

Cost per chunk: ``O(c N d)`` for the matmul, ``O(c N log N)`` for the vectorised sort (no per-item
passes besides it), ``O(c P log N)`` for the search and ``O(c P L)`` for the metrics; memory
``O(c N)``, never ``N x N``. The ranking is that of the matmul's scores, as in the counting route
(:mod:`rank_lab.metrics.binary_routes`).

On a GPU (or with more than 60 levels) the route is
:func:`~rank_lab.metrics.hierarchical_counting.hierarchical_counting_route`, which computes the same
metrics from explicit ``(c, N)`` score and level blocks
(:func:`~rank_lab.metrics.hierarchical_counting.hierarchical_chunk_metrics`, the previous route,
kept as a public helper and as an independent check). ``HIERARCHICAL_METRICS`` and
``hierarchical_chunk_metrics`` are still importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_positive_int,
)
from rank_lab.metrics.chunking import chunk_rows, torch_threads
from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.exact_scores import exact_matmul
from rank_lab.metrics.hierarchical_counting import (  # noqa: F401 - hierarchical_chunk_metrics was defined here
    hierarchical_chunk_metrics,
    hierarchical_counting_route,
)
from rank_lab.metrics.hierarchical_positions import (  # noqa: F401 - HIERARCHICAL_METRICS was defined here
    HIERARCHICAL_METRICS,
    check_ks_wanted,
    sorted_positive_metrics_packed,
)
from rank_lab.metrics.hierarchical_relevance import as_hierarchical_labels

__all__ = ["hierarchical_route"]


def _level_counts(lab: torch.Tensor, ref_lab: torch.Tensor, exclude_self: bool) -> torch.Tensor:
    """``|Omega^(l)|`` of every query, ``(Q, L + 1)`` long, from label counts (no scores)."""
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


def _sorted_positive_block(ps: np.ndarray, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of positive scores sorted by (score desc, level asc): one int64 sort per row.

    The key of a float32 score is its order-preserving integer image (``-0.0`` first made ``+0.0``),
    negated, shifted left by 8 bits, with the level (0 marks an excluded entry) in the low byte.
    Returns ``(scores, levels)``, excluded entries last with level 0 and score ``-inf``.
    """
    bits = (ps + np.float32(0.0)).view(np.int32)
    mono = bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))
    key = (-(mono.astype(np.int64)) << 8) | level
    key[level == 0] = np.iinfo(np.int64).max
    key.sort(axis=1)
    excluded = key == np.iinfo(np.int64).max
    lv = np.where(excluded, 0, key & 0xFF)
    m = (-(key >> 8)).astype(np.int32)
    vals = (m ^ ((m >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)
    return np.where(excluded, np.float32(-np.inf), vals), lv


def _positions_block(s: np.ndarray, groups: list[tuple[int, int, int, int]], lab_q: torch.Tensor, ref_lab: torch.Tensor,
                     self_col: torch.Tensor | None, n_levels: int) -> tuple[torch.Tensor, ...]:
    """Sorted positives of one chunk: ``(vals, levels, valid, negatives before)`` ``(c, P)`` (module docstring).

    ``s`` ``(c, N)`` float32 scores (modified: sorted in place); ``groups``: ``(r0, r1, a, b)``,
    rows ``r0:r1`` have their positives in columns ``a:b``.
    """
    c, n = s.shape
    p = max([b - a for _, _, a, b in groups] + [1])
    vals = np.full((c, p), -np.inf, dtype=s.dtype)
    lv = np.zeros((c, p), dtype=np.int64)
    for r0, r1, a, b in groups:
        if b <= a:
            continue
        level = torch.ones(r1 - r0, b - a, dtype=torch.long)
        match = torch.ones(r1 - r0, b - a, dtype=torch.bool)
        for col in range(n_levels - 2, -1, -1):
            match &= lab_q[r0:r1, col, None] == ref_lab[a:b, col][None, :]
            level += match
        if self_col is not None:
            own = self_col[r0:r1] - a
            hit = torch.nonzero((own >= 0) & (own < b - a)).flatten()
            level[hit, own[hit]] = 0
        if s.dtype == np.float32:
            vals[r0:r1, : b - a], lv[r0:r1, : b - a] = _sorted_positive_block(s[r0:r1, a:b], level.numpy())
        else:  # float64 scores: two stable sorts
            ps = torch.from_numpy(s[r0:r1, a:b].copy()).masked_fill(level == 0, -torch.inf)
            order = torch.argsort(level, dim=1, stable=True)
            order = order.gather(1, torch.argsort(ps.gather(1, order), dim=1, descending=True, stable=True))
            vals[r0:r1, : b - a] = ps.gather(1, order).numpy()
            lv[r0:r1, : b - a] = level.gather(1, order).numpy()
        s[r0:r1, a:b] = np.inf
    valid = np.isfinite(vals)
    n_valid = valid.sum(1)
    n_neg = np.array([n - (b - a) for r0, r1, a, b in groups for _ in range(r0, r1)], dtype=np.int64)
    ge = np.zeros((c, p), dtype=np.int64)

    s.sort(axis=1)  # negatives first, ascending; the positives' range is +inf
    for r in range(c):
        m = int(n_valid[r])
        if m:
            below = np.searchsorted(s[r, : n_neg[r]], vals[r, m - 1 :: -1], side="left")
            ge[r, :m] = n_neg[r] - below[::-1]
    return torch.from_numpy(vals).to(torch.float64), torch.from_numpy(lv), torch.from_numpy(valid), torch.from_numpy(ge)


def hierarchical_route(
    emb: torch.Tensor,
    lab: torch.Tensor,
    ref: torch.Tensor,
    ref_lab: torch.Tensor,
    ks: Sequence[int],
    wanted: set[str],
    exclude_self: bool,
    dev: torch.device,
    chunk_size: int | None,
    max_memory_mb: float,
    progress: bool | None,
    alpha: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Per-query hierarchical metrics of every query, chunk by chunk (see the module docstring).

    Args:
        emb: ``(Q, d)`` (normalised as wanted) queries; ``lab`` ``(Q, L)`` labels, fine first.
        ref: ``(N, d)`` gallery; ``ref_lab`` ``(N, L)``.
        Others: as :func:`rank_lab.metrics.retrieval_metrics`.

    Returns:
        ``{name: (Q,) tensor}`` (see :func:`~rank_lab.metrics.hierarchical_counting.hierarchical_chunk_metrics`).

    Raises:
        ValueError / TypeError: naming the argument (embeddings not ``(N, d)``, finite and
        non-empty; labels not integer ``(N,)`` / ``(N, L)`` with one row per embedding; different
        ``d`` or ``L``; ``ks`` outside ``[1, N]``; unknown ``wanted`` names; ``exclude_self`` with
        another reference set; a bad ``chunk_size``, ``max_memory_mb`` or ``alpha``).
    """
    emb = check_embeddings(emb, "emb")
    ref = check_embeddings(ref, "ref")
    lab = as_hierarchical_labels(lab, emb.shape[0], "lab")
    ref_lab = as_hierarchical_labels(ref_lab, ref.shape[0], "ref_lab")
    if ref.shape[1] != emb.shape[1]:
        raise ValueError(f"emb has d={emb.shape[1]} but ref has d={ref.shape[1]}")
    if ref_lab.shape[1] != lab.shape[1]:
        raise ValueError(f"lab has {lab.shape[1]} levels but ref_lab has {ref_lab.shape[1]}")
    if not isinstance(exclude_self, bool):
        raise TypeError(f"exclude_self must be a bool, got {type(exclude_self).__name__}")
    if exclude_self and ref.shape[0] != emb.shape[0]:
        raise ValueError("exclude_self=True needs the queries emb to be the reference set ref (same length)")
    ks, wanted = check_ks_wanted(ks, wanted, ref.shape[0] - int(exclude_self))
    if chunk_size is not None:
        chunk_size = check_positive_int(chunk_size, "chunk_size")
    max_memory_mb = check_float(max_memory_mb, "max_memory_mb", low=0.0, low_open=True)
    alpha = check_float(alpha, "alpha", low=0.0, low_open=True)
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool or None, got {type(progress).__name__}")
    if not isinstance(dev, torch.device):
        raise TypeError(f"dev must be a torch.device, got {type(dev).__name__}")
    work = torch.float64 if torch.float64 in (emb.dtype, ref.dtype) else torch.float32  # one working precision
    emb, ref = emb.to(work), ref.to(work)
    n_levels = lab.shape[1]
    if dev.type != "cpu" or n_levels > 60:  # pragma: no cover - GPU: the chunked counting route
        return hierarchical_counting_route(emb, lab, ref, ref_lab, ks, wanted, exclude_self, dev, chunk_size,
                                           max_memory_mb, progress, alpha)
    lab, ref_lab = lab.cpu(), ref_lab.cpu()
    g_order = torch.argsort(ref_lab[:, -1], stable=True)
    ref_p, ref_lab_p = ref[g_order].to(dev), ref_lab[g_order]
    coarse, first = torch.unique_consecutive(ref_lab_p[:, -1], return_counts=True)
    starts = torch.cumsum(first, 0) - first
    q_order = torch.argsort(lab[:, -1], stable=True)
    lab_q = lab[q_order]
    k = torch.searchsorted(coarse, lab_q[:, -1].contiguous()).clamp(max=max(coarse.numel() - 1, 0))
    present = coarse[k] == lab_q[:, -1]
    range_a = torch.where(present, starts[k], torch.zeros_like(k))
    range_b = torch.where(present, starts[k] + first[k], torch.zeros_like(k))
    self_col = None
    if exclude_self:
        inv = torch.empty_like(g_order)
        inv[g_order] = torch.arange(g_order.numel())
        self_col = inv[q_order]
    counts = _level_counts(lab_q, ref_lab_p, exclude_self)
    # rows per task: its scores (rows, N) and positives (rows, P) stay small; tasks run in Python
    # threads with single-threaded torch (each computes its own matmul rows): no OpenMP barriers
    sub = chunk_rows(ref.shape[0], max_memory_mb / 8, chunk_size, bytes_per_item=4, max_rows=128)
    starts = list(range(0, emb.shape[0], sub))
    show = len(starts) > 64 if progress is None else progress
    threads = max(1, torch.get_num_threads())
    results: dict[int, dict[str, torch.Tensor]] = {}

    def block(r0: int) -> None:
        """Queries ``r0 : r0 + sub`` (sorted order): scores, positions, metrics."""
        r1 = min(r0 + sub, emb.shape[0])
        s = (emb[q_order[r0:r1]].to(dev) @ ref_p.T).numpy()
        ra, rb = range_a[r0:r1], range_b[r0:r1]
        cut = [0, *(torch.nonzero((ra[1:] != ra[:-1]) | (rb[1:] != rb[:-1])).flatten() + 1).tolist(), r1 - r0]
        groups = [(i0, i1, int(ra[i0]), int(rb[i0])) for i0, i1 in zip(cut[:-1], cut[1:], strict=True)]
        own = None if self_col is None else self_col[r0:r1]
        vals, lv, valid, ge = _positions_block(s, groups, lab_q[r0:r1], ref_lab_p, own, n_levels)
        width = max(int(valid.sum(1).max()), 1)
        results[r0] = sorted_positive_metrics_packed(lv[:, :width], valid[:, :width], ge[:, :width], vals[:, :width],
                                                     counts[r0:r1], n_levels, ks, wanted, alpha)

    with exact_matmul(), torch_threads(1), ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in progress_bar(pool.map(block, starts), len(starts), show, "hierarchical metrics"):
            pass
    parts: dict[str, list[torch.Tensor]] = {}
    for key in sorted(results):
        for name, v in results[key].items():
            parts.setdefault(name, []).append(v)
    out = {}
    for name, v in parts.items():
        val = torch.empty_like(torch.cat(v))
        val[q_order] = torch.cat(v)
        out[name] = val
    return out
