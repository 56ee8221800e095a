"""The notebook cells that carry parameters: reading the ``parameters`` cell, writing the injected
one.

:func:`parse_parameters_cell` is the only parser of a parameters cell (``ast``; one plain
``name = literal`` per line); :func:`injected_cell_source` writes the cell the runner inserts after
it, one ``name = repr(value)`` per line, which the same parser reads back.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CHECK_TAG",
    "parse_parameters_cell",
    "parameters_cell_source",
    "injected_cell_source",
    "is_checked_cell",
]

#: The cell tag nbval reads as "compare this cell's output" (nbval's ``NBVAL_CHECK_OUTPUT`` marker
#: as a
#: tag: no marker text in the cell, so none on the site).
CHECK_TAG = "nbval-check-output"
_CHECK_COMMENT = "# NBVAL_CHECK_OUTPUT"


def _comments(source: str) -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError):  # pragma: no cover - ast.parse reports it first
        pass
    return out


def parse_parameters_cell(
    source: str, where: str = "parameters cell"
) -> list[tuple[str, Any, str]]:
    """Read a parameters cell: ``[(name, default, comment), ...]`` in order.

    Every statement must be ``name = literal`` on its own line(s): one target, a value that
    ``ast.literal_eval`` reads (numbers, strings, booleans, ``None``, lists, tuples, dicts).

    Raises:
        TypeError: if ``source`` is not a string.
        ValueError: naming ``where`` and the line of a statement that is not such an assignment, or
            a name assigned twice.
    """
    if not isinstance(source, str):
        raise TypeError(
            f"source must be the text of a parameters cell, got {type(source).__name__}"
        )
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"{where}: not valid Python (line {exc.lineno}: {exc.msg})") from exc
    comments = _comments(source)
    lines = source.splitlines()
    out: list[tuple[str, Any, str]] = []
    seen: set[str] = set()
    last_line = 0
    for node in tree.body:
        text = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
        ok = (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        )
        if not ok:
            raise ValueError(
                f"{where}, line {node.lineno}: {text!r} is not one plain 'name = literal' "
                "assignment"
            )
        if node.lineno == last_line:
            raise ValueError(f"{where}, line {node.lineno}: one assignment per line, got {text!r}")
        last_line = node.end_lineno or node.lineno
        name = node.targets[0].id  # type: ignore[union-attr]
        try:
            value = ast.literal_eval(node.value)
        except ValueError as exc:
            raise ValueError(
                f"{where}, line {node.lineno}: the value of {name!r} is not a literal ({text!r})"
            ) from exc
        if name in seen:
            raise ValueError(f"{where}, line {node.lineno}: {name!r} is assigned twice")
        seen.add(name)
        comment = " ".join(comments[i] for i in range(node.lineno, last_line + 1) if i in comments)
        out.append((name, value, comment))
    return out


def parameters_cell_source(nb: Any, where: str = "notebook") -> str:
    """The source of the one code cell tagged ``parameters`` of an ``nbformat`` notebook.

    Raises:
        ValueError: if no cell, or more than one, carries the tag.
    """
    cells = [
        c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])
    ]
    if len(cells) != 1:
        raise ValueError(
            f"{where}: {len(cells)} code cells are tagged 'parameters', expected exactly one"
        )
    return cells[0].source


def injected_cell_source(values: Mapping[str, Any]) -> str:
    """The source of the cell injected after the parameters cell: one ``name = repr(value)`` per
    line.

    Raises:
        TypeError: if ``values`` is not a mapping of identifiers to literals.
    """
    if not isinstance(values, Mapping):
        raise TypeError(f"values must be a mapping, got {type(values).__name__}")
    lines = ["# Parameters (checked and injected by rank_lab.book)"]
    for name, value in values.items():
        if not (isinstance(name, str) and name.isidentifier()):
            raise TypeError(f"values: parameter name {name!r} is not an identifier")
        text = repr(value)
        try:
            ok = ast.literal_eval(text) == value
        except (ValueError, SyntaxError):
            ok = False
        if not ok:
            raise TypeError(f"values: {name}={value!r} is not a Python literal")
        lines.append(f"{name} = {text}")
    return "\n".join(lines) + "\n"


def is_checked_cell(cell: Any) -> bool:
    """Whether a notebook cell is the one whose output nbval compares (the key-figures cell).

    The cell carries the tag :data:`CHECK_TAG`. Chapters not yet converted to the tag still start
    the cell with the comment ``# NBVAL_CHECK_OUTPUT``, which nbval reads too; the chapter
    apparatus test refuses the comment in converted chapters.

    Args:
        cell: an ``nbformat`` cell (``cell_type``, ``source``, ``metadata``).
    """
    if getattr(cell, "cell_type", None) != "code":
        return False
    tags = (cell.metadata or {}).get("tags", []) if hasattr(cell, "metadata") else []
    return CHECK_TAG in tags or cell.source.lstrip().startswith(_CHECK_COMMENT)
