"""Matrix entries of the book's apparatus: the TOC, the book map, the chapter audit, readings,
reruns, links, conversions and the site check (:mod:`rank_lab.book`).

The valid calls run on a tiny project built in a scratch folder (``_toc.yml`` with two numbered
chapters, the second declaring the first as prerequisite, a reading and a rerun block) and on tiny
records whose results hold one paired difference and one bounded summary. The site check runs
headless Chromium on a one-page static site (the project requires Chromium, as
``tests/book/test_site.py`` does); every bad variant of it is refused before Chromium starts.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import nbformat

from rank_lab.book import (
    audit,
    bookmap,
    cells,
    chapter,
    colab,
    convert,
    links,
    readings,
    record,
    recorded,
    rerun,
    sitecheck,
    toc,
)
from rank_lab.data.datasets.sop import load_sop
from rank_lab.stats import ci_summary

from .entries_book import TINY, _diff, _ok_doc, _out, _rec_tiny, _run, _spec, _write
from .framework import cls, fn

TOC = """format: jb-book
root: book/intro
parts:
  - caption: "I. Sample"
    numbered: true
    chapters:
      - file: book/part/ch1
      - file: book/part/ch2
        sections:
          - file: book/part/ch2_notes
  - caption: "Back matter"
    chapters:
      - file: book/back/glossary
"""

RERUN = """  rerun:
    datasets: [sop]
    parameters: {dataset: sop, data_dir: /path/to/Stanford_Online_Products}
    estimate: {backbone: resnet18, image_size: 64, epochs: 1, dataset: sop, batch_size: 4}
    expect:
      - {what: "R@1 on SOP", value: "81.2", where: "Ramzi thesis, Tab. 3.3"}
"""


def _chapter(name: str, title: str, meta: str) -> str:
    return (
        TINY.replace("rank_lab:\n", f"rank_lab:\n{meta}", 1)
        + f"\n({name})=\n# {title}\n\nIt took 2 minutes.\n"
    )


def _toc_book(
    prereq: str = "[ch1]", reading: str = "{reads: [run/gain], not_read: {}}", toc_text: str = TOC
) -> str:
    """A project (``_toc.yml``, ``book/intro.md``, two chapters, an appendix, a back-matter page);
    the book folder."""
    book = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_toc_")) / "book"
    (book / "part").mkdir(parents=True)
    (book / "back").mkdir()
    (book.parent / "_toc.yml").write_text(toc_text)
    (book / "intro.md").write_text("(intro)=\n# Sample\n")
    (book / "part" / "ch1.md").write_text(_chapter("ch1", "Chapter one", "  prerequisites: []\n"))
    (book / "part" / "ch2.md").write_text(
        _chapter("ch2", "Chapter two", f"  prerequisites: {prereq}\n  reading: {reading}\n{RERUN}")
    )
    (book / "part" / "ch2_notes.md").write_text("# Notes\n")
    (book / "back" / "glossary.md").write_text("# Glossary\n")
    return str(book)


def _ch2() -> str:
    return str(Path(_toc_book()) / "part" / "ch2.md")


def _rich_doc() -> dict:
    """A results document whose run holds one paired difference (``run/gain``) and one summary
    (``run/acc``)."""
    doc = _ok_doc()
    doc["results"]["run"].update(gain=_diff(), acc=ci_summary([0.5, 0.6, 0.7]))
    return doc


def _rich_rec() -> dict:
    return record.make_record(_rich_doc(), _spec())


def _rich_run() -> recorded.RecordedRun:
    return recorded.RecordedRun("rtiny", Path("recorded/rtiny.json"), _rich_rec())


def _recorded_book() -> str:
    """The recorded tiny notebook with its record written beside it (``recorded/rtiny.json``)."""
    md = _rec_tiny()
    record.write_record(_rich_rec(), record.record_path(md))
    return md


def _summary(bounds: list | None = None) -> dict:
    s = {"mean": 0.6, "lo": 0.5, "hi": 0.7, "n": 3}
    return {"run": {"acc": {**s, "bounds": bounds} if bounds else s}}


def _site() -> str:
    """A built site of one page (``index.html`` and ``page.html``)."""
    root = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_site_"))
    for name in ("index.html", "page.html"):
        (root / name).write_text(
            "<!doctype html><html><body><main><p>A short page.</p></main></body></html>"
        )
    return str(root)


def _snap() -> dict:
    return {"cpu_s": 1.0, "cpu_count": 2, "load_avg": [0.5, 0.5, 0.5]}


def _checked_cell() -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell("print(1)", metadata={"tags": [cells.CHECK_TAG]})


PAGE = (
    "---\na: 1\n---\n\nThis takes 2 minutes; see benchmarks/README.md.\n\n```python\nx = 1\n```\n"
)

ENTRIES = [
    # the table of contents and the book map
    cls(toc.TocError),
    cls(toc.Chapter, dict(name="ch1", file="book/part/ch1", number=1, part="I", sections=())),
    cls(toc.Part, dict(caption="I", numbered=True, chapters=())),
    fn(
        toc.toc_path,
        lambda: dict(root=_toc_book()),
        {"root": "path"},
        extra={"int": ("root", lambda: 3, ("root",))},
        legal={
            "root:missing": (
                "the path of the TOC beside the book folder is computed, not read (docstring)"
            )
        },
    ),
    fn(
        toc.read_toc,
        lambda: dict(root=_toc_book()),
        {"root": "path"},
        extra={
            "int": ("root", lambda: 3, ("root",)),
            "parts": (
                "root",
                lambda: _toc_book(toc_text="format: jb-book\nroot: book/intro\n"),
                ("parts",),
            ),
            "file": (
                "root",
                lambda: _toc_book(toc_text="parts:\n  - caption: I\n    chapters: [a]\n"),
                ("file",),
            ),
        },
    ),
    fn(
        toc.toc_chapters,
        lambda: dict(root=_toc_book()),
        {"root": "path"},
        extra={
            "twice": (
                "root",
                lambda: _toc_book(toc_text=TOC.replace("book/back/glossary", "book/part/ch1")),
                ("chapters",),
            )
        },
    ),
    fn(bookmap.chapter_titles, lambda: dict(root=_toc_book()), {"root": "path"}),
    fn(
        bookmap.prerequisites,
        lambda: dict(root=_toc_book()),
        {"root": "path"},
        extra={
            "unknown": ("root", lambda: _toc_book(prereq="[ch9]"), ("prerequisite",)),
            "later": ("root", lambda: _toc_book(prereq="[ch2]"), ("prerequisite",)),
        },
    ),
    fn(
        bookmap.map_svg,
        lambda: dict(root=_toc_book()),
        {"root": "path"},
        extra={"unknown": ("root", lambda: _toc_book(prereq="[ch9]"), ("prerequisite",))},
    ),
    fn(
        bookmap.main,
        dict(argv=[]),
        extra={"unknown": ("argv", lambda: ["--bogus"], ())},
        legal={
            "argv:unknown": "a usage error prints the usage and returns exit code 2 (docstring)"
        },
    ),
    # the chapter audit
    fn(audit.prose, dict(md_text=PAGE), extra={"int": ("md_text", lambda: 3, ("md_text",))}),
    fn(
        audit.hand_written_times,
        dict(md_text=PAGE, allowed=["2 hours"]),
        extra={
            "int": ("md_text", lambda: 3, ("md_text",)),
            "str": ("allowed", lambda: "2 minutes", ("allowed",)),
        },
    ),
    fn(
        audit.unlinked_repository_paths,
        dict(md_text=PAGE),
        extra={"int": ("md_text", lambda: 3, ("md_text",))},
    ),
    fn(
        audit.internal_language,
        dict(text="The chapter shows the loss."),
        extra={"int": ("text", lambda: 3, ("text",))},
    ),
    fn(
        audit.interval_problems,
        lambda: dict(results=_summary([0.0, 1.0]), exempt=["x/*"]),
        extra={
            "list": ("results", lambda: [1], ("results",)),
            "str": ("exempt", lambda: "run/*", ("exempt",)),
        },
    ),
    fn(
        audit.chapter_problems,
        lambda: dict(name=_ch2()),
        extra={
            "unknown": ("name", lambda: "no_such_chapter_anywhere", ("notebook",)),
            "int": ("name", lambda: 3, ("name",)),
        },
    ),
    fn(
        audit.main,
        lambda: dict(argv=[_ch2()]),
        extra={"unknown": ("argv", lambda: ["no_such_chapter_anywhere"], ("notebook",))},
    ),
    # a chapter's start, its cells
    cls(chapter.ChapterRun, lambda: dict(name="rtiny", device="cpu", record=_run())),
    fn(
        chapter.setup,
        lambda: dict(namespace={"seed": 0, "smoke": True, "dataset": "a"}, name=_rec_tiny()),
        extra={
            "list": ("namespace", lambda: [("seed", 0)], ("namespace",)),
            "empty": ("name", lambda: " ", ("name",)),
        },
    ),
    fn(cells.is_checked_cell, lambda: dict(cell=_checked_cell())),
    # records: machine usage, run kind, bounds
    fn(record.machine_snapshot),
    fn(
        record.machine_usage,
        lambda: dict(start=_snap(), end={**_snap(), "cpu_s": 3.5}),
        extra={
            "list": ("start", lambda: [1.0], ("start",)),
            "keys": ("end", lambda: {"cpu_s": 1.0}, ("end",)),
            "str": ("end", lambda: {**_snap(), "cpu_s": "many"}, ("end",)),
        },
    ),
    fn(
        recorded.run_kind,
        lambda: dict(run=_run()),
        extra={
            "str": ("run", lambda: "rtiny", ("run",)),
            "missing": (
                "run",
                lambda: recorded.RecordedRun("rtiny", Path("r.json"), None),
                ("run",),
            ),
        },
    ),
    fn(
        convert.bound_summaries,
        lambda: dict(record=_rich_rec(), pattern="run/acc", bounds=(0.0, 1.0)),
        extra={
            "int": ("bounds", lambda: 3, ("bounds",)),
            "one": ("bounds", lambda: (0.0,), ("bounds",)),
            "order": ("bounds", lambda: (1.0, 0.0), ("bounds",)),
            "nan": ("bounds", lambda: (float("nan"), 1.0), ("bounds",)),
            "outside": ("bounds", lambda: (0.8, 1.0), ("bounds",)),
            "pattern": ("pattern", lambda: 3, ("pattern",)),
            "none": ("pattern", lambda: "zz/*", ("pattern",)),
            "record": ("record", lambda: [1], ("record",)),
        },
    ),
    fn(
        convert.main,
        lambda: dict(argv=["bounds", _recorded_book(), "run/acc", "0", "1"]),
        extra={
            "usage": ("argv", lambda: ["bounds"], ()),
            "pattern": ("argv", lambda: ["bounds", _recorded_book(), "zz", "0", "1"], ()),
        },
        legal={
            "argv:usage": "a usage error prints the usage and returns exit code 2 (docstring)",
            "argv:pattern": (
                "a refused conversion prints the error and returns exit code 2 (docstring)"
            ),
        },
    ),
    # readings
    cls(readings.ReadingError),
    cls(
        readings.Claim,
        dict(text="A beats B", where="Thesis, Tab. 1", effect=0.6),
        {"effect": "real"},
        extra={"text": ("text", lambda: "", ("text",)), "where": ("where", lambda: 3, ("where",))},
    ),
    cls(
        readings.Reference,
        dict(name="CE", value=0.3),
        {"value": "real"},
        extra={"name": ("name", lambda: " ", ("name",))},
    ),
    fn(
        readings.arm_status,
        lambda: dict(value=0.5, reference=readings.Reference("CE", 0.3), higher_is_better=True),
        {"value": "real"},
        extra={
            "reference": ("reference", lambda: 0.3, ("reference",)),
            "bool": ("higher_is_better", lambda: "no", ("higher_is_better",)),
        },
    ),
    fn(
        readings.effects,
        lambda: dict(results=_rich_rec()["results"]),
        extra={
            "list": ("results", lambda: [1], ("results",)),
            "slash": ("results", lambda: {"a/b": {"x": 1}}, ("results",)),
        },
    ),
    fn(
        readings.resolved_effects,
        lambda: dict(results=_rich_rec()["results"]),
        extra={
            "list": ("results", lambda: [1], ("results",)),
            "slash": ("results", lambda: {"a/b": {"x": 1}}, ("results",)),
        },
    ),
    cls(
        readings.ReadingSpec,
        dict(reads=("run/*",), not_read={"x": "not measured"}),
        calls=[("expand", dict(ids=["run/gain", "x"]), None)],
    ),
    fn(
        readings.reading_spec,
        lambda: dict(name=_ch2()),
        extra={
            "reads": (
                "name",
                lambda: str(Path(_toc_book(reading="{reads: run/gain}")) / "part" / "ch2.md"),
                ("reads",),
            ),
            "keys": (
                "name",
                lambda: str(Path(_toc_book(reading="{read: [a]}")) / "part" / "ch2.md"),
                ("reading",),
            ),
            "unknown": ("name", lambda: "no_such_chapter_anywhere", ("notebook",)),
        },
    ),
    fn(
        readings.reading_problems,
        lambda: dict(run=_rich_run(), spec=readings.ReadingSpec(("run/gain",), {})),
        extra={
            "run": ("run", lambda: 3, ("run",)),
            "spec": ("spec", lambda: "run/gain", ("spec",)),
        },
    ),
    cls(
        readings.Reading,
        lambda: dict(run=_rich_run(), live=None, title="What this run shows"),
        calls=[
            (
                "state",
                dict(
                    effect_id="run/gain", template="A is {direction} B: {ci}", digits=2, scale=100.0
                ),
                {"digits": "nonnegint", "scale": "real"},
            ),
            ("note", dict(sentence="Three seeds."), None),
            ("markdown", None, None),
        ],
        extra={
            "run": ("run", lambda: {"a": 1}, ("run",)),
            "live": ("live", lambda: [1], ("live",)),
            "title": ("title", lambda: "", ("title",)),
            "unknown": ("state.effect_id", lambda: "run/none", ("effect",)),
            "field": ("state.template", lambda: "{bogus}", ("template",)),
            "note": ("note.sentence", lambda: 3, ("sentence",)),
        },
    ),
    # the rerun box
    cls(rerun.RerunError),
    cls(
        rerun.DatasetInfo,
        dict(name="sop", size="3 GB", layout="Ebay_*.txt", loader=load_sop, source="https://x"),
    ),
    cls(
        rerun.RerunSpec,
        dict(
            notebook="ch2",
            path=Path("ch2.md"),
            datasets=("sop",),
            parameters={"dataset": "sop"},
            estimate=None,
            expect=(),
        ),
    ),
    fn(
        rerun.rerun_spec,
        lambda: dict(name=_ch2()),
        extra={
            "dataset": (
                "name",
                lambda: _write(_chapter("x", "X", RERUN.replace("[sop]", "[nope]"))),
                ("datasets",),
            ),
            "estimate": (
                "name",
                lambda: _write(_chapter("x", "X", RERUN.replace("batch_size: 4", "batch_size: 0"))),
                ("estimate",),
            ),
            "unknown": ("name", lambda: "no_such_chapter_anywhere", ("notebook",)),
        },
    ),
    fn(
        rerun.rerun_markdown,
        lambda: dict(name=_ch2()),
        extra={"none": ("name", lambda: _write(_chapter("x", "X", "")), ("rerun",))},
    ),
    # links
    fn(
        links.repository_settings,
        lambda: dict(project=_project_dir()),
        {"project": "path"},
        extra={"list": ("project", lambda: _project_dir("- a\n"), ("_config.yml",))},
        legal={
            "project:missing": (
                "a project without _config.yml has no repository: url None (docstring)"
            )
        },
    ),
    fn(
        links.browse_url,
        dict(
            path="benchmarks/README.md",
            ref="0123abc",
            url="https://github.com/o/r",
            branch="main",
            folder=False,
        ),
        extra={
            "int": ("path", lambda: 3, ("path",)),
            "climb": ("path", lambda: "../x", ("path",)),
            "abs": ("path", lambda: "/etc", ("path",)),
            "ref": ("ref", lambda: 3, ("ref",)),
            "url": ("url", lambda: 3, ("url",)),
            "branch": ("branch", lambda: ["main"], ("branch",)),
            "folder": ("folder", lambda: "yes", ("folder",)),
        },
    ),
    # MyST -> Colab: the {ref} resolver
    cls(
        colab.ref_resolver,
        lambda: dict(root=Path(_toc_book()), colab_base="https://colab.example/x"),
        calls=[("__call__", dict(label="ch1"), None)],
        extra={"unknown": ("__call__.label", lambda: "no_such_label", ("label",))},
    ),
    # the site check
    cls(sitecheck.BrowserMissingError),
    cls(sitecheck.SiteProblem, dict(page="a.html", width=390, kind="overflow", detail="table")),
    fn(sitecheck.find_browser),
    fn(sitecheck.site_pages, lambda: dict(html_dir=_site()), {"html_dir": "path"}),
    fn(
        sitecheck.check_site,
        lambda: dict(html_dir=_site(), out_dir=None, widths=(390,), pages=None, browser=None),
        {"html_dir": "path"},
        extra={
            "zero": ("widths", lambda: (0,), ("widths",)),
            "int": ("widths", lambda: 390, ("widths",)),
            "empty": ("widths", lambda: (), ("widths",)),
            "browser": ("browser", lambda: "/nonexistent/rank_lab_chromium", ("browser",)),
            "browser_int": ("browser", lambda: 3, ("browser",)),
            "pages_str": ("pages", lambda: "page.html", ("pages",)),
            "pages_absent": ("pages", lambda: ["/nonexistent/rank_lab_page.html"], ("pages",)),
            "out_dir": ("out_dir", lambda: 3, ("out_dir",)),
        },
    ),
    fn(
        sitecheck.main,
        lambda: dict(argv=[_site(), "--out", _out(), "--page", "page.html"]),
        extra={"missing": ("argv", lambda: ["/nonexistent/rank_lab_bad_inputs/site"], ())},
        legal={
            "argv:missing": "no built site prints the error and returns exit code 2 (docstring)"
        },
    ),
]


def _project_dir(config: str = "repository: {url: 'https://github.com/o/r', branch: dev}\n") -> str:
    root = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_project_"))
    (root / "_config.yml").write_text(config)
    return str(root)
