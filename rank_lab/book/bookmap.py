"""The map of the book: its parts, numbered chapters and the dependencies between them, as an SVG.

The intro shows ``book/_static/book_map.svg``, generated from ``_toc.yml`` (parts and chapter
order) and each chapter's front matter (``rank_lab.prerequisites``: the chapters it builds on)::

    python -m rank_lab.book.bookmap --write     # rewrites book/_static/book_map.svg

A test checks that the committed file is current. The SVG is self-contained (no font or script
to fetch: it loads offline) and scales to the width of the page.
"""

from __future__ import annotations

import html
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from .notebooks import book_dir, front_matter
from .toc import read_toc

__all__ = ["MAP_PATH", "chapter_titles", "prerequisites", "map_svg", "main"]

#: Where the map is written, relative to the book folder.
MAP_PATH = Path("_static") / "book_map.svg"

_W = 720  # drawing width (the SVG scales to the page)
_PAD = 12  # outer margin
_CAPTION = 26  # height of a part's caption line
_BOX_H = 46  # height of a chapter box
_ROW_GAP = 16  # space between two parts
_COL_GAP = 14  # space between two boxes of a part
_MAX_BOX_W = 210


def _page(root: Path, file: str) -> Path:
    return root.parent / f"{file}.md"


def chapter_titles(root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Each numbered chapter's title (its first level-1 heading), by name, in book order."""
    root = Path(root) if root is not None else book_dir()
    out = {}
    for part in read_toc(root):
        for ch in part.chapters:
            if ch.number is None:
                continue
            text = _page(root, ch.file).read_text(encoding="utf-8")
            out[ch.name] = next(
                (ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")), ch.name
            )
    return out


def prerequisites(root: str | os.PathLike[str] | None = None) -> dict[str, list[str]]:
    """Each numbered chapter's ``rank_lab.prerequisites`` (``[]`` when it declares none), by name.

    Raises:
        ValueError: a prerequisite that is not a numbered chapter, or one that comes later in the
            book.
    """
    root = Path(root) if root is not None else book_dir()
    order = [ch.name for part in read_toc(root) for ch in part.chapters if ch.number is not None]
    files = {ch.name: ch.file for part in read_toc(root) for ch in part.chapters}
    out = {}
    for name in order:
        pre = (front_matter(_page(root, files[name])).get("rank_lab") or {}).get(
            "prerequisites"
        ) or []
        for p in pre:
            if p not in order:
                raise ValueError(
                    f"{name}: prerequisite {p!r} is not a numbered chapter of _toc.yml"
                )
            if order.index(p) >= order.index(name):
                raise ValueError(
                    f"{name}: prerequisite {p!r} comes later in the book (reorder _toc.yml)"
                )
        out[name] = list(pre)
    return out


def map_svg(root: str | os.PathLike[str] | None = None) -> str:
    """The SVG text of the map: one band per numbered part, one box per chapter, one arrow per
    dependency."""
    root = Path(root) if root is not None else book_dir()
    parts = [p for p in read_toc(root) if p.numbered]
    titles = chapter_titles(root)
    deps = prerequisites(root)
    boxes: dict[str, tuple[float, float, float]] = {}  # name -> (x, y, width)
    rows = []
    y = _PAD
    for part in parts:
        k = len(part.chapters)
        width = min(_MAX_BOX_W, (_W - 2 * _PAD - 48 - (k - 1) * _COL_GAP) / max(k, 1))
        total = k * width + (k - 1) * _COL_GAP
        x0 = (_W - total) / 2
        for i, ch in enumerate(part.chapters):
            boxes[ch.name] = (x0 + i * (width + _COL_GAP), y + _CAPTION, width)
        rows.append((part, y))
        y += _CAPTION + _BOX_H + _ROW_GAP
    height = y - _ROW_GAP + _PAD
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {height:.0f}" width="100%" '
        f'role="img" aria-label="Map of the book: parts, chapters and the chapters each builds on" '
        f'font-family="sans-serif">',
        "<title>Map of the book: parts, chapters and the chapters each builds on</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#7a8796"/></marker></defs>',
    ]
    for _part, top in rows:
        out.append(
            f'<rect x="{_PAD / 2}" y="{top - 2}" width="{_W - _PAD}" '
            f'height="{_CAPTION + _BOX_H + 8}" rx="8" fill="#f3f6fa" stroke="#d5dde6"/>'
        )
    row_of = {ch.name: i for i, (part, _) in enumerate(rows) for ch in part.chapters}
    lanes: dict[tuple[str, str], int] = {}  # (source, side) -> lane of the side corridor
    for name, pre in deps.items():  # arrows first: boxes are drawn over them
        for p in pre:
            (sx, sy, sw), (dx, dy, dw) = boxes[p], boxes[name]
            gap = row_of[name] - row_of[p]
            if gap == 0:  # same part: side to side
                d = f"M {sx + sw:.1f} {sy + _BOX_H / 2:.1f} L {dx - 2:.1f} {dy + _BOX_H / 2:.1f}"
            elif gap == 1:  # the next part: a curve from bottom to top
                x1, y1, x2, y2 = sx + sw / 2, sy + _BOX_H, dx + dw / 2, dy
                mid = (y1 + y2) / 2
                d = (
                    f"M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f}, {x2:.1f} {mid:.1f}, {x2:.1f} "
                    f"{y2 - 2:.1f}"
                )
            # a later part: down the corridor on the side of the target, clear of the boxes between
            else:
                left = dx + dw / 2 <= _W / 2
                lane = lanes.setdefault(
                    (p, "L" if left else "R"),
                    sum(1 for k in lanes if k[1] == ("L" if left else "R")),
                )
                cx = _PAD + 2 + 6 * lane if left else _W - _PAD - 2 - 6 * lane
                y1, y2 = sy + _BOX_H / 2 + (4 if left else -4), dy + _BOX_H / 2
                x1 = sx if left else sx + sw
                x2 = dx - 2 if left else dx + dw + 2
                d = (
                    f"M {x1:.1f} {y1:.1f} L {cx:.1f} {y1:.1f} L {cx:.1f} {y2:.1f} L {x2:.1f} "
                    f"{y2:.1f}"
                )
            out.append(
                f'<path d="{d}" fill="none" stroke="#7a8796" stroke-width="1.3" '
                'marker-end="url(#arrow)"/>'
            )
    for part, top in rows:  # captions over the arrows, on the band's colour
        out.append(
            f'<rect x="{_PAD + 22}" y="{top + 1}" width="{7.2 * len(part.caption) + 8:.0f}" '
            f'height="14" fill="#f3f6fa"/>'
        )
        out.append(
            f'<text x="{_PAD + 26}" y="{top + 13}" font-size="12" font-weight="bold" '
            'fill="#34495e">'
            f"{html.escape(part.caption)}</text>"
        )
    numbers = {ch.name: ch.number for part in parts for ch in part.chapters}
    for name, (x, y0, width) in boxes.items():
        out.append(
            f'<rect x="{x:.1f}" y="{y0:.1f}" width="{width:.1f}" height="{_BOX_H}" rx="6" '
            f'fill="#ffffff" stroke="#2c7fb8" stroke-width="1.4"/>'
        )
        chars = max(12, int(width / 6.4))
        lines = textwrap.wrap(f"{numbers[name]}. {titles[name]}", chars)[:3]
        size = 11 if len(lines) < 3 else 10
        first = y0 + _BOX_H / 2 - (len(lines) - 1) * (size + 1) / 2 + size / 3
        for i, line in enumerate(lines):
            out.append(
                f'<text x="{x + width / 2:.1f}" y="{first + i * (size + 1):.1f}" '
                f'font-size="{size}" text-anchor="middle" fill="#1b2631">{html.escape(line)}</text>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rank_lab.book.bookmap [--write]``: print the map, or write
    ``book/_static/book_map.svg``."""
    args = list(argv if argv is not None else sys.argv[1:])
    svg = map_svg()
    if args == ["--write"]:
        path = book_dir() / MAP_PATH
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        print(path)
        return 0
    if args:
        print("usage: python -m rank_lab.book.bookmap [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(svg)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
