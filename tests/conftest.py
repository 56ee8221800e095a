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
    """The slowest tests first (the Colab simulation, then notebook and real-data runs) so xdist
    balances the run."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("colab"):
            return 0
        return (
            1 if item.get_closest_marker("notebook") or item.get_closest_marker("realdata") else 2
        )

    items.sort(key=rank)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    """Print the bad-input matrix's counts when its tests ran (issue 16; numbers in
    docs/decisions.md)."""
    ran = any(
        "bad_inputs/test_matrix.py" in getattr(r, "nodeid", "")
        for reports in terminalreporter.stats.values()
        for r in reports
    )
    if not ran:
        return

    from bad_inputs.registry import ENTRIES, counts
    from bad_inputs.test_matrix import KNOWN

    c = counts()
    n_entries = len(ENTRIES)
    terminalreporter.write_line(
        f"bad-input matrix: {c['callables']} public callables ({c['public_names']} public names, "
        f"{n_entries} entries), {c['variants']} variants run, {len(KNOWN)} open defects in "
        "tests/bad_inputs/known_defects.txt"
    )
