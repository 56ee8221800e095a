"""A chapter's set-up in one line: the run, the seed, the device, the results and the recorded run.

The cell after a chapter's parameters cell is book plumbing, folded on the site (tag
``hide-cell``)::

    from rank_lab.book.chapter import setup

    run = setup(globals(), "evaluating_retrieval")
    dev, results, cost, rec = run.device, run.results, run.cost, run.record

:func:`setup` calls :func:`rank_lab.book.start_run` (the runner's checked parameters, or the
parameters cell's values when the notebook runs by hand), seeds every generator with the ``seed``
parameter, resolves the ``device`` parameter (``None``: CUDA when present), and loads the chapter's
recorded run (:func:`rank_lab.book.load_record`; a missing one is ``False``). It imports no
papermill, jupytext, nbformat or Sphinx: a Colab twin runs it with rank_lab alone.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rank_lab.utils import get_device, seed_everything

from .recorded import RecordedRun, load_record
from .results import start_run

__all__ = ["ChapterRun", "setup"]


@dataclass
class ChapterRun:
    """What a chapter's cells share.

    Attributes:
        name: the notebook's name.
        device: the resolved device.
        results: the figures the chapter saves (``save_results(results, ...)``), filled by its
            cells.
        cost: the timings it saves apart from the figures.
        record: the chapter's recorded run (``False`` when there is none).
    """

    name: str
    device: torch.device
    record: RecordedRun
    results: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)


def setup(namespace: MutableMapping[str, Any], name: str) -> ChapterRun:
    """Start a chapter's run: checked parameters, seeded generators, device, recorded run.

    Args:
        namespace: the notebook's ``globals()`` (its parameters cell has run).
        name: the notebook's name (its ``.md`` stem), for its recorded run.

    Returns:
        A :class:`ChapterRun` with empty ``results`` and ``cost``.

    Raises:
        TypeError: ``namespace`` not a mapping, ``name`` not a non-empty string.
        RuntimeError: see :func:`rank_lab.book.start_run` (the kernel's values differ from the
            runner's).
        NotebookNotFoundError: ``name`` names no notebook of the book (with the book's folder
            present).
    """
    if not isinstance(namespace, MutableMapping):
        raise TypeError(
            f"namespace must be the notebook's globals(), got {type(namespace).__name__}"
        )
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be the notebook's name, got {name!r}")
    start_run(namespace)
    if "seed" in namespace:
        seed_everything(namespace["seed"])
    device = get_device(namespace.get("device"))
    return ChapterRun(name=name, device=device, record=load_record(name))
