"""Shared pytest configuration."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
# CI runs `pytest -n 2` on 2 cores: one intra-op thread per worker avoids oversubscription, which
# makes the small tensors of the unit tests about 10x slower.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Notebook tests are the slowest: schedule them first so xdist balances the run."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("notebook") else 1)
