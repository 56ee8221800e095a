"""The one registry type of rank_lab: a read-only table ``name -> object`` of one family.

Every family that a config string selects is a :class:`Registry`: the losses
(:data:`rank_lab.losses.registry.LOSSES`), the backbones
(:data:`rank_lab.models.backbones.BACKBONES`), the poolings
(:data:`rank_lab.models.pooling.POOLINGS`), the training recipes
(:data:`rank_lab.train.recipes.RECIPES`), the classification methods and rules
(:data:`rank_lab.train.classification.CLS_METHODS`, :data:`rank_lab.fewshot.classify.METHODS`) and
the dataset tables. An entry registers where it is defined::

    POOLINGS = Registry("pooling")

    @POOLINGS.register("gem")
    class GeM(nn.Module): ...

    POOLINGS.build("gem", p=3.0)       # GeM(p=3.0)
    POOLINGS.list("*ma*")              # ["mac"]

Names are case-insensitive and ``-`` equals ``_``; each family has one ``list_<family>(filter="")``
function returning the sorted names, as :meth:`Registry.list` does. A name that is not registered
raises :class:`UnknownNameError` (a ``ValueError`` and a ``KeyError``) naming the family and listing
the known names.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "Entry", "UnknownNameError"]

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """A name that its registry does not hold (the message lists the known names)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered object.

    Attributes:
        name: the canonical name (lower case, ``_``-separated).
        obj: the registered object (a class, a factory, a config ...).
        info: what the family records beside the object (read-only), e.g. a loss's ``needs``.
        summary: the first line of the object's docstring (or ``info["summary"]``).
    """

    name: str
    obj: T
    info: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""


def _summary(obj: object) -> str:
    doc = obj.__doc__ if isinstance(obj, type) or callable(obj) else None
    lines = (doc or "").strip().splitlines()
    return lines[0] if lines else ""


class Registry(Mapping[str, T]):
    """A read-only table ``name -> object`` of one family (see the module docstring).

    Args:
        kind: the family's name in messages (``"loss"``, ``"pooling"``, ``"recipe"`` ...).
        entries: ``{name: object}`` registered at once, in this order (a table of data rather
            than of definitions, e.g. the folders of the datasets).

    A registry is a ``Mapping``: ``name in registry``, ``registry[name]`` (the object),
    iteration over the names in registration order, ``len``; :meth:`list` gives them sorted. It
    is changed only by :meth:`register` and :meth:`unregister`.
    """

    def __init__(self, kind: str, entries: Mapping[str, T] | None = None) -> None:
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"kind must be a non-empty str, got {kind!r}")
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        for name, obj in (entries or {}).items():
            self.register(name, obj)

    # ------------------------------------------------------------------ names
    def key(self, name: object, what: str = "name") -> str:
        """The canonical form of ``name`` (stripped, lower case, ``-`` -> ``_``).

        Raises:
            TypeError: ``name`` is not a str. ValueError: it is empty.
        """
        if not isinstance(name, str):
            raise TypeError(f"{what} must be a str, got {type(name).__name__}")
        key = name.strip().lower().replace("-", "_")
        if not key:
            raise ValueError(f"{what} must be a non-empty str, got {name!r}")
        return key

    # ------------------------------------------------------------------ changes
    def register(self, name: str, obj: T | None = None, **info: Any) -> Any:
        """Register ``obj`` under ``name``; without ``obj``, a decorator that registers its
        argument.

        Args:
            name: the name (see :meth:`key`).
            obj: the object (``None``: return a decorator).
            **info: what the family records beside the object (:attr:`Entry.info`).

        Returns:
            ``obj``, or the decorator (which returns its argument unchanged).

        Raises:
            ValueError: ``name`` is already registered. TypeError: ``name`` is not a str.
        """
        key = self.key(name)
        if key in self._entries:
            raise ValueError(f"{self.kind} name {key!r} already registered")

        def add(target: T) -> T:
            if key in self._entries:
                raise ValueError(f"{self.kind} name {key!r} already registered")
            summary = str(info.pop("summary", "")) or _summary(target)
            self._entries[key] = Entry(key, target, MappingProxyType(dict(info)), summary)
            return target

        return add if obj is None else add(obj)

    def unregister(self, name: str) -> Entry[T]:
        """Remove a name; returns its :class:`Entry`.

        Raises:
            UnknownNameError: the name is not registered.
        """
        entry = self.entry(name)
        del self._entries[entry.name]
        return entry

    # ------------------------------------------------------------------ lookups
    def entry(self, name: str) -> Entry[T]:
        """The :class:`Entry` of ``name``.

        Raises:
            TypeError: ``name`` is not a str.
            UnknownNameError: the name is not registered (the message lists the known names).
        """
        key = self.key(name)
        if key not in self._entries:
            raise UnknownNameError(
                f"unknown {self.kind} name {name!r}; known: {sorted(self._entries)}"
            )
        return self._entries[key]

    def build(self, name: str, /, **kwargs: Any) -> Any:
        """Call the registered class or factory: ``registry[name](**kwargs)``."""
        obj = self.entry(name).obj
        if not callable(obj):
            raise TypeError(
                f"{self.kind} {name!r} is a {type(obj).__name__}, not a class or a factory"
            )
        return obj(**kwargs)

    def list(self, filter: str = "", **info: Any) -> list[str]:
        """Sorted names matching the ``fnmatch`` pattern ``filter`` (``""``: all) and ``info``.

        Args:
            filter: e.g. ``"*ap*"``; case-insensitive, ``-`` = ``_``.
            **info: keep the entries whose :attr:`Entry.info` holds these values (``None``: any).

        Raises:
            TypeError: ``filter`` is not a str.
        """
        if not isinstance(filter, str):
            raise TypeError(f"filter must be a str pattern, got {type(filter).__name__}")
        pattern = filter.strip().lower().replace("-", "_")
        return sorted(
            e.name
            for e in self._entries.values()
            if (not pattern or fnmatch.fnmatchcase(e.name, pattern))
            and all(v is None or e.info.get(k) == v for k, v in info.items())
        )

    # ------------------------------------------------------------------ Mapping
    def __getitem__(self, name: str) -> T:
        return self.entry(name).obj

    def __contains__(self, name: object) -> bool:
        try:
            return self.key(name) in self._entries
        except (TypeError, ValueError):
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"
