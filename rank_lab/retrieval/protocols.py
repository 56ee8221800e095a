"""Evaluation protocols of image search: Revisited Oxford/Paris and the cross-source protocol.

**Revisited Oxford / Paris** (Radenović et al. 2018; Gominski thesis §3.1, digest 004 §3.3, [EXT]
revisitop). Every query has ``easy``, ``hard`` and ``junk`` database images; the rest are negatives.
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

**Cross-source protocol** (thesis §4.1.2, digest §3.4): every annotated image queries the base
(itself excluded by index). *Absolute* performance: mAP over all queries, positives = images
sharing at least one class with the query (multi-label). *Intra-domain / attribute-specific*: the
mAP over the subset of queries of one collection or one attribute value (ranking and positives
still over the whole base; compare methods on the same subset only). *Inter-domain*: ``P1``, the
1-based position of the first positive from another domain (same-domain positives before it are
not ignored in the position but do not stop the search); ``mP1`` its median, ``qP1`` its first
quartile; ``APD`` = mean position of cross-domain positives - mean position of all positives,
``mAPD`` its mean (0 is ideal). Queries without a cross-domain positive are skipped for P1 / APD.

**Ties** follow the project rule (``docs/decisions.md``): the worst case. For AP and the mean
position of all positives, tied negatives come first. For ``P1`` and the cross-domain mean
position, same-domain positives are also placed before tied cross-domain positives (the worst case
for the inter-domain measures). Positions are computed by counting
(:func:`rank_lab.metrics.positive_positions`), chunk by chunk, never by sorting an ``n x n`` matrix.
The cross-source AP is the non-interpolated AP of :func:`rank_lab.metrics.average_precision` on the
ranking with the ignored items (the query itself, junk) removed (tested against it); it is computed
from the same positions as P1 and APD so that one pass serves all the measures.

Confidence intervals for repeated stochastic runs: :func:`mean_ci` (Student t, thesis §4.3.3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from rank_lab._validation import as_tensor, check_finite, check_positive_int

__all__ = [
    "REVISITED_PROTOCOLS",
    "revisited_masks",
    "revisited_evaluate",
    "trapezoid_ap_from_positions",
    "multilabel_targets",
    "CrossDomainReport",
    "cross_domain_evaluate",
    "inter_domain_from_positions",
    "grouped_map",
    "mean_ci",
]

REVISITED_PROTOCOLS = ("easy", "medium", "hard")


# ----------------------------------------------------------------------------- revisited


def _check_positions(positions: object, valid: object, p_name: str, v_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, P)`` integer 1-based positions and a same-shape bool mask (shape / dtype only: cheap)."""
    pos = as_tensor(positions, p_name)
    ok = as_tensor(valid, v_name)
    if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"{p_name} must hold integer positions, got dtype {pos.dtype}")
    if ok.dtype != torch.bool:
        raise TypeError(f"{v_name} must be a bool mask, got dtype {ok.dtype}")
    if pos.ndim != 2:
        raise ValueError(f"{p_name} must have shape (c, P), got {tuple(pos.shape)}")
    if ok.shape != pos.shape:
        raise ValueError(f"{v_name} has shape {tuple(ok.shape)} but {p_name} has {tuple(pos.shape)}")
    if bool((pos[ok] < 1).any()):
        raise ValueError(f"{p_name} must hold 1-based positions (>= 1) where {v_name} is True")
    return pos, ok


def revisited_masks(gnd: Mapping[str, Any], n_db: int, protocol: str) -> tuple[np.ndarray, np.ndarray]:
    """Positive and ignored (junk) masks ``(n_db,)`` of one query for ``protocol``.

    Args:
        gnd: the query's ground truth, ``{"easy": [...], "hard": [...], "junk": [...]}`` (database
            indices, as in ``gnd_roxford5k.pkl``).
        n_db: database size.
        protocol: ``"easy"``, ``"medium"`` or ``"hard"``.

    Raises:
        ValueError: unknown ``protocol``, ``n_db`` not a positive int, indices outside ``[0, n_db)``.
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
    positions, valid = _check_positions(positions, valid, "positions", "valid")
    r = positions.to(torch.float64) - 1.0
    j = torch.arange(positions.shape[1], dtype=torch.float64)[None, :]
    p0 = torch.where(r > 0, j / r.clamp_min(1.0), torch.ones_like(r))
    p1 = (j + 1) / (r + 1)
    n_pos = valid.sum(1).to(torch.float64).clamp_min(1.0)
    terms = torch.where(valid, (p0 + p1) / 2, torch.zeros_like(p1))  # padding never enters (even a 0)
    return terms.sum(1) / n_pos


def _noninterp_ap(positions: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    j = torch.arange(1, positions.shape[1] + 1, dtype=torch.float64)[None, :]
    return ((j / positions.to(torch.float64)) * valid).sum(1) / valid.sum(1).to(torch.float64).clamp_min(1.0)


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
        distractor_scores: ``(Q, N_d)`` similarities to distractors (R1M), negatives for every query.
        ap_kind: ``"trapezoid"`` (the protocol's definition) or ``"noninterp"`` (thesis eq. 3.1).
        chunk_size: queries scored together (memory ``O(chunk (n_db + N_d))``).

    Returns:
        ``{protocol: {"mAP": .., "mP@1": .., ..., "n_queries": .., "n_empty": ..}}`` in percent
        (mAP and mP@k x 100, as the papers report them).
    """
    from rank_lab.metrics import positive_positions

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
            raise ValueError(f"distractor_scores must have shape ({n_q}, N_d), got {tuple(distractor_scores.shape)}")
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
            ap = trapezoid_ap_from_positions(positions, valid) if ap_kind == "trapezoid" else _noninterp_ap(positions, valid)
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


# ----------------------------------------------------------------------------- cross-source


def multilabel_targets(query_labels: object, gallery_labels: object) -> torch.Tensor:
    """Positives ``(Q, N)``: the gallery item shares at least one class with the query.

    Labels are ``(n,)`` integers (single label), ``(n, C)`` multi-hot (bool or 0/1), or a list of
    iterables of class ids (multi-label sets).
    """

    def to_hot(lab: object, name: str, n_classes: int | None = None) -> torch.Tensor:
        if isinstance(lab, (list, tuple)) and lab and not isinstance(lab[0], (int, np.integer)) and not torch.is_tensor(lab):
            ids = [sorted({int(c) for c in row}) for row in lab]
            c = 1 + max((max(r) for r in ids if r), default=0)
            c = max(c, n_classes or 0)
            hot = torch.zeros(len(ids), c, dtype=torch.bool)
            for i, r in enumerate(ids):
                if r:
                    hot[i, r] = True
            return hot
        t = as_tensor(lab, name)
        if t.ndim == 1:
            if t.is_floating_point():
                raise TypeError(f"{name} must hold integers, got {t.dtype}")
            c = max(int(t.max()) + 1 if t.numel() else 1, n_classes or 0)
            return torch.nn.functional.one_hot(t.long().clamp_min(0), c).bool() & (t >= 0)[:, None]
        if t.ndim == 2:
            if t.dtype != torch.bool and not bool(((t == 0) | (t == 1)).all()):
                raise ValueError(f"{name} of shape (n, C) must be multi-hot (bool or 0/1)")
            return t.bool()
        raise ValueError(f"{name} must be (n,), (n, C) or a list of label sets, got shape {tuple(t.shape)}")

    q = to_hot(query_labels, "query_labels")
    g = to_hot(gallery_labels, "gallery_labels")
    c = max(q.shape[1], g.shape[1])
    q = torch.nn.functional.pad(q, (0, c - q.shape[1]))
    g = torch.nn.functional.pad(g, (0, c - g.shape[1]))
    return (q.float() @ g.float().T) > 0


@dataclass
class CrossDomainReport:
    """Per-query values of the cross-source protocol and their summaries.

    Attributes:
        ap: ``(Q,)`` non-interpolated AP (NaN for queries without positives).
        p1: ``(Q,)`` position of the first cross-domain positive (NaN when none).
        apd: ``(Q,)`` average position deviation (NaN when no cross-domain positive).
        summary: ``{"mAP", "mP1", "qP1", "mAPD", "n_queries", "n_skipped", "n_inter"}`` and one
            ``"mAP[<group>=<value>]"`` entry per query subset; mAP values x 100.
    """

    ap: torch.Tensor
    p1: torch.Tensor
    apd: torch.Tensor
    summary: dict[str, float] = field(default_factory=dict)


def inter_domain_from_positions(
    pos_all: torch.Tensor, valid_all: torch.Tensor, pos_cross: torch.Tensor, valid_cross: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``P1`` and ``APD`` per query from positive positions (NaN without a cross-domain positive).

    Args:
        pos_all, valid_all: ``(Q, P)`` positions of all the positives and their mask.
        pos_cross, valid_cross: ``(Q, P')`` positions of the cross-domain positives and their mask.

    Returns:
        ``(p1 (Q,), apd (Q,))`` float64; NaN marks a query without a cross-domain positive (the
        protocol skips it, see the module docstring).

    Raises:
        TypeError / ValueError: non-integer positions, non-bool masks, mismatched shapes.
    """
    pos_all, valid_all = _check_positions(pos_all, valid_all, "pos_all", "valid_all")
    pos_cross, valid_cross = _check_positions(pos_cross, valid_cross, "pos_cross", "valid_cross")
    if pos_cross.shape[0] != pos_all.shape[0]:
        raise ValueError(f"pos_cross has {pos_cross.shape[0]} rows but pos_all has {pos_all.shape[0]}")
    n_all = valid_all.sum(1).to(torch.float64)
    n_cross = valid_cross.sum(1).to(torch.float64)
    mean_all = (pos_all.to(torch.float64) * valid_all).sum(1) / n_all.clamp_min(1)
    mean_cross = (pos_cross.to(torch.float64) * valid_cross).sum(1) / n_cross.clamp_min(1)
    has = n_cross > 0
    p1 = torch.where(has, pos_cross[:, 0].to(torch.float64), torch.full_like(n_all, float("nan")))
    apd = torch.where(has, mean_cross - mean_all, torch.full_like(n_all, float("nan")))
    return p1, apd


def grouped_map(ap: torch.Tensor, groups: object, names: Mapping[int, str] | None = None) -> dict[str, float]:
    """mAP (x 100) over each subset of queries sharing a group value (domain, attribute value).

    Args:
        ap: ``(Q,)`` per-query AP in [0, 1]; NaN marks a query without positives and is skipped
            (a group of such queries gets NaN). Integer APs are cast to float.
        groups: ``(Q,)`` integer group of every query; negative values (unknown) are ignored.
        names: optional ``{value: name}`` for the keys.

    Raises:
        ValueError: ``ap`` holds inf or a value outside [0, 1], or ``groups`` has another shape.
    """
    ap = as_tensor(ap, "ap").detach().cpu()
    if not ap.is_floating_point():
        ap = ap.double()
    known = ap[~torch.isnan(ap)]
    if bool(((known < 0) | (known > 1)).any()):
        raise ValueError("ap must hold APs in [0, 1] (NaN for a query without positives), got inf or a value outside")
    g = as_tensor(groups, "groups").long().cpu()
    if g.shape != ap.shape:
        raise ValueError(f"groups has shape {tuple(g.shape)} but ap has {tuple(ap.shape)}")
    out = {}
    for v in torch.unique(g).tolist():
        if v < 0:
            continue
        sel = (g == v) & ~torch.isnan(ap)
        key = names.get(v, str(v)) if names else str(v)
        out[key] = 100 * float(ap[sel].mean()) if bool(sel.any()) else float("nan")
    return out


def cross_domain_evaluate(
    scores: torch.Tensor,
    positives: torch.Tensor,
    query_domains: object,
    gallery_domains: object,
    *,
    self_index: torch.Tensor | Sequence[int] | None = None,
    ignore: torch.Tensor | None = None,
    query_groups: Mapping[str, object] | None = None,
    group_names: Mapping[str, Mapping[int, str]] | None = None,
    chunk_size: int = 256,
) -> CrossDomainReport:
    """The cross-source protocol of the Gominski thesis (§4.1.2): absolute, per-group and inter-domain.

    Args:
        scores: ``(Q, N)`` similarities of the queries to the base.
        positives: ``(Q, N)`` bool (see :func:`multilabel_targets`).
        query_domains: ``(Q,)`` domain (collection) of every query.
        gallery_domains: ``(N,)`` domain of every base item (distractors included).
        self_index: ``(Q,)`` column of each query in the base (removed from its ranking), or
            ``None`` when the queries are not in the base; ``-1`` = not in the base.
        ignore: ``(Q, N)`` bool, other items to remove from the ranking.
        query_groups: ``{"domain": (Q,), "scale": (Q,), ...}`` integer subsets for per-group mAP
            (negative = unknown, left out).
        group_names: optional ``{group: {value: name}}`` for the summary keys.
        chunk_size: queries per chunk.

    Returns:
        A :class:`CrossDomainReport`.
    """
    from rank_lab.metrics import positive_positions

    scores = as_tensor(scores, "scores").detach().cpu()
    positives = as_tensor(positives, "positives").detach().cpu().bool()
    if scores.ndim != 2 or positives.shape != scores.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and positives {tuple(positives.shape)} must both be (Q, N)")
    if not scores.is_floating_point():
        scores = scores.double()
    check_finite(scores, "scores")
    n_q, n = scores.shape
    qd = as_tensor(query_domains, "query_domains").long().cpu()
    gd = as_tensor(gallery_domains, "gallery_domains").long().cpu()
    if qd.shape != (n_q,) or gd.shape != (n,):
        raise ValueError(f"query_domains must be ({n_q},) and gallery_domains ({n},), got {tuple(qd.shape)}, {tuple(gd.shape)}")
    ign = torch.zeros_like(positives) if ignore is None else as_tensor(ignore, "ignore").bool().cpu().clone()
    if ign.shape != scores.shape:
        raise ValueError(f"ignore must have shape {tuple(scores.shape)}")
    if self_index is not None:
        si = as_tensor(self_index, "self_index").long().cpu()
        if si.shape != (n_q,) or bool((si >= n).any()):
            raise ValueError(f"self_index must have shape ({n_q},) with values < {n}")
        rows = torch.nonzero(si >= 0).flatten()
        ign[rows, si[rows]] = True
    aps, p1s, apds = [], [], []
    for a in range(0, n_q, chunk_size):
        s = scores[a : a + chunk_size].to(torch.float64)
        ig = ign[a : a + chunk_size]
        pos = positives[a : a + chunk_size] & ~ig
        neg = ~positives[a : a + chunk_size] & ~ig
        cross = gd[None, :] != qd[a : a + chunk_size, None]
        pos_all, valid_all = positive_positions(s, pos, neg)
        ap = _noninterp_ap(pos_all, valid_all)
        ap = torch.where(valid_all.any(1), ap, torch.full_like(ap, float("nan")))
        pos_x, valid_x = positive_positions(s, pos & cross, neg | (pos & ~cross))
        p1, apd = inter_domain_from_positions(pos_all, valid_all, pos_x, valid_x)
        aps.append(ap)
        p1s.append(p1)
        apds.append(apd)
    ap, p1, apd = torch.cat(aps), torch.cat(p1s), torch.cat(apds)
    ok = ~torch.isnan(ap)
    inter = ~torch.isnan(p1)
    summary = {
        "mAP": 100 * float(ap[ok].mean()) if bool(ok.any()) else float("nan"),
        "mP1": float(np.median(p1[inter].numpy())) if bool(inter.any()) else float("nan"),
        "qP1": float(np.percentile(p1[inter].numpy(), 25)) if bool(inter.any()) else float("nan"),
        "mAPD": float(apd[inter].mean()) if bool(inter.any()) else float("nan"),
        "n_queries": float(ok.sum()),
        "n_skipped": float((~ok).sum()),
        "n_inter": float(inter.sum()),
    }
    groups = {"domain": qd, **(dict(query_groups) if query_groups else {})}
    for gname, gvals in groups.items():
        names = (group_names or {}).get(gname)
        for key, val in grouped_map(ap, gvals, names).items():
            summary[f"mAP[{gname}={key}]"] = val
    return CrossDomainReport(ap, p1, apd, summary)


def mean_ci(values: object, level: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of the Student-t confidence interval (thesis §4.3.3, digest §3.7).

    ``mean +- t_{(1+level)/2, n-1} s / sqrt(n)`` with ``s`` the sample standard deviation
    (``ddof = 1``); e.g. ``t = 2.776`` for 5 runs, ``2.064`` for 25.

    Args:
        values: ``(n,)`` results of ``n >= 2`` repeated stochastic runs (integers are cast to float).
        level: confidence level in ``(0, 1)``.

    Returns:
        ``(mean, half_width)``.

    Raises:
        ValueError: ``values`` not 1-D, shorter than 2 or holding NaN / inf; ``level`` outside (0, 1).
    """
    from scipy import stats

    t_values = as_tensor(values, "values")
    if t_values.ndim != 1:
        raise ValueError(f"values must have shape (n,), got {tuple(t_values.shape)}")
    x = np.asarray(t_values.double().cpu().numpy(), dtype=np.float64)
    if x.size < 2:
        raise ValueError(f"values needs at least 2 runs for a confidence interval, got {x.size}")
    if not np.isfinite(x).all():
        raise ValueError("values contains NaN or inf")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    t = stats.t.ppf((1 + level) / 2, x.size - 1)
    return float(x.mean()), float(t * x.std(ddof=1) / np.sqrt(x.size))
