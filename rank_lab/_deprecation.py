"""Deprecation helpers: renamed keyword arguments and names moved to another module.

Old names keep working with a :class:`DeprecationWarning` that names the replacement (one
vocabulary per concept, one home per name).

* :func:`renamed_kwargs` -- inside a constructor or function: map the old keyword names of
  ``kwargs`` to the new ones (warning once per call); giving both spellings is a ``TypeError``.
* :func:`moved_names` -- the module ``__getattr__`` of a compatibility module: ``old.Name`` is
  looked up in its new module with a warning, so importing the old module itself stays silent.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["warn_deprecated", "renamed_kwargs", "moved_names"]


def warn_deprecated(message: str) -> None:
    """Emit a :class:`DeprecationWarning` attributed to the first caller outside ``rank_lab``.

    So the warning points at the user's line (a notebook cell, a script), whatever the depth of the
    package's own calls (a constructor reached through ``super()``, a module ``__getattr__``).
    """
    frame, level = sys._getframe(1), 2  # level 1 is this function
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in ("rank_lab", "importlib"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def renamed_kwargs(kwargs: dict[str, Any], renames: Mapping[str, str], owner: str) -> dict[str, Any]:
    """Move old keyword names of ``kwargs`` to their new names, in place, with a ``DeprecationWarning``.

    Args:
        kwargs: the keyword arguments received (modified in place and returned).
        renames: ``{old: new}``.
        owner: the callable's name, for the messages (e.g. ``"SmoothRecallAtK"``).

    Raises:
        TypeError: both the old and the new name were given.
    """
    for old, new in renames.items():
        if old not in kwargs:
            continue
        if new in kwargs:
            raise TypeError(f"{owner}: got both {old!r} (deprecated) and {new!r}; pass {new!r} only")
        warn_deprecated(f"{owner}({old}=...) is deprecated: use {new}=... (same meaning)")
        kwargs[new] = kwargs.pop(old)
    return kwargs


def moved_names(module: str, moves: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving names that moved, each with a ``DeprecationWarning``.

    Args:
        module: the old module's ``__name__``.
        moves: ``{old_name: "new.module:new_name"}`` (``"new.module"`` alone keeps the name).

    Returns:
        The ``__getattr__(name)`` function to assign in the old module.
    """

    def __getattr__(name: str) -> Any:
        if name not in moves:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target, _, new_name = moves[name].partition(":")
        new_name = new_name or name
        warn_deprecated(f"{module}.{name} moved: use {target}.{new_name}")
        # imported on first use only: the new module may import the old one's package
        return getattr(importlib.import_module(target), new_name)

    return __getattr__
