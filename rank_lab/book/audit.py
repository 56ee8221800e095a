"""What a chapter shows its reader, checked: language, times, structure, plumbing, intervals.

The checks are plain functions returning lists of problems (empty: fine), so that the tests
(``tests/book/test_chapters.py``), the site check (:mod:`rank_lab.book.sitecheck`, on the built
pages) and a chapter engineer at the console share them::

    python -m rank_lab.book.audit evaluating_retrieval     # every problem of one chapter

* :func:`internal_language`: words a reader must never see (the project's history, commit hashes,
  test markers, the record command, this machine) in any text; :data:`INTERNAL_WORDS` is the list.
* :func:`hand_written_times`: times stated in a chapter's prose (every time a chapter states comes
  from its recorded run, :meth:`rank_lab.book.RecordedRun.time_sentence`).
* :func:`unlinked_repository_paths`: repository files named in prose but not linked with ``{repo}``.
* :func:`chapter_problems`: the apparatus of a converted chapter (docs/book_contract.md): opening
  boxes, summary, exercises with tested solutions, hidden plumbing, the rerun box, the reading's
  completeness, bounded intervals, appendix pages, length.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cells import CHECK_TAG
from .notebooks import book_dir, find_notebook, front_matter, to_notebook
from .readings import effects, reading_problems, reading_spec
from .record import record_spec
from .recorded import load_record
from .rerun import RerunError, rerun_spec
from .toc import toc_chapters

__all__ = [
    "INTERNAL_WORDS",
    "MAX_PAGE_LINES",
    "HIDING_TAGS",
    "BOUNDED_METRIC",
    "internal_language",
    "prose",
    "hand_written_times",
    "unlinked_repository_paths",
    "interval_problems",
    "chapter_problems",
    "main",
]

#: Words a page never shows: the project's history, internal markers, commands and machine details.
#:
#: :meta hide-value:
INTERNAL_WORDS: dict[str, re.Pattern[str]] = {
    "a test marker (NBVAL)": re.compile(r"nbval", re.I),
    "the record command": re.compile(r"rank_lab\.book\s+record"),
    "this project's machine": re.compile(
        r"\d-core CPU of this project|\bof this project\b|this project's", re.I
    ),
    "the chapter's own history": re.compile(
        r"(earlier|previous|older|former) version of this (chapter|page|notebook)"
        r"|\bthis chapter (used to|previously)\b",
        re.I,
    ),
    "git HEAD": re.compile(r"\bHEAD\b"),
    "a commit hash": re.compile(
        r"(?<![\w#/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/.-])"
    ),
    "uncommitted changes": re.compile(r"uncommitted", re.I),
    "project-internal notes": re.compile(r"di[g]ests?|shared/seeds|seeds folder", re.I),
    "an issue number": re.compile(r"\bissue\s+#?\d+", re.I),
    "a work note": re.compile(r"\b(TODO|FIXME|XXX)\b"),
}

#: A chapter's main page is at most this many lines of Markdown source (after the front matter).
MAX_PAGE_LINES = 600
#: Cell tags that keep a cell's code off the page (removed) or folded behind a toggle.
HIDING_TAGS = frozenset({"remove-cell", "remove-input", "hide-cell", "hide-input"})
#: Names of bounded metrics (accuracy, AP, recall, precision, FPR, AUROC, ...) in a results path.
#:
#: :meta hide-value:
BOUNDED_METRIC = re.compile(
    r"(acc|accuracy|\bmAP|\bAP\b|\bH-AP|AP@|R@\d|Recall|recall|precision|P@\d|FPR|TPR|"
    r"AUROC|AUPR|NDCG|ASI|F1|\bOA\b|error rate)",
    re.I,
)
#: Code that is the book's plumbing: a cell holding it is hidden or folded on the site.
#:
#: :meta hide-value:
PLUMBING = re.compile(
    r"save_results\(|print_key_figures\(|load_record\(|start_run\(|setup\(globals\(\)|"
    r"show_header\(|Reading\(|\bresults\[[^\]]+\]\s*=|\bcost\[[^\]]+\]\s*=|"
    r"\bresults\[[^\]]+\]\.update\(|\bcost\[[^\]]+\]\.update\("
)

_UNIT = r"(?:ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?)"
#: A time stated in prose: "2 minutes", "1,226 s", "15-30 min", "a few minutes", "under a minute",
#: "hours".
#:
#: :meta hide-value:
TIME_TEXT = re.compile(
    rf"\b\d[\d,]*(?:\.\d+)?\s*(?:-|–|to)?\s*(?:\d[\d,]*(?:\.\d+)?\s*)?{_UNIT}\b(?!\s*[=(])(?![-/]\w)"
    r"|\b(?:seconds|minutes?|hours?|days?|weeks?)\b",
    re.I,
)
_REPO_PATH = re.compile(
    r"(?<![\w/.`<-])((?:benchmarks|tests|tools|docs|\.ci|rank_lab)/[\w./-]+\.(?:py|md|json|yml|toml|txt)"
    r"|bench_\w+\.py|gpu_check_report\.md|(?:Makefile|pyproject\.toml|environment\.yml)\b)"
)
_FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})")
_CODE_DIRECTIVES = ("{code-cell}", "{code}", "{code-block}", "{math}", "{eval-rst}", "{raw}")
_REPO_ROLE = re.compile(r"\{repo\}`[^`]*`")


def internal_language(text: str) -> list[str]:
    """The hits of :data:`INTERNAL_WORDS` in ``text``: ``"<what>: '<match>' in '...context...'"``.

    Raises:
        TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    hits = []
    for what, pattern in INTERNAL_WORDS.items():
        for m in pattern.finditer(text):
            around = text[max(0, m.start() - 40) : m.end() + 40].replace("\n", " ")
            hits.append(f"{what}: {m.group(0)!r} in {around!r}")
    return hits


def prose(md_text: str) -> list[tuple[int, str]]:
    """``(line number, text)`` of the prose of a MyST page: no front matter, code cells, code blocks
    or math.

    Directive blocks (admonitions, exercises, solutions) are prose; their fences, option lines
    (``:label:``) and ``(label)=`` targets are not. Inline code and math (``$...$``) are blanked
    out.
    """
    if not isinstance(md_text, str):
        raise TypeError(
            f"md_text must be a page's MyST source (a string), got {type(md_text).__name__}"
        )
    lines = md_text.splitlines()
    out: list[tuple[int, str]] = []
    i = 0
    if lines and lines[0].strip() == "---":
        i = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), len(lines) - 1) + 1
    code: str | None = None  # the fence of the code block we are in
    directives: list[str] = []  # the fences of the open directives
    math = False
    for n in range(i, len(lines)):
        stripped = lines[n].strip()
        m = _FENCE.match(stripped)
        if code is not None:
            if (
                m
                and stripped == m.group(1)
                and m.group(1)[0] == code[0]
                and len(m.group(1)) >= len(code)
            ):
                code = None
            continue
        if math:
            math = "$$" not in stripped
            continue
        if m:
            fence, info = m.group(1), stripped[len(m.group(1)) :].strip()
            if not info:
                if directives and directives[-1] == fence:
                    directives.pop()
                else:
                    code = fence
            elif info.startswith("{") and not info.startswith(_CODE_DIRECTIVES):
                directives.append(fence)
            else:
                code = fence
            continue
        if stripped.startswith("$$"):
            math = stripped.count("$$") < 2
            continue
        if (
            re.match(r"^:[\w-]+:", stripped)
            or re.match(r"^\([\w:.-]+\)=$", stripped)
            or stripped in ("+++", "")
        ):
            continue
        if stripped.startswith("%"):
            continue
        text = re.sub(r"`[^`]*`", " ", lines[n])
        text = re.sub(r"\$[^$]*\$", " ", text)
        out.append((n + 1, text))
    return out


def hand_written_times(md_text: str, allowed: Sequence[str] = ()) -> list[str]:
    """Times stated in the prose of a page (``"line 12: '2 minutes'"``), outside the ``allowed``
    quotes.

    Args:
        md_text: the page's MyST source.
        allowed: exact phrases that may stay (times quoted from a source, declared in the chapter's
            front matter as ``rank_lab.quoted_times``).
    """
    if (
        isinstance(allowed, str)
        or not isinstance(allowed, Sequence)
        or not all(isinstance(a, str) for a in allowed)
    ):
        raise TypeError(f"allowed must be a list of phrases (strings), got {allowed!r}")
    hits = []
    for n, text in prose(md_text):
        for phrase in allowed:
            text = text.replace(phrase, " ")
        hits += [f"line {n}: {m.group(0).strip()!r}" for m in TIME_TEXT.finditer(text)]
    return hits


def unlinked_repository_paths(md_text: str) -> list[str]:
    """Repository files named in prose without the ``{repo}`` role
    (``"line 3: 'benchmarks/README.md'"``)."""
    hits = []
    for n, text in prose(md_text):
        raw = _REPO_ROLE.sub(" ", text)
        hits += [f"line {n}: {m.group(1)!r}" for m in _REPO_PATH.finditer(raw)]
    return hits


def _summaries(node: Any, path: str = "") -> list[tuple[str, Mapping[str, Any]]]:
    if isinstance(node, Mapping):
        if {"mean", "lo", "hi", "n"} <= set(node):
            return [(path, node)]
        return [
            x for k, v in node.items() for x in _summaries(v, f"{path}/{k}" if path else str(k))
        ]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _summaries(v, f"{path}/{i}")]
    return []


def interval_problems(results: Mapping[str, Any], exempt: Sequence[str] = ()) -> list[str]:
    """Intervals of a run's results that leave their metric's range, or bounded metrics without a
    range.

    Every summary (``mean``, ``lo``, ``hi``, ``n``) that is not a paired difference and whose path
    names a bounded metric (:data:`BOUNDED_METRIC`) must carry ``bounds`` (``ci_summary(values,
    bounds=...)``), and every summary with ``bounds`` must lie inside them.

    Args:
        results: a run's results.
        exempt: ``fnmatch`` patterns of paths that name a bounded metric's word but hold an
            unbounded quantity (declared in the front matter as ``rank_lab.unbounded``).
    """
    if (
        isinstance(exempt, str)
        or not isinstance(exempt, Sequence)
        or not all(isinstance(p, str) for p in exempt)
    ):
        raise TypeError(f"exempt must be a list of fnmatch patterns (strings), got {exempt!r}")
    out = []
    diffs = set(effects(results))
    for path, s in _summaries(results):
        if path in diffs:
            continue
        bounds = s.get("bounds")
        if bounds is not None:
            lo, hi = bounds
            if s["lo"] < lo - 1e-12 or s["hi"] > hi + 1e-12:
                out.append(
                    f"{path}: interval [{s['lo']:.4g}, {s['hi']:.4g}] leaves its range {bounds}"
                )
        elif BOUNDED_METRIC.search(path) and not any(fnmatch.fnmatchcase(path, p) for p in exempt):
            out.append(
                f"{path}: a bounded metric's summary without bounds (ci_summary(..., bounds=(0, "
                "100)))"
            )
    return out


def _without_options(text: str) -> str:
    """A page without its cell and directive option lines (``:tags: [nbval-check-output]`` is not
    text)."""
    return "\n".join(ln for ln in text.splitlines() if not re.match(r"^\s*:[\w-]+:", ln))


def _tags(cell: Any) -> set[str]:
    return set(cell.metadata.get("tags", []))


def _directive_blocks(md_text: str, name: str) -> list[tuple[str, str]]:
    """``(argument, body)`` of each ``{name}`` directive of a page (backtick or colon fences)."""
    out = []
    lines = md_text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(`{3,}|:{3,})\{" + re.escape(name) + r"\}\s*(.*)$", line.strip())
        if m:
            fence = m.group(1)
            end = next(
                (j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines)
            )
            out.append((m.group(2).strip(), "\n".join(lines[i + 1 : end])))
    return out


def _label_of(body: str) -> str | None:
    m = re.search(r"^:label:\s*(\S+)\s*$", body, re.M)
    return m.group(1) if m else None


def chapter_problems(name: str | Any) -> list[str]:
    """Everything that keeps a chapter from the apparatus of docs/book_contract.md (empty:
    converted).

    Raises:
        NotebookNotFoundError: no such notebook.
    """
    md = find_notebook(name)
    text = md.read_text(encoding="utf-8")
    meta = front_matter(md).get("rank_lab") or {}
    problems: list[str] = []
    # ---- length (the page after its front matter)
    body = text.split("\n---", 1)[1] if text.startswith("---") else text
    n_lines = len(body.strip("\n").splitlines())
    if n_lines > MAX_PAGE_LINES:
        problems.append(
            f"the main page has {n_lines} lines after its front matter (at most {MAX_PAGE_LINES}: "
            "move errata, recipes and deep dives to appendix pages)"
        )
    # ---- opening and closing
    title = re.search(r"^\(([\w-]+)\)=\n# ", body, re.M)
    if title is None or title.group(1) != md.stem:
        problems.append(f"the title is not preceded by its label ({md.stem})=")
    first_code = body.find("```{code-cell}")
    first_h2 = re.search(r"^## ", body, re.M)
    opening = body[
        : min(
            first_code if first_code >= 0 else len(body),
            first_h2.start() if first_h2 else len(body),
        )
    ]
    admonitions = [arg for arg, _ in _directive_blocks(opening, "admonition")]
    if admonitions[:2] != ["What you will learn", "Prerequisites"]:
        problems.append(
            f"the page must open with the admonitions 'What you will learn' then 'Prerequisites' "
            f"(before any code cell or section), found {admonitions}"
        )
    prereq = meta.get("prerequisites")
    if not isinstance(prereq, list) or not all(isinstance(p, str) for p in prereq):
        problems.append(
            "front matter rank_lab.prerequisites must list the chapters this one builds on ([] for "
            "none)"
        )
    else:
        chapters = toc_chapters(md.parent.parent)
        for p in prereq:
            if p not in chapters:
                problems.append(f"prerequisite {p!r} is not a chapter of _toc.yml")
            elif f"{{ref}}`{p}`" not in opening and f"<{p}>`" not in opening:
                problems.append(
                    f"the Prerequisites box does not link the prerequisite chapter {{ref}}`{p}`"
                )
    h2 = re.findall(r"^## (.+?)\s*$", body, re.M)
    if h2[-2:] != ["Summary", "Exercises"]:
        problems.append(
            f"the last two sections must be '## Summary' then '## Exercises', found {h2[-2:]}"
        )
    # ---- exercises
    exercises_text = body[body.rfind("\n## Exercises") :] if "\n## Exercises" in body else ""
    exercises = _directive_blocks(exercises_text, "exercise")
    labels = [_label_of(b) for _, b in exercises]
    if not 3 <= len(exercises) <= 6:
        problems.append(
            f"{len(exercises)} exercises under '## Exercises' (3 to 6: conceptual, derivation, "
            "code)"
        )
    if None in labels:
        problems.append("every exercise has a :label:")
    solved = {arg: b for arg, b in _directive_blocks(exercises_text, "solution")}
    gated = {arg: b for arg, b in _directive_blocks(exercises_text, "solution-start")}
    for lab in [x for x in labels if x]:
        block = solved.get(lab, gated.get(lab))
        if block is None:
            problems.append(
                f"exercise {lab} has no solution (solution or solution-start/solution-end)"
            )
        elif not re.search(r"^:class:.*\bdropdown\b", block, re.M):
            problems.append(f"the solution of {lab} is not in a dropdown (:class: dropdown)")
    if not gated:
        problems.append(
            "no code exercise: at least one solution is a gated solution (solution-start ... "
            "solution-end) around a code cell that asserts its answer"
        )
    nb = to_notebook(md)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for start in gated:
        seg = exercises_text.split(f"{{solution-start}} {start}", 1)[1].split("{solution-end}", 1)[
            0
        ]
        if "```{code-cell}" not in seg or "assert " not in seg:
            problems.append(
                f"the gated solution of {start} holds no code cell that asserts its answer"
            )
    # ---- cells: plumbing hidden, nbval tag, no first-generation readings
    checked = [c for c in code if CHECK_TAG in _tags(c)]
    if len(checked) != 1:
        problems.append(
            f"{len(checked)} code cells tagged {CHECK_TAG} (exactly one: the key figures)"
        )
    for i, c in enumerate(code):
        if c.source.lstrip().startswith("# NBVAL"):
            problems.append(
                f"code cell {i}: the nbval marker is a comment; use the cell tag {CHECK_TAG}"
            )
        if "parameters" in _tags(c):
            continue
        if PLUMBING.search(c.source) and not _tags(c) & HIDING_TAGS:
            first = next(ln for ln in c.source.splitlines() if PLUMBING.search(ln))
            problems.append(
                f"code cell {i} holds the book's plumbing ({first.strip()[:60]!r}) but is not "
                f"hidden or folded (tags {sorted(HIDING_TAGS)})"
            )
        if re.search(r"\b(effect_sentence|show_reading)\(", c.source):
            problems.append(
                f"code cell {i}: the reading uses effect_sentence/show_reading; use rank_lab.book."
                "readings.Reading (MDE, arm health, completeness)"
            )
    if code and "setup(globals()," not in (code[1].source if len(code) > 1 else ""):
        problems.append(
            "the cell after the parameters calls rank_lab.book.chapter.setup(globals(), name)"
        )
    # ---- references, links, language, times
    if "{doc}`" in body:
        problems.append(
            "a {doc} role names a folder: link chapters and appendix pages by label with {ref}"
        )
    problems += [f"internal language: {h}" for h in internal_language(_without_options(body))]
    problems += [
        f"hand-written time, {h} (state times from the record: RecordedRun.time_sentence)"
        for h in hand_written_times(text, meta.get("quoted_times") or [])
    ]
    problems += [
        f"repository file named but not linked, {h} (use {{repo}}`path`)"
        for h in unlinked_repository_paths(text)
    ]
    root = md.parents[2] if len(md.parents) > 2 else md.parent
    for m in re.finditer(r"\{repo\}`(?:[^`<]*<)?([^`>]+)>?`", body):
        if not (root / m.group(1).strip()).exists():
            problems.append(f"{{repo}}`{m.group(1)}` names no file of the repository")
    # ---- rerun box
    if not _directive_blocks(body, "rerun-box"):
        problems.append("no {rerun-box} directive (the 'Rerun at full scale' box)")
    try:
        if rerun_spec(md) is None:
            problems.append("front matter rank_lab.rerun is missing (the rerun box's data)")
    except RerunError as exc:
        problems.append(str(exc))
    # ---- record: reading completeness and bounded intervals
    if record_spec(md) is not None:
        rec = load_record(md)
        if reading_spec(md) is None:
            problems.append("front matter rank_lab.reading is missing (the effects the box reads)")
        problems += reading_problems(rec)
        problems += [
            f"record: {p}" for p in interval_problems(rec.results, meta.get("unbounded") or [])
        ]
    # ---- appendix pages
    entry = toc_chapters(md.parent.parent).get(md.stem)
    for section in entry.sections if entry else ():
        page = md.parents[2] / f"{section}.md" if len(md.parents) > 2 else Path(f"{section}.md")
        if not page.is_file():
            problems.append(f"appendix page {section}.md listed in _toc.yml does not exist")
            continue
        ptext = page.read_text(encoding="utf-8")
        plabel = re.search(r"^\(([\w-]+)\)=\s*\n# ", ptext, re.M)
        if plabel is None:
            problems.append(f"appendix page {page.name}: its title is not preceded by a label")
        elif f"{{ref}}`{plabel.group(1)}`" not in body and f"<{plabel.group(1)}>`" not in body:
            problems.append(
                f"the chapter does not link its appendix page {{ref}}`{plabel.group(1)}`"
            )
        problems += [
            f"{page.name}: internal language: {h}"
            for h in internal_language(_without_options(ptext))
        ]
        problems += [
            f"{page.name}: hand-written time, {h}"
            for h in hand_written_times(ptext, meta.get("quoted_times") or [])
        ]
        problems += [
            f"{page.name}: repository file not linked, {h}"
            for h in unlinked_repository_paths(ptext)
        ]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rank_lab.book.audit [NAME ...]``: print each chapter's problems; exit 1 when
    any."""
    names = list(argv if argv is not None else sys.argv[1:])
    if not names:
        names = [
            md.stem
            for md in sorted(book_dir().rglob("*.md"))
            if md.stem in toc_chapters() and toc_chapters()[md.stem].number is not None
        ]
    bad = 0
    for name in names:
        problems = chapter_problems(name)
        print(f"{name}: {'converted' if not problems else f'{len(problems)} problem(s)'}")
        for p in problems:
            print(f"  - {p}")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
