"""Shared pytest configuration."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Notebook tests are the slowest: schedule them first so xdist balances the run."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("notebook") else 1)
