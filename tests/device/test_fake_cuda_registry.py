"""Every valid call of the bad-input registry on the fake CUDA device: CUDA would refuse none of
them.

The entries not judged are listed with their reason in ``not_judged.txt``; mismatches found in code
another engineer owns are listed in ``known_mismatches.txt``. Both lists only shrink.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_inputs.registry import ENTRIES

from .fake_cuda import DeviceMismatch
from .registry_run import listed, not_judged, run_on_fake_cuda

NOT_JUDGED = not_judged()
KNOWN_FILE = Path(__file__).parent / "known_mismatches.txt"
KNOWN = {
    ln.split("#")[0].strip(): ln.split("#", 1)[1].strip()
    for ln in KNOWN_FILE.read_text(encoding="utf-8").splitlines()
    if ln.strip() and not ln.startswith("#")
}
#: the entries run (a ``prefix*`` line of not_judged.txt leaves its module out, with its reason)
RUN = [
    e for e in ENTRIES if not any(k.endswith("*") and e.name.startswith(k[:-1]) for k in NOT_JUDGED)
]


@pytest.mark.parametrize("entry", RUN, ids=lambda e: e.name)
def test_valid_call_on_fake_cuda(entry) -> None:  # noqa: ANN001
    reason = listed(entry.name, NOT_JUDGED) or KNOWN.get(entry.name)
    if reason is None:
        run_on_fake_cuda(entry)  # raises DeviceMismatch where CUDA would refuse
        return
    expected = DeviceMismatch if entry.name in KNOWN else Exception
    try:
        run_on_fake_cuda(entry)
    except expected:
        return
    pytest.fail(
        f"{entry.name} now runs clean on the fake CUDA device: remove its line from "
        f"{'known_mismatches.txt' if entry.name in KNOWN else 'not_judged.txt'} ({reason})"
    )


def test_the_lists_name_registry_entries() -> None:
    names = {e.name for e in ENTRIES}
    stale = [
        k
        for k in [*NOT_JUDGED, *KNOWN]
        if not (k.endswith("*") and any(n.startswith(k[:-1]) for n in names)) and k not in names
    ]
    assert not stale, f"not_judged.txt / known_mismatches.txt name no registry entry: {stale}"
    assert all(reason for reason in [*NOT_JUDGED.values(), *KNOWN.values()]), (
        "every listed entry says why"
    )
    assert len(RUN) > 500  # the registry's valid calls, less the book's tooling
