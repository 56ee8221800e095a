"""Evaluation protocols of image search: Revisited Oxford/Paris (and confidence intervals).

**Revisited Oxford / Paris** (Radenović et al. 2018; Gominski thesis §3.1; the
revisitop evaluation code). Every query has ``easy``, ``hard`` and ``junk`` database images; the
rest are negatives.
*Easy*: positives = easy, ignored = junk + hard. *Medium*: positives = easy + hard, ignored = junk.
*Hard*: positives = hard, ignored = junk + easy. Ignored images are removed from the ranking
before scoring. The protocol's AP is the revisitop ``compute_ap`` **trapezoidal** interpolation
``AP = sum_j (1/|P|) (P_{j-1} + P_j)/2`` with ``P_{j-1} = j / r_j`` (1 when ``r_j = 0``) and
``P_j = (j + 1)/(r_j + 1)`` for the ``j``-th positive at 0-based position ``r_j``; it is *not* the
non-interpolated AP of :func:`rank_lab.metrics.average_precision` (eq. 3.1 of the thesis), which is
available as ``ap_kind="noninterp"``. The trapezoid credits a positive with the mean of the
precision just before it (``j / r_j``) and at it (``(j+1)/(r_j+1)``); since ``j <= r_j`` the first
is never larger, so the trapezoid is at most eq. 3.1, with equality exactly when no negative
precedes any positive (tested). mP@k is revisitop's ``k_q = min(max positive position, k)``,
``P@k = #{pos <= k_q} / k_q``. Queries without positives (possible in *Hard*) are skipped and
counted, as in revisitop. The R1M distractors are extra negatives for every query, passed as a
separate ``(Q, N_d)`` score block (:func:`revisited_evaluate`).

The cross-source protocol of the thesis (§4.1.2) is in :mod:`rank_lab.retrieval.cross_source`,
whose AP kernels this module uses. Ties follow the project rule (``docs/decisions.md``):
the worst case, tied negatives first (:func:`rank_lab.metrics.positive_positions`).

Confidence intervals for repeated stochastic runs: :func:`rank_lab.stats.mean_ci` (Student t, thesis
§4.3.3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch

from rank_lab._validation import as_tensor, check_finite, check_positive_int
from rank_lab.metrics import positive_positions
from rank_lab.retrieval.cross_source import (
    check_positions,
    noninterpolated_ap,
)

__all__ = [
    "REVISITED_PROTOCOLS",
    "revisited_masks",
    "revisited_evaluate",
    "trapezoid_ap_from_positions",
]

REVISITED_PROTOCOLS = ("easy", "medium", "hard")


# ----------------------------------------------------------------------------- revisited


def revisited_masks(
    gnd: Mapping[str, Any], n_db: int, protocol: str
) -> tuple[np.ndarray, np.ndarray]:
    """Positive and ignored (junk) masks ``(n_db,)`` of one query for ``protocol``.

    Args:
        gnd: the query's ground truth, ``{"easy": [...], "hard": [...], "junk": [...]}`` (database
            indices, as in ``gnd_roxford5k.pkl``).
        n_db: database size.
        protocol: ``"easy"``, ``"medium"`` or ``"hard"``.

    Raises:
        ValueError: unknown ``protocol``, ``n_db`` not a positive int, indices outside
            ``[0, n_db)``.
    """
    n_db = check_positive_int(n_db, "n_db")
    if protocol not in REVISITED_PROTOCOLS:
        raise ValueError(f"protocol must be one of {REVISITED_PROTOCOLS}, got {protocol!r}")
    sets = {}
    for key in ("easy", "hard", "junk"):
        idx = np.asarray(gnd.get(key, []), dtype=np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= n_db):
            raise ValueError(f"gnd[{key!r}] holds indices outside [0, {n_db})")
        m = np.zeros(n_db, dtype=bool)
        m[idx] = True
        sets[key] = m
    if protocol == "easy":
        return sets["easy"], sets["junk"] | sets["hard"]
    if protocol == "medium":
        return sets["easy"] | sets["hard"], sets["junk"]
    return sets["hard"], sets["junk"] | sets["easy"]


def trapezoid_ap_from_positions(positions: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """revisitop's trapezoidal AP from 1-based positive positions ``(c, P)`` (sorted) and a mask.

    ``AP = (1/R) sum_j ((j / r_j if r_j > 0 else 1) + (j + 1)/(r_j + 1)) / 2`` with ``r_j =
    positions_j - 1`` (0-based) and ``j`` the 0-based index among the positives.

    Args:
        positions: ``(c, P)`` integer 1-based positions (from
            :func:`rank_lab.metrics.positive_positions`).
        valid: ``(c, P)`` bool, which entries are positives.

    Returns:
        ``(c,)`` float64 AP (0 for a row without positive).

    Raises:
        TypeError / ValueError: non-integer ``positions``, non-bool ``valid``, other shapes, a
            position below 1.
    """
    positions, valid = check_positions(positions, valid, "positions", "valid")
    r = positions.to(torch.float64) - 1.0
    j = torch.arange(positions.shape[1], dtype=torch.float64, device=positions.device)[None, :]
    p0 = torch.where(r > 0, j / r.clamp_min(1.0), torch.ones_like(r))
    p1 = (j + 1) / (r + 1)
    n_pos = valid.sum(1).to(torch.float64).clamp_min(1.0)
    # padding never enters (even a 0)
    terms = torch.where(valid, (p0 + p1) / 2, torch.zeros_like(p1))
    return terms.sum(1) / n_pos


def revisited_evaluate(
    scores: torch.Tensor,
    gnd: Sequence[Mapping[str, Any]],
    *,
    protocols: Sequence[str] = REVISITED_PROTOCOLS,
    ks: Sequence[int] = (1, 5, 10),
    distractor_scores: torch.Tensor | None = None,
    ap_kind: Literal["trapezoid", "noninterp"] = "trapezoid",
    chunk_size: int = 8,
) -> dict[str, dict[str, float]]:
    """Revisited Oxford / Paris evaluation (Easy / Medium / Hard, junk ignored; revisitop protocol).

    Args:
        scores: ``(Q, n_db)`` query-to-database similarities.
        gnd: ``Q`` ground-truth dicts with ``easy`` / ``hard`` / ``junk`` database indices.
        protocols: subset of ``("easy", "medium", "hard")``.
        ks: cut-offs of mP@k. Any ``k >= 1`` is defined, also beyond the database size: the
            protocol scores ``P@k_q`` with ``k_q = min(position of the last positive, k)``.
        distractor_scores: ``(Q, N_d)`` similarities to distractors (R1M), negatives for every
            query.
        ap_kind: ``"trapezoid"`` (the protocol's definition) or ``"noninterp"`` (thesis eq. 3.1).
        chunk_size: queries scored together (memory ``O(chunk (n_db + N_d))``).

    Returns:
        ``{protocol: {"mAP": .., "mP@1": .., ..., "n_queries": .., "n_empty": ..}}`` in percent
        (mAP and mP@k x 100, as the papers report them).
    """
    scores = as_tensor(scores, "scores").detach().cpu()
    if scores.ndim != 2:
        raise ValueError(f"scores must have shape (Q, n_db), got {tuple(scores.shape)}")
    if not scores.is_floating_point():
        scores = scores.double()
    check_finite(scores, "scores")
    n_q, n_db = scores.shape
    if len(gnd) != n_q:
        raise ValueError(f"gnd has {len(gnd)} entries but scores has {n_q} queries")
    if distractor_scores is not None:
        distractor_scores = as_tensor(distractor_scores, "distractor_scores").detach().cpu()
        if distractor_scores.ndim != 2 or distractor_scores.shape[0] != n_q:
            raise ValueError(
                f"distractor_scores must have shape ({n_q}, N_d), got "
                f"{tuple(distractor_scores.shape)}"
            )
        check_finite(distractor_scores, "distractor_scores")
    ks = [check_positive_int(k, "ks") for k in ks]
    if ap_kind not in ("trapezoid", "noninterp"):
        raise ValueError(f"ap_kind must be 'trapezoid' or 'noninterp', got {ap_kind!r}")
    out: dict[str, dict[str, float]] = {}
    for proto in protocols:
        masks = [revisited_masks(g, n_db, proto) for g in gnd]
        aps, prs, n_empty = [], [], 0
        for a in range(0, n_q, chunk_size):
            rows = range(a, min(a + chunk_size, n_q))
            pos = torch.from_numpy(np.stack([masks[i][0] for i in rows]))
            ign = torch.from_numpy(np.stack([masks[i][1] for i in rows]))
            s = scores[a : a + len(rows)].to(torch.float64)
            neg = ~pos & ~ign
            if distractor_scores is not None:
                d = distractor_scores[a : a + len(rows)].to(torch.float64)
                s = torch.cat([s, d], 1)
                pos = torch.cat([pos, torch.zeros_like(d, dtype=torch.bool)], 1)
                neg = torch.cat([neg, torch.ones_like(d, dtype=torch.bool)], 1)
            positions, valid = positive_positions(s, pos, neg)
            has = valid.any(1)
            n_empty += int((~has).sum())
            ap = (
                trapezoid_ap_from_positions(positions, valid)
                if ap_kind == "trapezoid"
                else noninterpolated_ap(positions, valid)
            )
            big = torch.where(valid, positions, torch.zeros_like(positions)).amax(1)
            pr = []
            for k in ks:
                kq = torch.minimum(big, torch.full_like(big, k)).clamp_min(1)
                pr.append(((positions <= kq[:, None]) & valid).sum(1).to(torch.float64) / kq)
            aps.append(ap[has])
            prs.append(torch.stack(pr, 1)[has])
        ap_all = torch.cat(aps)
        pr_all = torch.cat(prs)
        res = {"mAP": 100 * float(ap_all.mean()) if ap_all.numel() else float("nan")}
        for j, k in enumerate(ks):
            res[f"mP@{k}"] = 100 * float(pr_all[:, j].mean()) if pr_all.numel() else float("nan")
        res["n_queries"] = float(ap_all.numel())
        res["n_empty"] = float(n_empty)
        out[proto] = res
    return out
