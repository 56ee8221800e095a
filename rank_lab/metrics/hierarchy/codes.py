"""Hierarchical codes and the multi-label relevance of Algorithm 1 (Ramzi thesis §4.2.2.2).

A second representation of a label hierarchy, for trademark logos: each image carries a *set* of
hierarchical codes, root-to-leaf paths such as Vienna codes ``"01.01.05"`` (:func:`parse_code`).
Two codes are as close as their lowest common ancestor is deep (:func:`lca_distance`);
:func:`multilabel_relevance` (one pair of code sets) and :func:`multilabel_relevance_matrix`
(every query-item pair) give the relevance of Algorithm 1 of the thesis, a ``(Q, N)`` matrix that
:func:`rank_lab.metrics.hierarchy.metrics.h_average_precision` accepts. The ``(N, L)`` integer
label matrices and their relevance functions are in :mod:`rank_lab.metrics.hierarchy.relevance`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rank_lab._validation import check_positive_int

__all__ = ["parse_code", "lca_distance", "multilabel_relevance", "multilabel_relevance_matrix"]


def parse_code(code: str | Sequence[object]) -> tuple[str, ...]:
    """A hierarchical code as its root-to-leaf path: ``"01.03.05"`` -> ``("01", "03", "05")``.

    Sequences are taken as paths already (``(1, 3, 5)`` -> ``("1", "3", "5")``).
    """
    if isinstance(code, str):
        parts = tuple(p.strip() for p in code.strip().split("."))
    elif isinstance(code, Sequence):
        parts = tuple(str(p).strip() for p in code)
    else:
        raise TypeError(f"code must be a dotted string or a sequence, got {type(code).__name__}")
    if not parts or any(not p for p in parts):
        raise ValueError(f"code {code!r} is not a hierarchical code (empty level)")
    return parts


def lca_distance(
    a: str | Sequence[object], b: str | Sequence[object], n_levels: int | None = None
) -> int:
    """Tree distance to the lowest common ancestor, ``L - (common prefix length)`` (thesis
    §4.2.2.2).

    ``LCA(Lada#1, Lada#1) = 0``, ``LCA(Lada#1, Lada#2) = 1``, ``LCA(Lada#1, another car) = 2``.

    Args:
        a, b: root-to-leaf codes (:func:`parse_code`) of the same depth L.
        n_levels: L (default: the depth of the codes).
    """
    pa, pb = _parsed(a, "a"), _parsed(b, "b")
    depth = len(pa) if n_levels is None else check_positive_int(n_levels, "n_levels")
    _check_depth(pa, depth, "a")
    _check_depth(pb, depth, "b")
    return _lca(pa, pb, depth)


def _parsed(code: object, name: str) -> tuple[str, ...]:
    try:
        return parse_code(code)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc}") from None


def _check_depth(path: tuple[str, ...], depth: int, name: str) -> None:
    if len(path) != depth:
        raise ValueError(
            f"{name} = {'.'.join(path)!r} has {len(path)} levels but n_levels = {depth}"
        )


def _lca(pa: tuple[str, ...], pb: tuple[str, ...], depth: int) -> int:
    common = 0
    for x, y in zip(pa, pb, strict=True):
        if x != y:
            break
        common += 1
    return depth - common


def multilabel_relevance(
    query_codes: Sequence[str | Sequence[object]],
    item_codes: Sequence[str | Sequence[object]],
    n_levels: int,
) -> float:
    """Multi-label hierarchical relevance (Algorithm 1 of the Ramzi thesis, trademark logos).

    ``rel = sum_i (L - min_j LCA(y_q^i, y_k^j)) / (n L)`` over the n query labels: every query
    label earns the depth of its closest item label. 1 iff every query label has an exact match;
    0 iff no query label shares even the root level. (The thesis prints ``rel =.`` inside the loop;
    the text says the relevance "computes the sum", so the loop accumulates.)

    Args:
        query_codes: the query's codes (n >= 1).
        item_codes: the item's codes (m >= 1).
        n_levels: L, the depth of every code.

    Returns:
        A float in ``[0, 1]``.
    """
    return _multilabel(
        _code_set(query_codes, "query_codes"),
        _code_set(item_codes, "item_codes"),
        check_positive_int(n_levels, "n_levels"),
        "query_codes",
        "item_codes",
    )


def _code_set(codes: object, name: str) -> list[tuple[str, ...]]:
    """Parse a non-empty set of codes, naming ``name`` in every error."""
    if isinstance(codes, str) or not isinstance(codes, Sequence):
        raise TypeError(f"{name} must be a sequence of codes, got {type(codes).__name__}")
    if len(codes) == 0:
        raise ValueError(f"{name} is empty: each set must hold at least one code")
    return [_parsed(c, f"{name}[{i}]") for i, c in enumerate(codes)]


def _multilabel(
    qs: list[tuple[str, ...]], its: list[tuple[str, ...]], n_levels: int, name_q: str, name_i: str
) -> float:
    for path in qs:
        _check_depth(path, n_levels, name_q)
    for path in its:
        _check_depth(path, n_levels, name_i)
    total = 0.0
    for yq in qs:
        best = min(_lca(yq, yk, n_levels) for yk in its)
        total += (n_levels - best) / (len(qs) * n_levels)
    return total


def multilabel_relevance_matrix(
    query_sets: Sequence[Sequence[str | Sequence[object]]],
    item_sets: Sequence[Sequence[str | Sequence[object]]],
    n_levels: int,
) -> torch.Tensor:
    """Algorithm 1 for every (query, item) pair: ``(Q, N)`` float64 relevance.

    Args:
        query_sets: ``Q >= 1`` code sets (each non-empty).
        item_sets: ``N >= 1`` code sets (each non-empty).
        n_levels: L, the depth of every code.
    """
    n_levels = check_positive_int(n_levels, "n_levels")
    for sets, name in ((query_sets, "query_sets"), (item_sets, "item_sets")):
        if isinstance(sets, str) or not isinstance(sets, Sequence) or len(sets) == 0:
            raise ValueError(f"{name} must be a non-empty sequence of code sets")
    parsed_q = [_code_set(s, f"query_sets[{i}]") for i, s in enumerate(query_sets)]
    parsed_i = [_code_set(s, f"item_sets[{i}]") for i, s in enumerate(item_sets)]
    out = torch.zeros(len(parsed_q), len(parsed_i), dtype=torch.float64)
    for a, qs in enumerate(parsed_q):
        for b, its in enumerate(parsed_i):
            out[a, b] = _multilabel(qs, its, n_levels, f"query_sets[{a}]", f"item_sets[{b}]")
    return out
