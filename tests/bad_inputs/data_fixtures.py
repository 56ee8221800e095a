"""Dataset folders for the matrix entries of the loaders: each written once per test session.

:func:`fixture` writes :func:`rank_lab.fixtures.write_fixture`'s tiny copy of a dataset (2
classes, 2 images of 8 pixels) into a session folder and caches the path; the loaders only read
it. :func:`scratch` gives a fresh empty folder for the writers' entries. Everything lives in one
temporary folder removed at exit.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

MISSING = "/nonexistent/rank_lab_bad_inputs/folder"  # the framework's missing path


@functools.cache
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="rank_lab_bad_inputs_"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@functools.cache
def fixture(name: str, per_class: int = 2) -> Path:
    """The folder of dataset ``name`` (a :func:`~rank_lab.fixtures.fixture_names` name)."""
    from rank_lab.fixtures import write_fixture

    return write_fixture(
        name, _root() / f"{name}_{per_class}", n_classes=2, per_class=per_class, size=8
    )


def scratch() -> Path:
    """A new empty folder (writers' entries write there)."""
    return Path(tempfile.mkdtemp(dir=_root()))
