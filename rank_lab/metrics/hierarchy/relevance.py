"""Label hierarchies and hierarchical relevance (Ramzi thesis §4.2.1, §4.2.2.2; SupRank §V-A).

**Representation.** A label hierarchy is an ``(N, L)`` integer matrix, one column per level,
ordered **fine to coarse** (column 0 = fine-grained id, column ``L - 1`` = coarsest group;
``docs/decisions.md``). SOP: (product, category), L = 2; iNat-full: (species ... kingdom), L = 7.

**Shared level.** For a query q and an item j, :func:`shared_level` gives the level
``l in {0, ..., L}`` of their lowest common ancestor, in the thesis' numbering: ``l = L`` same
fine label (set ``Omega^(L)``), ``l = 0`` nothing in common (``Omega^- = Omega^(0)``). It is the
number of label columns that match *contiguously from the coarsest one* (``mode="lca"``), which is
robust to ids reused under different parents; the official HAPPIER code counts matching columns
(``mode="count"``), which is the same for tree-consistent labels. The level sets of a query
(``|Omega^(l)|``, thesis §4.2.1) are counted by :func:`level_counts`.

**Relevance functions** (all per query, from the levels; items outside the retrieval set get 0):

* :func:`hap_relevance` -- Eq. 4.7 of the thesis (SupRank Eq. 20): ``rel(k) = (l/L)^alpha /
  |Omega^(l)|``, alpha = 1 for the H-AP metric and HAPPIER, 5 (SOP) / 3 (iNat) for HAPPIER_F.
  ``normalize=False`` gives the un-normalised toy relevances ``(l/L)^alpha`` of Figs. 4.3-4.5.
* :func:`weighted_ap_relevance` -- the relevance of Property 1 (Eq. 4.9, index typo fixed as in
  SupRank Eq. 58): ``rel(k) = sum_{p<=l} w_p / |Omega^{+,p}|``, ``Omega^{+,p} = U_{q>=p} Omega^(q)``;
  with it H-AP equals ``sum_l w_l AP^(l)``.
* :func:`ndcg_gains` -- ``2^l - 1`` (thesis §4.2.4).
* :func:`binary_level_relevance` -- ``1[l = L]`` (H-AP then equals AP).

**Multi-label relevance** (Algorithm 1 of the thesis, trademark logos, a second representation):
each image carries a *set* of hierarchical codes; see :mod:`rank_lab.metrics.hierarchy.codes`.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from rank_lab._validation import (
    as_tensor,
    check_finite,
    check_float,
    check_labels,
    check_nonneg_int,
    check_positive_int,
)

__all__ = [
    "as_hierarchical_labels",
    "hierarchy_table",
    "shared_level",
    "check_levels",
    "level_weights",
    "level_counts",
    "level_set",
    "relevance_table",
    "level_relevance",
    "hap_relevance",
    "weighted_ap_relevance",
    "ndcg_gains",
    "binary_level_relevance",
]

LevelMode = Literal["lca", "count"]
RelevanceKind = Literal["hap", "weighted_ap", "ndcg", "binary"]


def as_hierarchical_labels(
    labels: object, n: int | None = None, name: str = "labels"
) -> torch.Tensor:
    """Check integer labels and return them as ``(N, L)`` (a ``(N,)`` vector becomes ``(N, 1)``)."""
    y = check_labels(labels, n, name)
    return y[:, None] if y.ndim == 1 else y


def hierarchy_table(labels: torch.Tensor) -> torch.Tensor:
    """The label path of every fine class, ``(C, L)`` sorted by fine id (one row per fine class).

    Args:
        labels: ``(N, L)`` hierarchical labels (fine first).

    Returns:
        ``(C, L)`` long: row c is the (fine, parent, ..., root) path of the c-th smallest fine id.

    Raises:
        ValueError: a fine id appears with two different paths (labels are not a tree).
    """
    y = as_hierarchical_labels(labels)
    rows = torch.unique(y, dim=0)
    if torch.unique(rows[:, 0]).numel() != rows.shape[0]:
        fine, counts = torch.unique(rows[:, 0], return_counts=True)
        bad = fine[counts > 1][:3].tolist()
        raise ValueError(f"labels are not a tree: fine ids {bad} appear with several parent paths")
    return rows[torch.argsort(rows[:, 0])]


def shared_level(
    labels: torch.Tensor, ref_labels: torch.Tensor, *, mode: LevelMode = "lca"
) -> torch.Tensor:
    """Level of the lowest common ancestor of each (query, item) pair (thesis §4.2.1).

    Args:
        labels: ``(Q, L)`` query labels, fine first (``(Q,)`` is L = 1).
        ref_labels: ``(N, L)`` retrieval-set labels.
        mode: ``"lca"`` (default): number of columns that match contiguously from the coarsest
            one, the depth of the lowest common ancestor; ``"count"``: number of matching columns
            (official HAPPIER ``create_label_matrix``); equal for tree-consistent labels.

    Returns:
        ``(Q, N)`` long in ``[0, L]``: ``L`` = same fine label, ``0`` = nothing shared.
    """
    a = as_hierarchical_labels(labels, name="labels")
    b = as_hierarchical_labels(ref_labels, name="ref_labels").to(a.device)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"labels have {a.shape[1]} levels but ref_labels have {b.shape[1]}")
    if mode not in ("lca", "count"):
        raise ValueError(f"mode must be 'lca' or 'count', got {mode!r}")
    out = torch.zeros(a.shape[0], b.shape[0], dtype=torch.long, device=a.device)
    match = torch.ones(a.shape[0], b.shape[0], dtype=torch.bool, device=a.device)
    for col in range(a.shape[1] - 1, -1, -1):  # coarsest first
        eq = a[:, col, None] == b[None, :, col]
        match = match & eq if mode == "lca" else eq
        out += match
    return out


def _int_levels(levels: object) -> torch.Tensor:
    """``(Q, N)`` long shared levels ``>= 0`` (a ``(N,)`` vector is one query), or raise naming
    ``levels``."""
    lv = as_tensor(levels, "levels")
    if lv.ndim == 1:
        lv = lv[None]
    if lv.ndim != 2:
        raise ValueError(f"levels must have shape (Q, N), got {tuple(lv.shape)}")
    if lv.is_floating_point() or lv.is_complex() or lv.dtype == torch.bool:
        raise TypeError(f"levels must hold integers, got dtype {lv.dtype}")
    if lv.numel() == 0:
        raise ValueError(f"levels is empty (shape {tuple(lv.shape)})")
    lv = lv.long()
    if int(lv.min()) < 0:
        raise ValueError(f"levels must be >= 0, got {int(lv.min())}")
    return lv


def _valid_mask(valid: object, lv: torch.Tensor) -> torch.Tensor:
    """The ``(Q, N)`` bool retrieval-set mask (all True for None), same shape as ``levels``."""
    if valid is None:
        return torch.ones_like(lv, dtype=torch.bool)
    v = as_tensor(valid, "valid").to(lv.device)
    if v.ndim == 1:
        v = v[None]
    if v.shape != lv.shape:
        raise ValueError(f"valid has shape {tuple(v.shape)} but levels has {tuple(lv.shape)}")
    return v.bool()


def check_levels(
    levels: object, n_levels: int, valid: object = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check ``(Q, N)`` shared levels in ``[0, L]`` (a ``(N,)`` vector is one query) and a retrieval
    mask.

    Args:
        levels: non-empty integer levels.
        n_levels: L (a positive int).
        valid: ``(Q, N)`` bool retrieval-set mask, or None (every item).

    Returns:
        ``(levels long (Q, N), valid bool (Q, N))``.

    Raises:
        ValueError / TypeError: naming the argument.
    """
    lv = _int_levels(levels)
    n_levels = check_positive_int(n_levels, "n_levels")
    if int(lv.max()) > n_levels:
        raise ValueError(
            f"levels must lie in [0, n_levels={n_levels}], got range [{int(lv.min())}, "
            f"{int(lv.max())}]"
        )
    return lv, _valid_mask(valid, lv)


def level_counts(
    levels: torch.Tensor, n_levels: int, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """``|Omega^(l)|`` for every query and level, ``(Q, L + 1)`` long (column l = level l).

    Args:
        levels: ``(Q, N)`` integer shared levels in ``[0, L]`` (:func:`shared_level`); a ``(N,)``
            vector is one query.
        n_levels: L.
        valid: ``(Q, N)`` bool retrieval-set mask (the query's own column excluded), or None.
    """
    lv, v = check_levels(levels, n_levels, valid)
    return level_counts_trusted(lv, n_levels, v)


def level_counts_trusted(levels: torch.Tensor, n_levels: int, valid: torch.Tensor) -> torch.Tensor:
    """:func:`level_counts` without the checks (no host sync): ``levels`` ``(Q, N)`` long in
    ``[0, n_levels]``, ``valid`` ``(Q, N)`` bool on the same device, ``n_levels`` a positive int
    (the losses' inner call)."""
    return torch.stack([((levels == lev) & valid).sum(1) for lev in range(n_levels + 1)], dim=1)


def level_set(levels: torch.Tensor, level: int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Membership mask of ``Omega^(level)``, ``(Q, N)`` bool (thesis §4.2.1).

    Args:
        levels: ``(Q, N)`` shared levels ``>= 0`` (a ``(N,)`` vector is one query).
        level: ``l >= 0``.
        valid: ``(Q, N)`` bool retrieval-set mask, or None.
    """
    lv = _int_levels(levels)
    level = check_nonneg_int(level, "level")
    return (lv == level) & _valid_mask(valid, lv)


def level_weights(weights: object, n_levels: int) -> torch.Tensor:
    """Check the weights ``w_1..w_L`` of Property 1 (finite, > 0, summing to 1); ``(L,)``
    float64."""
    n_levels = check_positive_int(n_levels, "n_levels")
    w = as_tensor(weights, "weights", torch.float64)
    if w.ndim > 1:
        raise ValueError(f"weights must have shape (L,), got {tuple(w.shape)}")
    w = w.reshape(-1)
    if w.numel() != n_levels:
        raise ValueError(
            f"weights must hold one weight per level 1..L ({n_levels}), got {w.numel()}"
        )
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError("weights must be finite and > 0 (Property 1)")
    if abs(float(w.sum()) - 1.0) > 1e-6:
        raise ValueError(f"weights must sum to 1 (Property 1), got {float(w.sum()):.6f}")
    return w


def relevance_table(
    counts: torch.Tensor,
    n_levels: int,
    kind: RelevanceKind = "hap",
    *,
    alpha: float = 1.0,
    weights: Sequence[float] | torch.Tensor | None = None,
    normalize: bool = True,
) -> torch.Tensor:
    """Relevance of one item of each level, per query: ``(Q, L + 1)`` float64 (column 0 is 0).

    The relevance functions of the thesis depend on the level of an item and on the query's level
    counts only, so ``rel[q, j] = table[q, level[q, j]]``.

    Args:
        counts: ``(Q, L + 1)`` level-set sizes (:func:`level_counts`).
        n_levels: L.
        kind: ``"hap"`` (Eq. 4.7), ``"weighted_ap"`` (Property 1), ``"ndcg"`` (``2^l - 1``) or
            ``"binary"`` (``1[l = L]``).
        alpha: decay of Eq. 4.7 (> 0).
        weights: ``w_1..w_L`` for ``"weighted_ap"`` (positive, sum 1; ``w_l`` weighs ``AP^(l)``).
        normalize: Eq. 4.7's division by ``|Omega^(l)|`` (False: the toy relevances of Fig. 4.4).
    """
    n_levels = check_positive_int(n_levels, "n_levels")
    c = as_tensor(counts, "counts").to(torch.float64)
    if c.ndim != 2 or c.shape[1] != n_levels + 1 or c.shape[0] == 0:
        raise ValueError(
            f"counts must have shape (Q, {n_levels + 1}) with Q > 0 (n_levels={n_levels}), got "
            f"{tuple(c.shape)}"
        )
    check_finite(c, "counts")
    if bool((c < 0).any()):
        raise ValueError("counts must be >= 0 (level-set sizes)")
    if kind == "hap":
        alpha = check_float(alpha, "alpha", low=0.0, low_open=True)
    elif kind == "weighted_ap":
        if weights is None:
            raise ValueError("kind='weighted_ap' needs weights w_1..w_L")
        weights = level_weights(weights, n_levels)
    elif kind not in ("ndcg", "binary"):
        raise ValueError(f"kind must be 'hap', 'weighted_ap', 'ndcg' or 'binary', got {kind!r}")
    return relevance_table_trusted(
        c,
        n_levels,
        kind,
        alpha=float(alpha) if kind == "hap" else 1.0,
        weights=weights,  # type: ignore[arg-type]
        normalize=normalize,
    )


def relevance_table_trusted(
    counts: torch.Tensor,
    n_levels: int,
    kind: RelevanceKind = "hap",
    *,
    alpha: float = 1.0,
    weights: torch.Tensor | None = None,
    normalize: bool = True,
) -> torch.Tensor:
    """:func:`relevance_table` without the checks (no host sync; the losses' inner call).

    ``counts`` ``(Q, L + 1)`` level-set sizes ``>= 0`` (:func:`level_counts_trusted`), ``n_levels``
    a positive int, ``kind`` one of the four kinds, ``alpha > 0``, ``weights`` the checked ``(L,)``
    float64 weights of :func:`level_weights` for ``"weighted_ap"``.
    """
    c = counts.to(torch.float64)
    lev = torch.arange(n_levels + 1, dtype=torch.float64, device=c.device)
    if kind == "hap":
        total = (lev / n_levels) ** float(alpha)
        table = total.expand_as(c).clone()
        if normalize:
            table = torch.where(c > 0, table / c.clamp(min=1), torch.zeros_like(table))
    elif kind == "weighted_ap":
        if weights is None:
            raise ValueError("kind='weighted_ap' needs weights w_1..w_L")
        w = weights.to(device=c.device, dtype=torch.float64)
        above = c.flip(1).cumsum(1).flip(1)[:, 1:]  # |Omega^{+,p}| for p = 1..L
        terms = torch.where(above > 0, w / above.clamp(min=1), torch.zeros_like(above))
        table = torch.cat([torch.zeros_like(c[:, :1]), terms.cumsum(1)], dim=1)
    elif kind == "ndcg":
        table = (2.0**lev - 1.0).expand_as(c).clone()
    elif kind == "binary":
        table = (lev == n_levels).to(torch.float64).expand_as(c).clone()
    else:
        raise ValueError(f"kind must be 'hap', 'weighted_ap', 'ndcg' or 'binary', got {kind!r}")
    table[:, 0] = 0.0
    return table


def level_relevance(
    levels: torch.Tensor,
    n_levels: int,
    kind: RelevanceKind = "hap",
    *,
    alpha: float = 1.0,
    weights: Sequence[float] | torch.Tensor | None = None,
    normalize: bool = True,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Relevance ``(Q, N)`` float64 of every item from its shared level (see
    :func:`relevance_table`).

    ``levels`` are ``(Q, N)`` integers in ``[0, n_levels]`` (a ``(N,)`` vector is one query). Level
    sets are counted over the valid items only; invalid items get relevance 0.
    """
    lv, v = check_levels(levels, n_levels, valid)
    table = relevance_table(
        level_counts(lv, n_levels, v),
        n_levels,
        kind,
        alpha=alpha,
        weights=weights,
        normalize=normalize,
    )
    return torch.where(v, table.gather(1, lv), torch.zeros_like(table.gather(1, lv)))


def hap_relevance(
    levels: torch.Tensor,
    n_levels: int,
    alpha: float = 1.0,
    *,
    valid: torch.Tensor | None = None,
    normalize: bool = True,
) -> torch.Tensor:
    """H-AP relevance ``(l/L)^alpha / |Omega^(l)|`` (Eq. 4.7 of the Ramzi thesis; SupRank Eq. 20).

    Args:
        levels: ``(Q, N)`` integer shared levels (a ``(N,)`` vector is one query).
        n_levels: L.
        alpha: decay (1: metric and HAPPIER; 5 SOP / 3 iNat: HAPPIER_F).
        valid: retrieval-set mask (level sets are counted over it).
        normalize: divide by ``|Omega^(l)|`` (False: the toy relevances 1, 2/3, 1/3 of Fig. 4.4).

    Returns:
        ``(Q, N)`` float64; level-0 and invalid items get 0. H-AP is invariant to a global scale
        of the relevance, so the official code's ``(x / (levels - 1))^alpha`` gives the same metric.
    """
    return level_relevance(levels, n_levels, "hap", alpha=alpha, normalize=normalize, valid=valid)


def weighted_ap_relevance(
    levels: torch.Tensor,
    n_levels: int,
    weights: Sequence[float] | torch.Tensor,
    *,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Relevance of Property 1, ``sum_{p<=l} w_p / |Omega^{+,p}|`` (Eq. 4.9 / SupRank Eq. 58),
    ``(Q, N)``.

    With it, :func:`rank_lab.metrics.hierarchy.metrics.h_average_precision` equals
    ``sum_l w_l AP^(l)`` (:func:`rank_lab.metrics.hierarchy.metrics.weighted_sum_ap`).
    """
    return level_relevance(levels, n_levels, "weighted_ap", weights=weights, valid=valid)


def ndcg_gains(levels: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Hierarchical NDCG gains ``2^l - 1`` (thesis §4.2.4), ``(Q, N)`` float64 (0 where invalid).

    Args:
        levels: ``(Q, N)`` integer shared levels ``>= 0`` (a ``(N,)`` vector is one query).
        valid: ``(Q, N)`` bool retrieval-set mask, or None.
    """
    lv = _int_levels(levels)
    g = 2.0 ** lv.to(torch.float64) - 1.0
    return torch.where(_valid_mask(valid, lv), g, torch.zeros_like(g))


def binary_level_relevance(levels: torch.Tensor, n_levels: int) -> torch.Tensor:
    """Binary relevance ``1[l = L]`` (same fine label), ``(Q, N)`` float64.

    Args:
        levels: ``(Q, N)`` integer shared levels in ``[0, n_levels]``.
        n_levels: L.
    """
    lv, _ = check_levels(levels, n_levels)
    return (lv == n_levels).to(torch.float64)
