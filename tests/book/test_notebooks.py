"""The book's notebooks keep the contract of ``rank_lab.book`` (docs/book_contract.md).

Static, for every notebook (fast): the parameters cell parses into a schema with its front-matter
constraints; papermill reads the same names without a warning; every declared parameter is read by
the notebook's code; the run is started with ``start_run`` (or the chapter kit's ``setup``) and
saved with ``save_results``; one cell tagged ``nbval-check-output`` prints the key figures.

Executed (marker ``notebook``), for every notebook in smoke mode: papermill through
:func:`rank_lab.book.run_notebook`; ``results.json`` follows the schema, holds the effective
parameters, finite figures and no timings among them; the printed key figures match
``tests/notebook_reference/<name>.json`` within its stated tolerances; then nbval re-executes the
executed copy (``--nbval-lax``) and compares the checked cell's output; that re-run (no runner:
``start_run`` reads the kernel's namespace) writes a ``results.json`` whose parameters and results
equal the runner's: two runs with the same parameters agree outside provenance and cost.

``make notebook-reference`` (``RANK_LAB_WRITE_REFERENCE=1``) rewrites the reference files from
the smoke runs, keeping their tolerances; a commit that changes them says why.

Clean outputs (issue 15): the executed smoke notebooks carry no warning text, no stderr stream and
no stray return value (an ``execute_result`` that is a bare repr such as ``PosixPath(...)``); code
lines are at most 90 characters; the book names no project-internal material; a notebook that
declares a recorded full run (``rank_lab.recorded``) has a valid record next to it.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from rank_lab.book import (
    check_document,
    front_matter,
    list_notebooks,
    load_results,
    notebook_schema,
    run_notebook,
)
from rank_lab.book.audit import internal_language
from rank_lab.book.cells import is_checked_cell
from rank_lab.book.notebooks import to_notebook
from rank_lab.book.record import record_spec
from rank_lab.book.recorded import load_record

NOTEBOOKS = list_notebooks()
IDS = [p.stem for p in NOTEBOOKS]
ROOT = Path(__file__).resolve().parents[2]
REFERENCE = Path(__file__).resolve().parents[1] / "notebook_reference"
SMOKE = {"seed": 0, "device": "cpu"}  # with the defaults of each parameters cell (smoke = True)
#: Tolerances of a new reference file: the smoke figures of the small trained models may move by a
#: few percent on another CPU (float summation order); exact computations get tighter ones by hand.
DEFAULT_TOLERANCE = {"rel": 0.05, "abs": 0.01}
TIMING_KEY = re.compile(
    r"(^|_)(s|sec|secs|seconds|time|elapsed|runtime|per_s)$|^(seconds|elapsed|runtime|time)"
)
MAX_CODE_LINE = 90
#: Warning text that must not appear in an executed notebook's outputs.
WARNING_TEXT = re.compile(
    r"Warning\b|DeprecationWarning|TqdmWarning|IProgress not found|without encryption"
)
#: Words naming project-internal material that readers never see (the book cites the sources).
INTERNAL = re.compile(r"digest|shared/seeds|seeds folder", re.IGNORECASE)


def _outside_solutions(md: Path) -> list:
    """The code cells that are not inside a gated exercise solution (solution-start ...
    solution-end)."""
    out, inside = [], False
    for cell in to_notebook(md).cells:
        if cell.cell_type == "markdown":
            start, end = cell.source.rfind("{solution-start}"), cell.source.rfind("{solution-end}")
            inside = start > end if max(start, end) >= 0 else inside
        elif not inside:
            out.append(cell)
    return out


def _code_cells(md: Path) -> list:
    return [c for c in to_notebook(md).cells if c.cell_type == "code"]


def _loaded_names(md: Path) -> set[str]:
    names: set[str] = set()
    for cell in _code_cells(md):
        if "parameters" in cell.metadata.get("tags", []):
            continue
        src = "\n".join(
            ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))
        )
        names |= {
            n.id
            for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        if "setup(globals()," in src:  # rank_lab.book.chapter.setup reads the seed and the device
            names |= {"seed", "device"}
    return names


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no jupytext notebook found under book/"


def test_every_notebook_is_in_the_toc() -> None:
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    for md in NOTEBOOKS:
        assert md.relative_to(ROOT).with_suffix("").as_posix() in toc, (
            f"{md} is missing from _toc.yml"
        )


@pytest.mark.parametrize("md", NOTEBOOKS, ids=IDS)
def test_notebook_contract(md: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    schema = notebook_schema(md)  # raises on a malformed cell or front matter
    for name in ("smoke", "seed", "device"):
        assert name in schema.names, f"{md.name}: parameter {name!r} missing"
    assert schema.parameters["smoke"].default is True, (
        f"{md.name}: the defaults must be the smoke run"
    )
    assert "weights_path" not in schema.names, (
        f"{md.name}: weights_path is now one parameter, weights"
    )
    if "weights" in schema.names:
        assert schema.parameters["weights"].default == "imagenet", (
            f"{md.name}: weights defaults to 'imagenet'"
        )
    unread = [n for n in schema.names if n not in _loaded_names(md)]
    assert not unread, f"{md.name}: declared parameters its code never reads: {unread}"

    cells = _code_cells(md)
    assert "parameters" in cells[0].metadata.get("tags", []), (
        f"{md.name}: the parameters cell comes first"
    )
    assert "start_run(globals())" in cells[1].source or "setup(globals()," in cells[1].source, (
        f"{md.name}: the cell after the parameters calls start_run (or rank_lab.book.chapter.setup)"
    )
    for line in cells[0].source.splitlines():
        assert "=" not in line.partition("#")[2], (
            f"{md.name}: '=' in a parameters comment breaks papermill: {line!r}"
        )
    checked = [c for c in cells if is_checked_cell(c)]
    assert len(checked) == 1 and "print_key_figures(" in checked[0].source, (
        f"{md.name}: one cell tagged nbval-check-output prints the key figures"
    )
    main = _outside_solutions(md)
    assert "save_results(" in main[-1].source, (
        f"{md.name}: the last cell (outside the exercises' solutions) writes results.json"
    )
    assert front_matter(md).get("rank_lab", {}).get("results_keys"), (
        f"{md.name}: no rank_lab.results_keys"
    )

    # papermill's own reader agrees with the schema, without a warning (for
    # `papermill --help-notebook`)
    import papermill

    src = tmp_path / f"{md.stem}.ipynb"
    nbformat.write(to_notebook(md), src)
    with caplog.at_level(logging.WARNING, logger="papermill"):
        inspected = papermill.inspect_notebook(str(src))
    assert list(inspected) == schema.names
    assert not [r for r in caplog.records if r.name.startswith("papermill")], caplog.text


def _code_lines(md: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of the code lines of a jupytext MyST notebook (fences excluded)."""
    out, inside = [], False
    for i, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```{code-cell}"):
            inside = True
        elif inside and line.startswith("```"):
            inside = False
        elif inside:
            out.append((i, line))
    return out


@pytest.mark.parametrize("md", NOTEBOOKS, ids=IDS)
def test_code_lines_fit_in_90_characters(md: Path) -> None:
    long = [f"line {i}: {len(t)} characters" for i, t in _code_lines(md) if len(t) > MAX_CODE_LINE]
    assert not long, (
        f"{md.name}: code lines longer than {MAX_CODE_LINE} characters (the book cuts them): {long}"
    )


def test_book_cites_sources_not_internal_material() -> None:
    """No mention of project-internal notes (a "digest", its errata, the seeds folder) anywhere in
    book/."""
    found = []
    for path in sorted((ROOT / "book").rglob("*")):
        if path.is_file() and path.suffix in (".md", ".py", ".bib", ".json", ".css", ".yml"):
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if INTERNAL.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert not found, "cite the source's section or equation instead:\n" + "\n".join(found)


@pytest.mark.parametrize("md", NOTEBOOKS, ids=IDS)
def test_declared_record_is_present_and_valid(md: Path) -> None:
    """A chapter that declares ``rank_lab.recorded`` ships its record (the book shows it)."""
    spec = record_spec(md)
    if spec is None:
        assert "load_record(" not in md.read_text(encoding="utf-8"), (
            f"{md.name} loads a record but declares none (front matter rank_lab.recorded)"
        )
        return
    run = load_record(md)  # raises on a malformed record
    assert run, (
        f"{md.name} declares a recorded full run but {run.path} is missing: "
        f"run `python -m rank_lab.book record {md.stem}` and commit the file"
    )
    schema = notebook_schema(md)
    assert set(run.parameters) == set(schema.names), (
        f"{run.path.name}: parameters differ from the notebook's"
    )
    assert schema.check(run.parameters) == run.parameters and run.parameters["smoke"] is False
    assert list(run.results) == list(spec.keys)
    assert len(run.seeds) >= 3, (
        f"{run.path.name}: a recorded run has at least 3 seeds, got {run.seeds}"
    )
    assert run.provenance["notebook"] == md.stem and run.provenance["git_commit"], run.provenance


def _output_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Warning text, stderr streams and stray return values in the outputs of an executed
    notebook."""
    problems = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            kind = out.get("output_type")
            if kind == "stream" and out.get("name") == "stderr":
                problems.append(f"cell {i}: stderr: {out.get('text', '')[:200]!r}")
            elif kind == "stream" and WARNING_TEXT.search(out.get("text", "")):
                problems.append(f"cell {i}: warning text: {out.get('text', '')[:200]!r}")
            elif kind == "execute_result" and set(out.get("data", {})) <= {"text/plain"}:
                problems.append(
                    f"cell {i}: stray return value {out['data'].get('text/plain', '')[:80]!r} "
                    "(assign it, or end the cell with a statement)"
                )
            elif kind in ("display_data", "execute_result"):
                text = out.get("data", {}).get("text/plain", "")
                if WARNING_TEXT.search(text if isinstance(text, str) else "".join(text)):
                    problems.append(f"cell {i}: warning text in a display: {text[:200]!r}")
            if kind in ("stream", "display_data", "execute_result") and not is_checked_cell(cell):
                data = out.get("data", {})
                shown = (
                    out.get("text", "")
                    if kind == "stream"
                    else data.get("text/markdown", data.get("text/plain", ""))
                )
                shown = shown if isinstance(shown, str) else "".join(shown)
                problems += [
                    f"cell {i}: internal language in an output: {hit}"
                    for hit in internal_language(shown)
                ]
    return problems


def _timing_keys(obj: object, path: str = "") -> list[str]:
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if TIMING_KEY.search(str(k)):
                out.append(f"{path}.{k}")
            out += _timing_keys(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:50]):
            out += _timing_keys(v, f"{path}.{i}")
    return out


def _finite(obj: object) -> bool:
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return not isinstance(obj, float) or math.isfinite(obj)


def _printed_figures(nb_path: Path) -> dict[str, float]:
    nb = nbformat.read(nb_path, as_version=4)
    cell = next(c for c in nb.cells if is_checked_cell(c))
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
    figures = {}
    for line in text.splitlines():
        label, sep, value = line.rpartition(" = ")
        if sep:
            figures[label] = float(value)
    assert figures, f"{nb_path.name}: the checked cell printed no key figure"
    return figures


def _compare_with_reference(name: str, figures: dict[str, float]) -> None:
    path = REFERENCE / f"{name}.json"
    if os.environ.get("RANK_LAB_WRITE_REFERENCE"):
        old = json.loads(path.read_text()) if path.exists() else {}
        doc = {
            "notebook": name,
            "parameters": SMOKE,
            "tolerance": old.get("tolerance", DEFAULT_TOLERANCE),
            "figures": figures,
        }
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
        return
    assert path.exists(), f"no reference for {name}: run `make notebook-reference`"
    ref = json.loads(path.read_text())
    assert ref["parameters"] == SMOKE
    tol = ref["tolerance"]
    assert set(figures) == set(ref["figures"]), (
        f"{name}: key figures changed: new {sorted(set(figures) - set(ref['figures']))}, "
        f"gone {sorted(set(ref['figures']) - set(figures))}"
    )
    moved = {
        k: (v, ref["figures"][k])
        for k, v in figures.items()
        if v != pytest.approx(ref["figures"][k], rel=tol["rel"], abs=tol["abs"])
    }
    assert not moved, (
        f"{name}: key figures moved beyond rel={tol['rel']}, abs={tol['abs']} (got, reference): "
        f"{moved}"
    )


def _nbval(executed: Path, workdir: Path) -> Path:
    """Re-execute the executed notebook with nbval (``--nbval-lax``) in ``workdir``; return its
    folder."""
    workdir.mkdir()
    copy = workdir / executed.name
    shutil.copy(executed, copy)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--rootdir",
        str(workdir),
        "--nbval-lax",
        "--nbval-current-env",
        "--nbval-cell-timeout=600",
        str(copy),
    ]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (
        f"nbval failed on {executed.name}:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    return workdir


@pytest.mark.notebook
@pytest.mark.parametrize("md", NOTEBOOKS, ids=IDS)
def test_notebook_runs_in_smoke_mode(
    md: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # deterministic kernels, one core each under `pytest -n 2`
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    out = run_notebook(md, SMOKE, tmp_path / "papermill", timeout=600)
    doc = load_results(out)
    schema = notebook_schema(md)
    assert doc["provenance"]["status"] == "ok" and doc["provenance"]["runner"] == "rank_lab.book"
    assert doc["provenance"]["notebook"] == md.stem
    assert doc["parameters"] == schema.effective(SMOKE)
    results = doc["results"]
    missing = set(front_matter(md)["rank_lab"]["results_keys"]) - set(results)
    assert not missing, f"{md.name}: results.json lacks {sorted(missing)}"
    assert _finite(results), f"{md.name}: results.json holds NaN or inf"
    timings = _timing_keys(results)
    assert not timings, f"{md.name}: timings belong in cost, not results: {timings}"
    assert doc["cost"]["run_s"] > 0

    executed = out / f"{md.stem}.ipynb"
    nb = nbformat.read(executed, as_version=4)
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{md.name}: error outputs {errors[:1]}"
    problems = _output_problems(nb)
    assert not problems, f"{md.name}: the executed notebook's outputs are not clean:\n" + "\n".join(
        problems
    )
    _compare_with_reference(md.stem, _printed_figures(executed))

    rerun = _nbval(executed, tmp_path / "nbval")
    by_hand = check_document(json.loads((rerun / "results.json").read_text()))
    assert by_hand["provenance"]["runner"] == "none"
    assert by_hand["parameters"] == doc["parameters"], (
        "start_run read other parameters than the runner injected"
    )
    assert by_hand["results"] == results, (
        f"{md.name}: two runs with the same parameters gave different results"
    )


def test_cli_refuses_bad_parameters_of_the_book_notebooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's cases, on the real notebooks: exit code 2 and one line, nothing executed."""
    from rank_lab.book import main

    out = ["--out", str(tmp_path / "out")]
    assert main(["run", "evaluating_retrieval", "-p", "datset", "digits", *out]) == 2
    known = ", ".join(notebook_schema("evaluating_retrieval").names)
    assert capsys.readouterr().err == (
        f"error: unknown parameter 'datset' for evaluating_retrieval; "
        f"did you mean 'dataset'? Known: {known}\n"
    )
    assert main(["run", "smooth_rank_surrogates_details", "-p", "dataset", "digitz", *out]) == 2
    assert capsys.readouterr().err == (
        "error: parameter 'dataset' of smooth_rank_surrogates_details: got 'digitz' "
        "(str), expected one of 'synthetic', 'digits'; did you mean 'digits'?\n"
    )
    assert main(["run", "heat", "-p", "smoke", "maybe", *out]) == 2
    assert (
        "parameter 'smoke' of heat: got 'maybe' (str), expected a bool (true or false)"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.notebook
def test_evaluating_retrieval_reads_its_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-p dataset digits` changes the figures shown; a missing real dataset folder is one clear
    error."""
    from rank_lab.book import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert (
        main(
            [
                "run",
                "evaluating_retrieval",
                "-p",
                "dataset",
                "digits",
                "--quiet",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    shown = capsys.readouterr().out
    default = json.loads((REFERENCE / "evaluating_retrieval.json").read_text())["figures"]
    assert "embedding_set.metrics.raw pixels.R@1 = " in shown and "raw features" in " ".join(
        default
    )
    digits = load_results(tmp_path / "evaluating_retrieval")["results"]["embedding_set"]
    assert digits["dataset"] == "digits" and list(digits["metrics"]) == ["raw pixels"]
    assert digits["metrics"]["raw pixels"]["mAP@R"] != pytest.approx(
        default["embedding_set.metrics.raw features.mAP@R"], abs=0.01
    )

    argv = [
        "run",
        "evaluating_retrieval",
        "-p",
        "dataset",
        "sop",
        "-p",
        "data_dir",
        "/nonexistent",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        "DatasetFolderError: SOP: root folder '/nonexistent' does not exist" in err
        and "Traceback" not in err
    )
    doc = load_results(tmp_path / "evaluating_retrieval")
    assert (
        doc["provenance"]["status"] == "failed"
        and doc["provenance"]["error"]["type"] == "DatasetFolderError"
    )
    assert doc["results"] == {}
