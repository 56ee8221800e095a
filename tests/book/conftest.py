"""Fixtures shared by the tests of rank_lab.book."""

from __future__ import annotations

import pytest

from rank_lab.book import results
from rank_lab.engine import run_report
from rank_lab.engine.fingerprint import set_code_context


def _reset() -> None:
    results._RUN.clear()
    run_report.start_fresh(False)
    run_report.reset_training_report()
    set_code_context(None)


@pytest.fixture(autouse=True)
def _no_run_state():
    """start_run keeps the run of the process (one notebook per kernel, its training report, fresh
    mode and code context); tests share a process."""
    _reset()
    yield
    _reset()
