"""Each public object is listed in the ``__all__`` of exactly one public module (book/api.md).

``book/api.md`` runs Sphinx ``automodule :members:`` once per public module
(:func:`rank_lab.book.api.public_modules`), and with an ``__all__`` autodoc documents every listed
name, imported or not. An object listed by two modules (a re-export) is documented twice, and every
cross-reference to it warns "more than one target found" in ``make book``. The defining module lists
it; a former home keeps importing it (old import paths work) without listing it. Package
``__init__`` files are not public modules here: their re-exports are fine.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Mapping

from rank_lab.book.api import public_modules

#: Duplicates still pending in rank_lab.metrics / rank_lab.retrieval (other branches fix them):
#: name -> the modules that list it. Shrink-only: a fixed entry fails until it is removed here.
PENDING: dict[str, set[str]] = {}

_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def duplicate_exports(modules: Mapping[str, types.ModuleType]) -> dict[str, set[str]]:
    """``{name: modules}`` of every object (same identity) listed in the ``__all__`` of two modules.

    Immutable scalars (ints, strings ...) may be shared by the interpreter without being
    re-exported, so for them the name must match too; any other object is one object whatever its
    name.
    """
    owners: dict[object, tuple[str, set[str]]] = {}
    for mod_name, mod in modules.items():
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            key = (name, id(obj)) if isinstance(obj, _SCALARS) else id(obj)
            owners.setdefault(key, (name, set()))[1].add(mod_name)
    return {name: mods for name, mods in owners.values() if len(mods) > 1}


def _module(name: str, **members: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for key, value in members.items():
        setattr(mod, key, value)
    mod.__all__ = [k for k in members if not k.startswith("_")]
    return mod


def test_duplicate_exports_finds_a_re_export_and_nothing_else():
    class Thing:
        pass

    def helper() -> None:
        pass

    other = type("Thing", (), {})  # same name, another object: two targets, but no re-export
    mods = {
        "pkg.a": _module("pkg.a", Thing=Thing, helper=helper, LIMIT=3, NAME="x"),
        "pkg.b": _module("pkg.b", Thing=Thing, Alias=helper, LIMIT_B=3),
        "pkg.c": _module("pkg.c", Thing=other, NAME="x", _private=helper),
    }
    assert duplicate_exports(mods) == {
        "Thing": {"pkg.a", "pkg.b"},
        "helper": {"pkg.a", "pkg.b"},
        "NAME": {"pkg.a", "pkg.c"},
    }
    mods["pkg.b"].__all__ = ["LIMIT_B"]  # the former home stops listing them: clean
    mods["pkg.c"].__all__ = ["Thing"]
    assert duplicate_exports(mods) == {}


def test_every_public_object_is_listed_in_one_public_module_only():
    found = duplicate_exports({name: importlib.import_module(name) for name in public_modules()})
    new = {name: sorted(mods) for name, mods in found.items() if PENDING.get(name) != mods}
    assert not new, (
        "objects listed in the __all__ of several public modules (book/api.md documents each twice "
        "and `make book` warns 'more than one target found'): keep each name in the __all__ of its "
        f"defining module only and let the other modules import it without listing it: {new}"
    )
    fixed = sorted(set(PENDING) - set(found))
    assert not fixed, f"fixed duplicates: remove these names from PENDING in {__file__}: {fixed}"
