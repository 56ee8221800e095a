"""The reading vocabulary (issue 24): effects, verdicts weighed by the MDE, collapsed arms,
completeness.

Hand-worked effects give each verdict: "resolved (agrees)", "cannot resolve (MDE x)", "not
resolved" above the MDE, "contradicted" (only with healthy arms, followed by why) and "not
comparable" when an arm is collapsed (never read as agreeing). The front-matter declaration is
checked against a record without running anything, and the box against the declaration when it is
shown.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rank_lab.book import readings, record, recorded
from rank_lab.book.readings import Claim, Reading, ReadingError, Reference, arm_status
from rank_lab.stats import minimum_detectable_effect, paired_difference

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
  results_keys: [training]
  recorded:
    keys: [training]
    seeds: training.seeds
{reading}---

# Reading mini

```{{code-cell}} ipython3
:tags: [parameters]
smoke = True
seed = 0
```
"""

AGREE = paired_difference([12.5, 12.7, 12.6, 12.9], [12.1, 12.3, 12.4, 12.5])  # d = .4 .4 .2 .4
NULL = paired_difference([12.5, 12.1, 12.9, 12.2], [12.4, 12.6, 12.3, 12.5])  # holds zero
AGAINST = paired_difference([11.0, 11.2, 11.1, 11.3], [12.1, 12.3, 12.4, 12.5])


def _results() -> dict:
    return {
        "training": {
            "seeds": [0, 1, 2, 3],
            "gain": {"mAP@R": AGREE, "R@1": NULL},
            "loss": AGAINST,
            "summary": {"x": {"n": 4, "mean": 1.0, "lo": 0.0, "hi": 2.0}},
        }
    }


def _record(results: dict) -> dict:
    prov = {
        "schema": "rank_lab.book.results/1",
        "status": "ok",
        "started_utc": "2026-11-26T09:00:00+00:00",
        "ended_utc": "2026-11-26T09:12:00+00:00",
        "rank_lab": "0.1.0",
        "torch": "2.14.1",
        "device": "cpu: Test CPU",
        "git_commit": "0123456789abcdef",
        "git_dirty": False,
        "seeds": [0, 1, 2, 3],
        "wall_s": 720.0,
    }
    return {
        "schema": record.RECORD_SCHEMA,
        "notebook": "readmini",
        "parameters": {"smoke": False, "seed": 0},
        "provenance": prov,
        "results": results,
    }


@pytest.fixture()
def book_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def make(reading: str, results: dict | None = None) -> recorded.RecordedRun:
        root = tmp_path / "book"
        (root / "part" / "recorded").mkdir(parents=True, exist_ok=True)
        (root / "part" / "readmini.md").write_text(HEAD.format(reading=reading))
        monkeypatch.setenv("RANK_LAB_BOOK", str(root))
        record.write_record(
            _record(results or _results()), root / "part" / "recorded" / "readmini.json"
        )
        return recorded.load_record("readmini")

    return make


# ------------------------------------------------------------------------------- effects
def test_effects_are_every_paired_difference_by_path() -> None:
    found = readings.effects(_results())
    assert sorted(found) == ["training/gain/R@1", "training/gain/mAP@R", "training/loss"]
    assert sorted(readings.resolved_effects(_results())) == ["training/gain/mAP@R", "training/loss"]
    assert readings.effects({"runs": [{"d": AGREE}]}) == {"runs/0/d": AGREE}
    with pytest.raises(ReadingError, match="holds '/'"):
        readings.effects({"a/b": {"d": AGREE}})
    with pytest.raises(TypeError, match="mapping"):
        readings.effects([AGREE])


def test_arm_status() -> None:
    ref = Reference("the untrained network", 7.5)
    assert arm_status(12.4, ref) == "healthy" and arm_status(7.5, ref) == "collapsed"
    assert arm_status(5.0, Reference("plain CE", 8.0), higher_is_better=False) == "healthy"
    with pytest.raises(TypeError, match="Reference"):
        arm_status(1.0, 7.5)


# ------------------------------------------------------------------------------- verdicts
def _box(results: dict | None = None) -> Reading:
    return Reading(recorded.RecordedRun("x", Path("x.json"), None), live=results or _results())


REF = Reference("the untrained network", 7.5)
KW = dict(a="SupAP", b="Sup-R@k", unit=" points", reasons=["a toy MLP"], reference=REF)


def test_resolved_agrees() -> None:
    text = _box().compare(
        "training/gain/mAP@R",
        metric="mAP@R",
        claim=Claim("SupAP beats Sup-R@k", "Tab. 3.3", 0.6),
        **KW,
    )
    mde = minimum_detectable_effect(AGREE["std"], 4)
    assert text.startswith(
        "**Resolved (agrees).** SupAP − Sup-R@k in mAP@R: +0.35 points (95 % CI [0.19, 0.51], "
        f"4 seeds; MDE {mde:.2f} points at 80 % power): the interval excludes zero on the side "
        "of the source: SupAP beats Sup-R@k (+0.60 points; Tab. 3.3)."
    )
    assert text.endswith(
        "Arms: SupAP 12.67, Sup-R@k 12.32; trivial reference (the untrained network) 7.50."
    )


def test_cannot_resolve_states_the_mde_next_to_the_source_effect() -> None:
    mde = minimum_detectable_effect(NULL["std"], 4)
    text = _box().compare(
        "training/gain/R@1", metric="R@1", claim=Claim("SupAP beats Sup-R@k", "Tab. 3.3", 0.5), **KW
    )
    assert mde > 0.5
    assert text.startswith(f"**Cannot resolve (MDE {mde:.2f} points).**")
    assert (
        f"this run cannot resolve an effect of this size (MDE {mde:.2f} points); the source: SupAP "
        "beats Sup-R@k (+0.50 points; Tab. 3.3). Why this run cannot show it: a toy MLP."
    ) in text
    # a source effect above the MDE that the interval does not resolve is said so
    text = _box().compare(
        "training/gain/R@1", metric="R@1", claim=Claim("SupAP beats Sup-R@k", "Tab. 3.3", 5.0), **KW
    )
    assert text.startswith("**Not resolved.**") and "above this run's MDE" in text


def test_contradicted_only_with_healthy_arms_and_says_why() -> None:
    claim = Claim("SupAP beats Sup-R@k", "Tab. 3.3", 0.6)
    text = _box().compare("training/loss", metric="mAP@R", claim=claim, **KW)
    assert text.startswith("**Contradicted.** SupAP − Sup-R@k in mAP@R: -1.18 points")
    assert (
        "excludes the sign of the source: SupAP beats Sup-R@k (+0.60 points; Tab. 3.3), and both "
        "arms are healthy. Why: a toy MLP." in text
    )
    # the same interval with an arm below the trivial reference: not comparable, neither for nor
    # against
    collapsed = _box().compare(
        "training/loss",
        metric="mAP@R",
        claim=claim,
        **{**KW, "reference": Reference("plain cross-entropy", 11.5)},
    )
    assert collapsed.startswith("**Not comparable (collapsed arm).**")
    assert (
        "SupAP is not better than plain cross-entropy, so this comparison counts neither for nor "
        "against" in collapsed
    )
    # a collapsed arm never makes an agreement either
    agree = _box().compare(
        "training/gain/mAP@R",
        metric="mAP@R",
        claim=claim,
        **{**KW, "reference": Reference("plain cross-entropy", 12.5)},
    )
    assert (
        agree.startswith("**Not comparable (collapsed arm).**") and "Sup-R@k is not better" in agree
    )


def test_claim_of_the_other_sign_and_lower_is_better() -> None:
    # the source claims A - B < 0 (B better): a resolved negative interval agrees
    text = _box().compare(
        "training/loss",
        metric="FPR95",
        claim=Claim("SupAP lowers FPR95", "Tab. 5.2", -2.0),
        higher_is_better=False,
        **{**KW, "reference": Reference("random", 20.0)},
    )
    assert text.startswith("**Resolved (agrees).**") and ", lower is better" in text
    # a claim of direction only ("A lowers FPR95"): on a lower-is-better metric it claims A - B < 0
    for effect, verdict in (
        ("training/loss", "Resolved (agrees)"),
        ("training/gain/mAP@R", "Contradicted"),
    ):
        text = _box().compare(
            effect,
            metric="FPR95",
            claim=Claim("SupAP lowers FPR95", "Tab. 5.2"),
            higher_is_better=False,
            **{**KW, "reference": Reference("random", 20.0)},
        )
        assert text.startswith(f"**{verdict}.**"), text


def test_state_fills_numbers_and_direction_from_the_interval() -> None:
    box = _box()
    assert (
        box.state("training/loss", "A − B = {ci} over {n} seeds: A is {direction} B.", unit=" pts")
        == "A − B = -1.18 pts [-1.33, -1.02] over 4 seeds: A is below B."
    )
    assert box.note("A count.") == "A count."
    with pytest.raises(ReadingError, match="read twice"):
        box.state("training/loss", "{ci}")
    with pytest.raises(ReadingError, match="no effect 'training/nope'"):
        box.state("training/nope", "{ci}")
    with pytest.raises(ReadingError, match="template"):
        _box().state("training/loss", "{unknown}")
    with pytest.raises(TypeError, match="Claim"):
        _box().compare("training/loss", metric="m", claim="A beats B", **KW)
    with pytest.raises(ValueError, match="reason"):
        _box().compare("training/loss", metric="m", claim=Claim("x", "y"), **{**KW, "reasons": []})


# ------------------------------------------------------------------------------- completeness
def test_declaration_covers_every_resolved_effect(book_with) -> None:
    rec = book_with(
        "  reading:\n    reads: [training/gain/*]\n    not_read:\n"
        "      training/loss: a loss value, not a claim\n"
    )
    assert readings.reading_problems(rec) == []
    rec = book_with("  reading:\n    reads: [training/gain/mAP@R]\n")
    assert readings.reading_problems(rec) == [
        "readmini: resolved effect 'training/loss' is neither read by the box nor listed in "
        "not_read"
    ]
    rec = book_with(
        "  reading:\n    reads: [training/gain/*, training/old]\n    not_read:\n"
        "      training/loss: reason\n      training/gain/mAP@R: both\n"
    )
    problems = readings.reading_problems(rec)
    assert "readmini: effect 'training/gain/mAP@R' is declared both read and not read" in problems
    assert (
        "readmini: 'training/old' matches no effect of the record (stale declaration)" in problems
    )
    rec = book_with("")
    assert readings.reading_problems(rec)[0].startswith(
        "readmini: no rank_lab.reading declaration, and the record has 2 resolved effects"
    )
    for bad in [
        "  reading: [a]\n",
        "  reading:\n    reads: a\n",
        "  reading:\n    not_read: {a: ''}\n",
        "  reading:\n    other: 1\n",
    ]:
        book_with(bad)
        with pytest.raises(ReadingError):
            readings.reading_spec("readmini")


def test_the_box_must_write_what_it_declares(book_with) -> None:
    rec = book_with(
        "  reading:\n    reads: [training/gain/*]\n    not_read:\n      training/loss: reason\n"
    )
    box = Reading(rec)
    claim = Claim("SupAP beats Sup-R@k", "Tab. 3.3", 0.6)
    box.compare("training/gain/mAP@R", metric="mAP@R", claim=claim, **KW)
    with pytest.raises(ReadingError, match="declared effect 'training/gain/R@1' has no sentence"):
        box.check()
    box.compare("training/gain/R@1", metric="R@1", claim=claim, **KW)
    box.check()
    box.state("training/loss", "{ci}")
    with pytest.raises(
        ReadingError, match="reads 'training/loss', which rank_lab.reading.reads does not declare"
    ):
        box.check()
    md = box.markdown()
    assert md.startswith(
        "````{admonition} What this run shows\n:class: tip\n\n- **Resolved (agrees).**"
    )
    assert md.endswith(
        "*Recorded run (CPU, toy scale): 4 seeds on 2026-11-26; 12.0 min of wall time on cpu: "
        "Test CPU (CPU time and machine load were not recorded); rank_lab 0.1.0, torch "
        "2.14.1.*\n````"
    )


def test_without_a_record_the_box_reads_the_live_run_and_checks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK_LAB_BOOK", str(tmp_path / "nowhere"))
    box = Reading(recorded.load_record("readmini"), live=_results())
    box.state("training/loss", "{ci}")
    box.check()
    assert box.markdown().endswith("*Read from the live smoke run above.*\n````")
    with pytest.raises(ReadingError, match="no sentence"):
        Reading(recorded.load_record("readmini"), live=_results()).markdown()


def test_record_round_trip_keeps_effects(book_with) -> None:
    rec = book_with("  reading:\n    reads: [training/*]\n")
    assert (
        json.loads(rec.path.read_text())["results"]["training"]["gain"]["mAP@R"]["mean_a"]
        == AGREE["mean_a"]
    )
    assert sorted(readings.effects(rec.results)) == sorted(readings.effects(_results()))
