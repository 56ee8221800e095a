"""Discovery of the book's notebooks: the ``book/`` folder, its jupytext MyST sources, front matter.

A notebook is a ``.md`` file under :func:`book_dir` whose YAML front matter declares a jupytext
text representation and a kernel. Its stem (``evaluating_retrieval``) is its name on the command
line; its front matter's ``rank_lab:`` block holds the parameter constraints
(:mod:`rank_lab.book.parameters`) and the keys of its results (``results_keys``).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

__all__ = [
    "read_yaml",
    "NotebookNotFoundError",
    "book_dir",
    "list_notebooks",
    "find_notebook",
    "front_matter",
    "suggest",
]


class NotebookNotFoundError(ValueError):
    """No book notebook has the name asked for (a user error: the CLI prints it and exits 2)."""


def read_yaml(text: str) -> Any:
    """Read YAML 1.2 text (safe types only): ``1e-3`` is a float, ``yes`` / ``no`` are strings.

    Raises:
        TypeError: ``text`` is not a string.
        ValueError: the text is not valid YAML (the parser's first line).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"text is not valid YAML: {first}") from exc


def book_dir() -> Path:
    """The folder holding the book's ``.md`` notebooks.

    ``$RANK_LAB_BOOK`` wins; else ``book/`` next to the package (a source checkout); else
    ``./book``.
    """
    env = os.environ.get("RANK_LAB_BOOK")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "book"
    return here if here.is_dir() else Path.cwd() / "book"


def _is_notebook(path: Path) -> bool:
    """A ``.md`` file is a notebook when its front matter declares a jupytext kernel."""
    try:
        head = path.read_text(encoding="utf-8")[:2000]
    except OSError:
        return False
    return head.startswith("---") and "kernelspec:" in head and "jupytext:" in head


def list_notebooks(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """All jupytext MyST notebooks under ``root`` (default :func:`book_dir`), sorted by path.

    Raises:
        TypeError: if ``root`` is not a path.
        FileNotFoundError: if ``root`` is not an existing folder.
    """
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a folder path, got {type(root).__name__}")
    root = Path(root) if root is not None else book_dir()
    if not root.is_dir():
        raise FileNotFoundError(f"root={str(root)!r}: no such book folder")
    return sorted(p for p in root.rglob("*.md") if "_build" not in p.parts and _is_notebook(p))


def suggest(name: str, known: list[str] | tuple[str, ...]) -> str:
    """The joint of an "unknown name" message: ``"; did you mean 'x'? "`` or ``". "``.

    ``x`` is the closest of ``known`` to ``name`` (``difflib``, ratio at least 0.6).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    if isinstance(known, str) or not all(isinstance(k, str) for k in known):
        raise TypeError(f"known must be a list of strings, got {known!r}")
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}? " if close else ". "


def find_notebook(name: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Resolve a notebook from a path to its ``.md`` source or a stem such as
    ``"evaluating_retrieval"``.

    Raises:
        TypeError: if ``name`` is not a string or a path.
        NotebookNotFoundError: naming the closest notebook and the known ones when ``name`` matches
            none, or the candidates when it matches several.
    """
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"name must be a notebook name or path, got {type(name).__name__}")
    p = Path(name)
    if p.suffix == ".md" and p.is_file():
        return p
    stem = p.stem if p.suffix else p.name
    notebooks = list_notebooks(root)
    matches = [q for q in notebooks if q.stem == stem]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise NotebookNotFoundError(
            f"notebook name {str(name)!r} is ambiguous: {[str(m) for m in matches]}"
        )
    stems = [q.stem for q in notebooks]
    raise NotebookNotFoundError(
        f"unknown notebook {str(name)!r}{suggest(stem, stems)}Known notebooks: "
        f"{', '.join(stems) or '(none)'}"
    )


def front_matter(md: str | os.PathLike[str]) -> dict[str, Any]:
    """The YAML front matter of a ``.md`` notebook as a dict (empty when it has none).

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if the front matter is not a YAML mapping.
    """
    text = Path(md).read_text(encoding="utf-8")
    if not text.startswith("---"):
        return {}
    parts = text.split("\n---", 1)
    if len(parts) < 2:
        raise ValueError(f"{md}: front matter opened with '---' is never closed")
    meta = read_yaml(parts[0][3:]) or {}
    if not isinstance(meta, dict):
        raise ValueError(f"{md}: front matter must be a YAML mapping, got {type(meta).__name__}")
    return meta


def to_notebook(md_path: str | os.PathLike[str]) -> Any:
    """The jupytext notebook (``nbformat`` node) of a ``.md`` source, with a ``python3``
    kernelspec."""
    # optional dependency (extra "book"), imported where it is used
    import jupytext

    nb = jupytext.read(Path(md_path))
    nb.metadata.setdefault(
        "kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"}
    )
    return nb
