"""Every chapter carries the textbook's apparatus and reads its recorded run completely (issues 25,
24).

The checks are :mod:`rank_lab.book.audit` (docs/book_contract.md, "Converting a chapter"); they run
on every chapter of ``_toc.yml``. A chapter in :data:`NOT_CONVERTED` is expected to fail the tests
named there (``xfail(strict=True)``): when a chapter engineer converts it, its tests pass, pytest
reports the strict xfail as a failure, and the aspect (then the chapter) leaves the list. The list
only shrinks; the goal is empty.

* ``test_chapter_apparatus``: opening boxes, prerequisites linked, summary, 3-6 exercises with
  solutions in dropdowns and at least one code solution that asserts its answer, the plumbing
  hidden, the nbval marker as a cell tag, the rerun box and its data, no internal language, no
  hand-written time, repository files linked, appendix pages linked, the main page at most 600
  lines;
* ``test_every_resolved_effect_is_read``: every resolved effect of the record is read by the "What
  this run shows" box or listed as not read with a reason (from the record and the front matter
  only: no execution);
* ``test_no_hand_written_times``: no time stated in the chapter's prose;
* ``test_intervals_inside_their_range``: the record's bounded metrics carry their range and stay in
  it.

The rest holds for every chapter now: the TOC, labels, folder-free references, the map.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rank_lab.book import find_notebook, front_matter, list_notebooks
from rank_lab.book.audit import (
    chapter_problems,
    hand_written_times,
    internal_language,
    interval_problems,
    prose,
    unlinked_repository_paths,
)
from rank_lab.book.bookmap import MAP_PATH, map_svg
from rank_lab.book.readings import reading_problems
from rank_lab.book.record import record_spec
from rank_lab.book.recorded import load_record
from rank_lab.book.toc import read_toc, toc_chapters

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = [ch.name for ch in toc_chapters(ROOT / "book").values() if ch.number is not None]

#: Chapters not yet converted, with the tests below that still fail for them (apparatus, effects,
#: times, intervals). A chapter engineer removes an aspect when its test passes (a strict xfail that
#: passes fails, on purpose) and the chapter when none is left. Never add a name or an aspect back.
NOT_CONVERTED: dict[str, set[str]] = {}


def _chapters(aspect: str) -> list:
    return [
        pytest.param(
            name,
            marks=pytest.mark.xfail(
                strict=True, reason=f"{name} is not converted yet (NOT_CONVERTED: {aspect})"
            ),
        )
        if aspect in NOT_CONVERTED.get(name, set())
        else name
        for name in CHAPTERS
    ]


def test_not_converted_names_real_chapters() -> None:
    assert set(NOT_CONVERTED) <= set(CHAPTERS), (
        f"not chapters of _toc.yml: {sorted(set(NOT_CONVERTED) - set(CHAPTERS))}"
    )
    aspects = {"apparatus", "effects", "times", "intervals"}
    assert all(a and a <= aspects for a in NOT_CONVERTED.values()), NOT_CONVERTED


@pytest.mark.parametrize("name", _chapters("apparatus"))
def test_chapter_apparatus(name: str) -> None:
    problems = chapter_problems(name)
    assert not problems, f"{name}:\n  - " + "\n  - ".join(problems)


@pytest.mark.parametrize("name", _chapters("effects"))
def test_every_resolved_effect_is_read(name: str) -> None:
    md = find_notebook(name)
    if record_spec(md) is None:
        assert "rank_lab.reading" not in md.read_text(encoding="utf-8")
        return
    problems = reading_problems(load_record(md))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", _chapters("times"))
def test_no_hand_written_times(name: str) -> None:
    md = find_notebook(name)
    allowed = (front_matter(md).get("rank_lab") or {}).get("quoted_times") or []
    hits = hand_written_times(md.read_text(encoding="utf-8"), allowed)
    assert not hits, f"{name}: times stated by hand (generate them from the record):\n" + "\n".join(
        hits
    )


@pytest.mark.parametrize("name", _chapters("intervals"))
def test_intervals_inside_their_range(name: str) -> None:
    md = find_notebook(name)
    rec = load_record(md) if record_spec(md) is not None else None
    if not rec:
        return
    exempt = (front_matter(md).get("rank_lab") or {}).get("unbounded") or []
    problems = interval_problems(rec.results, exempt)
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------- every chapter, now
def test_toc_lists_every_page_once_and_numbers_the_chapters() -> None:
    parts = read_toc(ROOT / "book")
    assert [p.numbered for p in parts[:-1]] == [True] * (len(parts) - 1) and not parts[-1].numbered
    numbers = [ch.number for p in parts for ch in p.chapters if ch.number is not None]
    assert numbers == list(range(1, len(numbers) + 1))
    files = [ch.file for p in parts for ch in p.chapters] + [
        s for p in parts for ch in p.chapters for s in ch.sections
    ]
    assert len(files) == len(set(files))
    for f in files:
        assert (ROOT / f"{f}.md").is_file(), f"_toc.yml names {f}.md, which does not exist"
    toc = {Path(f).name for f in files}
    for md in list_notebooks(ROOT / "book"):
        assert md.stem in toc, f"{md} is not in _toc.yml"


def test_chapter_folders_are_named_only_in_the_toc() -> None:
    """No file names a chapter's folder (book/<part>/<name>) but _toc.yml: a move needs one edit."""
    chapters = toc_chapters(ROOT / "book")
    paths = {
        f"{Path(ch.file).parent.name}/{ch.name}"
        for ch in chapters.values()
        if ch.number is not None
    }
    found = []
    for path in [
        *ROOT.glob("*.md"),
        *ROOT.glob("*.yml"),
        ROOT / "Makefile",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "rank_lab").rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "book").rglob("*.md"),
        *(ROOT / "book").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *(ROOT / "tools").rglob("*.py"),
        *(ROOT / ".ci").glob("*"),
    ]:
        if path.name == "_toc.yml" or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{path.relative_to(ROOT)}: {p}" for p in paths if p in text]
    assert not found, "chapter folders named outside _toc.yml:\n" + "\n".join(found)


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_title_is_labelled_by_its_name_and_links_are_by_label(name: str) -> None:
    text = find_notebook(name).read_text(encoding="utf-8")
    assert re.search(rf"^\({re.escape(name)}\)=\n# ", text, re.M), (
        f"{name}: put ({name})= above the title"
    )
    assert "{doc}`" not in text, (
        f"{name}: link pages by label ({{ref}}`name`), not by folder ({{doc}})"
    )


def test_book_map_is_current() -> None:
    path = ROOT / "book" / MAP_PATH
    assert path.is_file(), "run: python -m rank_lab.book.bookmap --write"
    assert path.read_text(encoding="utf-8") == map_svg(ROOT / "book"), (
        "book/_static/book_map.svg is stale: python -m rank_lab.book.bookmap --write"
    )


def test_intro_opens_with_the_map_and_links_every_chapter() -> None:
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "_static/book_map.svg" in intro
    for name in CHAPTERS:
        assert f"{{ref}}`{name}`" in intro, f"the intro does not link {name}"
    assert not internal_language(intro)
    for way in ("Read the site", "Rerun on Colab", "Run a chapter from the command line"):
        assert way in intro


# ------------------------------------------------------------------------------- the audit itself
def test_internal_language_catches_the_word_list() -> None:
    for text in [
        "# NBVAL_CHECK_OUTPUT",
        "run `python -m rank_lab.book record heat`",
        "the shared 2-core CPU of this project",
        "as the earlier version of this chapter had",
        "(HEAD moved to 0287c34 during the run)",
        "commit 07a9911",
        "see issue 24",
        "TODO: fix",
    ]:
        assert internal_language(text), text
    for text in [
        "the head of the list",
        "a 0.95 interval",
        "deadbeef",
        "mAP@R 12.43",
        "AP@5 = 0.2867",
        "results.json",
        "the header of the page",
    ]:
        assert not internal_language(text), (text, internal_language(text))


def test_hand_written_times_in_prose_only() -> None:
    page = (
        "---\nrank_lab: {}\n---\n\n# T\n\nThe whole notebook takes about 2 minutes on one core.\n"
        "It runs in a few minutes; ResNet-50 on SOP takes days.\n\n```{code-cell} ipython3\n"
        "timeout = 600  # 10 min\n```\n\nThe second form of Eq. 1; 15 epochs, $t = 5 s$, `run_s`.\n"
        "A source trains for 3 days on 8 GPUs.\n"
    )
    hits = hand_written_times(page, allowed=["3 days on 8 GPUs"])
    assert [h.split(": ", 1)[1] for h in hits] == ["'2 minutes'", "'minutes'", "'days'"], hits
    assert [n for n, _ in prose(page)][:2] == [5, 7]  # the title, then the first paragraph


def test_unlinked_repository_paths() -> None:
    page = (
        "# T\n\nSee benchmarks/README.md and `bench_metrics.py`, or {repo}`benchmarks/README.md` "
        "and {repo}`the tables <benchmarks/bench_metrics.py>`.\n"
    )
    assert [h.split(": ", 1)[1] for h in unlinked_repository_paths(page)] == [
        "'benchmarks/README.md'"
    ]


def test_interval_problems() -> None:
    good = {"acc": {"n": 3, "mean": 50.0, "lo": 0.0, "hi": 99.0, "bounds": [0, 100]}}
    assert interval_problems(good) == []
    assert "leaves its range" in interval_problems({"acc": {**good["acc"], "lo": -3.9}})[0]
    assert (
        "without bounds"
        in interval_problems({"x": {"AUROC": {"n": 3, "mean": 50.0, "lo": 1.0, "hi": 99.0}}})[0]
    )
    assert (
        interval_problems({"x": {"AUROC": {"n": 3, "mean": 5.0, "lo": 1.0, "hi": 9.0}}}, ["x/*"])
        == []
    )
    diff = {"n": 3, "mean": -1.0, "lo": -110.0, "hi": 2.0, "std": 1.0, "mean_a": 1.0, "mean_b": 2.0}
    assert interval_problems({"acc_gain": diff}) == []  # paired differences stay t-intervals
