"""The generated bad-input matrix (issue 16): every public callable, every derived bad variant.

Each variant must raise a ``ValueError``/``TypeError`` naming the argument, or return a result
documented as legal in its registry entry, and never a NaN (see :mod:`.framework`).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from .framework import (
    call_with_time_limit,
    find_nan,
    ledger_key,
    run,
    snapshot,
    variants,
    verdict,
)
from .registry import ENTRIES, counts, public_callables


def _known() -> set[str]:
    """The ledger of open defects: ``<entry> <variant>`` lines (``#`` comments), see
    docs/decisions.md."""
    lines = (Path(__file__).parent / "known_defects.txt").read_text().splitlines()
    return {ln.split("  #")[0].strip() for ln in lines if ln.strip() and not ln.startswith("#")}


KNOWN = _known()


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_bad_inputs(entry):
    valid = call_with_time_limit(lambda: run(entry))
    where = find_nan(valid)
    reference = snapshot(valid)
    del valid
    failures = {
        ledger_key(entry, v): msg
        for v in variants(entry)
        if (msg := verdict(entry, v, reference)) is not None
    }
    if where is not None:
        failures[f"{entry.name} valid:nan"] = f"the valid call returns a NaN ({where})"
    new = [f"{k}: {m}" for k, m in failures.items() if k not in KNOWN]
    assert not new, "bad-input defects:\n  " + "\n  ".join(new)
    fixed = sorted(k for k in KNOWN if k.split(" ")[0] == entry.name and k not in failures)
    assert not fixed, f"fixed: remove these lines from known_defects.txt: {fixed}"


def _pending() -> set[str]:
    """Public callables of module-level ``__all__`` lists still waiting for an entry
    (shrink-only)."""
    lines = (Path(__file__).parent / "pending_entries.txt").read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def test_every_public_callable_has_an_entry():
    covered = {id(e.target) for e in ENTRIES}
    pending = _pending()
    missing, done = [], []
    for i, (_, names) in public_callables().items():
        if i in covered:
            done += [n for n in names if n in pending]
        elif not any(n in pending for n in names):
            missing += names
    assert not missing, f"public callables without a bad-input registry entry: {sorted(missing)}"
    assert not done, f"now covered: remove these lines from pending_entries.txt: {sorted(done)}"
    known = {n for _, names in public_callables().values() for n in names}
    stale = sorted(pending - known)
    assert not stale, f"pending_entries.txt names no public callable: {stale}"


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
        stale += [
            f"{e.name}: {p}" for p in e.legal if not any(fnmatch.fnmatchcase(i, p) for i in ids)
        ]
    assert not stale, stale


def test_matrix_counts():
    c = counts()
    print(
        f"bad-input matrix: {c['callables']} public callables ({c['public_names']} public names), "
        f"{c['variants']} variants"
    )
    pending = {n for n in _pending()}
    uncovered = [
        i for i, (_, names) in public_callables().items() if any(n in pending for n in names)
    ]
    assert c["callables"] + len(uncovered) == len(public_callables())
    assert c["variants"] > 5 * c["callables"] // 2
