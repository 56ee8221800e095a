"""``rank_lab.book``: the parameter contract, results.json, the runner, the command line, the
twins."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from rank_lab import book
from rank_lab.book.cells import injected_cell_source, parse_parameters_cell
from rank_lab.book.parameters import ParameterError, ParameterTypeError, parse_cli_value
from rank_lab.book.provenance import SCHEMA
from rank_lab.book.results import (
    check_document,
    failed_document,
    key_figures,
    print_key_figures,
    write_document,
)

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
  results_keys: [value]
  parameters:
    seed: {min: 0}
    device: {type: str}
    dataset: {choices: [synthetic, digits]}
    data_dir: {type: str}
    scales: {min: 1}
---

# Mini
"""
PARAMS = """
```{code-cell} ipython3
:tags: [parameters]
smoke = True          # fast run
seed = 0
device = None         # None: CUDA when present
dataset = "synthetic" # the set
data_dir = None
scale = 2.0
scales = [1, 2]
```
"""
BODY = """
```{code-cell} ipython3
from rank_lab.book import save_results, start_run

start_run(globals())
if dataset == "digits" and data_dir is not None:
    from rank_lab.data.datasets import DatasetFolderError

    raise DatasetFolderError(f"digits: no folder {data_dir!r}")
value = scale * (seed + 1) * sum(scales)
```

```{code-cell} ipython3
# NBVAL_CHECK_OUTPUT
print(value, smoke, dataset, device)
results_path = save_results({"value": value, "smoke": smoke}, "results.json", cost={"took_s": 0.5})
```
"""
MINI = HEAD + PARAMS + BODY


@pytest.fixture()
def mini_book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "book"
    (root / "part").mkdir(parents=True)
    (root / "part" / "mini.md").write_text(MINI)
    monkeypatch.setenv("RANK_LAB_BOOK", str(root))
    monkeypatch.chdir(tmp_path)
    return root


# ------------------------------------------------------------------------------- parameters
def test_parse_parameter_is_a_yaml_literal() -> None:
    assert book.parse_parameter("1") == 1
    assert book.parse_parameter("false") is False
    assert book.parse_parameter("0.5") == 0.5
    assert book.parse_parameter("[1, 2]") == [1, 2]
    assert book.parse_parameter("null") is None
    assert book.parse_parameter("digits") == "digits"
    assert book.parse_parameter("a: [") == "a: ["  # not YAML: the text itself


def test_parameters_cell_is_one_literal_assignment_per_line() -> None:
    cell = 'smoke = True  # fast\nseed = 0\nalphas = [1.0,\n          2.0]  # two\nname = "a # b"\n'
    assert parse_parameters_cell(cell) == [
        ("smoke", True, "fast"),
        ("seed", 0, ""),
        ("alphas", [1.0, 2.0], "two"),
        ("name", "a # b", ""),
    ]
    for bad, why in [
        ("a, b = 1, 2", "plain"),
        ("a = b = 1", "plain"),
        ("x = 50000 // 32", "not a literal"),
        ("x = f()", "not a literal"),
        ("a = 1; b = 2", "one assignment per line"),
        ("a = 1\na = 2", "assigned twice"),
        ("import os", "plain"),
        ("a: int = 1", "plain"),
        ("a = (", "not valid Python"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_parameters_cell(bad)


def test_schema_types_defaults_and_constraints(mini_book: Path) -> None:
    schema = book.notebook_schema("mini")
    assert schema.names == ["smoke", "seed", "device", "dataset", "data_dir", "scale", "scales"]
    assert schema.defaults()["scales"] == [1, 2]
    p = schema.parameters
    assert p["smoke"].types == ("bool",) and p["device"].types == ("str",) and p["device"].nullable
    assert p["scales"].items == ("int",) and p["dataset"].choices == ("synthetic", "digits")
    assert p["smoke"].comment == "fast run"
    assert schema.check(
        {"smoke": False, "scale": 3, "device": "cpu", "data_dir": None, "scales": (4,)}
    ) == {"smoke": False, "scale": 3.0, "device": "cpu", "data_dir": None, "scales": [4]}
    assert isinstance(schema.check({"scale": 3})["scale"], float)  # an int is a float here
    assert (
        schema.effective({"seed": 5})["seed"] == 5 and schema.effective()["dataset"] == "synthetic"
    )


@pytest.mark.parametrize(
    "values, cls, message",
    [
        (
            {"sede": 1},
            ParameterError,
            "unknown parameter 'sede' for mini; did you mean 'seed'? Known: smoke, seed, device, "
            "dataset, data_dir, scale, scales",
        ),
        ({"zzz": 1}, ParameterError, "unknown parameter 'zzz' for mini. Known: smoke"),
        (
            {"smoke": "maybe"},
            ParameterTypeError,
            "parameter 'smoke' of mini: got 'maybe' (str), expected a bool (true or false)",
        ),
        ({"smoke": 1}, ParameterTypeError, "got 1 (int), expected a bool"),
        (
            {"seed": 1.5},
            ParameterTypeError,
            "parameter 'seed' of mini: got 1.5 (float), expected an int >= 0",
        ),
        (
            {"seed": -1},
            ParameterError,
            "parameter 'seed' of mini: got -1 (int), expected an int >= 0",
        ),
        ({"seed": True}, ParameterTypeError, "got True (bool), expected an int"),
        (
            {"dataset": "digitz"},
            ParameterError,
            "parameter 'dataset' of mini: got 'digitz' (str), expected one of 'synthetic', "
            "'digits'; did you mean 'digits'?",
        ),
        ({"dataset": None}, ParameterTypeError, "got None (NoneType), expected one of"),
        (
            {"device": 3},
            ParameterTypeError,
            "parameter 'device' of mini: got 3 (int), expected a str or null",
        ),
        ({"scale": math.nan}, ParameterError, "expected a float (finite)"),
        ({"scales": [1, "a"]}, ParameterTypeError, "expected a list of int"),
        ({"scales": [0]}, ParameterError, "with items >= 1"),
    ],
)
def test_check_names_parameter_value_and_expectation(mini_book: Path, values, cls, message) -> None:
    with pytest.raises(cls) as err:
        book.notebook_schema("mini").check(values)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)
    assert isinstance(err.value, TypeError) == (cls is ParameterTypeError)


def test_cli_values_are_yaml_literals_typed_by_the_schema(mini_book: Path) -> None:
    schema = book.notebook_schema("mini")
    p = schema.parameters
    assert parse_cli_value("false", p["smoke"]) is False
    assert parse_cli_value("maybe", p["smoke"]) == "maybe"  # refused by check, never truthy
    assert parse_cli_value("null", p["data_dir"]) is None
    assert parse_cli_value("2024", p["data_dir"]) == "2024"  # a folder name, not an int
    assert parse_cli_value("yes", p["dataset"]) == "yes"  # YAML 1.1 booleans stay text for a str
    assert parse_cli_value("3", p["scale"]) == 3
    assert schema.parse_cli([("smoke", "false"), ("scales", "[3, 4]"), ("scale", "0.5")]) == {
        "smoke": False,
        "scales": [3, 4],
        "scale": 0.5,
    }
    with pytest.raises(ParameterTypeError, match="'smoke' of mini: got 'maybe'"):
        schema.parse_cli([("smoke", "maybe")])
    with pytest.raises(
        ParameterError, match="unknown parameter 'datset' for mini; did you mean 'dataset'"
    ):
        schema.parse_cli([("datset", "digits")])


@pytest.mark.parametrize(
    "front, cell, message",
    [
        ("  parameters:\n    nothing: {min: 0}\n", "seed = 0\n", r"constrains \['nothing'\]"),
        ("", "data_dir = None\n", "defaults to None: declare its type"),
        ("  parameters:\n    d: {choices: [a, b]}\n", 'd = "c"\n', "breaks its own constraints"),
        (
            "  parameters:\n    seed: {type: str}\n",
            "seed = 0\n",
            "does not include the type of its default",
        ),
        ("  parameters:\n    seed: {minimum: 0}\n", "seed = 0\n", "unknown constraint keys"),
        ("  parameters:\n    seed: {type: number}\n", "seed = 0\n", "must name types"),
        ("", "a, b = 1, 2\n", "not one plain 'name = literal'"),
    ],
)
def test_malformed_schemas_are_refused(tmp_path: Path, front: str, cell: str, message: str) -> None:
    md = tmp_path / "bad.md"
    md.write_text(
        HEAD.split("rank_lab:")[0] + "rank_lab:\n  results_keys: [x]\n" + front + "---\n\n"
        "```{code-cell} ipython3\n:tags: [parameters]\n" + cell + "```\n"
    )
    with pytest.raises(ValueError, match=message):
        book.notebook_schema(md)


def test_injected_cell_round_trips_and_refuses_non_literals() -> None:
    src = injected_cell_source({"a": 1.5, "b": "x'y", "c": [1, None], "d": {"k": True}})
    ns: dict = {}
    exec(src, ns)  # noqa: S102 - the text the runner injects
    assert (ns["a"], ns["b"], ns["c"], ns["d"]) == (1.5, "x'y", [1, None], {"k": True})
    assert parse_parameters_cell(src) == [
        ("a", 1.5, ""),
        ("b", "x'y", ""),
        ("c", [1, None], ""),
        ("d", {"k": True}, ""),
    ]
    with pytest.raises(TypeError, match="not a Python literal"):
        injected_cell_source({"a": math.inf})
    with pytest.raises(TypeError, match="not an identifier"):
        injected_cell_source({"a b": 1})


# ------------------------------------------------------------------------------- results.json
def test_save_results_converts_and_writes_a_valid_document(tmp_path: Path) -> None:
    p = book.save_results(
        {
            "a": torch.tensor([1.0, 2.0]),
            "b": np.float32(0.5),
            "c": math.nan,
            "d": {"e": np.arange(2)},
        },
        tmp_path,
        cost={"fit_s": np.float64(1.25)},
    )
    doc = json.loads(p.read_text())
    assert doc["results"] == {"a": [1.0, 2.0], "b": 0.5, "c": None, "d": {"e": [0, 1]}}
    assert doc["cost"] == {"fit_s": 1.25}
    assert doc["parameters"] == {}  # no runner, no start_run: no parameter is known
    prov = doc["provenance"]
    assert (
        prov["schema"] == SCHEMA
        and prov["status"] == "ok"
        and prov["runner"] == "none"
        and prov["error"] is None
    )
    import faiss
    import timm

    import rank_lab

    assert (prov["rank_lab"], prov["torch"], prov["faiss"], prov["timm"]) == (
        rank_lab.__version__,
        torch.__version__,
        faiss.__version__,
        timm.__version__,
    )
    assert prov["device"].startswith("cpu: " if not torch.cuda.is_available() else "cuda")
    assert prov["started_utc"] <= prov["ended_utc"] and prov["started_utc"].endswith("+00:00")
    assert book.load_results(tmp_path) == doc
    assert sorted(os.listdir(tmp_path)) == ["results.json"]  # the temporary file was renamed
    with pytest.raises(TypeError, match="results must be a mapping"):
        book.save_results([1, 2], tmp_path)
    with pytest.raises(TypeError, match="cost must be a mapping"):
        book.save_results({}, tmp_path, cost=3)


def test_documents_are_checked(tmp_path: Path) -> None:
    good = failed_document({"seed": 1}, ValueError("boom"), notebook="x")
    assert good["provenance"]["error"] == {"type": "ValueError", "message": "boom"}
    assert check_document(good) == good
    for broken, message in [
        ({**good, "extra": {}}, "sections"),
        ({**good, "results": []}, "'results' must be a mapping"),
        ({**good, "provenance": {**good["provenance"], "status": "done"}}, "status"),
        ({**good, "provenance": {**good["provenance"], "error": None}}, "records its error"),
        ({**good, "provenance": {**good["provenance"], "schema": "v0"}}, "schema"),
    ]:
        with pytest.raises(ValueError, match=message):
            write_document(broken, tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(TypeError, match="error must be"):
        failed_document({}, "boom")


def test_key_figures_by_dotted_path_or_key_tuple(capsys: pytest.CaptureFixture[str]) -> None:
    res = {
        "a": {"b=0.1": {"c": 0.123456}},
        "rows": [{"AP": 2}, {"AP": -0.0}],
        "n": None,
        "t": torch.tensor(3.0),
    }
    assert key_figures(res, [("a", "b=0.1", "c"), "rows.0.AP", "rows.-1.AP", "t"]) == {
        "a.b=0.1.c": 0.123456,
        "rows.0.AP": 2.0,
        "rows.-1.AP": -0.0,
        "t": 3.0,
    }
    print_key_figures(res, [("a", "b=0.1", "c"), "rows.1.AP"])
    assert capsys.readouterr().out == "a.b=0.1.c = 0.123\nrows.1.AP = 0\n"
    with pytest.raises(ValueError, match="'a.b' is not in the results"):
        key_figures(res, ["a.b"])
    with pytest.raises(ValueError, match="'n' is None, not a finite number"):
        key_figures(res, ["n"])
    with pytest.raises(TypeError, match="paths must be"):
        key_figures(res, "a")


# ------------------------------------------------------------------------------- runner
def test_run_notebook_injects_checked_parameters_and_completes_the_document(
    mini_book: Path, tmp_path: Path
) -> None:
    out = book.run_notebook("mini", {"seed": 2, "scale": 10, "device": "cpu"}, tmp_path / "out")
    doc = book.load_results(out)
    assert doc["results"] == {"value": 90.0, "smoke": True}
    assert doc["parameters"] == {
        "smoke": True,
        "seed": 2,
        "device": "cpu",
        "dataset": "synthetic",
        "data_dir": None,
        "scale": 10.0,
        "scales": [1, 2],
    }
    assert (
        doc["provenance"]["runner"] == "rank_lab.book" and doc["provenance"]["notebook"] == "mini"
    )
    assert doc["cost"]["took_s"] == 0.5 and doc["cost"]["run_s"] > 0
    nb = nbformat.read(out / "mini.ipynb", as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "seed = 2\nscale = 10.0\ndevice = 'cpu'" in injected[0].source
    assert nb.cells.index(injected[0]) == 1 + next(
        i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])
    )
    assert sorted(p.name for p in out.iterdir()) == ["mini.ipynb", "results.json"]
    # the same run again: equal outside provenance and cost
    again = book.load_results(
        book.run_notebook("mini", {"seed": 2, "scale": 10, "device": "cpu"}, tmp_path / "again")
    )
    assert (again["parameters"], again["results"]) == (doc["parameters"], doc["results"])


def test_bad_parameters_are_refused_before_anything_runs(mini_book: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "mini"
    out.mkdir(parents=True)
    (out / "results.json").write_text("{}")
    with pytest.raises(ParameterError, match="unknown parameter 'datset'"):
        book.run_notebook("mini", {"datset": "digits"}, tmp_path / "out")
    with pytest.raises(TypeError, match="'smoke' of mini"):
        book.run_notebook("mini", {"smoke": "false"}, tmp_path / "out")
    # nothing executed, nothing touched
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]


def test_a_failed_run_leaves_a_failed_document_not_a_stale_one(
    mini_book: Path, tmp_path: Path
) -> None:
    good = book.run_notebook("mini", {}, tmp_path / "out")
    assert book.load_results(good)["provenance"]["status"] == "ok"
    elsewhere = tmp_path / "results.json"  # the working directory's own results stay untouched
    elsewhere.write_text('{"mine": 1}')
    with pytest.raises(
        book.NotebookRunError, match="mini failed in cell .*: DatasetFolderError: digits: no folder"
    ) as err:
        book.run_notebook(
            "mini", {"dataset": "digits", "data_dir": "/nonexistent"}, tmp_path / "out"
        )
    assert (
        err.value.ename == "DatasetFolderError" and err.value.results_path == good / "results.json"
    )
    doc = book.load_results(good)
    assert doc["provenance"]["status"] == "failed" and doc["results"] == {}
    assert doc["provenance"]["error"] == {
        "type": "DatasetFolderError",
        "message": "digits: no folder '/nonexistent'",
    }
    assert doc["parameters"]["data_dir"] == "/nonexistent"
    assert elsewhere.read_text() == '{"mine": 1}'


def test_a_notebook_that_saves_nothing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "book"
    root.mkdir()
    (root / "quiet.md").write_text(HEAD + PARAMS + "\n```{code-cell} ipython3\nx = 1\n```\n")
    monkeypatch.setenv("RANK_LAB_BOOK", str(root))
    with pytest.raises(RuntimeError, match="wrote no results.json"):
        book.run_notebook("quiet", {}, tmp_path / "out")
    assert book.load_results(tmp_path / "out" / "quiet")["provenance"]["status"] == "failed"


def test_a_notebook_run_by_hand_still_writes_a_valid_document(
    mini_book: Path, tmp_path: Path
) -> None:
    """jupyter-book and Jupyter execute the notebook without the runner: start_run reads the
    namespace."""
    from nbclient import NotebookClient

    from rank_lab.book.notebooks import to_notebook

    nb = to_notebook(mini_book / "part" / "mini.md")
    work = tmp_path / "by_hand"
    work.mkdir()
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    ).execute()
    doc = book.load_results(work)
    assert doc["provenance"]["runner"] == "none" and doc["provenance"]["notebook"] is None
    assert doc["parameters"] == book.notebook_schema("mini").defaults()
    assert doc["results"] == {"value": 6.0, "smoke": True}


# ------------------------------------------------------------------------------- command line
def test_cli_runs_with_yaml_values(
    mini_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "run",
        "mini",
        "-p",
        "seed",
        "1",
        "-p",
        "smoke",
        "false",
        "-p",
        "scales",
        "[1]",
        "--out",
        str(tmp_path / "cli"),
        "--quiet",
    ]
    assert book.main(argv) == 0
    doc = book.load_results(tmp_path / "cli" / "mini")
    assert doc["results"] == {"value": 4.0, "smoke": False}
    out = capsys.readouterr().out
    assert "results: " in out and out.endswith("key figures:\n4.0 False synthetic None\n")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["run", "mini", "-p", "datset", "digits"],
            "error: unknown parameter 'datset' for mini; did you mean 'dataset'? Known: smoke, "
            "seed, device, dataset, data_dir, scale, scales\n",
        ),
        (
            ["run", "mini", "-p", "smoke", "maybe"],
            "error: parameter 'smoke' of mini: got 'maybe' (str), expected a bool (true or "
            "false)\n",
        ),
        (
            ["run", "mini", "-p", "dataset", "digitz"],
            "error: parameter 'dataset' of mini: got 'digitz' (str), expected one of 'synthetic', "
            "'digits'; did you mean 'digits'?\n",
        ),
        (
            ["run", "mnii"],
            "error: unknown notebook 'mnii'; did you mean 'mini'? Known notebooks: mini\n",
        ),
        (["params", "nope"], "error: unknown notebook 'nope'. Known notebooks: mini\n"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_message(
    mini_book: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    assert book.main([*argv, *(["--out", str(tmp_path / "o")] if argv[0] == "run" else [])]) == 2
    captured = capsys.readouterr()
    assert captured.err == message and captured.out == ""
    assert not (tmp_path / "o").exists()  # nothing ran


def test_cli_dataset_error_inside_the_notebook(
    mini_book: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "run",
        "mini",
        "-p",
        "dataset",
        "digits",
        "-p",
        "data_dir",
        "/nonexistent",
        "--out",
        str(tmp_path / "o"),
        "--quiet",
    ]
    assert book.main(argv) == 1
    err = capsys.readouterr().err
    assert (
        "error: mini failed in cell" in err
        and "DatasetFolderError: digits: no folder '/nonexistent'" in err
    )
    assert "Traceback" not in err and "---------" not in err
    assert "status: failed" in err
    assert book.main([*argv, "--traceback"]) == 1
    err = capsys.readouterr().err
    assert "raise DatasetFolderError" in err  # the kernel's traceback


def test_cli_traceback_flag_on_a_usage_error(
    mini_book: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert book.main(["run", "mini", "-p", "datset", "x", "--traceback"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.endswith(
        "did you mean 'dataset'? Known: smoke, seed, device, dataset, data_dir, scale, scales\n"
    )


def test_cli_list_and_params(mini_book: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert book.main(["list"]) == 0
    assert capsys.readouterr().out.split() == ["mini", "part/mini.md"]
    assert book.main(["params", "mini"]) == 0
    out = capsys.readouterr().out
    assert "dataset  = 'synthetic'" in out and "one of 'synthetic', 'digits'; the set" in out
    assert "seed     = 0" in out and "an int >= 0" in out


def test_find_notebook_errors_name_the_known_ones(mini_book: Path) -> None:
    with pytest.raises(
        book.NotebookNotFoundError,
        match="unknown notebook 'no_such_chapter'. Known notebooks: mini",
    ):
        book.find_notebook("no_such_chapter")
    with pytest.raises(ValueError, match="did you mean 'mini'"):
        book.find_notebook("mni")
    with pytest.raises(FileNotFoundError, match="no such book folder"):
        book.list_notebooks(mini_book / "absent")


# ------------------------------------------------------------------------------- api page (twins:
# tests/book/test_twins.py)
def test_api_page_is_current() -> None:
    page = book.book_dir() / "api.md"
    assert page.exists(), "run: python -m rank_lab.book api --write"
    assert page.read_text(encoding="utf-8") == book.api_page(), (
        "book/api.md is stale: python -m rank_lab.book api --write"
    )
