"""The pieces of a chapter's apparatus: repository links, the rerun box, the chapter set-up, the
map, the record converter, and the Colab rendering of exercises, solutions, labels and the rerun
box."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from rank_lab.book import record, recorded
from rank_lab.book.bibtex import read_bib
from rank_lab.book.bookmap import map_svg, prerequisites
from rank_lab.book.chapter import setup
from rank_lab.book.colab import ColabMarkdown, MystConversionError, ref_resolver
from rank_lab.book.convert import bound_summaries
from rank_lab.book.links import browse_url, repository_settings
from rank_lab.book.rerun import DATASETS, RerunError, rerun_markdown, rerun_spec
from rank_lab.book.toc import toc_chapters
from rank_lab.data.datasets.sources import DATASET_SOURCES

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------- links
def test_browse_url_from_the_config() -> None:
    url = "https://github.com/org/repo"
    assert (
        browse_url("benchmarks/README.md", url=url, branch="main")
        == f"{url}/blob/main/benchmarks/README.md"
    )
    assert browse_url("benchmarks", url=url + ".git", branch="dev") == f"{url}/tree/dev/benchmarks"
    assert browse_url("", "abc1234", url=url, branch="main") == f"{url}/tree/abc1234"
    assert (
        browse_url("./tools/x.py", url=url, branch="main", folder=False)
        == f"{url}/blob/main/tools/x.py"
    )
    assert browse_url("a.md", url="git@github.com:org/repo", branch="main") is None  # not browsable
    with pytest.raises(ValueError, match="relative"):
        browse_url("../secret", url=url, branch="main")
    with pytest.raises(TypeError, match="strings"):
        browse_url(3, url=url, branch="main")
    settings = repository_settings(ROOT)
    assert settings["url"] and settings["url"].startswith("https://") and settings["branch"]


# ------------------------------------------------------------------------------- rerun box
def test_rerun_box_of_the_exemplar_is_generated_from_data() -> None:
    spec = rerun_spec("evaluating_retrieval")
    assert spec is not None and "sop" in spec.datasets
    text = rerun_markdown("evaluating_retrieval")
    assert text.startswith("````{admonition} Rerun at full scale\n:class: note dropdown")
    assert (
        "python -m rank_lab.book run evaluating_retrieval" in text
        and "-p smoke false -p dataset sop" in text
    )
    assert DATASET_SOURCES["sop"][0] in text and "120,053 images" in text
    assert "Estimate ({mod}`rank_lab.cost`, until a GPU run of this chapter is recorded)" in text
    assert "peak GPU memory about" in text and "81.2 and 54.8 (Ramzi thesis, Tab. 3.3)" in text
    assert "The recorded CPU run at toy scale (the tables of this page) took " in text
    if not (ROOT / "benchmarks" / "gpu_check_report.md").is_file():
        assert "untested on GPU hardware until a GPU check report is recorded" in text


def test_every_dataset_of_the_table_has_a_source_and_a_loader() -> None:
    for key, info in DATASETS.items():
        assert info.source in DATASET_SOURCES, key
        assert callable(info.loader) and info.loader_name.startswith("rank_lab.data."), key


def test_rerun_spec_refuses_what_the_box_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "book"
    (root / "p").mkdir(parents=True)
    head = (
        "---\njupytext:\n  text_representation: {extension: .md, format_name: myst}\nkernelspec:\n"
        "  name: python3\nrank_lab:\n  rerun:\n"
    )
    monkeypatch.setenv("RANK_LAB_BOOK", str(root))
    for block, message in [
        ("    datasets: [imagenet]\n", "not in rank_lab.book.rerun.DATASETS"),
        ("    estimate: {backbone: resnet50}\n", "batch_size"),
        (
            "    estimate: {backbone: nope, image_size: 224, epochs: 1, dataset: sop, "
            "batch_size: 8}\n",
            "estimate",
        ),
        ("    expect: [{what: x}]\n", "expect"),
        ("    other: 1\n", "keys among"),
    ]:
        (root / "p" / "c.md").write_text(head + block + "---\n\n# C\n")
        with pytest.raises(RerunError, match=message):
            rerun_spec("c")
    (root / "p" / "c.md").write_text(head.replace("  rerun:\n", "") + "---\n\n# C\n")
    assert rerun_spec("c") is None
    with pytest.raises(RerunError, match="no rank_lab.rerun block"):
        rerun_markdown("c")


# ------------------------------------------------------------------------------- chapter set-up
def test_setup_starts_the_run_seeds_and_loads_the_record() -> None:
    import torch

    ns = {"smoke": True, "seed": 3, "device": "cpu"}
    run = setup(ns, "evaluating_retrieval")
    a = torch.rand(1).item()
    setup(ns, "evaluating_retrieval")
    assert torch.rand(1).item() == a  # seeded again: the same draw
    assert run.device.type == "cpu" and run.results == {} and run.cost == {}
    assert run.record and run.record.notebook == "evaluating_retrieval"
    with pytest.raises(TypeError, match="name"):
        setup(ns, "")
    with pytest.raises(TypeError, match="globals"):
        setup([], "evaluating_retrieval")


# ------------------------------------------------------------------------------- map
def test_map_draws_every_part_chapter_and_dependency() -> None:
    svg = map_svg(ROOT / "book")
    deps = prerequisites(ROOT / "book")
    assert svg.startswith("<svg xmlns=") and svg.rstrip().endswith("</svg>")
    # loads offline, alone
    assert "<script" not in svg and "href" not in svg and "@import" not in svg
    assert svg.count("marker-end=") == sum(len(v) for v in deps.values())
    assert "I. Measuring retrieval" in svg and "1. Evaluating retrieval" in svg
    assert deps["evaluating_retrieval"] == []


def test_map_refuses_a_prerequisite_that_comes_later(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    shutil.copytree(
        ROOT / "book", root / "book", ignore=shutil.ignore_patterns("_build", "*.json", "_static")
    )
    shutil.copy(ROOT / "_toc.yml", root / "_toc.yml")
    md = root / f"{toc_chapters(root / 'book')['evaluating_retrieval'].file}.md"
    md.write_text(md.read_text().replace("  prerequisites: []", "  prerequisites: [heat]"))
    with pytest.raises(ValueError, match="comes later in the book"):
        prerequisites(root / "book")


# ------------------------------------------------------------------------------- converter
def test_bound_summaries_clips_only_the_matched_summaries() -> None:
    summ = {
        "n": 3,
        "mean": 2.0,
        "std": 3.0,
        "half_width": 7.0,
        "lo": -5.0,
        "hi": 9.0,
        "level": 0.95,
    }
    diff = {**summ, "mean_a": 4.0, "mean_b": 2.0}
    rec = {
        "schema": record.RECORD_SCHEMA,
        "notebook": "x",
        "parameters": {"smoke": False},
        "provenance": {
            "status": "ok",
            "started_utc": "a",
            "ended_utc": "b",
            "rank_lab": "0",
            "torch": "2",
            "device": "cpu",
            "git_commit": None,
            "seeds": [0, 1, 2],
            "wall_s": 1.0,
        },
        "results": {"m": {"acc": summ, "acc_gain": diff, "other": summ}},
    }
    new, count = bound_summaries(rec, "m/acc*", (0, 100))
    assert count == 1 and new["results"]["m"]["acc"] == {**summ, "lo": 0.0, "bounds": [0.0, 100.0]}
    assert new["results"]["m"]["acc_gain"] == diff and new["results"]["m"]["other"] == summ
    assert rec["results"]["m"]["acc"]["lo"] == -5.0  # the input is not modified
    with pytest.raises(ValueError, match="matches no summary"):
        bound_summaries(rec, "nothing", (0, 1))
    with pytest.raises(ValueError, match="outside bounds"):
        bound_summaries(rec, "m/acc", (5, 10))


def test_the_exemplar_record_carries_its_bounds() -> None:
    rec = recorded.load_record("evaluating_retrieval")
    for by_k in rec.results["metric_agreement"]["summary"].values():
        for s in by_k.values():
            assert s["bounds"] == [0.0, 100.0] and 0 <= s["lo"] <= s["mean"] <= s["hi"] <= 100
    raw = json.loads(rec.path.read_text())
    assert math.isclose(raw["provenance"]["wall_s"], rec.wall_s)


# ------------------------------------------------------------------------------- Colab rendering
def test_colab_renders_exercises_solutions_labels_and_the_rerun_box() -> None:
    conv = ColabMarkdown(
        "evaluating_retrieval",
        {},
        read_bib(ROOT / "book" / "references.bib"),
        ref_link=ref_resolver(ROOT / "book", "https://colab.example/nb"),
        repo_link=lambda p: f"https://github.com/org/repo/blob/main/{p}",
        rerun=lambda: rerun_markdown("evaluating_retrieval"),
    )
    ex = conv.convert("```{exercise} Ties\n:label: ex-a\n\nDerive the AP of $N$ tied items.\n```")
    assert ex == "> **Exercise 1 (Ties)**\n>\n> Derive the AP of $N$ tied items."
    assert (
        conv.convert("```{solution} ex-a\n:class: dropdown\n\nBecause.\n```")
        == "> **Solution to Exercise 1**\n>\n> Because."
    )
    conv.convert("```{exercise}\n:label: ex-b\n\nCompute.\n```")
    assert conv.convert("````{solution-start} ex-b\n:class: dropdown\n````").startswith(
        "> **Solution to Exercise 2**"
    )
    assert conv.convert("````{solution-end}\n````") == ""
    with pytest.raises(MystConversionError, match="unknown exercise"):
        conv.convert("```{solution} ex-z\nx\n```")
    # from _toc.yml
    twin = toc_chapters(ROOT / "book")["evaluating_retrieval"].file.removeprefix("book/")
    assert (
        conv.convert("See {ref}`evaluating_retrieval`.")
        == f"See [Evaluating retrieval](https://colab.example/nb/{twin}.ipynb)."
    )
    assert (
        conv.convert("{repo}`the tables <benchmarks/README.md>`")
        == "[`the tables`](https://github.com/org/repo/blob/main/benchmarks/README.md)"
    )
    box = conv.convert("```{rerun-box}\n```")
    assert (
        box.startswith("> **Rerun at full scale**")
        and "{admonition}" not in box
        and "{func}" not in box
    )
    assert conv.convert(
        "```{prf:proposition} Worst case\n:label: p1\n\nAP is minimal.\n```"
    ).startswith("> **Proposition 1 (Worst case)**")
    assert conv.convert("By {prf:ref}`p1`.") == "By Proposition 1."
