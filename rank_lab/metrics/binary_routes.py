"""The binary routes of the evaluation engine: certified neighbour lists and counting.

:func:`rank_lab.metrics.retrieval_metrics` (:mod:`rank_lab.metrics.engine`) computes the metrics
of binary relevance (same fine label) by one of two routes, both exact and in bounded memory
(never an ``N x N`` matrix), with the worst-case tie rule (``docs/decisions.md``: tied
irrelevant items come first):

* :func:`neighbour_list_route` (R@k, P@k, TR@k, AP@k, mAP@R, MRR): the certified neighbour lists
  of :mod:`rank_lab.metrics.certified`, every item whose canonical score reaches the query's K-th
  one, so that the items tied with the K-th are all there and no recount is needed. A query whose
  list holds no relevant item gets its MRR from an exact count (the first relevant item may lie
  beyond the list).
* :func:`counting_route` (needed by the full-list metrics ``"mAP"`` and ``"NDCG"``): queries in
  chunks of rows, the scores against the whole gallery ``(c, N)`` from one float32 (float64)
  matmul inside :func:`~rank_lab.metrics.exact_scores.exact_matmul`, and the worst-case position
  of every relevant item by *counting* (:func:`~rank_lab.metrics.counting.positive_positions`).

Both are internal routes of the engine (it checks their inputs): none is listed in ``__all__``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rank_lab.metrics.certified import certified_neighbours
from rank_lab.metrics.chunking import chunk_rows
from rank_lab.metrics.chunking import progress as progress_bar
from rank_lab.metrics.counting import metrics_from_positions, positive_positions
from rank_lab.metrics.exact_scores import canonical_scores, exact_matmul
from rank_lab.metrics.knn import KnnFn
from rank_lab.metrics.score_bounds import score_bound

__all__: list[str] = []


def counting_route(emb: torch.Tensor, lab: torch.Tensor, ref: torch.Tensor, ref_lab: torch.Tensor, ks: Sequence[int],
                   wanted: set[str], exclude_self: bool, dev: torch.device, chunk_size: int | None, max_memory_mb: float,
                   progress: bool | None) -> dict[str, torch.Tensor]:
    """Per-query binary metrics by counting, chunk by chunk (module docstring; Eqs. 2.1-2.6 of the Ramzi thesis).

    Inputs are checked by :func:`rank_lab.metrics.retrieval_metrics`, the only caller.

    Args:
        emb: ``(Q, d)`` queries (normalised as wanted); ``lab`` ``(Q,)`` labels.
        ref: ``(N, d)`` gallery; ``ref_lab`` ``(N,)``.
        ks: cut-offs of the ``@k`` metrics; wanted: metric names (:data:`~rank_lab.metrics.engine.ALL_METRICS`).
        exclude_self: query i is gallery item i and is left out of its own ranking.
        dev, chunk_size, max_memory_mb, progress: as :func:`rank_lab.metrics.retrieval_metrics`.

    Returns:
        ``{name: (Q,) tensor}`` (:func:`~rank_lab.metrics.counting.metrics_from_positions`).
    """
    ref_d, ref_lab_d = ref.to(dev), ref_lab.to(dev)
    c = chunk_rows(ref.shape[0], max_memory_mb, chunk_size)
    n_chunks = math.ceil(emb.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    parts: dict[str, list[torch.Tensor]] = {}
    for start in progress_bar(range(0, emb.shape[0], c), n_chunks, show, "retrieval metrics"):
        qc = emb[start : start + c].to(dev)
        with exact_matmul():
            s = qc @ ref_d.T
        pos = lab[start : start + c].to(dev)[:, None] == ref_lab_d[None, :]
        neg = ~pos
        if exclude_self:
            rows = torch.arange(qc.shape[0], device=dev)
            pos[rows, rows + start] = False
            neg[rows, rows + start] = False
        positions, valid = positive_positions(s, pos, neg)
        vals = metrics_from_positions(positions, valid, pos.sum(1), ks, wanted)
        for name, v in vals.items():
            parts.setdefault(name, []).append(v)
    return {name: torch.cat(v) for name, v in parts.items()}


def neighbour_list_route(emb: torch.Tensor, lab: torch.Tensor, ref: torch.Tensor, ref_lab: torch.Tensor,
                         n_pos: torch.Tensor, ks: Sequence[int], wanted: set[str], exclude_self: bool, dev: torch.device,
                         precision: str, knn: KnnFn | None, tile: int, chunk_size: int | None, max_memory_mb: float,
                         progress: bool | None) -> dict[str, torch.Tensor]:
    """Neighbour-list metrics from the certified lists (every item reaching the K-th canonical score).

    For every query, the list holds every item whose canonical score reaches its K-th one,
    K = max(largest k, the query's number of relevant items ``n_pos``); the worst-case position
    of a relevant entry is its rank among the relevant ones plus the irrelevant entries up to the
    end of its group of tied scores (module docstring). Inputs are checked by
    :func:`rank_lab.metrics.retrieval_metrics`, the only caller.

    Args:
        emb: ``(Q, d)`` queries; ``lab`` ``(Q,)`` labels; ``ref`` ``(N, d)``; ``ref_lab`` ``(N,)``.
        n_pos: ``(Q,)`` number of relevant items of each query.
        ks, wanted, exclude_self: as :func:`counting_route` (``wanted`` within
            :data:`~rank_lab.metrics.engine.KNN_METRICS`).
        dev: compute device; precision: stage-1 format; knn: a custom stage 1 or None; tile: tile
            side of the certified search; chunk_size, max_memory_mb, progress: as
            :func:`rank_lab.metrics.retrieval_metrics`.

    Returns:
        ``{name: (Q,) tensor}`` on the CPU.
    """
    kq = n_pos.clamp(min=max(ks) if ks else 1)
    lists = certified_neighbours(emb, ref, kq, exclude_self=exclude_self, precision=precision, knn=knn, device=dev,
                                 tile=tile, progress=progress, check=False)
    rows, lab_c, ref_lab_c = lists.rows, lab.cpu(), ref_lab.cpu()
    rel = ref_lab_c[lists.indices] == lab_c[rows]
    n_q = emb.shape[0]
    # worst-case position of a relevant entry: its rank among the relevant ones + the irrelevant
    # entries up to the end of its group of tied scores (all of which are in the list)
    new_group = torch.ones_like(rel)
    new_group[1:] = (rows[1:] != rows[:-1]) | (lists.scores[1:] != lists.scores[:-1])
    group = torch.cumsum(new_group.long(), 0) - 1
    irr_through = torch.cumsum(torch.bincount(group, weights=(~rel).double()), 0)
    row_start = lists.offsets[:-1]
    irr_before_row = torch.where(row_start > 0, irr_through[group[(row_start - 1).clamp(min=0)]],
                                 torch.zeros(n_q, dtype=torch.float64)) if rel.numel() else torch.zeros(n_q, dtype=torch.float64)
    rel_cum = torch.cumsum(rel.long(), 0)
    rel_before_row = torch.where(row_start > 0, rel_cum[(row_start - 1).clamp(min=0)], torch.zeros_like(row_start))
    rank_rel = rel_cum - rel_before_row[rows]
    position = rank_rel + (irr_through[group] - irr_before_row[rows]).long()
    n_rel = torch.bincount(rows[rel], minlength=n_q)
    width = max(int(n_rel.max()) if n_q else 1, 1)
    pos = torch.full((n_q, width), torch.iinfo(torch.long).max // 4, dtype=torch.long)
    valid = torch.zeros(n_q, width, dtype=torch.bool)
    pos[rows[rel], rank_rel[rel] - 1] = position[rel]
    valid[rows[rel], rank_rel[rel] - 1] = True
    per_q = metrics_from_positions(pos, valid, n_pos.cpu(), ks, wanted)
    if "MRR" in wanted:  # the first relevant item may lie beyond the list: count exactly
        far = torch.nonzero((n_rel == 0) & (n_pos.cpu() > 0)).flatten()
        if far.numel():
            first = _first_relevant_positions(emb, lab, ref, ref_lab, far, exclude_self, dev, chunk_size, max_memory_mb)
            per_q["MRR"][far] = 1.0 / first.to(torch.float64)
    return per_q


def _first_relevant_positions(emb, lab, ref, ref_lab, rows, exclude_self, dev, chunk_size, max_memory_mb):
    """Worst-case position of the best relevant item of each query in ``rows`` (canonical scores).

    ``s*`` = the best canonical score among the query's relevant items; the position is 1 + the
    irrelevant items with canonical score ``>= s*``: certain ones from the float32 (float64) matmul
    and its bound, the ambiguous ones (within the bound of ``s*``) re-scored canonically.
    """
    ref_d, ref_lab_d, emb_d = ref.to(dev), ref_lab.to(dev), emb.to(dev)
    lab_r = lab[rows].to(dev)
    rows_d = rows.to(dev)
    pair_q, pair_g = torch.nonzero(lab_r[:, None] == ref_lab_d[None, :], as_tuple=True)
    if exclude_self:
        keep = pair_g != rows_d[pair_q]
        pair_q, pair_g = pair_q[keep], pair_g[keep]
    sc = canonical_scores(emb_d, ref_d, rows_d[pair_q], pair_g, check=False)
    best = torch.full((rows.numel(),), -torch.inf, dtype=sc.dtype, device=dev).scatter_reduce(0, pair_q, sc, "amax")
    g_norm = float(ref_d.to(torch.float64).norm(dim=1).max())
    qn = emb_d[rows_d].to(torch.float64).norm(dim=1)
    a, _, _ = score_bound(qn, qn, torch.zeros_like(qn), g_norm, g_norm, 0.0, emb.shape[1], emb.dtype, emb.dtype, emb.dtype)
    c = chunk_rows(ref.shape[0], max_memory_mb, chunk_size, bytes_per_item=16)
    out = torch.empty(rows.numel(), dtype=torch.long)
    for s0 in range(0, rows.numel(), c):
        qi = rows_d[s0 : s0 + c]
        with exact_matmul():
            s = emb_d[qi] @ ref_d.T
        irr = lab_r[s0 : s0 + c, None] != ref_lab_d[None, :]
        if exclude_self:
            irr[torch.arange(qi.numel(), device=dev), qi] = False
        b64, a_c = best[s0 : s0 + c].to(torch.float64)[:, None], a[s0 : s0 + c, None]
        s64 = s.to(torch.float64)
        certain = irr & (s64 - a_c >= b64)
        unsure = irr & ~certain & (s64 + a_c >= b64)
        count = certain.sum(1)
        ur, uc = torch.nonzero(unsure, as_tuple=True)
        if ur.numel():
            cs = canonical_scores(emb_d, ref_d, qi[ur], uc, check=False)
            count = count + torch.bincount(ur[cs >= best[s0 + ur]], minlength=qi.numel())
        out[s0 : s0 + c] = (1 + count).cpu()
    return out
