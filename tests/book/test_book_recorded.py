"""Recorded full runs (``python -m rank_lab.book record``), their display beside the live run,
readings.

A tiny book with one notebook that declares a record: the record command runs it with
``smoke=False`` and writes ``<part>/recorded/<name>.json``; a failed run, a refused parameter or a
dirty checkout never touches a good record; the record schema refuses per-item arrays, non-finite
numbers and smoke runs; the loader gives a plain "no record" header when the file is missing; the
readings pick their wording from the sign of the effect and whether its CI excludes zero.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

from rank_lab import book
from rank_lab.book import readings, record, recorded
from rank_lab.book.record import RECORD_SCHEMA, RecordBuildError, RecordError, RecordSpec
from rank_lab.stats import paired_difference

matplotlib.use("Agg")

HEAD = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
rank_lab:
  results_keys: [settings, training, per_item]
  recorded:
    keys: [training]
    seeds: training.seeds
  parameters:
    seed: {min: 0}
    n_seeds: {type: int, min: 2}
---

# Recorded mini
"""
BODY = """
```{code-cell} ipython3
:tags: [parameters]
smoke = True     # fast run
seed = 0
n_seeds = None   # None: 2 smoke, 3 full
fail = False     # raise in the last cell
```

```{code-cell} ipython3
from rank_lab.book import print_key_figures, save_results, start_run
from rank_lab.stats import ci_summary, paired_difference

start_run(globals())
seeds = list(range(seed, seed + (n_seeds or (2 if smoke else 3))))
a = [0.5 + 0.01 * s for s in seeds]
b = [0.4 + 0.012 * s for s in seeds]
results = {"settings": {"smoke": smoke},
           "training": {"seeds": seeds, "a": ci_summary(a), "effect": paired_difference(a, b)},
           "per_item": list(range(500))}
```

```{code-cell} ipython3
# NBVAL_CHECK_OUTPUT
if fail:
    raise RuntimeError("boom")
print_key_figures(results, ["training.effect.mean"])
results_path = save_results(results, "results.json")
```
"""


@pytest.fixture()
def rec_book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "book"
    (root / "part").mkdir(parents=True)
    (root / "part" / "recmini.md").write_text(HEAD + BODY)
    (root / "part" / "plain.md").write_text(
        HEAD.replace("  recorded:\n    keys: [training]\n    seeds: training.seeds\n", "") + BODY
    )
    monkeypatch.setenv("RANK_LAB_BOOK", str(root))
    monkeypatch.chdir(tmp_path)
    # a clean checkout unless a test says otherwise
    monkeypatch.setattr(record, "git_output", lambda *args: "")
    return root


def _record_doc(**prov: object) -> dict:
    p = {
        "schema": "rank_lab.book.results/1",
        "status": "ok",
        "started_utc": "2026-11-26T09:00:00+00:00",
        "ended_utc": "2026-11-26T09:12:00+00:00",
        "rank_lab": "0.1.0",
        "torch": "2.14.1",
        "device": "cpu: Test CPU",
        "git_commit": "0123456789abcdef",
        "git_dirty": False,
        "seeds": [0, 1, 2],
        "wall_s": 720.0,
        "threads": 1,
    }
    p.update(prov)
    return {
        "schema": RECORD_SCHEMA,
        "notebook": "recmini",
        "parameters": {"smoke": False, "seed": 0},
        "provenance": p,
        "results": {"training": {"seeds": [0, 1, 2], "x": 1.5}},
    }


# ----------------------------------------------------------------------------------- record
def test_record_spec_reads_the_front_matter(rec_book: Path) -> None:
    assert record.record_spec("recmini") == RecordSpec("recmini", ("training",), "training.seeds")
    assert record.record_spec("plain") is None
    assert record.record_path("recmini") == rec_book / "part" / "recorded" / "recmini.json"
    assert record.record_path("recmini", "gpu").name == "recmini.gpu.json"
    with pytest.raises(ValueError, match="variant"):
        record.record_path("recmini", "GPU run")


@pytest.mark.parametrize(
    "decl, message",
    [
        ("  recorded: true\n", "must be a mapping"),
        ("  recorded:\n    keys: [nope]\n    seeds: nope.seeds\n", "not in rank_lab.results_keys"),
        ("  recorded:\n    keys: [training]\n    seeds: settings.seeds\n", "inside the kept keys"),
        ("  recorded:\n    keys: [training]\n", "must be a mapping"),
        ("  recorded:\n    keys: []\n    seeds: training.seeds\n", "non-empty list"),
    ],
)
def test_record_spec_refuses_malformed_declarations(
    rec_book: Path, decl: str, message: str
) -> None:
    text = (rec_book / "part" / "recmini.md").read_text()
    text = text.replace("  recorded:\n    keys: [training]\n    seeds: training.seeds\n", decl)
    (rec_book / "part" / "recmini.md").write_text(text)
    with pytest.raises(RecordError, match=message):
        record.record_spec("recmini")


def test_record_runs_full_scale_and_writes_a_small_record(
    rec_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        book.main(
            ["record", "recmini", "-p", "seed", "2", "--quiet", "--out", str(tmp_path / "out")]
        )
        == 0
    )
    out = capsys.readouterr().out
    path = rec_book / "part" / "recorded" / "recmini.json"
    assert f"record: {path}" in out and "Recorded run (CPU, toy scale): 3 seeds on " in out
    rec = json.loads(path.read_text())
    assert record.check_record(rec) == rec
    assert rec["schema"] == RECORD_SCHEMA and rec["notebook"] == "recmini"
    assert rec["parameters"] == {"smoke": False, "seed": 2, "n_seeds": None, "fail": False}
    assert list(rec["results"]) == ["training"]  # the declared subset: no per-item arrays
    prov = rec["provenance"]
    assert prov["seeds"] == [2, 3, 4] and prov["status"] == "ok" and prov["wall_s"] > 0
    assert prov["variant"] is None and prov["runner"] == "rank_lab.book"
    # the machine while it ran: CPU time of the kernel, logical CPUs, load averages at start and end
    assert prov["cpu_s"] > 0 and prov["cpu_count"] >= 1
    assert len(prov["load_avg_start"]) == len(prov["load_avg_end"]) == 3
    assert "of CPU time on " in recorded.record_header(recorded.load_record("recmini"))
    assert rec["results"]["training"]["effect"]["n"] == 3
    # the executed notebook and its full results.json stay in the output folder
    full = book.load_results(tmp_path / "out" / "recmini")
    assert full["results"]["per_item"] == list(range(500)) and full["parameters"]["smoke"] is False

    # a failed run leaves the good record untouched (and says so)
    before = path.read_bytes()
    assert (
        book.main(
            ["record", "recmini", "-p", "fail", "true", "--quiet", "--out", str(tmp_path / "out")]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and f"the record {path} was left as it was" in err
    assert path.read_bytes() == before


def test_record_refusals_run_nothing_and_touch_nothing(
    rec_book: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = ["--out", str(tmp_path / "out")]
    path = rec_book / "part" / "recorded" / "recmini.json"
    path.parent.mkdir()
    path.write_text("{}")  # whatever is there stays there
    assert book.main(["record", "plain", *out]) == 2
    assert "plain declares no recorded run" in capsys.readouterr().err
    assert book.main(["record", "recmini", "-p", "smoke", "true", *out]) == 2
    assert "a record is a full run, smoke must be false" in capsys.readouterr().err
    assert book.main(["record", "recmini", "-p", "n_seeds", "1", *out]) == 2
    assert "parameter 'n_seeds' of recmini" in capsys.readouterr().err
    monkeypatch.setattr(record, "git_output", lambda *args: " M rank_lab/stats.py")
    assert book.main(["record", "recmini", *out]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    assert path.read_text() == "{}" and not (tmp_path / "out").exists()


def test_make_record_refuses_what_cannot_be_recorded(rec_book: Path) -> None:
    spec = record.record_spec("recmini")
    doc = {
        "parameters": {"smoke": False},
        "provenance": {
            "status": "ok",
            "started_utc": "x",
            "ended_utc": "y",
            "rank_lab": "0.1.0",
            "torch": "2",
            "device": "cpu",
            "git_commit": None,
        },
        "results": {"training": {"seeds": [0, 1, 2]}},
        "cost": {"run_s": 3.0},
    }
    rec = record.make_record(doc, spec)
    assert rec["provenance"]["seeds"] == [0, 1, 2] and rec["provenance"]["wall_s"] == 3.0
    with pytest.raises(RecordError, match="smoke parameter must be False"):
        record.make_record({**doc, "parameters": {"smoke": True}}, spec)
    with pytest.raises(RecordError, match="did not succeed"):
        record.make_record({**doc, "provenance": {**doc["provenance"], "status": "failed"}}, spec)
    with pytest.raises(RecordError, match="lack the recorded keys"):
        record.make_record({**doc, "results": {}}, spec)
    with pytest.raises(RecordError, match="no 'training.seeds'"):
        record.make_record({**doc, "results": {"training": {}}}, spec)
    with pytest.raises(RecordError, match="per-item arrays"):
        record.make_record(
            {**doc, "results": {"training": {"seeds": [0], "x": list(range(101))}}}, spec
        )
    assert issubclass(RecordBuildError, RecordError)


def test_check_record_rules() -> None:
    good = _record_doc()
    assert record.check_record(good) == good
    for bad, message in [
        ({**good, "extra": 1}, "sections"),
        ({**good, "schema": "x/1"}, "schema"),
        ({**good, "parameters": {"smoke": True}}, "full run"),
        ({**good, "provenance": {**good["provenance"], "seeds": []}}, "seeds"),
        ({**good, "provenance": {**good["provenance"], "seeds": [0.5]}}, "seeds"),
        ({**good, "results": {"x": float("nan")}}, "NaN"),
        ({**good, "results": {"x": "a" * 70_000}}, "bytes of JSON"),
    ]:
        with pytest.raises(RecordError, match=message):
            record.check_record(bad)
    with pytest.raises(TypeError, match="record"):
        record.check_record([good])
    machine = {
        "cpu_s": 3.5,
        "cpu_count": 2,
        "load_avg_start": [0.5, 0.4, 0.3],
        "load_avg_end": [1.0, 0.5, 0.3],
    }
    assert record.check_record(_record_doc(**machine))["provenance"]["cpu_count"] == 2
    for bad, message in [
        ({"cpu_s": 3.5}, "not all of"),
        ({**machine, "cpu_s": -1.0}, "cpu_s"),
        ({**machine, "cpu_count": 0}, "cpu_count"),
        ({**machine, "load_avg_end": [1.0]}, "load"),
    ]:
        with pytest.raises(RecordError, match=message):
            record.check_record(_record_doc(**bad))


def test_machine_usage_measures_cpu_time_of_children_and_the_load() -> None:
    import subprocess
    import sys

    before = record.machine_snapshot()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    usage = record.machine_usage(before, record.machine_snapshot())
    assert usage["cpu_s"] > 0.05 and usage["cpu_count"] >= 1
    assert set(usage) == set(record.MACHINE_KEYS) and len(usage["load_avg_start"]) == 3
    with pytest.raises(TypeError, match="start"):
        record.machine_usage({}, before)


# --------------------------------------------------------------------------------- recorded
def test_missing_record_says_so_plainly(rec_book: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = recorded.load_record("recmini")
    assert not run and run.results == {} and run.seeds == []
    header = recorded.record_header(run)
    assert header == "No recorded run of recmini yet: the tables show the live smoke run only."
    recorded.show_header(run)  # outside a kernel: the plain text
    assert capsys.readouterr().out.strip() == header


def test_loaded_record_header_and_errors(rec_book: Path) -> None:
    path = rec_book / "part" / "recorded" / "recmini.json"
    path.parent.mkdir()
    record.write_record(_record_doc(), path)
    run = recorded.load_record("recmini")
    assert run and run.seeds == [0, 1, 2] and run.results["training"]["x"] == 1.5
    assert recorded.record_header(run) == (
        "Recorded run (CPU, toy scale): 3 seeds on 2026-11-26; 12.0 min of wall time on cpu: Test "
        "CPU (CPU time and machine load were not recorded); rank_lab 0.1.0, torch 2.14.1."
    )
    record.write_record(_record_doc(git_dirty=True, wall_s=42.0, seeds=[7]), path)
    assert recorded.record_header(recorded.load_record("recmini")) == (
        "Recorded run (CPU, toy scale): 1 seed on 2026-11-26; 42 s of wall time on cpu: Test CPU "
        "(CPU time and machine load were not recorded); rank_lab 0.1.0, torch 2.14.1, with "
        "uncommitted local changes."
    )
    machine = {
        "cpu_s": 1500.0,
        "cpu_count": 2,
        "load_avg_start": [1.93, 1.5, 1.2],
        "load_avg_end": [2.41, 2.0, 1.5],
    }
    record.write_record(_record_doc(**machine), path)
    run = recorded.load_record("recmini")
    assert run.cpu_s == 1500.0 and run.wall_s == 720.0
    assert run.time_sentence() == (
        "12.0 min of wall time and 25.0 min of CPU time on cpu: Test CPU with 2 logical "
        "cores (load average 1.9 at the start, 2.4 at the end)"
    )
    gpu = _record_doc(device="cuda:0: NVIDIA H100 80GB HBM3")
    gpu["parameters"]["dataset"] = "sop"
    record.write_record(gpu, path)
    assert recorded.run_kind(recorded.load_record("recmini")) == "GPU, real data: sop"
    # a browsable repository: the header links the code of the run (never a hash in the text)
    (rec_book.parent / "_config.yml").write_text(
        "repository:\n  url: https://github.com/org/repo\n"
    )
    record.write_record(_record_doc(), path)
    header = recorded.record_header(recorded.load_record("recmini"))
    assert header.endswith(
        "; [the code of this run](https://github.com/org/repo/tree/0123456789abcdef)."
    )
    (rec_book.parent / "_config.yml").unlink()
    moved = record.pin_start_commit(_record_doc(git_commit="fedcba9876543210"), "0123456789abcdef")
    assert moved["provenance"]["git_commit"] == "0123456789abcdef"
    assert moved["provenance"]["git_commit_end"] == "fedcba9876543210"
    # HEAD did not move
    assert record.pin_start_commit(_record_doc(), "0123456789abcdef") == _record_doc()
    assert record.pin_start_commit(_record_doc(), None) == _record_doc()  # outside a git checkout
    edited = record.pin_start_commit(_record_doc(git_dirty=True), "0123456789abcdef", False)
    # edited during the run, clean when it started
    assert edited["provenance"]["git_dirty"] is False
    with pytest.raises(TypeError, match="start_dirty"):
        record.pin_start_commit(_record_doc(), None, "no")
    record.write_record(moved, path)
    assert recorded.record_header(recorded.load_record("recmini")).endswith(
        "torch 2.14.1 (the repository moved on during the run)."
    )
    path.write_text(json.dumps({**_record_doc(), "notebook": "other"}))
    with pytest.raises(RecordError, match="not of 'recmini'"):
        recorded.load_record("recmini")
    path.write_text(json.dumps({"schema": RECORD_SCHEMA}))
    with pytest.raises(RecordError, match="sections"):
        recorded.load_record("recmini")  # a broken record is an error, not a missing one
    with pytest.raises(TypeError, match="RecordedRun"):
        recorded.record_header("recmini")


def test_tables_and_ci_formatting(capsys: pytest.CaptureFixture[str]) -> None:
    s = {"mean": 0.54321, "lo": 0.5, "hi": 0.58642}
    assert recorded.format_ci(s) == "0.54 [0.50, 0.59]"
    assert recorded.format_ci(s, digits=1, scale=100) == "54.3 [50.0, 58.6]"
    assert recorded.format_ci(None) == "-"
    rows = [
        {"loss": "SupAP", "mAP@R": recorded.format_ci(s, 1, 100), "n": 5},
        {"loss": "Smooth-AP", "mAP@R": 0.5, "extra": None},
    ]
    assert recorded.table_text(rows) == (
        "loss                   mAP@R  n  extra\n"
        "---------  -----------------  -  -----\n"
        "SupAP      54.3 [50.0, 58.6]  5      -\n"
        "Smooth-AP               0.50  -      -"
    )
    html = recorded.table_html(rows, columns=["loss", "mAP@R"], caption="a <b>")
    assert html.startswith('<div class="rank-lab-table"><table><caption>a &lt;b&gt;</caption>')
    assert "<th>mAP@R</th>" in html and "extra" not in html and html.endswith("</table></div>")
    recorded.show_table(rows, columns=["loss", "n"], caption="cap")
    assert (
        capsys.readouterr().out == "cap\nloss       n\n---------  -\nSupAP      5\nSmooth-AP  -\n"
    )
    with pytest.raises(TypeError, match="rows"):
        recorded.table_text({"a": 1})
    with pytest.raises(TypeError, match="summary"):
        recorded.format_ci({"mean": 1.0})


def test_display_in_a_kernel_publishes_html_and_markdown(monkeypatch: pytest.MonkeyPatch) -> None:
    published = []
    import IPython
    import IPython.display

    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(
        IPython.display, "display", lambda obj, raw=False: published.append((obj, raw))
    )
    recorded.show_table([{"a": 1.0}])
    recorded.show_markdown("**x**")
    assert published[0][1] and set(published[0][0]) == {"text/html", "text/plain"}
    assert published[1] == ({"text/markdown": "**x**", "text/plain": "**x**"}, True)


def test_ci_errorbar_plots_mean_and_asymmetric_interval() -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    bars = recorded.ci_errorbar(
        ax,
        [0, 1],
        [{"mean": 0.5, "lo": 0.4, "hi": 0.7}, {"mean": 0.2, "lo": 0.1, "hi": 0.25}],
        scale=100,
        label="x",
    )
    line = bars.lines[0]
    assert list(line.get_ydata()) == [50.0, 20.0]
    segs = bars.lines[2][0].get_segments()
    assert [tuple(map(float, s[:, 1])) for s in segs] == [(40.0, 70.0), (10.0, 25.0)]
    with pytest.raises(ValueError, match="positions"):
        recorded.ci_errorbar(ax, [0], [])
    plt.close(fig)


# --------------------------------------------------------------------------------- readings
KW = dict(a="SupAP", b="Smooth-AP", metric="mAP@R", reasons=["toy data", "small MLP"])
CLAIM = "Sup-AP beats Smooth-AP on SOP and iNaturalist (SupRank Tab. II)"


def test_reading_a_resolved_effect_in_the_claimed_direction() -> None:
    # d = [1, 2, 2] points: CI [0.23, 3.10]
    d = paired_difference([0.55, 0.56, 0.57], [0.54, 0.54, 0.55])
    assert readings.effect_sentence(d, claim=CLAIM, scale=100, unit=" points", **KW) == (
        "SupAP beats Smooth-AP by 1.67 points in mAP@R (95 % CI of SupAP − Smooth-AP: [0.23, "
        "3.10], 3 seeds): the CI excludes zero, as the source claims: Sup-AP beats Smooth-AP on "
        "SOP and iNaturalist (SupRank Tab. II)."
    )
    assert readings.effect_sentence(d, claim=None, scale=100, **KW).endswith(
        "3 seeds): the CI excludes zero."
    )


def test_reading_an_unresolved_effect() -> None:
    d = paired_difference([0.55, 0.53, 0.57], [0.54, 0.54, 0.55])
    text = readings.effect_sentence(d, claim=CLAIM + ".", scale=100, **KW)
    assert text.startswith(
        "No difference between SupAP and Smooth-AP in mAP@R that we can resolve with 3 seeds: "
        "SupAP − Smooth-AP = 0.67 (95 % CI [-3.13, 4.46]), and the CI holds zero."
    )
    assert text.endswith(
        "The source claims that Sup-AP beats Smooth-AP on SOP and iNaturalist (SupRank Tab. II); "
        "likely reasons why this run cannot show it: toy data; small MLP."
    )
    assert readings.effect_sentence(d, claim=None, **KW).endswith(
        "Likely reasons: toy data; small MLP."
    )


def test_reading_a_reversed_effect_names_the_claim_and_the_reasons() -> None:
    d = paired_difference([0.45, 0.46, 0.47], [0.54, 0.54, 0.55])  # A - B = [-9, -8, -8]
    assert readings.effect_sentence(d, claim=CLAIM, scale=100, **KW) == (
        "Smooth-AP beats SupAP by 8.33 in mAP@R (95 % CI of Smooth-AP − SupAP: [6.90, 9.77], 3 "
        "seeds): the CI excludes zero, against the source's claim that Sup-AP beats Smooth-AP on "
        "SOP and iNaturalist (SupRank Tab. II); likely reasons: toy data; small MLP."
    )
    assert readings.effect_sentence(d, claim=None, scale=100, **KW).endswith(
        "against the expectation that SupAP beats Smooth-AP; likely reasons: toy data; small MLP."
    )


def test_reading_a_metric_where_lower_is_better() -> None:
    d = paired_difference([5.0, 6.0, 5.5], [8.0, 9.0, 8.7])  # A - B < 0: A wins on FPR95
    assert readings.effect_sentence(
        d, a="HEAT", b="GMM", metric="FPR95", claim=None, reasons="toy", higher_is_better=False
    ) == (
        "HEAT beats GMM by 3.07 in FPR95, lower is better (95 % CI of HEAT − GMM: [-3.35, -2.78], "
        "3 seeds): the CI excludes zero."
    )
    worse = readings.effect_sentence(
        paired_difference([8.0, 9.0, 8.7], [5.0, 6.0, 5.5]),
        a="HEAT",
        b="GMM",
        metric="FPR95",
        claim="HEAT beats the GMM",
        reasons="toy",
        higher_is_better=False,
    )
    assert worse.startswith(
        "GMM beats HEAT by 3.07 in FPR95, lower is better (95 % CI of GMM − HEAT: [-3.35, -2.78]"
    )
    assert "against the source's claim that HEAT beats the GMM; likely reasons: toy." in worse


def test_reading_refuses_incomplete_input() -> None:
    d = paired_difference([1.0, 2.0], [0.0, 0.5])
    with pytest.raises(ValueError, match="reasons"):
        readings.effect_sentence(d, a="A", b="B", metric="m", claim=None, reasons=[])
    with pytest.raises(TypeError, match="difference"):
        readings.effect_sentence({"mean": 1.0}, a="A", b="B", metric="m", claim=None, reasons="r")
    with pytest.raises(TypeError, match="metric"):
        readings.effect_sentence(d, a="A", b="B", metric="", claim=None, reasons="r")


def test_reading_box_is_a_myst_admonition(rec_book: Path) -> None:
    text = readings.reading_markdown(["one.", "two."])
    assert text == (
        "````{admonition} What this run shows\n:class: tip\n\n- one.\n- two.\n\n"
        "*Read from the live smoke run above.*\n````"
    )
    missing = readings.reading_markdown(["one."], recorded.load_record("recmini"))
    assert "*No recorded run of recmini yet" in missing
    path = rec_book / "part" / "recorded" / "recmini.json"
    path.parent.mkdir()
    record.write_record(_record_doc(), path)
    assert "*Recorded run (CPU, toy scale): 3 seeds on 2026-11-26" in readings.reading_markdown(
        ["one."], recorded.load_record("recmini")
    )
    with pytest.raises(TypeError, match="sentences"):
        readings.reading_markdown("one.")


def test_without_the_book_folder_every_record_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed rank_lab without book/ (a Colab twin) shows the 'no record' header, no crash."""
    monkeypatch.setenv("RANK_LAB_BOOK", str(tmp_path / "nowhere"))
    run = recorded.load_record("smooth_rank_surrogates")
    assert not run and run.path == Path("recorded/smooth_rank_surrogates.json")
    assert recorded.record_header(run).startswith("No recorded run of smooth_rank_surrogates yet")
    assert recorded.load_record("heat", "gpu").path.name == "heat.gpu.json"
    with pytest.raises(ValueError, match="variant"):
        recorded.load_record("heat", "GPU run")
    with pytest.raises(TypeError, match="name"):
        recorded.load_record(3)
