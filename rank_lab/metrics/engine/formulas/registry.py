"""The metrics of :func:`rank_lab.metrics.retrieval_metrics`: one registry, one entry per metric.

A metric is a :class:`RetrievalMetric`: its name, its family (``"binary"``: relevant = same fine
label, computed from :class:`~rank_lab.metrics.engine.formulas.positions.BinaryPositions`;
``"hierarchical"``: from :class:`~rank_lab.metrics.engine.formulas.positions.LevelPositions`), how
deep down the ranking it looks (``depth``, which decides the routes that can serve it) and the
function that computes its per-query values. Adding a metric to the engine is one call::

    from rank_lab.metrics import RetrievalMetric, register_metric, retrieval_metrics

    def r_precision(p, ks):  # R-precision: relevant items among the first R, over R
        return {"RP": (p.valid & (p.pos <= p.n_pos[:, None])).sum(1).double() / p.r}

    register_metric(RetrievalMetric("RP", family="binary", depth="R", compute=r_precision))
    retrieval_metrics(embeddings, labels, metrics=("RP",))   # {"RP": ..., "n_queries": ...}

Every route produces the same positions, so a registered metric gets bit-identical values from
every route. The built-in metrics are registered below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from rank_lab._validation import check_choice
from rank_lab.metrics.engine.formulas import binary, levels
from rank_lab.registry import Registry

__all__ = [
    "RetrievalMetric",
    "METRICS",
    "register_metric",
    "unregister_metric",
    "get_metric",
    "list_metrics",
]

Family = Literal["binary", "hierarchical"]
Depth = Literal["cutoff", "k", "R", "first", "all"]
Compute = Callable[[Any, tuple[int, ...]], dict[str, torch.Tensor]]
Reduce = Callable[
    [dict[str, torch.Tensor], torch.Tensor, tuple[int, ...]],
    tuple[dict[str, float], dict[str, torch.Tensor]],
]


@dataclass(frozen=True)
class RetrievalMetric:
    """One metric of the engine.

    Attributes:
        name: the name asked for in ``retrieval_metrics(metrics=...)`` (e.g. ``"R@k"``); the keys
            it returns may differ (``"R@1"``, ``"R@10"``).
        family: ``"binary"`` (a function of ``BinaryPositions``) or ``"hierarchical"`` (of
            ``LevelPositions``; the labels' levels matter).
        depth: how far down each query's ranking the metric reads: ``"cutoff"`` (only whether each
            relevant item lies within each cut-off k: R@k, P@k, TR@k), ``"k"`` (the exact positions
            of the first ``max(ks)``), ``"R"`` (of the first R, the number of relevant items),
            ``"first"`` (the position of the first relevant item, however deep), ``"all"`` (every
            relevant item).
            Neighbour lists serve all but ``"all"``; the counting route serves all, resolving only
            the positions a depth needs.
        compute: ``compute(positions, ks) -> {key: (c,) float64}`` per query.
        reduce: how the per-query values become the reported figures (default: the mean over the
            queries with a relevant item); ``reduce(per_query, keep, ks) -> (figures, per_query)``.
    """

    name: str
    family: Family
    depth: Depth
    compute: Compute
    reduce: Reduce | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty str, got {self.name!r}")
        if self.family not in ("binary", "hierarchical"):
            raise ValueError(f"family must be 'binary' or 'hierarchical', got {self.family!r}")
        if self.depth not in ("cutoff", "k", "R", "first", "all"):
            raise ValueError(
                f"depth must be 'cutoff', 'k', 'R', 'first' or 'all', got {self.depth!r}"
            )
        if not callable(self.compute):
            raise TypeError(f"compute must be callable, got {type(self.compute).__name__}")
        if self.reduce is not None and not callable(self.reduce):
            raise TypeError(f"reduce must be callable or None, got {type(self.reduce).__name__}")


#: the engine's metrics (:class:`rank_lab.registry.Registry`, the package's one registry type): the
#: entry's ``info`` holds the metric's ``family`` and ``depth``; names are case-insensitive.
METRICS: Registry[RetrievalMetric] = Registry("retrieval metric")


def register_metric(metric: RetrievalMetric, *, replace: bool = False) -> RetrievalMetric:
    """Add ``metric`` to the engine (module docstring), in :data:`METRICS`.

    Args:
        metric: a :class:`RetrievalMetric`.
        replace: allow replacing a registered metric of the same name.

    Returns:
        ``metric``.

    Raises:
        TypeError: ``metric`` is not a :class:`RetrievalMetric`.
        ValueError: the name is taken (and ``replace`` is false).
    """
    if not isinstance(metric, RetrievalMetric):
        raise TypeError(f"metric must be a RetrievalMetric, got {type(metric).__name__}")
    if metric.name in METRICS:
        if not replace:
            raise ValueError(
                f"a metric named {metric.name!r} is registered already (pass replace=True)"
            )
        METRICS.unregister(metric.name)
    doc = (getattr(metric.compute, "__doc__", None) or "").strip().splitlines()
    return METRICS.register(
        metric.name,
        metric,
        family=metric.family,
        depth=metric.depth,
        summary=doc[0] if doc else metric.name,
    )


def unregister_metric(name: str) -> None:
    """Remove a registered metric (``ValueError`` naming it when unknown)."""
    METRICS.unregister(name)


def get_metric(name: str) -> RetrievalMetric:
    """The registered metric called ``name`` (case-insensitive; ``ValueError`` listing the names
    when unknown)."""
    return METRICS[name]


def list_metrics(filter: str = "", *, family: Family | None = None) -> list[str]:
    """The registered metric names, sorted (:meth:`rank_lab.registry.Registry.list`).

    Args:
        filter: an ``fnmatch`` pattern (``"*ap*"``; case-insensitive); ``""`` = all.
        family: ``"binary"`` or ``"hierarchical"`` only; ``None``: both.

    Returns:
        The metrics' own spellings (``"mAP@R"``, ``"R@k"``), as ``retrieval_metrics(metrics=...)``
        takes them.
    """
    if family is not None:
        family = check_choice(family, "family", ("binary", "hierarchical"))
    return [METRICS[n].name for n in METRICS.list(filter, family=family)]


for _metric in (
    RetrievalMetric("R@k", "binary", "cutoff", binary.recall_rate),
    RetrievalMetric("P@k", "binary", "cutoff", binary.precision_at),
    RetrievalMetric("TR@k", "binary", "cutoff", binary.true_recall),
    RetrievalMetric("AP@k", "binary", "k", binary.ap_at),
    RetrievalMetric("mAP@R", "binary", "R", binary.map_at_r),
    RetrievalMetric("MRR", "binary", "first", binary.reciprocal_rank),
    RetrievalMetric("mAP", "binary", "all", binary.mean_ap),
    RetrievalMetric("NDCG", "binary", "all", binary.ndcg),
    RetrievalMetric("H-AP", "hierarchical", "all", levels.h_ap),
    RetrievalMetric("ASI", "hierarchical", "all", levels.asi),
    RetrievalMetric("NDCG-h", "hierarchical", "all", levels.ndcg_h),
    RetrievalMetric("AP@level", "hierarchical", "all", levels.ap_per_level),
    RetrievalMetric("H-R@k", "hierarchical", "all", levels.h_recall),
    RetrievalMetric("MS@k", "hierarchical", "all", levels.mistakes, levels.reduce_mistakes),
):
    register_metric(_metric)
