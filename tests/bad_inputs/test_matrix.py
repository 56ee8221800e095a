"""The generated bad-input matrix (issue 16): every public callable, every derived bad variant.

Each variant must raise a ``ValueError``/``TypeError`` naming the argument, or return a result
documented as legal in its registry entry, and never a NaN (see :mod:`.framework`).
"""

from __future__ import annotations

import fnmatch

import pytest
import torch

from .framework import find_nan, run, variants, verdict
from .registry import ENTRIES, counts, public_callables


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_bad_inputs(entry):
    where = find_nan(run(entry))
    assert where is None, f"the valid call of {entry.name} returns a NaN ({where})"
    failures = [f"{v.id}: {msg}" for v in variants(entry) if (msg := verdict(entry, v)) is not None]
    assert not failures, f"{entry.name}:\n  " + "\n  ".join(failures)


def test_every_public_callable_has_an_entry():
    covered = {id(e.target) for e in ENTRIES}
    missing = sorted(n for i, (_, names) in public_callables().items() if i not in covered for n in names)
    assert not missing, f"public callables without a bad-input registry entry: {missing}"


def test_entries_are_public_and_unique():
    public = public_callables()
    ids = [id(e.target) for e in ENTRIES]
    assert len(ids) == len(set(ids)), "an entry is registered twice"
    stray = [e.name for e in ENTRIES if id(e.target) not in public]
    assert not stray, f"entries for names no sub-package exports: {stray}"


def test_every_legal_pattern_is_used():
    """A documented legal result must describe a variant that exists (no stale documentation)."""
    stale = []
    for e in ENTRIES:
        ids = [v.id for v in variants(e)]
        stale += [f"{e.name}: {p}" for p in e.legal if not any(fnmatch.fnmatchcase(i, p) for i in ids)]
    assert not stale, stale


def test_matrix_counts():
    c = counts()
    print(f"bad-input matrix: {c['callables']} public callables ({c['public_names']} public names), {c['variants']} variants")
    assert c["callables"] == len(public_callables())
    assert c["variants"] > 5 * c["callables"] // 2
