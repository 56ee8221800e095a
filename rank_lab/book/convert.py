"""Bring a committed record up to date without re-running it: bounds for bounded metrics.

A record made before :func:`rank_lab.stats.ci_summary` took ``bounds`` holds Student-t intervals
of accuracies, APs or recalls that may leave ``[0, 100]``. The interval with bounds is the same
t-interval intersected with the range, so it follows from the stored ``lo`` and ``hi`` alone::

    python -m rank_lab.book.convert bounds evaluating_retrieval "metric_agreement/summary/*/*" 0 100

rewrites the record (atomically, checked) with ``bounds`` added to every summary whose path
matches the pattern (``fnmatch``; paths as in :func:`rank_lab.book.readings.effects`) and its
interval clipped. Paired differences are never touched (they stay t-intervals). The lead
re-records every chapter eventually; this keeps the committed records valid meanwhile.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rank_lab._validation import check_float

from .readings import EFFECT_KEYS
from .record import check_record, record_path, write_record
from .recorded import load_record

__all__ = ["bound_summaries", "main"]


def bound_summaries(
    record: Mapping[str, Any], pattern: str, bounds: tuple[float, float]
) -> tuple[dict[str, Any], int]:
    """A copy of ``record`` whose summaries matching ``pattern`` carry ``bounds``, clipped; and
    their count.

    Args:
        record: a record (:func:`rank_lab.book.record.check_record`).
        pattern: ``fnmatch`` pattern over the summaries' paths inside ``results`` (``a/b/c``).
        bounds: ``(low, high)`` of the metric.

    Raises:
        ValueError: ``bounds`` with low >= high, a matched summary whose mean lies outside them, or
            a pattern that matches no summary.
        TypeError: ``record`` not a mapping.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be an fnmatch pattern (a string), got {pattern!r}")
    if isinstance(bounds, str) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise TypeError(f"bounds must be a pair (low, high), got {bounds!r}")
    # a fresh tree: no object shared by two paths
    rec = json.loads(json.dumps(check_record(record)))
    low = check_float(bounds[0], "bounds[0]")
    high = check_float(bounds[1], "bounds[1]")
    if not low < high:
        raise ValueError(f"bounds must satisfy low < high, got {bounds!r}")
    count = 0

    def walk(node: Any, path: str) -> None:
        nonlocal count
        if isinstance(node, dict):
            if {"mean", "lo", "hi", "n"} <= set(node) and not EFFECT_KEYS <= set(node):
                if fnmatch.fnmatchcase(path, pattern):
                    if not low <= node["mean"] <= high:
                        raise ValueError(
                            f"{path}: mean {node['mean']} lies outside bounds {[low, high]}"
                        )
                    node.update(
                        lo=max(node["lo"], low), hi=min(node["hi"], high), bounds=[low, high]
                    )
                    count += 1
                return
            for k, v in node.items():
                walk(v, f"{path}/{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}/{i}")

    walk(rec["results"], "")
    if count == 0:
        raise ValueError(f"pattern {pattern!r} matches no summary of the record")
    return check_record(rec), count


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rank_lab.book.convert bounds NAME PATTERN LOW HIGH``; exit 0 when written, 2 on
    an error."""
    args = list(argv if argv is not None else sys.argv[1:])
    if len(args) != 5 or args[0] != "bounds":
        print(
            "usage: python -m rank_lab.book.convert bounds NAME PATTERN LOW HIGH", file=sys.stderr
        )
        return 2
    _, name, pattern, low, high = args
    try:
        run = load_record(name)
        if not run:
            raise ValueError(f"{name} has no record")
        new, count = bound_summaries(run.document, pattern, (float(low), float(high)))
        path = write_record(new, record_path(name))
    except (TypeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: bounds {[float(low), float(high)]} on {count} summaries")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
