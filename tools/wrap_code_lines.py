"""Bring the code lines of the book's notebooks to at most 90 characters, changing nothing else.

    python tools/wrap_code_lines.py book/<part>/<name>.md [more.md ...]

The notebook tests refuse code lines longer than 90 characters (the book cuts them). For each
code cell of a jupytext MyST notebook that has such lines, this script:

1. moves a trailing comment that makes a line long onto its own line above it;
2. reformats only the statements that hold a long line with ``ruff format --range`` (line length
   90), leaving the rest of the cell as it was; the parameters cell is never reformatted;
3. wraps long comment-only lines, the trailing comments of the parameters cell (onto aligned
   comment lines below) and long string literals (split into adjacent literals at a space
   outside any ``{...}`` field).

A cell is written back only when its Python AST is unchanged (comments and the split of string
literals do not change the AST). What is still too long afterwards (a docstring, a long word) is
listed for a hand edit.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import tokenize

MAX = 90
RUFF = [
    sys.executable,
    "-m",
    "ruff",
    "format",
    "--isolated",
    "--line-length",
    str(MAX),
    "--target-version",
    "py310",
    "--quiet",
]
_SKIP = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def _tokens(lines: list[str]) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _move_comments(lines: list[str]) -> list[str]:
    toks = _tokens(lines)
    if toks is None:
        return lines
    comment = {t.start[0]: t.start[1] for t in toks if t.type == tokenize.COMMENT}
    code = {t.start[0] for t in toks if t.type not in _SKIP and t.type != tokenize.COMMENT}
    out: list[str] = []
    for i, line in enumerate(lines, 1):
        if len(line) > MAX and i in comment and i in code:
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + line[comment[i] :], line[: comment[i]].rstrip()]
        else:
            out.append(line)
    return out


def _ruff_ranges(lines: list[str]) -> list[str]:
    src = "\n".join(lines) + "\n"
    for _ in range(500):
        cur = src.split("\n")
        long = [i for i, line in enumerate(cur, 1) if len(line) > MAX]
        changed = False
        for n in long:
            fd, name = tempfile.mkstemp(suffix=".py")
            with os.fdopen(fd, "w") as f:
                f.write(src)
            done = subprocess.run(
                RUFF + ["--range", f"{n}:1-{n}:{len(cur[n - 1]) + 1}", name],
                capture_output=True,
                text=True,
            )
            new = open(name).read()
            os.unlink(name)
            if done.returncode == 0 and new != src:
                src, changed = new, True
                break
        if not changed:
            break
    return src.rstrip("\n").split("\n")


def _split_string(literal: str, room: int) -> tuple[str, str] | None:
    m = re.match(r"^([rRbBuUfF]*)('''|\"\"\"|'|\")", literal)
    if m is None or len(m.group(2)) == 3:
        return None
    prefix, quote = m.group(1), m.group(2)
    body = literal[len(prefix) + 1 : -1]
    depth, best = 0, None
    for i, ch in enumerate(body):
        if "f" in prefix.lower() and ch in "{}":
            depth += 1 if ch == "{" else -1
        elif ch == " " and depth == 0 and 0 < i < len(body) - 1 and body[i - 1] != "\\":
            if len(prefix) + i + 3 <= room:
                best = i
    if best is None:
        return None
    return f"{prefix}{quote}{body[: best + 1]}{quote}", f"{prefix}{quote}{body[best + 1 :]}{quote}"


def _wrap_rest(lines: list[str], parameters_cell: bool) -> list[str]:
    toks = _tokens(lines)
    if toks is None:
        return lines
    by_line: dict[int, list[tokenize.TokenInfo]] = {}
    for t in toks:
        if t.type not in _SKIP:
            by_line.setdefault(t.start[0], []).append(t)
    out: list[str] = []
    for n, line in enumerate(lines, 1):
        ts = by_line.get(n, [])
        indent = line[: len(line) - len(line.lstrip())]
        if len(line) <= MAX or not ts:
            out.append(line)
        elif len(ts) == 1 and ts[0].type == tokenize.COMMENT:  # a comment-only line
            text = line.strip().lstrip("#").strip()
            out += [f"{indent}# {w}" for w in textwrap.wrap(text, MAX - len(indent) - 2)]
        elif parameters_cell and ts[-1].type == tokenize.COMMENT and MAX - ts[-1].start[1] >= 27:
            col = ts[-1].start[1]
            parts = textwrap.wrap(ts[-1].string.lstrip("#").strip(), MAX - col - 2)
            out += [line[:col] + "# " + parts[0]] + [" " * col + "# " + p for p in parts[1:]]
        else:
            strings = [t for t in ts if t.type == tokenize.STRING and t.start[0] == t.end[0] == n]
            t = max(strings, key=lambda t: len(t.string)) if strings else None
            if t is None or line[: t.start[1]].strip():
                out.append(line)
                continue
            after, rest, pieces = line[t.end[1] :], t.string, []
            while len(indent) + len(rest) + len(after) > MAX:
                split = _split_string(rest, MAX - len(indent))
                if split is None:
                    break
                pieces.append(split[0])
                rest = split[1]
            out += [indent + p for p in pieces] + [indent + rest + after]
    return out


def _same_ast(a: list[str], b: list[str]) -> bool:
    try:
        return ast.dump(ast.parse("\n".join(a))) == ast.dump(ast.parse("\n".join(b)))
    except SyntaxError:
        return False


def wrap_notebook(path: str) -> list[str]:
    """Rewrite ``path`` in place; return the code lines still longer than :data:`MAX`."""
    text = open(path, encoding="utf-8").read().split("\n")
    out: list[str] = []
    left: list[str] = []
    i = 0
    while i < len(text):
        line = text[i]
        out.append(line)
        i += 1
        if not line.startswith("```{code-cell}"):
            continue
        options = []
        while i < len(text) and text[i].startswith(":") and not text[i].startswith("::"):
            options.append(text[i])
            i += 1
        start = i
        while not text[i].startswith("```"):
            i += 1
        body = text[start:i]
        magics = any(b.lstrip().startswith(("%", "!")) for b in body)
        if any(len(b) > MAX for b in body) and not magics:
            parameters_cell = ":tags: [parameters]" in options
            new = body if parameters_cell else _ruff_ranges(_move_comments(body))
            new = _wrap_rest(new, parameters_cell)
            if _same_ast(body, new):
                body = new
            else:
                left.append(
                    f"{path}: a cell at line {start + 1} would change its AST; left as it was"
                )
        out += options + body
        first = len(out) - len(body) + 1  # line number of the cell's first code line, as written
        left += [
            f"{path}:{first + j}: {len(b)} characters" for j, b in enumerate(body) if len(b) > MAX
        ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    return left


if __name__ == "__main__":
    remaining = [msg for p in sys.argv[1:] for msg in wrap_notebook(p)]
    print("\n".join(remaining) if remaining else "every code line fits in 90 characters")
    sys.exit(1 if remaining else 0)
