"""The registry of the bad-input matrix: every public callable of the sub-packages' ``__all__``.

Each ``entries_<subpackage>.py`` module lists one :class:`~.framework.Entry` per public callable
(a small valid call, the roles of its arguments, and the documented legal results);
``test_matrix.py`` derives the bad variants and checks every verdict. A public name without an
entry fails ``test_every_public_callable_has_an_entry``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from . import (
    entries_apparatus,
    entries_book,
    entries_data,
    entries_fewshot,
    entries_learned,
    entries_losses,
    entries_metrics,
    entries_misc,
    entries_models,
    entries_ood,
    entries_ranking,
    entries_retrieval,
    entries_train,
)
from .framework import Entry, variants

SUBPACKAGES = (
    "rank_lab.metrics",
    "rank_lab.data",
    "rank_lab.data.datasets",
    "rank_lab.ranking",
    "rank_lab.losses",
    "rank_lab.train",
    "rank_lab.models",
    "rank_lab.retrieval",
    "rank_lab.fewshot",
    "rank_lab.ood",
    "rank_lab.learned",
    "rank_lab.memory",
    "rank_lab.utils",
    "rank_lab.book",
)
EXCLUDED: tuple[str, ...] = ()

ENTRIES: list[Entry] = [
    *entries_metrics.ENTRIES,
    *entries_data.ENTRIES,
    *entries_ranking.ENTRIES,
    *entries_losses.ENTRIES,
    *entries_train.ENTRIES,
    *entries_models.ENTRIES,
    *entries_retrieval.ENTRIES,
    *entries_fewshot.ENTRIES,
    *entries_ood.ENTRIES,
    *entries_learned.ENTRIES,
    *entries_misc.ENTRIES,
    *entries_book.ENTRIES,
    *entries_apparatus.ENTRIES,
]


def _public_modules() -> list[str]:
    """The sub-packages above plus every public module below them (no ``_`` in the dotted name)."""
    names = list(SUBPACKAGES)
    import rank_lab

    for info in pkgutil.walk_packages(rank_lab.__path__, "rank_lab."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or info.name.startswith(EXCLUDED):
            continue
        names.append(info.name)
    return sorted(set(names))


def public_callables() -> dict[int, tuple[Any, list[str]]]:
    """``id(obj) -> (obj, [qualified public names])`` of every function and class in the ``__all__``
    lists of the sub-packages and of their public modules."""
    out: dict[int, tuple[Any, list[str]]] = {}
    for pkg in _public_modules():
        mod = importlib.import_module(pkg)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if (inspect.isclass(obj) or inspect.isroutine(obj)) and not _is_foreign(obj):
                out.setdefault(id(obj), (obj, []))[1].append(f"{pkg}.{name}")
    return out


def _is_foreign(obj: Any) -> bool:
    """Names re-exported from outside the package (e.g. ``typing`` aliases) are not ours to
    check."""
    return not (getattr(obj, "__module__", "") or "").startswith("rank_lab")


def counts() -> dict[str, int]:
    """Callables covered and variants derived (the numbers recorded in docs/decisions.md)."""
    return {
        "public_names": sum(len(names) for _, names in public_callables().values()),
        "callables": len({id(e.target) for e in ENTRIES}),
        "variants": sum(len(variants(e)) for e in ENTRIES),
    }
