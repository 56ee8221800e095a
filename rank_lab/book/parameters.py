"""The parameter contract of a notebook: its parameters cell is the schema, its front matter the
constraints.

The cell tagged ``parameters`` holds one plain assignment per statement, ``name = literal``
(``ast.literal_eval`` reads the literal; comments are allowed): ``seed = 0  # the first seed``.
Each name is a parameter, and the type of its default is the parameter's type (``bool``,
``int``, ``float``, ``str``, ``list``, ``dict``). Choices, ranges and the types of ``None``
defaults are declared in the notebook's front matter, never in comments::

    rank_lab:
      parameters:
        dataset: {choices: [synthetic, digits, sop, cub]}
        data_dir: {type: str, path: true}   # a None default accepts None or a value of this type
        alphas: {type: list, items: float, gt: 0, min_length: 1}

Constraint keys: ``type`` (a type name or a list of them), ``choices`` (the value, or each item of
a list, is one of them), ``min`` / ``max`` (inclusive bounds of a number, or of each item of a
list), ``gt`` / ``lt`` (exclusive bounds), ``multiple_of``, ``min_length`` (the fewest items of a
list), ``items`` (the type of a list's items; derived from a non-empty default when all its items
share one type) and ``path`` (``true``: a string value is a file or folder path, which the runner
resolves against the caller's working directory; ``{keywords: [imagenet, none]}``: the same, except
for those words, in any case). A value is checked by :meth:`ParameterSchema.check`, which raises
:class:`ParameterError` (a ``ValueError``: unknown name, value outside the choices or range) or
:class:`ParameterTypeError` (also a ``TypeError``: wrong type), each naming the parameter, the value
and what is expected. Command-line values are YAML 1.2 literals (:func:`parse_cli_value`): ``1e-3``
is a float, ``yes`` / ``no`` are strings (a bool is ``true`` or ``false``), and a name given twice
is refused.
"""

from __future__ import annotations

import ast
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cells import parameters_cell_source, parse_parameters_cell
from .notebooks import find_notebook, front_matter, read_yaml, suggest, to_notebook

__all__ = [
    "TYPE_NAMES",
    "ParameterError",
    "ParameterTypeError",
    "Parameter",
    "ParameterSchema",
    "notebook_schema",
    "parse_parameter",
    "parse_cli_value",
]

#: The parameter types and the Python types of their values.
TYPE_NAMES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (float, int),
    "str": (str,),
    "list": (list, tuple),
    "dict": (dict,),
}
_CONSTRAINT_KEYS = (
    "type",
    "choices",
    "min",
    "max",
    "gt",
    "lt",
    "multiple_of",
    "min_length",
    "items",
    "path",
)


class ParameterError(ValueError):
    """A parameter value the notebook does not accept (unknown name, outside choices or range)."""


class ParameterTypeError(ParameterError, TypeError):
    """A parameter value of the wrong type (both a ``ValueError`` and a ``TypeError``)."""


def _type_of(value: Any) -> str:
    for name in ("bool", "int", "float", "str", "list", "dict"):
        if isinstance(value, TYPE_NAMES[name][0]) and not (
            name == "int" and isinstance(value, bool)
        ):
            return name
    raise TypeError(f"{value!r} is not a literal of a parameter type ({', '.join(TYPE_NAMES)})")


def _matches(value: Any, type_name: str) -> bool:
    if isinstance(value, bool):
        return type_name == "bool"
    return isinstance(value, TYPE_NAMES[type_name])


def _names(value: Any, key: str) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value or ())
    bad = [n for n in names if n not in TYPE_NAMES]
    if bad or not names:
        raise ValueError(f"{key} must name types among {list(TYPE_NAMES)}, got {value!r}")
    return names


@dataclass(frozen=True)
class Parameter:
    """One parameter of a notebook: its default, its types and the constraints of its front
    matter."""

    name: str
    default: Any
    types: tuple[str, ...]
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    items: tuple[str, ...] | None = None
    comment: str = ""
    path: bool = False
    path_keywords: tuple[str, ...] = ()
    gt: float | None = None
    lt: float | None = None
    min_length: int | None = None
    multiple_of: int | None = None

    @property
    def nullable(self) -> bool:
        """A ``None`` default accepts ``None`` (and a value of any declared type)."""
        return self.default is None

    def expected(self) -> str:
        """What the parameter accepts, in words (``"one of 'a', 'b'"``,
        ``"an int >= 1 or null"``)."""
        if self.choices is not None:
            listed = ", ".join(repr(c) for c in self.choices)
            text = (
                f"a list of items among {listed}" if self.types == ("list",) else f"one of {listed}"
            )
        else:
            parts = []
            for t in self.types:
                word = (
                    "a bool (true or false)"
                    if t == "bool"
                    else (f"an {t}" if t == "int" else f"a {t}")
                )
                if t == "list" and self.items:
                    word += " of " + " or ".join(self.items)
                parts.append(word)
            text = " or ".join(parts)
            bounds = [
                f">= {self.min:g}" if self.min is not None else "",
                f"> {self.gt:g}" if self.gt is not None else "",
                f"<= {self.max:g}" if self.max is not None else "",
                f"< {self.lt:g}" if self.lt is not None else "",
                f"a multiple of {self.multiple_of}" if self.multiple_of else "",
            ]
            bounds = [b for b in bounds if b]
            if bounds:
                text += (" with items " if self.types == ("list",) else " ") + " and ".join(bounds)
        if self.min_length:
            text += f", at least {self.min_length} item{'s' if self.min_length > 1 else ''}"
        return text + (" or null" if self.nullable else "")

    def _fail(
        self, value: Any, notebook: str, cls: type[ParameterError] = ParameterError, hint: str = ""
    ) -> None:
        if not hint and cls is ParameterTypeError:
            hint = self._type_hint(value)
        raise cls(
            f"parameter {self.name!r} of {notebook}: got {value!r} ({type(value).__name__}), "
            f"expected {self.expected()}{hint}"
        )

    # why a YAML literal is not of the type, for common surprises
    def _type_hint(self, value: Any) -> str:
        if (
            "bool" in self.types
            and isinstance(value, str)
            and value.lower() in ("yes", "no", "on", "off", "y", "n")
        ):
            return " (YAML 1.2: yes, no, on and off are strings; write true or false)"
        floats = [
            v for v in (value if isinstance(value, list) else [value]) if isinstance(v, float)
        ]
        if (
            ("int" in self.types or "int" in (self.items or ()))
            and floats
            and all(math.isfinite(v) and v.is_integer() for v in floats)
        ):
            return (
                f" ({floats[0]!r} is a float in YAML; write it as an integer, e.g. "
                f"{int(floats[0])})"
            )
        return ""

    def resolve(self, value: Any, base: Path) -> Any:
        """A path parameter's relative value made absolute against ``base`` (``~`` expanded);
        other values, keywords and ``None`` are returned as they are."""
        if (
            not self.path
            or not isinstance(value, str)
            or value.strip().lower() in ("", *map(str.lower, self.path_keywords))
        ):
            return value
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else (base / p).absolute())

    def _check_item(self, item: Any, value: Any, notebook: str) -> Any:
        if self.items is not None and not any(_matches(item, t) for t in self.items):
            self._fail(value, notebook, ParameterTypeError)
        if isinstance(item, float) and not math.isfinite(item):
            self._fail(value, notebook, hint=" (finite)")
        if self.choices is not None and item not in self.choices:
            hint = (
                suggest(item, [str(c) for c in self.choices]).strip(" .;")
                if isinstance(item, str)
                else ""
            )
            self._fail(value, notebook, hint=f"; {hint}" if hint else "")
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if (
                (self.min is not None and item < self.min)
                or (self.max is not None and item > self.max)
                or (self.gt is not None and item <= self.gt)
                or (self.lt is not None and item >= self.lt)
                or (self.multiple_of and item % self.multiple_of)
            ):
                self._fail(value, notebook)
        if self.items == ("float",) and isinstance(item, int) and not isinstance(item, bool):
            return float(item)
        return item

    def check(self, value: Any, notebook: str = "the notebook") -> Any:
        """Return ``value`` normalised (``int`` -> ``float`` for a float, tuple -> list), or raise.

        Raises:
            ParameterTypeError: the value has none of the parameter's types.
            ParameterError: it is outside the choices or the range, or a non-finite float.
        """
        if value is None:
            if self.nullable:
                return None
            self._fail(value, notebook, ParameterTypeError)
        kind = next((t for t in self.types if _matches(value, t)), None)
        if kind is None:
            self._fail(value, notebook, ParameterTypeError)
        if kind == "list":
            if self.min_length is not None and len(value) < self.min_length:
                self._fail(value, notebook)
            return [self._check_item(v, value, notebook) for v in value]
        if kind == "dict":
            try:
                _type_of(value)
                ast.literal_eval(repr(value))
            except (TypeError, ValueError, SyntaxError):
                self._fail(value, notebook, ParameterTypeError)
            return dict(value)
        value = self._check_item(value, value, notebook)
        return float(value) if kind == "float" else value


@dataclass(frozen=True)
class ParameterSchema:
    """The parameters of one notebook, in the order of its parameters cell."""

    notebook: str
    parameters: Mapping[str, Parameter] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The parameter names, in cell order."""
        return list(self.parameters)

    def defaults(self) -> dict[str, Any]:
        """The default of every parameter (the smoke run)."""
        return {n: p.default for n, p in self.parameters.items()}

    def _get(self, name: Any) -> Parameter:
        if not isinstance(name, str):
            raise ParameterTypeError(
                f"parameter names are strings, got {name!r} for {self.notebook}"
            )
        if name not in self.parameters:
            raise ParameterError(
                f"unknown parameter {name!r} for {self.notebook}{suggest(name, self.names)}"
                f"Known: {', '.join(self.names)}"
            )
        return self.parameters[name]

    def check(self, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Check ``values`` and return the checked overrides (unknown names are refused first).

        Args:
            values: parameter name -> value (Python values; see :func:`parse_cli_value` for text).

        Raises:
            ParameterError, ParameterTypeError: naming the parameter, the value and what is
                expected.
        """
        if values is None:
            return {}
        if not isinstance(values, Mapping):
            raise TypeError(
                f"parameters must be a mapping of names to values, got {type(values).__name__}"
            )
        for name in values:
            self._get(name)
        return {name: self.parameters[name].check(v, self.notebook) for name, v in values.items()}

    def effective(self, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The defaults updated with the checked ``values``: what the notebook runs with."""
        return {**self.defaults(), **self.check(values)}

    def parse_cli(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """Parse and check ``-p NAME VALUE`` pairs (values as YAML literals, see
        :func:`parse_cli_value`).

        Raises:
            ParameterError: a name given twice, unknown, or a value it refuses.
        """
        out: dict[str, Any] = {}
        raw_of: dict[str, str] = {}
        for name, raw in pairs:
            if name in raw_of:
                raise ParameterError(
                    f"parameter {name!r} of {self.notebook} is given twice "
                    f"(-p {name} {raw_of[name]}, -p {name} {raw}): give it once"
                )
            raw_of[name] = raw
            out[name] = parse_cli_value(raw, self._get(name))
        return self.check(out)

    def resolve_paths(
        self, values: Mapping[str, Any], base: str | os.PathLike[str] | None = None
    ) -> dict[str, Any]:
        """``values`` with the relative values of path parameters (front matter ``path``) made
        absolute against ``base`` (default: the current working directory), so that a notebook
        running in its output folder reads the file the caller named."""
        root = Path(base) if base is not None else Path.cwd()
        return {
            n: (self.parameters[n].resolve(v, root) if n in self.parameters else v)
            for n, v in values.items()
        }


def _parameter(name: str, default: Any, comment: str, spec: Any, where: str) -> Parameter:
    spec = dict(spec or {})
    unknown = sorted(set(spec) - set(_CONSTRAINT_KEYS))
    if unknown:
        raise ValueError(
            f"{where}: parameter {name!r}: unknown constraint keys {unknown} (known: "
            f"{list(_CONSTRAINT_KEYS)})"
        )
    if isinstance(default, tuple):
        default = list(default)
    own = _type_of(default) if default is not None else None
    if "type" in spec:
        types = _names(spec["type"], f"{where}: parameter {name!r}: type")
        if own is not None and own not in types:
            raise ValueError(
                f"{where}: parameter {name!r}: declared type {spec['type']!r} does not include "
                f"the type of its default {default!r} ({own})"
            )
    elif own is None:
        raise ValueError(
            f"{where}: parameter {name!r} defaults to None: declare its type in the front matter "
            f"(rank_lab: parameters: {name}: {{type: ...}})"
        )
    else:
        types = (own,)
    items = None
    if "items" in spec:
        items = _names(spec["items"], f"{where}: parameter {name!r}: items")
    elif isinstance(default, list) and default:
        kinds = {_type_of(v) for v in default}
        items = (kinds.pop(),) if len(kinds) == 1 else None
    choices = spec.get("choices")
    if choices is not None and not isinstance(choices, (list, tuple)):
        raise ValueError(f"{where}: parameter {name!r}: choices must be a list, got {choices!r}")
    for key in ("min", "max", "gt", "lt"):
        if spec.get(key) is not None and (
            isinstance(spec[key], bool) or not isinstance(spec[key], (int, float))
        ):
            raise ValueError(
                f"{where}: parameter {name!r}: {key} must be a number, got {spec[key]!r}"
            )
    path, keywords = _path_spec(spec.get("path", False), types, f"{where}: parameter {name!r}")
    for key in ("min_length", "multiple_of"):
        v = spec.get(key)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int) or v < (key == "multiple_of")
        ):
            raise ValueError(
                f"{where}: parameter {name!r}: {key} must be an int >= "
                f"{int(key == 'multiple_of')}, got {v!r}"
            )
    p = Parameter(
        name,
        default,
        types,
        tuple(choices) if choices is not None else None,
        spec.get("min"),
        spec.get("max"),
        items,
        comment,
        path,
        keywords,
        spec.get("gt"),
        spec.get("lt"),
        spec.get("min_length"),
        spec.get("multiple_of"),
    )
    try:
        p.check(default, where)
    except ParameterError as exc:
        raise ValueError(
            f"{where}: the default of {name!r} breaks its own constraints: {exc}"
        ) from exc
    return p


def _path_spec(spec: Any, types: tuple[str, ...], where: str) -> tuple[bool, tuple[str, ...]]:
    if spec is False or spec is None:
        return False, ()
    if "str" not in types:
        raise ValueError(f"{where}: path applies to a str parameter, its types are {list(types)}")
    if spec is True:
        return True, ()
    if (
        isinstance(spec, Mapping)
        and set(spec) == {"keywords"}
        and isinstance(spec["keywords"], list)
        and all(isinstance(k, str) for k in spec["keywords"])
    ):
        return True, tuple(spec["keywords"])
    raise ValueError(
        f"{where}: path must be true or {{keywords: [words that are not paths]}}, got {spec!r}"
    )


def notebook_schema(
    name: str | os.PathLike[str], root: str | os.PathLike[str] | None = None
) -> ParameterSchema:
    """The :class:`ParameterSchema` of a book notebook (its parameters cell and front matter).

    Args:
        name: a notebook stem or the path of its ``.md`` source (see :func:`find_notebook`).
        root: the book folder (default :func:`book_dir`).

    Raises:
        NotebookNotFoundError: no such notebook.
        ValueError: a malformed parameters cell or front matter (naming the notebook).
    """
    md = find_notebook(name, root)
    where = md.stem
    cell = parameters_cell_source(to_notebook(md), where)
    meta = (front_matter(md).get("rank_lab") or {}).get("parameters") or {}
    if not isinstance(meta, Mapping):
        raise ValueError(f"{where}: rank_lab.parameters of the front matter must be a mapping")
    declared = parse_parameters_cell(cell, f"{where}: parameters cell")
    names = [n for n, _, _ in declared]
    stray = sorted(set(meta) - set(names))
    if stray:
        raise ValueError(
            f"{where}: the front matter constrains {stray}, which the parameters cell does not "
            "declare"
        )
    params = {n: _parameter(n, d, c, meta.get(n), where) for n, d, c in declared}
    return ParameterSchema(Path(md).stem, params)


def parse_parameter(value: str) -> Any:
    """Parse a ``-p NAME VALUE`` value as a YAML 1.2 literal (``1`` -> 1, ``1e-3`` -> 0.001,
    ``false`` -> False, ``[1, 2]``, ``null`` -> None; ``yes`` stays the string ``"yes"``); text that
    is not valid YAML stays a string.

    Raises:
        TypeError: if ``value`` is not a string.
    """
    if not isinstance(value, str):
        raise TypeError(
            f"value must be the text given on the command line, got {type(value).__name__}"
        )
    try:
        return read_yaml(value)
    except ValueError:
        return value


def parse_cli_value(raw: str, parameter: Parameter) -> Any:
    """A command-line value for ``parameter``: the YAML literal, or the raw text for a string
    parameter.

    ``-p smoke false`` gives ``False``; ``-p data_dir 2024`` gives ``"2024"`` (``data_dir`` takes
    strings, not ints); ``-p smoke maybe`` gives ``"maybe"``, which :meth:`Parameter.check` refuses.
    """
    if not isinstance(parameter, Parameter):
        raise TypeError(f"parameter must be a Parameter, got {type(parameter).__name__}")
    if not isinstance(raw, str):
        raise TypeError(f"raw must be the text given on the command line, got {type(raw).__name__}")
    value = parse_parameter(raw)
    if isinstance(value, str) or "str" not in parameter.types:
        return value
    if value is None and parameter.nullable:
        return None
    if any(_matches(value, t) for t in parameter.types):
        return value
    return raw
