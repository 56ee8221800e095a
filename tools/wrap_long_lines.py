"""Rewrap the lines that ``ruff format`` leaves longer than the line length, changing no code.

    python tools/wrap_long_lines.py [--line-length 100] [--check] [--before-format] PATH [PATH ...]

Run after ``ruff format`` (``make format`` runs both). With ``--before-format`` it only moves long
trailing comments onto their own line, so that ruff does not split a statement to make room for
its comment. PATHs are ``.py`` files or folders
(searched for ``*.py``). For each line longer than the limit it:

1. rewraps a comment-only line at word boundaries, keeping its indentation and its ``#``/``#:``
   prefix; moves a long trailing comment onto its own line above the code line (pragmas such as
   ``# noqa`` and ``# type:`` stay where they are);
2. breaks a long prose line of a docstring at a space, the continuation indented like the line or,
   for a Google-style section item (``name: text``) or a bullet, with the item's hanging
   indentation; literal blocks (after ``::``, ``>>>`` examples, ``|`` and ``+--``/``===`` tables,
   fenced code) are never touched;
3. breaks a long line of another triple-quoted string with a backslash-newline continuation (the
   string's value stays identical; raw strings are left alone);
4. splits a long single-line string literal of the code (f-strings and prefixes kept) into
   implicitly concatenated pieces at spaces, one per line, outside any ``{...}`` field, wrapped in
   parentheses unless the string already starts its line inside brackets.

What is still too long then gets ``  # noqa: E501`` where a comment is valid (for a line inside a
multi-line string: after the string's closing quotes, which ruff applies to the whole string) and
is listed. A file is written only when its AST is unchanged, docstrings compared with their
whitespace runs collapsed and every other string compared exactly; otherwise it is left as it was
and reported. Running the tool twice changes nothing. Exit status 1 when a file was refused (or,
with ``--check``, would change).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

PRAGMA = re.compile(r"#\s*(noqa\b|type:|fmt:|pragma\b|pylint:|pyright:|isort:|ruff:|nosec\b)", re.I)
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.I)
SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
ITEM = re.compile(r"^\s*\**[\w.\[\], |*]+?( \([^)]*\))?:(\s|$)")
BULLET = re.compile(r"^(\s*)([-*+]|\d+[.)]|\(\d+\)|[a-z][.)]) +")
LITERAL_START = ("|", "+-", "+=", "==", ">>>", "```", "~~~", ".. ", "$$")
BAD_CONTINUATION = re.compile(r"^([-*+|#]|>>>|\.\.|\d+[.)] |::)")
_SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def width(text: str) -> int:
    """Display width as ruff measures it (East Asian wide characters count 2)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def too_long(line: str, limit: int) -> bool:
    """Whether ruff's E501 flags ``line``: not a single word, no URL at its end, no pragma
    excuse."""
    if width(line) <= limit:
        return False
    chunks = line.split()
    if len(chunks) < 2 or (len(chunks) == 2 and chunks[0] == "#"):
        return False
    if "://" in chunks[-1] and width(line) - width(chunks[-1]) <= limit:
        return False
    m = PRAGMA.search(line)
    return not (m and "#" in line and width(line[: m.start()].rstrip()) <= limit)


@dataclass
class Tok:
    """A token; f-strings of Python >= 3.12 are merged back into one STRING token."""

    type: int
    string: str
    start: tuple[int, int]
    end: tuple[int, int]


def tokens(src: str) -> list[Tok]:
    out: list[Tok] = []
    fstring: list[tokenize.TokenInfo] = []
    fs_start = getattr(tokenize, "FSTRING_START", -1)
    fs_end = getattr(tokenize, "FSTRING_END", -1)
    lines = src.splitlines(keepends=True)
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == fs_start or fstring:
            fstring.append(t)
            depth = sum(x.type == fs_start for x in fstring) - sum(
                x.type == fs_end for x in fstring
            )
            if depth == 0:
                (r0, c0), (r1, c1) = fstring[0].start, t.end
                text = "".join(lines[r0 - 1 : r1])
                start = c0
                stop = len(text) - len(lines[r1 - 1]) + c1
                out.append(Tok(tokenize.STRING, text[start:stop], (r0, c0), (r1, c1)))
                fstring = []
            continue
        if t.type not in _SKIP:
            out.append(Tok(t.type, t.string, t.start, t.end))
    return out


def string_parts(literal: str) -> tuple[str, str, str] | None:
    """``(prefix, quote, body)`` of a string literal token."""
    m = re.match(r"^([rRbBuUfF]*)('''|\"\"\"|'|\")", literal)
    if m is None:
        return None
    prefix, quote = m.group(1), m.group(2)
    return prefix, quote, literal[len(prefix) + len(quote) : len(literal) - len(quote)]


def field_mask(body: str, is_f: bool) -> list[bool]:
    """For each character of an f-string body, whether it lies inside a ``{...}`` field."""
    mask = [False] * len(body)
    if not is_f:
        return mask
    depth, i = 0, 0
    quote = None
    while i < len(body):
        ch = body[i]
        if depth == 0:
            if body.startswith("{{", i) or body.startswith("}}", i):
                i += 2
                continue
            if ch == "{":
                depth = 1
                mask[i] = True
        else:
            mask[i] = True
            if quote:
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
        i += 1
    return mask


def _plain(prefix: str, body: str) -> str:
    """The prefix of an f-string piece without fields loses its ``f``."""
    return (
        prefix.replace("f", "").replace("F", "") if "{" not in body and "}" not in body else prefix
    )


def _requote(prefix: str, quote: str, body: str) -> str:
    """A piece in the quotes ``ruff format`` prefers: double quotes unless the body holds one."""
    raw = "r" in prefix.lower()
    if quote == "'" and '"' not in body and not (raw and "\\'" in body):
        if not raw:
            body = re.sub(r"(?<!\\)((?:\\\\)*)\\'", r"\1'", body)
        quote = '"'
    return f"{prefix}{quote}{body}{quote}"


def _expr_dump(code: str) -> str | None:
    try:
        return ast.dump(ast.parse("(\n" + code + "\n)", mode="eval"))
    except SyntaxError:
        return None


def split_string(literal: str, first: int, rest: int, last_extra: int) -> list[str] | None:
    """Pieces of a single-line string literal, each at most ``first``/``rest`` wide (the last one
    also holding ``last_extra`` more columns), cut after a space outside any f-string field; None
    when no cut is possible or the pieces would not make the same value."""
    parts = string_parts(literal)
    if parts is None:
        return None
    prefix, quote, body = parts
    mask = field_mask(body, "f" in prefix.lower())
    cuts = [
        i + 1
        for i, ch in enumerate(body)
        if ch == " "
        and not mask[i]
        and 0 < i < len(body) - 1
        and body[i - 1] != "\\"
        and not body[i + 1 :].startswith(" ")
    ]
    pieces: list[str] = []
    start = 0
    budget = first
    over = len(prefix) + 2 * len(quote)
    while width(body[start:]) + over + last_extra > budget:
        fits = [c for c in cuts if c > start and width(body[start:c]) + over <= budget]
        later = [c for c in cuts if c > start]
        if not later:
            break
        cut = fits[-1] if fits else later[0]
        pieces.append(body[start:cut])
        start = cut
        budget = rest
    if not pieces:
        return None
    pieces.append(body[start:])
    out = [_requote(_plain(prefix, p), quote, p) for p in pieces]
    if _expr_dump(literal) is None or _expr_dump(literal) != _expr_dump("\n".join(out)):
        return None
    return out


# ---------------------------------------------------------------------------------------------
# docstrings


def docstring_layout(lines: list[str], first_indent: int) -> list[int | None]:
    """For each line of a docstring (the first one with its opening quotes replaced by spaces),
    the indentation of a continuation of that line, or None when the line is literal."""
    out: list[int | None] = [None] * len(lines)
    literal_indent: int | None = None  # inside a ``::`` block: lines indented more than this
    in_fence = False
    in_example = False
    section_indent: int | None = None
    item_indent: int | None = None
    paragraph: list[int] = []

    def close_paragraph() -> None:
        if any(out[j] is None and not lines[j].strip() == "" for j in paragraph):
            for j in paragraph:
                out[j] = None
        paragraph.clear()

    for i, line in enumerate(lines):
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if not text:
            close_paragraph()
            in_example = False
            continue
        if literal_indent is not None:
            if indent > literal_indent:
                continue
            literal_indent = None
        if text.startswith(("```", "~~~")):
            in_fence = not in_fence
            close_paragraph()
            continue
        if in_fence:
            continue
        if text.startswith(">>>"):
            in_example = True
        if in_example or text.startswith(LITERAL_START):
            paragraph.append(i)  # out[i] stays None: the whole paragraph becomes literal
            if text.endswith("::"):
                literal_indent = indent
            continue
        if text.endswith("::"):
            literal_indent = indent
            paragraph.append(i)
            out[i] = indent  # the line itself is prose
            continue
        if SECTION.match(line):
            section_indent, item_indent = indent, None
            out[i] = indent
            paragraph.append(i)
            continue
        if section_indent is not None and indent <= section_indent:
            section_indent = item_indent = None
        if section_indent is not None and item_indent is None:
            item_indent = indent
        hang = indent
        bullet = BULLET.match(line)
        if bullet:
            hang = len(bullet.group(0))
        elif item_indent is not None and indent == item_indent and ITEM.match(line):
            hang = indent + 4
        out[i] = hang
        paragraph.append(i)
    close_paragraph()
    if out and lines and out[0] is not None:
        out[0] = first_indent if not BULLET.match(lines[0]) else out[0]
    return out


def break_prose(line: str, lo: int, hi: int, hang: int, limit: int) -> tuple[str, str] | None:
    """Break ``line`` at a space between columns ``lo`` and ``hi`` (its text region): the first
    part fits ``limit`` and the continuation ``hang`` spaces + rest; None if no such space."""
    ticks = 0
    candidates: list[tuple[int, int]] = []  # (badness, position)
    for i in range(lo, min(hi, len(line))):
        ch = line[i]
        if ch == "`" and line[i - 1] != "`":
            ticks += 1  # a run of backticks opens or closes an inline literal or role
        if ch != " " or i <= max(lo, hang) or line[i - 1] == " ":
            continue
        head = line[:i].rstrip()
        tail = line[i:].lstrip()
        if not tail or i + (len(line) - i - len(line[i:].lstrip())) >= hi:
            continue
        if width(head) > limit:
            break
        bad = 0
        if ticks % 2:
            bad += 2  # inside an inline literal or role
        if BAD_CONTINUATION.match(tail) or head.endswith("::"):
            bad += 4
        candidates.append((bad, i))
    if not candidates:
        return None
    best = min(b for b, _ in candidates)
    pos = max(p for b, p in candidates if b == best)
    if best >= 4:
        return None
    return line[:pos].rstrip(), " " * hang + line[pos:].lstrip()


# ---------------------------------------------------------------------------------------------
# one pass


@dataclass
class Notes:
    noqa: list[int] = field(default_factory=list)
    left: list[tuple[int, str]] = field(default_factory=list)


def _docstring_starts(tree: ast.AST) -> set[tuple[int, int]]:
    """Start positions of string expression statements (docstrings, attribute docstrings)."""
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out.add((node.value.lineno, node.value.col_offset))
    return out


def _code_line_info(toks: list[Tok]):
    by_line: dict[int, list[tuple[Tok, int]]] = {}
    inside: dict[int, Tok] = {}  # line -> multi-line string token covering (part of) it
    depth = 0
    for t in toks:
        by_line.setdefault(t.start[0], []).append((t, depth))
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            depth -= 1
        if t.type == tokenize.STRING and t.end[0] > t.start[0]:
            for r in range(t.start[0], t.end[0] + 1):
                inside[r] = t
    return by_line, inside


def one_pass(src: str, limit: int, pre: bool = False) -> str:
    """Fix at most one thing per long line; the caller repeats until nothing changes."""
    lines = src.split("\n")
    if not any(too_long(line, limit) for line in lines):
        return src
    toks = tokens(src)
    docs = _docstring_starts(ast.parse(src))
    by_line, inside = _code_line_info(toks)
    edits: dict[int, tuple[int, list[str]]] = {}  # first line -> (lines replaced, new lines)
    skip_until = 0
    for n, line in enumerate(lines, 1):
        if n <= skip_until or not too_long(line, limit):
            continue
        new = _fix_line(lines, n, limit, docs, by_line, inside, pre)
        if new:
            edits[n] = new
            skip_until = n + new[0] - 1
    if not edits:
        return src
    out: list[str] = []
    n = 1
    while n <= len(lines):
        count, repl = edits.get(n, (1, [lines[n - 1]]))
        out.extend(repl)
        n += count
    return "\n".join(out)


def _fix_line(lines, n, limit, docs, by_line, inside, pre=False) -> tuple[int, list[str]] | None:
    line = lines[n - 1]
    mls = inside.get(n)
    if pre:
        # before ruff format: only move long trailing comments up, so that ruff does not split
        # a statement just to make room for its comment
        toks = by_line.get(n, [])
        last = toks[-1][0] if toks else None
        if len(toks) < 2 or last.type != tokenize.COMMENT or PRAGMA.match(last.string):
            return None
    if mls is not None and (mls.start[0] < n or mls.end[0] > n):
        if mls.start in docs:
            return _wrap_docstring_line(lines, n, mls, limit)
        new = _wrap_string_line(lines, n, mls, limit)
        return (1, new) if new else None
    line_toks = by_line.get(n, [])
    if not line_toks:
        return None
    first, _ = line_toks[0]
    last, _ = line_toks[-1]
    if first.type == tokenize.COMMENT:
        return _wrap_comment(lines, n, by_line, limit)
    if last.type == tokenize.COMMENT and not PRAGMA.match(last.string):
        prev = lines[n - 2] if n >= 2 else ""
        if prev.rstrip().endswith("\\") or (mls is not None and mls.start[0] < n):
            return None
        indent = line[: len(line) - len(line.lstrip())]
        return 1, [indent + last.string, line[: last.start[1]].rstrip()]
    if last.type == tokenize.COMMENT:
        return None
    strings = [
        i
        for i, (t, _) in enumerate(line_toks)
        if t.type == tokenize.STRING and t.start[0] == t.end[0] == n
    ]
    if not strings:
        return None
    i = max(strings, key=lambda i: len(line_toks[i][0].string))
    tok, depth = line_toks[i]
    if tok.start in docs and len(line_toks) == 1:
        return _wrap_docstring_line(lines, n, tok, limit)
    prev_tok = line_toks[i - 1][0] if i > 0 else _previous_token(by_line, n)
    next_tok = (
        line_toks[i + 1][0] if i + 1 < len(line_toks) else _next_token(by_line, n, len(lines))
    )
    adjacent = any(t is not None and t.type == tokenize.STRING for t in (prev_tok, next_tok))
    new = _split_code_string(lines, n, tok, depth, adjacent, next_tok, limit)
    if not new:
        return None
    nxt = lines[n] if n < len(lines) else ""
    if (
        next_tok is not None
        and next_tok.type == tokenize.STRING
        and next_tok.start[0] == next_tok.end[0] == n + 1
        and not nxt[: next_tok.start[1]].strip()
        and not line[tok.end[1] :].strip()
    ):
        # the last piece flows into the next part of the concatenation (split again if too long)
        merged = merge_strings(new[-1].strip(), next_tok.string)
        if merged is not None:
            head = nxt[: next_tok.start[1]] + merged + nxt[next_tok.end[1] :]
            return 2, new[:-1] + [head]
    return 1, new


def merge_strings(a: str, b: str) -> str | None:
    """One literal with the value of the adjacent literals ``a b``, or None when their prefixes
    or quotes differ (an f-string takes a plain piece without braces)."""
    pa, pb = string_parts(a), string_parts(b)
    if pa is None or pb is None or pa[1] != pb[1] or len(pa[1]) == 3:
        return None
    (prefa, quote, body_a), (prefb, _, body_b) = pa, pb
    la, lb = prefa.lower(), prefb.lower()
    if ("r" in la) != ("r" in lb) or ("b" in la) != ("b" in lb):
        return None
    if ("f" in la) != ("f" in lb):
        plain = body_b if "f" in la else body_a
        if "{" in plain or "}" in plain:
            return None
    prefix = prefb if "f" in lb else prefa
    merged = _requote(prefix, quote, body_a + body_b)
    if _expr_dump(a + "\n" + b) != _expr_dump(merged) or _expr_dump(merged) is None:
        return None
    return merged


def _previous_token(by_line, n: int) -> Tok | None:
    for r in range(n - 1, 0, -1):
        toks = [t for t, _ in by_line.get(r, []) if t.type != tokenize.COMMENT]
        if toks:
            return toks[-1]
    return None


def _next_token(by_line, n: int, total: int) -> Tok | None:
    for r in range(n + 1, total + 1):
        toks = [t for t, _ in by_line.get(r, []) if t.type != tokenize.COMMENT]
        if toks:
            return toks[0]
    return None


def _joinable(text: str, items: bool = True) -> bool:
    """Whether a line's text reads as the continuation of the sentence above it."""
    if not text or not (text[0].islower() or text[0] in "(`'\"") or text.startswith(LITERAL_START):
        return False
    return not (BULLET.match(text) or PRAGMA.match(text) or SECTION.match(text)) and not (
        items and ITEM.match(text)
    )


def _wrap_comment(lines: list[str], n: int, by_line, limit: int) -> tuple[int, list[str]] | None:
    line = lines[n - 1]
    stripped = line.lstrip()
    if PRAGMA.match(stripped) or stripped.startswith("#!"):
        return None
    indent = line[: len(line) - len(stripped)]
    m = re.match(r"#+[:!]?\s*", stripped)
    lead = indent + m.group(0)
    if not lead.endswith(" "):
        lead += " "
    bullet = BULLET.match(stripped[m.end() :])
    hang = lead + " " * (len(bullet.group(0)) if bullet else 0)
    rule = re.search(r"([-=#*~_])\1{3,}$", line)
    if rule and width(line[: rule.start()]) + 4 <= limit:
        return 1, [line[: rule.start()] + rule.group(1) * (limit - width(line[: rule.start()]))]
    split = break_prose(line, len(lead), len(line), 0, limit)
    if split is None:
        return None
    head, tail = split
    if n < len(lines):
        nxt = lines[n]
        toks = by_line.get(n + 1, [])
        if (
            len(toks) == 1
            and toks[0][0].type == tokenize.COMMENT
            and nxt.startswith(hang)
            and _joinable(nxt[len(hang) :])
        ):
            return 2, [head, hang + tail + " " + nxt[len(hang) :]]
    return 1, [head, hang + tail]


def _wrap_docstring_line(
    lines: list[str], n: int, tok: Tok, limit: int
) -> tuple[int, list[str]] | None:
    r0, c0 = tok.start
    r1, c1 = tok.end
    parts = string_parts(tok.string)
    if parts is None:
        return None
    prefix, quote, _ = parts
    open_len = len(prefix) + len(quote)
    doc = lines[r0 - 1 : r1]
    doc = [" " * (c0 + open_len) + doc[0][c0 + open_len :]] + doc[1:]
    if r1 == r0:
        doc[0] = doc[0][: c1 - len(quote)]
    else:
        doc[-1] = doc[-1][: c1 - len(quote)]
    layout = docstring_layout(doc, c0)
    hang = layout[n - r0]
    if hang is None:
        return None
    line = lines[n - 1]
    lo = c0 + open_len if n == r0 else 0
    hi = c1 - len(quote) if n == r1 else len(line)
    split = break_prose(line, lo, hi, hang, limit)
    if split is None:
        return None
    head, tail = split
    k = n - r0 + 1  # index of the next line in ``doc``
    if n < r1 and layout[k] is not None:
        nxt = lines[n]
        text = nxt.lstrip()
        plain = layout[k] == len(nxt) - len(text) and not BULLET.match(text)
        if len(nxt) - len(text) == hang and plain and _joinable(text, items=False):
            return 2, [head, tail + " " + text]
    return 1, [head, tail]


def _wrap_string_line(lines: list[str], n: int, tok: Tok, limit: int) -> list[str] | None:
    """A line of a non-docstring triple-quoted string: backslash-newline continuation, the
    continuation at column 0, so that the string's value is unchanged."""
    parts = string_parts(tok.string)
    if parts is None or "r" in parts[0].lower():
        return None
    prefix, quote, _ = parts
    r0, c0 = tok.start
    line = lines[n - 1]
    lo = c0 + len(prefix) + len(quote) if n == r0 else 0
    hi = tok.end[1] - len(quote) if n == tok.end[0] else len(line)
    # the part of the token before this line decides whether a position is inside an f-field
    before = "\n".join(lines[r0 - 1 : n - 1])[c0:] if n > r0 else line[c0:lo]
    body_prefix = before[len(prefix) + len(quote) :] + ("\n" if n > r0 else "")
    segment = line[lo if n == r0 else 0 : hi]
    mask = field_mask(body_prefix + segment, "f" in prefix.lower())[len(body_prefix) :]
    base = lo if n == r0 else 0
    best = None
    for i, ch in enumerate(segment):
        pos = base + i
        if ch != " " or mask[i] or pos == base or line[pos - 1] in " \\":
            continue
        if width(line[: pos + 1]) + 1 > limit:
            break
        if not line[pos + 1 : hi].strip():
            break
        best = pos
    if best is None:
        return None
    return [line[: best + 1] + "\\", line[best + 1 :]]


def _split_code_string(
    lines: list[str], n: int, tok: Tok, depth: int, adjacent: bool, next_tok: Tok | None, limit: int
) -> list[str] | None:
    line = lines[n - 1]
    indent = line[: len(line) - len(line.lstrip())]
    before, after = line[: tok.start[1]], line[tok.end[1] :]
    if not before.strip() and depth > 0:
        room = limit - len(indent)
        pieces = split_string(tok.string, room, room, width(after))
        if pieces is None:
            return None
        return [indent + p for p in pieces[:-1]] + [indent + pieces[-1] + after]
    if adjacent:
        # part of an implicit concatenation: split in place, the pieces indented like the next part
        if depth == 0:
            return None
        more = indent
        if next_tok is not None and next_tok.type == tokenize.STRING and next_tok.start[0] > n:
            more = " " * next_tok.start[1]
        pieces = split_string(tok.string, limit - width(before), limit - len(more), width(after))
        if pieces is None:
            return None
        rest = [more + p for p in pieces[1:]]
        rest[-1] += after
        return [before + pieces[0]] + rest
    inner = indent + "    "
    if width(inner + tok.string) <= limit:
        pieces = [tok.string]
    else:
        pieces = split_string(tok.string, limit - len(inner), limit - len(inner), 0)
        if pieces is None:
            return None
    if before.rstrip().endswith(("(", "[", "{")) and after.startswith((")", "]", "}")):
        return [before.rstrip()] + [inner + p for p in pieces] + [indent + after]
    return [before + "("] + [inner + p for p in pieces] + [indent + ")" + after]


# ---------------------------------------------------------------------------------------------
# noqa for what is left


def add_noqa(src: str, limit: int, notes: Notes) -> str:
    lines = src.split("\n")
    toks = tokens(src)
    by_line, inside = _code_line_info(toks)
    targets: dict[int, list[int]] = {}  # line that gets the noqa -> long lines it covers
    for n, line in enumerate(lines, 1):
        if not too_long(line, limit):
            continue
        t = inside.get(n)
        target = t.end[0] if t is not None else n
        end_tok = inside.get(target)
        if lines[target - 1].rstrip().endswith("\\") or (
            end_tok is not None and end_tok.end[0] > target
        ):
            notes.left.append((n, "too long; no place for a noqa comment"))
            continue
        targets.setdefault(target, []).append(n)
    for target, covered in sorted(targets.items()):
        line = lines[target - 1]
        comments = [t for t, _ in by_line.get(target, []) if t.type == tokenize.COMMENT]
        m = NOQA.search(comments[-1].string) if comments else None
        if m and not m.group("codes"):
            new = line  # a blanket noqa already covers it
        elif m:
            if "E501" in m.group("codes").upper():
                new = line
            else:
                c = comments[-1]
                new = (
                    line[: c.start[1]]
                    + c.string[: m.end("codes")]
                    + ", E501"
                    + c.string[m.end("codes") :]
                )
        else:
            new = line.rstrip() + "  # noqa: E501"
        if new != line:
            lines[target - 1] = new
        for n in covered:
            notes.noqa.append(n)
            if n != target:
                notes.left.append((n, f"inside a literal or raw string; noqa on line {target}"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the AST check and the driver


def normalized_dump(src: str) -> str:
    """The module's AST with every docstring's whitespace runs collapsed to one space."""
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            node.value.value = " ".join(node.value.value.split())
    return ast.dump(tree)


def wrap_source(src: str, limit: int = 100, pre: bool = False) -> tuple[str, Notes]:
    """The rewrapped source and its notes; raises ValueError when the AST would change.

    ``pre``: the pass before ``ruff format``, which only moves long trailing comments up."""
    notes = Notes()
    new = src
    for _ in range(200):
        nxt = one_pass(new, limit, pre)
        if nxt == new:
            break
        new = nxt
    if not pre:
        new = add_noqa(new, limit, notes)
    if new != src and normalized_dump(new) != normalized_dump(src):
        raise ValueError("the AST would change")
    return new, notes


def iter_files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--line-length", type=int, default=100)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if any would")
    ap.add_argument(
        "--before-format",
        action="store_true",
        help="only move long trailing comments onto their own line (run before ruff format)",
    )
    args = ap.parse_args(argv)
    refused, changed, noqa, left = [], [], 0, []
    for path in iter_files(args.paths):
        src = path.read_text(encoding="utf-8")
        try:
            new, notes = wrap_source(src, args.line_length, args.before_format)
        except (ValueError, SyntaxError, tokenize.TokenError) as exc:
            refused.append(f"{path}: left unchanged ({exc})")
            continue
        noqa += len(notes.noqa)
        left += [f"{path}:{n}: {why}" for n, why in sorted(notes.left)]
        if new != src:
            changed.append(str(path))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "would change" if args.check else "changed"
    print(f"{verb} {len(changed)} file(s); {noqa} long line(s) under '# noqa: E501'")
    for msg in left:
        print("  listed:", msg)
    for msg in refused:
        print("  REFUSED:", msg)
    return 1 if refused or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
