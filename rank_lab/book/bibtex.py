"""A small reader of the book's BibTeX file (``book/references.bib``) for the Colab twins.

The site renders ``{cite}`` roles with sphinxcontrib-bibtex (``bibtex_reference_style:
author_year``); a twin opened on Colab has no Sphinx, so :mod:`rank_lab.book.colab` writes the
same author-year labels itself and lists the cited entries at the end. This module reads the
subset of BibTeX the book uses: ``@type{key, field = {value}, ...}`` entries with braced or quoted
values, ``%`` comment lines, and LaTeX accents such as ``{\\'e}`` or ``{\\v{s}}``.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BibEntry", "BibError", "read_bib", "parse_bib", "latex_to_text"]


class BibError(ValueError):
    """The BibTeX text is malformed, or a citation names a key it does not hold."""


#: LaTeX accent command -> Unicode combining character.
_ACCENTS = {
    "'": "\u0301",
    "`": "\u0300",
    "^": "\u0302",
    '"': "\u0308",
    "~": "\u0303",
    "=": "\u0304",
    ".": "\u0307",
    "v": "\u030c",
    "u": "\u0306",
    "H": "\u030b",
    "c": "\u0327",
    "k": "\u0328",
}
_ACCENT = re.compile(
    r"\\([`'^\"~=.]|[vuHck](?![a-zA-Z]))\s*(?:\{\s*(\\[ij]|[A-Za-z])\s*\}|(\\[ij](?![a-zA-Z])|[A-Za-z]))"
)
_LETTERS = {
    r"\i": "i",
    r"\j": "j",
    r"\ss": "ß",
    r"\o": "ø",
    r"\O": "Ø",
    r"\ae": "æ",
    r"\AE": "Æ",
    r"\l": "ł",
    r"\L": "Ł",
    r"\&": "&",
    r"\%": "%",
    r"\_": "_",
}


def latex_to_text(value: str) -> str:
    """Plain Unicode text of a BibTeX value: accents composed, braces and ``~`` removed.

    ``"J{\\"a}rvelin"`` -> ``"Järvelin"``, ``"Ji{\\v{r}}{\\'\\i}"`` -> ``"Jiří"``,
    ``"Cumulated Gain-Based Evaluation of {IR} Techniques"`` keeps ``IR``.

    Raises:
        TypeError: ``value`` is not a str.
    """
    if not isinstance(value, str):
        raise TypeError(f"value must be a str, got {type(value).__name__}")

    def accent(m: re.Match[str]) -> str:
        letter = m.group(2) or m.group(3)
        letter = _LETTERS.get(letter, letter)
        return unicodedata.normalize("NFC", letter + _ACCENTS[m.group(1)])

    text = _ACCENT.sub(accent, value)
    for cmd, repl in sorted(_LETTERS.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(re.escape(cmd) + r"(?![a-zA-Z])\s?", repl, text)
    text = text.replace("--", "\u2013").replace("~", "\u00a0")
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


@dataclass(frozen=True)
class BibEntry:
    """One BibTeX entry: ``kind`` (``article``, ``inproceedings`` ...), ``key`` and its fields
    (plain text)."""

    kind: str
    key: str
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def last_names(self) -> list[str]:
        """The authors' last names (``"Last, First"`` or ``"First von Last"`` forms), in order."""
        names = []
        for person in re.split(r"\s+and\s+", self.fields.get("author", "").strip()):
            if not person:
                continue
            if person.lower() == "others":
                names.append("others")
            elif "," in person:
                names.append(person.split(",", 1)[0].strip())
            else:
                names.append(person.split()[-1])
        return names

    @property
    def year(self) -> str:
        """The ``year`` field (``"n.d."`` when absent)."""
        return self.fields.get("year", "n.d.")

    def authors_short(self) -> str:
        """``"Ramzi"``, ``"Musgrave and Lim"`` or ``"Ramzi et al."`` (``"Anonymous"`` without
        authors)."""
        names = self.last_names
        if not names:
            return "Anonymous"
        if len(names) == 1:
            return names[0]
        if len(names) == 2 and names[1] != "others":
            return f"{names[0]} and {names[1]}"
        return f"{names[0]} et al."

    def reference(self) -> str:
        """One Markdown line for the reference list: ``Authors (year). *Title*. Venue.``"""
        authors = re.split(r"\s+and\s+", self.fields.get("author", "Anonymous"))
        shown = []
        for person in authors:
            if "," in person:
                last, first = (s.strip() for s in person.split(",", 1))
                shown.append(f"{first} {last}".strip())
            else:
                shown.append(person.strip())
        who = ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1]
        venue = next(
            (
                self.fields[k]
                for k in (
                    "journal",
                    "booktitle",
                    "school",
                    "institution",
                    "publisher",
                    "howpublished",
                )
                if k in self.fields
            ),
            "",
        )
        extra = [venue] if venue else []
        if self.kind == "misc" and "eprint" in self.fields:
            extra.append(f"arXiv:{self.fields['eprint']}")
        if "volume" in self.fields:
            extra.append(f"vol. {self.fields['volume']}")
        if "pages" in self.fields:
            extra.append(f"pp. {self.fields['pages']}")
        tail = (". " + ", ".join(extra)) if extra else ""
        url = self.fields.get("url") or (
            f"https://doi.org/{self.fields['doi']}" if "doi" in self.fields else ""
        )
        link = f" <{url}>" if url else ""
        return f"{who} ({self.year}). *{self.fields.get('title', self.key)}*{tail}.{link}"


_HEAD = re.compile(r"@\s*([A-Za-z]+)\s*[{(]\s*([^,\s]+)\s*,")


def _value(text: str, i: int, where: str) -> tuple[str, int]:
    """Read a braced, quoted or bare value starting at ``text[i]``; return it and the index after
    it."""
    if text[i] == "{":
        depth, j = 0, i
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1 : j], j + 1
            j += 1
        raise BibError(f"{where}: unbalanced braces")
    if text[i] == '"':
        j = i + 1
        while j < len(text) and (text[j] != '"' or text[j - 1] == "\\"):
            j += 1
        if j >= len(text):
            raise BibError(f"{where}: unterminated quoted value")
        return text[i + 1 : j], j + 1
    m = re.compile(r"[A-Za-z0-9_.:-]+").match(text, i)
    if not m:
        raise BibError(f"{where}: expected a value at {text[i : i + 30]!r}")
    return m.group(0), m.end()


def parse_bib(text: str, source: str = "<bib>") -> dict[str, BibEntry]:
    """Parse BibTeX text into ``{key: BibEntry}`` (field names lower-cased, values as plain text).

    Raises:
        TypeError: ``text`` is not a str.
        BibError: a malformed entry or a key defined twice (the message names ``source`` and the
            key).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = "\n".join("" if line.lstrip().startswith("%") else line for line in text.splitlines())
    entries: dict[str, BibEntry] = {}
    pos = 0
    while (m := _HEAD.search(text, pos)) is not None:
        kind, key = m.group(1).lower(), m.group(2)
        where = f"{source}: entry {key!r}"
        if kind in ("comment", "preamble", "string"):
            raise BibError(f"{where}: @{kind} is not supported")
        fields: dict[str, str] = {}
        i = m.end()
        while True:
            while i < len(text) and text[i] in " \t\r\n,":
                i += 1
            if i >= len(text):
                raise BibError(f"{where}: the entry is never closed")
            if text[i] in "})":
                i += 1
                break
            fm = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)\s*=\s*").match(text, i)
            if not fm:
                raise BibError(f"{where}: expected 'field = value' at {text[i : i + 30]!r}")
            raw, i = _value(text, fm.end(), where)
            fields[fm.group(1).lower()] = latex_to_text(raw)
        if key in entries:
            raise BibError(f"{source}: key {key!r} is defined twice")
        entries[key] = BibEntry(kind, key, fields)
        pos = i
    return entries


def read_bib(path: str | os.PathLike[str]) -> dict[str, BibEntry]:
    """Read a ``.bib`` file (:func:`parse_bib`).

    Raises:
        FileNotFoundError: no such file.
        BibError: malformed content.
    """
    p = Path(path)
    return parse_bib(p.read_text(encoding="utf-8"), str(p))
