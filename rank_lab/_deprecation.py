"""Deprecation helpers: renamed keyword arguments and names moved to another module.

Old names keep working with a :class:`DeprecationWarning` that names the replacement
(``docs/decisions.md``, 2026-11-26: one vocabulary per concept, one home per name).

* :func:`renamed_kwargs` -- inside a constructor or function: map the old keyword names of
  ``kwargs`` to the new ones (warning once per call); giving both spellings is a ``TypeError``.
* :func:`moved_names` -- the module ``__getattr__`` of a compatibility module: ``old.Name`` is
  looked up in its new module with a warning, so importing the old module itself stays silent.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["warn_deprecated", "renamed_kwargs", "moved_names"]


def warn_deprecated(message: str, stacklevel: int = 3) -> None:
    """Emit a :class:`DeprecationWarning` attributed to the caller's caller (``stacklevel=3``)."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def renamed_kwargs(kwargs: dict[str, Any], renames: Mapping[str, str], owner: str, stacklevel: int = 4) -> dict[str, Any]:
    """Move old keyword names of ``kwargs`` to their new names, in place, with a ``DeprecationWarning``.

    Args:
        kwargs: the keyword arguments received (modified in place and returned).
        renames: ``{old: new}``.
        owner: the callable's name, for the messages (e.g. ``"SmoothRecallAtK"``).
        stacklevel: of the warning (4: the user's call of a constructor that calls this helper
            from a ``__init__`` reached through ``super()``; adjust for direct calls).

    Raises:
        TypeError: both the old and the new name were given.
    """
    for old, new in renames.items():
        if old not in kwargs:
            continue
        if new in kwargs:
            raise TypeError(f"{owner}: got both {old!r} (deprecated) and {new!r}; pass {new!r} only")
        warn_deprecated(f"{owner}({old}=...) is deprecated: use {new}=... (same meaning)", stacklevel)
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
        warn_deprecated(f"{module}.{name} moved: use {target}.{new_name}", stacklevel=3)
        # imported on first use only: the new module may import the old one's package
        return getattr(importlib.import_module(target), new_name)

    return __getattr__
