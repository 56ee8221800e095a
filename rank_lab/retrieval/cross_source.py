"""The cross-source evaluation protocol of the Gominski thesis (§4.1.2, Fig. 4.2).

Every annotated image queries the base (itself excluded by index). *Absolute* performance: mAP over
all queries, positives = images sharing at least one class with the query
(multi-label). *Intra-domain / attribute-specific*: the mAP over the subset of queries of one
collection or one attribute value (ranking and positives still over the whole base; compare methods
on the same subset only). *Inter-domain*: ``P1``, the
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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from rank_lab._validation import as_tensor, check_finite, check_int_tensor
from rank_lab.metrics import positive_positions

__all__ = [
    "multilabel_targets",
    "CrossDomainReport",
    "cross_domain_evaluate",
    "inter_domain_from_positions",
    "grouped_map",
]


def check_positions(
    positions: object, valid: object, p_name: str, v_name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, P)`` integer 1-based positions and a same-shape bool mask (shape / dtype only:
    cheap)."""
    pos = check_int_tensor(positions, p_name, 2)
    ok = as_tensor(valid, v_name)
    if ok.dtype != torch.bool:
        raise TypeError(f"{v_name} must be a bool mask, got dtype {ok.dtype}")
    if ok.shape != pos.shape:
        raise ValueError(
            f"{v_name} has shape {tuple(ok.shape)} but {p_name} has {tuple(pos.shape)}"
        )
    if bool((pos[ok] < 1).any()):
        raise ValueError(f"{p_name} must hold 1-based positions (>= 1) where {v_name} is True")
    return pos, ok


def noninterpolated_ap(positions: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    j = torch.arange(1, positions.shape[1] + 1, dtype=torch.float64)[None, :]
    return ((j / positions.to(torch.float64)) * valid).sum(1) / valid.sum(1).to(
        torch.float64
    ).clamp_min(1.0)


def multilabel_targets(query_labels: object, gallery_labels: object) -> torch.Tensor:
    """Positives ``(Q, N)``: the gallery item shares at least one class with the query.

    Labels are ``(n,)`` integers (single label), ``(n, C)`` multi-hot (bool or 0/1), or a list of
    iterables of class ids (multi-label sets).
    """

    def to_hot(lab: object, name: str, n_classes: int | None = None) -> torch.Tensor:
        if (
            isinstance(lab, (list, tuple))
            and lab
            and not isinstance(lab[0], (int, np.integer))
            and not torch.is_tensor(lab)
        ):
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
        raise ValueError(
            f"{name} must be (n,), (n, C) or a list of label sets, got shape {tuple(t.shape)}"
        )

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
    pos_all: torch.Tensor,
    valid_all: torch.Tensor,
    pos_cross: torch.Tensor,
    valid_cross: torch.Tensor,
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
    pos_all, valid_all = check_positions(pos_all, valid_all, "pos_all", "valid_all")
    pos_cross, valid_cross = check_positions(pos_cross, valid_cross, "pos_cross", "valid_cross")
    if pos_cross.shape[0] != pos_all.shape[0]:
        raise ValueError(
            f"pos_cross has {pos_cross.shape[0]} rows but pos_all has {pos_all.shape[0]}"
        )
    n_all = valid_all.sum(1).to(torch.float64)
    n_cross = valid_cross.sum(1).to(torch.float64)
    mean_all = (pos_all.to(torch.float64) * valid_all).sum(1) / n_all.clamp_min(1)
    mean_cross = (pos_cross.to(torch.float64) * valid_cross).sum(1) / n_cross.clamp_min(1)
    has = n_cross > 0
    p1 = torch.where(has, pos_cross[:, 0].to(torch.float64), torch.full_like(n_all, float("nan")))
    apd = torch.where(has, mean_cross - mean_all, torch.full_like(n_all, float("nan")))
    return p1, apd


def grouped_map(
    ap: torch.Tensor, groups: object, names: Mapping[int, str] | None = None
) -> dict[str, float]:
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
        raise ValueError(
            "ap must hold APs in [0, 1] (NaN for a query without positives), got inf or a value "
            "outside"
        )
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
    """The cross-source protocol of the Gominski thesis (§4.1.2): absolute, per-group and
    inter-domain.

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
    scores = as_tensor(scores, "scores").detach().cpu()
    positives = as_tensor(positives, "positives").detach().cpu().bool()
    if scores.ndim != 2 or positives.shape != scores.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and positives {tuple(positives.shape)} must both be (Q, "
            "N)"
        )
    if not scores.is_floating_point():
        scores = scores.double()
    check_finite(scores, "scores")
    n_q, n = scores.shape
    qd = as_tensor(query_domains, "query_domains").long().cpu()
    gd = as_tensor(gallery_domains, "gallery_domains").long().cpu()
    if qd.shape != (n_q,) or gd.shape != (n,):
        raise ValueError(
            f"query_domains must be ({n_q},) and gallery_domains ({n},), got {tuple(qd.shape)}, "
            f"{tuple(gd.shape)}"
        )
    ign = (
        torch.zeros_like(positives)
        if ignore is None
        else as_tensor(ignore, "ignore").bool().cpu().clone()
    )
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
        ap = noninterpolated_ap(pos_all, valid_all)
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
