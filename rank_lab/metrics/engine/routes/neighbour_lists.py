"""The neighbour-list route: binary metrics from the certified neighbour lists.

For every query the certified search (:mod:`rank_lab.metrics.engine.search.certified`) lists every
item whose canonical score reaches its K-th one, K = max(largest k, the query's number of relevant
items R), ties at the K-th included; so the worst-case position of a relevant entry is its rank
among the relevant ones plus the irrelevant entries up to the end of its group of tied scores,
with no recount (``docs/decisions.md``: tied irrelevant items come first). Relevant items beyond
the list lie beyond every cut-off and beyond R, which is all that metrics of depth ``"cutoff"``,
``"k"`` and ``"R"`` read; a query whose list holds no relevant item gets the position of its first
one by an exact count (depth ``"first"``, MRR). Stage 1 is the tiled matmul in the format of
``precision`` or a flat index (``backend="faiss"``, ``knn=``). Internal route of
:func:`rank_lab.metrics.retrieval_metrics` (it checks the request).
"""

from __future__ import annotations

import torch

from rank_lab.metrics.engine._blocks import chunk_rows
from rank_lab.metrics.engine.formulas.positions import BinaryPositions
from rank_lab.metrics.engine.routes.request import MetricsRequest
from rank_lab.metrics.engine.scores._stage1 import Stage1
from rank_lab.metrics.engine.scores.exact import canonical_pairs, exact_matmul
from rank_lab.metrics.engine.search.certified import certified_lists
from rank_lab.metrics.engine.search.knn import search_tile

__all__: list[str] = []  # a route of retrieval_metrics (which checks the request)


def list_length(req: MetricsRequest) -> int:
    """The longest list the route needs: ``max(largest k, largest R)``."""
    return max(max(req.ks) if req.ks else 1, int(req.n_pos.max()) if req.n_pos.numel() else 1)


def neighbour_list_route(req: MetricsRequest) -> dict[str, dict[str, torch.Tensor]]:
    """Per-query values of the binary metrics of ``req`` (depths ``"cutoff"``, ``"k"``, ``"R"``,
    ``"first"``).

    Returns:
        ``{metric name: {key: (Q,) float64}}`` on the CPU.
    """
    lab = req.labels[:, 0]
    ref_lab = req.gallery_labels[:, 0]
    n_pos = req.n_pos
    kq = n_pos.clamp(min=max(req.ks) if req.ks else 1)
    lists = certified_lists(
        req.queries,
        req.gallery,
        kq,
        exclude_self=req.exclude_self,
        precision=req.precision,
        device=req.device,
        tile=search_tile(req.max_memory_mb, req.chunk_size),
        progress=req.progress,
        index=req.index,
    )
    rows = lists.rows
    rel = ref_lab[lists.indices] == lab[rows]
    n_q = req.queries.shape[0]
    # worst-case position of a relevant entry: its rank among the relevant ones + the irrelevant
    # entries up to the end of its group of tied scores (all of which are in the list)
    new_group = torch.ones_like(rel)
    new_group[1:] = (rows[1:] != rows[:-1]) | (lists.scores[1:] != lists.scores[:-1])
    group = torch.cumsum(new_group.long(), 0) - 1
    irr_through = torch.cumsum(torch.bincount(group, weights=(~rel).double()), 0)
    row_start = lists.offsets[:-1]
    zero = torch.zeros(n_q, dtype=torch.float64)
    irr_before_row = (
        torch.where(row_start > 0, irr_through[group[(row_start - 1).clamp(min=0)]], zero)
        if rel.numel()
        else zero
    )
    rel_cum = torch.cumsum(rel.long(), 0)
    rel_before_row = torch.where(
        row_start > 0, rel_cum[(row_start - 1).clamp(min=0)], torch.zeros_like(row_start)
    )
    rank_rel = rel_cum - rel_before_row[rows]
    position = rank_rel + (irr_through[group] - irr_before_row[rows]).long()
    n_rel = torch.bincount(rows[rel], minlength=n_q)
    width = max(int(n_rel.max()) if n_q else 1, 1)
    pos = torch.full((n_q, width), torch.iinfo(torch.long).max // 4, dtype=torch.long)
    valid = torch.zeros(n_q, width, dtype=torch.bool)
    pos[rows[rel], rank_rel[rel] - 1] = position[rel]
    valid[rows[rel], rank_rel[rel] - 1] = True
    if "first" in req.depths:  # the first relevant item may lie beyond the list: count exactly
        far = torch.nonzero((n_rel == 0) & (n_pos > 0)).flatten()
        if far.numel():
            pos[far, 0] = first_relevant_positions(req, far)
            valid[far, 0] = True
    positions = BinaryPositions(pos, valid, n_pos)
    return {m.name: m.compute(positions, req.ks) for m in req.metrics}


def first_relevant_positions(req: MetricsRequest, rows: torch.Tensor) -> torch.Tensor:
    """Worst-case position of the best relevant item of each query in ``rows`` (canonical scores).

    ``s*`` = the best canonical score among the query's relevant items; the position is 1 + the
    irrelevant items with canonical score ``>= s*``: certain ones from the working-precision matmul
    and its bound (``lo >= s*``), the ambiguous ones (``lo < s* <= hi``) re-scored canonically.
    Entries past the first of a row are not computed (``valid`` marks only the first).
    """
    dev = req.device
    q, g = req.queries, req.gallery
    lab = req.labels[:, 0].to(dev)
    ref_lab = req.gallery_labels[:, 0].to(dev)
    rows_d = rows.to(dev)
    lab_r = lab[rows_d]
    pair_q, pair_g = torch.nonzero(lab_r[:, None] == ref_lab[None, :], as_tuple=True)
    if req.exclude_self:
        keep = pair_g != rows_d[pair_q]
        pair_q, pair_g = pair_q[keep], pair_g[keep]
    sc = canonical_pairs(q, g, rows_d[pair_q], pair_g)
    best = torch.full((rows.numel(),), -torch.inf, dtype=sc.dtype, device=dev).scatter_reduce(
        0, pair_q, sc, "amax"
    )
    st = Stage1(q[rows_d], g, q.dtype, False)
    c = chunk_rows(g.shape[0], req.max_memory_mb, req.chunk_size, bytes_per_item=24)
    out = torch.empty(rows.numel(), dtype=torch.long)
    for s0 in range(0, rows.numel(), c):
        qi = rows_d[s0 : s0 + c]
        local = torch.arange(s0, s0 + qi.numel(), device=dev)
        with exact_matmul():
            s = st.qr[local] @ g.T
        irr = lab_r[s0 : s0 + c, None] != ref_lab[None, :]
        if req.exclude_self:
            irr[torch.arange(qi.numel(), device=dev), qi] = False
        lo, hi = st.intervals(s, local[:, None].expand_as(s))
        b64 = best[s0 : s0 + c].to(torch.float64)[:, None]
        certain = irr & (lo >= b64)
        unsure = irr & ~certain & (hi >= b64)
        count = certain.sum(1)
        ur, uc = torch.nonzero(unsure, as_tuple=True)
        if ur.numel():
            cs = canonical_pairs(q, g, qi[ur], uc)
            count = count + torch.bincount(ur[cs >= best[s0 + ur]], minlength=qi.numel())
        out[s0 : s0 + c] = (1 + count).cpu()
    return out
