"""The one object a route of the engine receives: what to evaluate, built once by
``retrieval_metrics``.

:func:`rank_lab.metrics.retrieval_metrics` checks every argument once, normalises the embeddings,
resolves the metrics in the registry (:mod:`rank_lab.metrics.engine.formulas.registry`) and hands a
frozen :class:`MetricsRequest` to a route; routes and kernels trust it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rank_lab.metrics.engine.formulas.registry import RetrievalMetric
from rank_lab.metrics.engine.search.index import IndexStage1

__all__: list[str] = []  # built by retrieval_metrics only


@dataclass(frozen=True)
class MetricsRequest:
    """A checked evaluation request (read-only).

    Attributes:
        queries: ``(Q, d)`` embeddings, normalised if asked, in the working precision (float32,
            float64 for float64 inputs), on ``device``.
        gallery: ``(N, d)``, the same object as ``queries`` when the queries are the gallery.
        labels: ``(Q, L)`` long labels on the CPU, fine level first (``L = 1`` for flat labels).
        gallery_labels: ``(N, L)``.
        exclude_self: query i is gallery item i and is left out of its own ranking.
        ks: sorted distinct cut-offs.
        metrics: the registered metrics asked for.
        n_pos: ``(Q,)`` long, relevant items (same fine label) of each query, self excluded.
        device: the compute device.
        precision: the ``precision=`` option (stage-1 format, resolved by the route).
        index: a flat index for stage 1 of the neighbour lists (``backend="faiss"`` or ``knn=``), or
            None.
        chunk_size: rows per block (None: from ``max_memory_mb``).
        max_memory_mb: memory budget of one block.
        progress: tqdm bars (None: by size).
        alpha: alpha of the H-AP relevance.
    """

    queries: torch.Tensor
    gallery: torch.Tensor
    labels: torch.Tensor
    gallery_labels: torch.Tensor
    exclude_self: bool
    ks: tuple[int, ...]
    metrics: tuple[RetrievalMetric, ...]
    n_pos: torch.Tensor
    device: torch.device
    precision: str
    index: IndexStage1 | None
    chunk_size: int | None
    max_memory_mb: float
    progress: bool | None
    alpha: float

    @property
    def same(self) -> bool:
        """Whether the queries are the gallery (one tensor)."""
        return self.queries is self.gallery

    @property
    def hierarchical(self) -> bool:
        """Whether a hierarchical metric is asked (the labels' levels matter)."""
        return any(m.family == "hierarchical" for m in self.metrics)

    @property
    def n_levels(self) -> int:
        """L, the number of label levels."""
        return int(self.labels.shape[1])

    @property
    def depths(self) -> set[str]:
        """The depths of the metrics asked
        (:class:`~rank_lab.metrics.engine.formulas.registry.RetrievalMetric`)."""
        return {m.depth for m in self.metrics}
