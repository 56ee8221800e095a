"""Fixtures shared by the tests of rank_lab.book."""

from __future__ import annotations

import pytest

from rank_lab.book import results


@pytest.fixture(autouse=True)
def _no_run_state():
    """start_run keeps the run of the process (one notebook per kernel); tests share a process."""
    results._RUN.clear()
    yield
    results._RUN.clear()
