"""The book's table of contents (``_toc.yml``): parts, numbered chapters, their appendix pages.

``_toc.yml`` is the only file that names a chapter's folder. Everything else finds a chapter by its
name (the ``.md`` file's stem, :func:`rank_lab.book.find_notebook`) and reads its place in the book
from here: the part it belongs to, its number (chapters are numbered 1, 2, ... across the numbered
parts, as the site numbers them), and its appendix pages (the chapter's ``sections`` in the TOC).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .notebooks import book_dir

__all__ = ["TocError", "Chapter", "Part", "read_toc", "toc_chapters", "toc_path"]


class TocError(ValueError):
    """``_toc.yml`` is missing or does not have the shape the book uses (parts of chapters)."""


@dataclass(frozen=True)
class Chapter:
    """A chapter of the TOC.

    Attributes:
        name: the page's stem (``"evaluating_retrieval"``), the notebook's name.
        file: the TOC entry, relative to the project root without suffix (``"book/part/name"``).
        number: the chapter number on the site (``None`` in an unnumbered part such as the back
            matter).
        part: the caption of its part.
        sections: the TOC entries of its appendix pages (``file`` values, in order).
    """

    name: str
    file: str
    number: int | None
    part: str
    sections: tuple[str, ...]


@dataclass(frozen=True)
class Part:
    """A part of the TOC: its caption, whether it is numbered, and its chapters in order."""

    caption: str
    numbered: bool
    chapters: tuple[Chapter, ...]


def toc_path(root: str | os.PathLike[str] | None = None) -> Path:
    """``_toc.yml`` of the project whose book folder is ``root`` (default :func:`book_dir`)."""
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be the book folder (a path) or None, got {root!r}")
    root = Path(root) if root is not None else book_dir()
    return root.parent / "_toc.yml"


def _entries(items: Any, where: str) -> list[Mapping[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list) or not all(
        isinstance(e, Mapping) and isinstance(e.get("file"), str) for e in items
    ):
        raise TocError(f"{where} must be a list of entries with a 'file', got {items!r}")
    return list(items)


def read_toc(root: str | os.PathLike[str] | None = None) -> list[Part]:
    """The parts of the book in order, with numbered chapters (``numbered: true`` parts count on).

    Args:
        root: the book folder (default :func:`book_dir`); ``_toc.yml`` sits in its parent.

    Raises:
        TocError: no ``_toc.yml``, or not the ``jb-book`` shape with ``parts`` of ``chapters``.
    """
    path = toc_path(root)
    try:
        toc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TocError(
            f"cannot read {str(path)!r} (the TOC beside the book folder root={str(root)!r}): {exc}"
        ) from exc
    if not isinstance(toc, Mapping) or not isinstance(toc.get("parts"), list):
        raise TocError(f"{path}: expected a jb-book TOC with 'parts'")
    parts, number = [], 0
    for i, part in enumerate(toc["parts"]):
        if not isinstance(part, Mapping) or not isinstance(part.get("caption"), str):
            raise TocError(f"{path}: part {i} has no caption")
        numbered = bool(part.get("numbered", False))
        chapters = []
        for entry in _entries(part.get("chapters"), f"{path}: part {part['caption']!r} chapters"):
            if numbered:
                number += 1
            sections = tuple(
                s["file"]
                for s in _entries(entry.get("sections"), f"{path}: {entry['file']} sections")
            )
            chapters.append(
                Chapter(
                    Path(entry["file"]).name,
                    entry["file"],
                    number if numbered else None,
                    part["caption"],
                    sections,
                )
            )
        parts.append(Part(part["caption"], numbered, tuple(chapters)))
    return parts


def toc_chapters(root: str | os.PathLike[str] | None = None) -> dict[str, Chapter]:
    """Every chapter of the TOC by name, in book order.

    Raises:
        TocError: see :func:`read_toc`; two chapters with one name.
    """
    out: dict[str, Chapter] = {}
    for part in read_toc(root):
        for ch in part.chapters:
            if ch.name in out:
                raise TocError(
                    f"two TOC chapters are named {ch.name!r}: {out[ch.name].file}, {ch.file}"
                )
            out[ch.name] = ch
    return out
