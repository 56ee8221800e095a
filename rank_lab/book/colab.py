"""MyST Markdown -> plain Jupyter Markdown, for the Colab twins of the book's notebooks.

The site is built by Sphinx, which resolves MyST's roles and directives; Colab renders a Markdown
cell as CommonMark with ``$...$`` math and shows MyST syntax as raw text. :class:`ColabMarkdown`
rewrites the Markdown cells of one notebook the way the site shows them:

* ``{cite}`key``` / ``{cite:p}`` -> "(Author, year)", or "Author, year" inside parentheses of the
  text ("({cite}`key`, §2)" -> "(Author, year, §2)", never doubled brackets), ``{cite:t}`` ->
  "Author (year)" (the author-year style of ``_config.yml``); :meth:`ColabMarkdown.references_cell`
  lists the cited entries of ``book/references.bib`` at the end of the twin;
* display math labelled ``$$ ... $$ (label)`` -> ``$$ ... \\tag{n} $$``, numbered in page order as
  Sphinx numbers them, and ``{eq}`label``` -> ``(n)``;
* ``{mod}``, ``{func}``, ``{class}``, ``{meth}``, ``{data}``, ``{attr}``, ``{exc}``, ``{obj}``
  -> inline code (``~`` keeps the last component; functions and methods get ``()`` as on the site);
  ``{math}`` -> ``$...$``; ``{doc}`` -> the page's title, linked to its Colab twin when the
  repository is on GitHub;
* admonitions (``{note}`` fences of backticks or of colons, ``:::{note}``) -> a block quote with a
  bold title;
  ``(label)=`` targets are dropped;
* ``{ref}`label``` -> the labelled page's or section's title (linked to its twin when it is a
  notebook), ``{repo}`path``` -> a link to the repository file;
* ``{exercise}`` / ``{solution}`` / ``{solution-start}`` ... ``{solution-end}`` (sphinx-exercise)
  -> "Exercise n" block quotes, numbered in page order, and "Solution to Exercise n" (the gated
  solution's code cells stay code cells); ``{prf:...}`` (sphinx-proof) -> numbered block quotes;
* ``{rerun-box}`` -> the box's Markdown (:func:`rank_lab.book.rerun.rerun_markdown`), converted.

Anything else in MyST syntax raises :class:`MystConversionError` naming the notebook, so a new
construct cannot leak into a twin unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from .bibtex import BibEntry, BibError

__all__ = [
    "ColabMarkdown",
    "MystConversionError",
    "MYST_LEFTOVER",
    "equation_labels",
    "doc_resolver",
    "ref_resolver",
]


class MystConversionError(ValueError):
    """A Markdown cell holds MyST syntax the converter does not know, or a reference it cannot
    resolve."""


#: Patterns of MyST syntax that must not survive in a twin's Markdown (the twin tests use them).
MYST_LEFTOVER = {
    "role": re.compile(r"\{[a-zA-Z][\w:.-]*\}`"),
    "directive": re.compile(r"^\s*(```+|:::+)\s*\{[\w:.-]+\}", re.M),
    "labelled math": re.compile(r"\$\$[ \t]*\([\w:.-]+\)"),
    "target": re.compile(r"^\s*\([\w:.-]+\)=\s*$", re.M),
}

_ROLE = re.compile(r"\{(?P<role>[a-zA-Z][\w:.-]*)\}(?P<ticks>`+)(?P<body>.+?)(?P=ticks)", re.S)
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+|:::+)[ \t]*(?P<info>.*)$")
_TARGET = re.compile(r"^\s*\([\w:.-]+\)=\s*$")
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
_CODE_ROLES = {
    "mod",
    "func",
    "class",
    "meth",
    "data",
    "attr",
    "exc",
    "obj",
    "const",
    "var",
    "any",
    "py:mod",
    "py:func",
    "py:class",
    "py:meth",
    "py:data",
    "py:attr",
    "py:exc",
    "py:obj",
}
_ADMONITIONS = {
    "note",
    "tip",
    "hint",
    "important",
    "warning",
    "caution",
    "attention",
    "danger",
    "error",
    "seealso",
    "admonition",
    "dropdown",
}


def _math_spans(text: str) -> list[tuple[int, int, str | None]]:
    """``(start, end, label)`` of each ``$$ ... $$`` block (``end`` after an optional
    ``(label)``)."""
    spans, i = [], 0
    while (start := text.find("$$", i)) >= 0:
        stop = text.find("$$", start + 2)
        if stop < 0:
            break
        end = stop + 2
        m = re.compile(r"[ \t]*\((?P<label>[\w:.-]+)\)").match(text, end)
        label = m.group("label") if m else None
        spans.append((start, m.end() if m else end, label))
        i = m.end() if m else end
    return spans


def equation_labels(markdown_cells: list[str]) -> dict[str, int]:
    """Numbers of the labelled equations, in page order: ``$$ ... $$ (label)`` and ``{math}`` with
    ``:label:`` (Sphinx numbers the labelled equations of a page 1, 2, ...).

    Raises:
        TypeError: ``markdown_cells`` is not a list of strings.
        MystConversionError: a label defined twice.
    """
    if isinstance(markdown_cells, str) or not all(isinstance(c, str) for c in markdown_cells):
        raise TypeError("markdown_cells must be a list of the Markdown cells' texts (str)")
    labels: dict[str, int] = {}
    for text in markdown_cells:
        found = [(start, lab) for start, _, lab in _math_spans(text) if lab]
        found += [
            (m.start(), m.group(1))
            for m in re.finditer(r"^\s*:label:\s*([\w:.-]+)\s*$", text, re.M)
        ]
        for _, lab in sorted(found):
            if lab in labels:
                raise MystConversionError(f"equation label {lab!r} is defined twice")
            labels[lab] = len(labels) + 1
    return labels


class ColabMarkdown:
    """Converts the Markdown cells of one notebook (see the module docstring).

    Args:
        name: the notebook's name (for error messages).
        equations: label -> number (:func:`equation_labels` of the notebook's Markdown cells).
        bibliography: key -> entry (:func:`rank_lab.book.bibtex.read_bib` of
            ``book/references.bib``).
        doc_link: maps a ``{doc}`` target (as written) to ``(title, url or None)``.

    Attributes:
        cited: the keys cited so far, in order of first citation.
    """

    def __init__(
        self,
        name: str,
        equations: Mapping[str, int],
        bibliography: Mapping[str, BibEntry],
        doc_link: Callable[[str], tuple[str, str | None]] | None = None,
        *,
        ref_link: Callable[[str], tuple[str, str | None]] | None = None,
        repo_link: Callable[[str], str | None] | None = None,
        rerun: Callable[[], str] | None = None,
    ) -> None:
        self.name, self.equations, self.bibliography = name, dict(equations), bibliography
        self.doc_link, self.ref_link, self.repo_link, self.rerun = (
            doc_link,
            ref_link,
            repo_link,
            rerun,
        )
        self.cited: list[str] = []
        self.exercises: dict[str, int] = {}  # exercise label -> its number on the page
        self.proofs: dict[str, tuple[str, int]] = {}  # sphinx-proof label -> (kind, number)

    # ---------------------------------------------------------------- public
    def convert(self, text: str) -> str:
        """The Colab Markdown of one cell's MyST Markdown.

        Raises:
            MystConversionError: unknown role or directive, unknown equation label, unknown citation
                key.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._blocks(text.splitlines())

    def references_cell(self) -> str | None:
        """Markdown of the reference list (the cited entries, sorted by author and year), or
        ``None``."""
        if not self.cited:
            return None
        entries = sorted(
            (self.bibliography[k] for k in self.cited),
            key=lambda e: (e.last_names[:1], e.year, e.fields.get("title", "")),
        )
        lines = [f"- {e.reference()}" for e in entries]
        return "## References\n\n" + "\n".join(lines)

    # ---------------------------------------------------------------- blocks
    def _fail(self, message: str) -> MystConversionError:
        return MystConversionError(f"{self.name}: {message}")

    def _blocks(self, lines: list[str]) -> str:
        out: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            m = _FENCE.match(line)
            if _TARGET.match(line):
                i += 1
                continue
            if not m:
                j = i
                while j < len(lines) and not _FENCE.match(lines[j]) and not _TARGET.match(lines[j]):
                    j += 1
                out.append(self._inline("\n".join(lines[i:j])))
                i = j
                continue
            fence, info = m.group("fence"), m.group("info").strip()
            close = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if lines[j].strip().startswith(fence[0] * len(fence))
                    and lines[j].strip().strip(fence[0]) == ""
                ),
                None,
            )
            if close is None:
                raise self._fail(f"unclosed {fence} fence at line {i + 1}: {line.strip()!r}")
            body = lines[i + 1 : close]
            directive = re.match(r"\{(?P<name>[\w:.-]+)\}\s*(?P<arg>.*)$", info)
            if directive is None:
                out.append("\n".join(lines[i : close + 1]))  # plain code block: verbatim
            else:
                out.append(self._directive(directive.group("name"), directive.group("arg"), body))
            i = close + 1
        return "\n".join(out)

    def _directive(self, name: str, arg: str, body: list[str]) -> str:
        options = {}
        while body and re.match(r"^\s*:[\w-]+:", body[0]):
            key, _, value = body.pop(0).strip()[1:].partition(":")
            options[key] = value.strip()
        if name == "math":
            label = options.get("label")
            tag = f" \\tag{{{self._eq_number(label)}}}" if label else ""
            return "$$\n" + "\n".join(body).strip("\n") + tag + "\n$$"
        if name == "exercise":
            number = len(self.exercises) + 1
            if options.get("label"):
                self.exercises[options["label"]] = number
            title = f"Exercise {number}" + (
                f" ({self._inline(arg.strip())})" if arg.strip() else ""
            )
            return self._quote(title, body)
        if name in ("solution", "solution-start"):
            target = arg.strip()
            if target not in self.exercises:
                raise self._fail(
                    f"{{{name}}} of an unknown exercise {target!r} (exercises: "
                    f"{sorted(self.exercises)})"
                )
            title = f"Solution to Exercise {self.exercises[target]}"
            return (
                self._quote(title, body)
                if name == "solution"
                else f"> **{title}** (the code cell below)"
            )
        if name == "solution-end":
            return ""
        if name.startswith("prf:") and name != "prf:proof":
            kind = name.removeprefix("prf:").capitalize()
            number = sum(1 for k, _ in self.proofs.values() if k == kind) + 1
            if options.get("label"):
                self.proofs[options["label"]] = (kind, number)
            title = f"{kind} {number}" + (f" ({self._inline(arg.strip())})" if arg.strip() else "")
            return self._quote(title, body)
        if name == "prf:proof":
            return self._quote("Proof", body)
        if name == "rerun-box":
            if self.rerun is None:
                raise self._fail("{rerun-box} needs a rerun resolver")
            return self._blocks(self.rerun().splitlines())
        if name in _ADMONITIONS:
            title = (
                arg.strip()
                if name in ("admonition", "dropdown") and arg.strip()
                else name.capitalize()
            )
            if name == "seealso":
                title = "See also"
            inner = (
                body
                if name in ("admonition", "dropdown") or not arg.strip()
                else [arg.strip(), "", *body]
            )
            text = self._blocks(inner).strip("\n")
            quoted = "\n".join(f"> {ln}" if ln.strip() else ">" for ln in text.splitlines())
            return f"> **{self._inline(title)}**\n>\n{quoted}"
        raise self._fail(f"MyST directive {{{name}}} has no Colab rendering (rank_lab.book.colab)")

    def _quote(self, title: str, body: list[str]) -> str:
        text = self._blocks(body).strip("\n")
        quoted = "\n".join(f"> {ln}" if ln.strip() else ">" for ln in text.splitlines())
        return f"> **{title}**\n>\n{quoted}" if quoted else f"> **{title}**"

    # ---------------------------------------------------------------- inline
    def _eq_number(self, label: str) -> int:
        if label not in self.equations:
            raise self._fail(
                f"unknown equation label {label!r} (labelled equations: {sorted(self.equations)})"
            )
        return self.equations[label]

    def _inline(self, text: str) -> str:
        parts, pos = [], 0
        for start, end, label in _math_spans(text):
            parts.append(self._roles(text[pos:start]))
            block = text[start:end]
            if label is not None:
                body = block[: block.rfind("$$")]
                block = f"{body.rstrip()} \\tag{{{self._eq_number(label)}}}" + (
                    " $$" if "\n" not in body else "\n$$"
                )
            parts.append(block)
            pos = end
        parts.append(self._roles(text[pos:]))
        return "".join(parts)

    def _roles(self, text: str) -> str:
        out, pos, depth = [], 0, 0
        for m in _ROLE.finditer(text):
            depth = _paren_depth(text[pos : m.start()], depth)
            out.append(text[pos : m.start()])
            out.append(self._role(m, in_parens=depth > 0))
            pos = m.end()
        out.append(text[pos:])
        return "".join(out)

    def _role(self, m: re.Match[str], in_parens: bool = False) -> str:
        role, body = m.group("role"), m.group("body").strip()
        titled = _TITLED.match(body)
        title, target = (
            (titled.group("title").strip(), titled.group("target").strip())
            if titled
            else (None, body)
        )
        if role in ("cite", "cite:p", "cite:ps") and in_parens:
            # "(see {cite}`x`, §2)" reads "(see Author, 2021, §2)", not "(see (Author, 2021), §2)"
            role = "cite:alp"
        if role in (
            "cite",
            "cite:p",
            "cite:ps",
            "cite:t",
            "cite:ts",
            "cite:alp",
            "cite:author",
            "cite:year",
        ):
            return self._cite(role, target)
        if role == "eq":
            return f"({self._eq_number(target)})"
        if role in _CODE_ROLES:
            if title:
                return f"`{title}`"
            shown = target.lstrip("~").lstrip(".")
            if target.startswith("~"):
                shown = shown.rsplit(".", 1)[-1]
            if role.removeprefix("py:") in ("func", "meth") and not shown.endswith(")"):
                shown += "()"
            return f"`{shown}`"
        if role == "math":
            return f"${body}$"
        if role == "ref":
            if self.ref_link is None:
                raise self._fail(f"{{ref}}`{body}` needs a ref_link resolver")
            page, url = self.ref_link(target)
            shown = title or page
            return f"[{shown}]({url})" if url else f"*{shown}*"
        if role == "repo":
            url = self.repo_link(target) if self.repo_link is not None else None
            shown = title or target
            return f"[`{shown}`]({url})" if url else f"`{shown}`"
        if role == "prf:ref":
            if target not in self.proofs:
                raise self._fail(f"{{prf:ref}}`{target}` names no proposition of this page")
            kind, number = self.proofs[target]
            return title or f"{kind} {number}"
        if role == "doc":
            if self.doc_link is None:
                raise self._fail(f"{{doc}}`{body}` needs a doc_link resolver")
            page, url = self.doc_link(target)
            shown = title or page
            return f"[{shown}]({url})" if url else f"*{shown}*"
        raise self._fail(f"MyST role {{{role}}} has no Colab rendering (rank_lab.book.colab)")

    def _cite(self, role: str, keys_text: str) -> str:
        keys = [k.strip() for k in keys_text.split(",") if k.strip()]
        if not keys:
            raise self._fail(f"empty {{{role}}} citation")
        entries = []
        for key in keys:
            if key not in self.bibliography:
                raise BibError(f"{self.name}: citation key {key!r} is not in book/references.bib")
            if key not in self.cited:
                self.cited.append(key)
            entries.append(self.bibliography[key])
        if role in ("cite:t", "cite:ts"):
            return "; ".join(f"{e.authors_short()} ({e.year})" for e in entries)
        if role == "cite:author":
            return "; ".join(e.authors_short() for e in entries)
        if role == "cite:year":
            return "; ".join(e.year for e in entries)
        inner = "; ".join(f"{e.authors_short()}, {e.year}" for e in entries)
        return inner if role == "cite:alp" else f"({inner})"


def _paren_depth(text: str, depth: int) -> int:
    """The parenthesis depth after ``text`` (Markdown prose), starting at ``depth``; a blank line
    (a new paragraph) resets it, and inline code and ``$...$`` math do not count."""
    if "\n\n" in text or re.search(r"\n[ \t]*\n", text):
        depth, text = 0, re.split(r"\n[ \t]*\n", text)[-1]
    text = re.sub(r"`+[^`]*`+|\$[^$]*\$", "", text)
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
    return depth


def doc_resolver(
    md_path: Path, root: Path, colab_base: str | None
) -> Callable[[str], tuple[str, str | None]]:
    """A ``{doc}`` resolver for the notebook ``md_path`` of the book ``root``: the target page's
    first ``# `` heading, and the URL of its twin under ``colab_base`` (``None``: no link)."""

    def resolve(target: str) -> tuple[str, str | None]:
        rel = target.removesuffix(".md").removesuffix(".ipynb")
        # "/x/y" is relative to the project root (the folder above book/), as in Sphinx; else to the
        # page
        page = (root.parent / rel.lstrip("/")) if rel.startswith("/") else (md_path.parent / rel)
        page = page.with_suffix(".md").resolve()
        if not page.is_file():
            raise MystConversionError(f"{md_path.stem}: {{doc}}`{target}` names no page ({page})")
        heading = next(
            (
                ln[2:].strip()
                for ln in page.read_text(encoding="utf-8").splitlines()
                if ln.startswith("# ")
            ),
            page.stem,
        )
        try:
            twin = page.relative_to(root.resolve()).with_suffix(".ipynb").as_posix()
        except ValueError:
            twin = None
        return heading, (f"{colab_base}/{twin}" if colab_base and twin else None)

    return resolve


_LABEL = re.compile(r"^\((?P<label>[\w:.-]+)\)=\s*$")


def ref_resolver(root: Path, colab_base: str | None) -> Callable[[str], tuple[str, str | None]]:
    """A ``{ref}`` resolver for the book ``root``: a label's title (the heading after ``(label)=``
    in any page of the book) and the URL of the page's twin under ``colab_base`` when the page is a
    notebook (``None``: no link)."""
    labels: dict[str, tuple[Path, str]] = {}
    for page in sorted(Path(root).rglob("*.md")):
        if "_build" in page.parts:
            continue
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = _LABEL.match(line)
            if m:
                heading = next(
                    (ln.lstrip("#").strip() for ln in lines[i + 1 :] if ln.strip()),
                    m.group("label"),
                )
                labels[m.group("label")] = (page, heading)

    def resolve(label: str) -> tuple[str, str | None]:
        if label not in labels:
            raise MystConversionError(
                f"{{ref}}`{label}` names no label of the book ({len(labels)} labels)"
            )
        page, heading = labels[label]
        head = page.read_text(encoding="utf-8")[:2000]
        is_notebook = head.startswith("---") and "jupytext:" in head and "kernelspec:" in head
        if not (is_notebook and colab_base):
            return heading, None
        twin = page.relative_to(Path(root)).with_suffix(".ipynb").as_posix()
        return heading, f"{colab_base}/{twin}"

    return resolve
