"""Retrieval evaluation of the :class:`~rank_lab.train.Trainer` (every test item queries the
others).

:class:`RetrievalEvaluation` embeds a dataset with the trainer's model
(:func:`~rank_lab.train.embed_dataset`) and computes :func:`rank_lab.metrics.retrieval_metrics` (R@k
and mAP@R by default, the tables of the
Ramzi thesis §3.5.1); the distributed trainer overrides :meth:`~RetrievalEvaluation.embed` and
:meth:`~RetrievalEvaluation._metrics` to shard both over its ranks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from rank_lab.metrics import retrieval_metrics
from rank_lab.train.data import as_dataset, embed_dataset

__all__: list[str] = []  # the trainer's base class: use rank_lab.train.Trainer


class RetrievalEvaluation:
    """The evaluation methods of :class:`~rank_lab.train.Trainer` (it provides ``model``,
    ``config``, ``device``, ``amp``, ``amp_dtype`` and ``test_data``)."""

    model: torch.nn.Module
    config: Any
    device: torch.device
    amp: bool
    amp_dtype: torch.dtype
    test_data: Any

    def embed(self, data: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings ``(N, d)`` (CPU, float32) and labels of ``data``."""
        return embed_dataset(
            self.model,
            data,
            batch_size=self.config.eval_batch_size,
            device=self.device,
            num_workers=self.config.num_workers,
            amp=self.amp,
            amp_dtype=self.amp_dtype,
        )

    def _check_eval_ks(self, n_items: int, name: str = "test_data") -> None:
        """Refuse ``eval_ks`` larger than the gallery (``n_items - 1``: each item queries the
        others).

        The one rule of :func:`rank_lab.metrics.retrieval_metrics` (``docs/decisions.md``), checked
        when the trainer is built so that a long run does not fail at its first evaluation.
        """
        too_big = sorted(k for k in self.config.eval_ks if k > n_items - 1)
        if too_big:
            raise ValueError(
                f"eval_ks holds k={too_big} but {name} has {n_items} items, so a query ranks only "
                f"{n_items - 1}; set eval_ks <= {n_items - 1} (e.g. eval_ks=(1, "
                f"{max(1, min(10, n_items - 1))}))"
            )

    def evaluate(self, data: Any = None) -> dict[str, float]:
        """Retrieval metrics of ``data`` (default: the test data): every item queries all others.

        Raises:
            ValueError: an ``eval_ks`` larger than the gallery (``N - 1``), as
                :func:`~rank_lab.metrics.retrieval_metrics` does (one rule, ``docs/decisions.md``).
        """
        name = "test_data" if data is None else "data"
        data = self.test_data if data is None else data
        if data is None:
            raise ValueError(
                "no evaluation data: pass test_data to the Trainer or data to evaluate()"
            )
        self._check_eval_ks(len(as_dataset(data, name)[1]), name)
        emb, labels = self.embed(data)
        t0 = time.perf_counter()
        res = self._metrics(emb, labels, self.config.eval_ks)
        res["eval_time"] = time.perf_counter() - t0
        return res

    def _metrics(
        self, emb: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]
    ) -> dict[str, float]:
        """:func:`rank_lab.metrics.retrieval_metrics` of ``emb (N, d)`` (every item queries the
        others)."""
        res = retrieval_metrics(
            emb, labels, ks=ks, metrics=self.config.eval_metrics, device=self.device
        )
        return {k: v for k, v in res.items() if k != "per_query"}
