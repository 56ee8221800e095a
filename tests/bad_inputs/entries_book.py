"""Matrix entries of :mod:`rank_lab.book` (the notebook runner, its parameter contract,
results.json).

Most arguments here are names, paths, mappings and notebook text rather than tensors, so the bad
values are the ``extra`` variants of each entry: the wrong type, an unknown name, a malformed cell
or document. ``run_notebook`` executes one tiny notebook (a kernel start) for its valid call; every
bad variant is refused before a kernel starts.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import nbformat

import rank_lab.book as B
from rank_lab.book import (
    api,
    bibtex,
    cells,
    cli,
    colab,
    kernels,
    notebooks,
    parameters,
    provenance,
    readings,
    record,
    recorded,
    results,
    runner,
    twins,
    wall_times,
)
from rank_lab.stats import paired_difference

from .framework import cls, fn

TINY = """---
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
    dataset: {choices: [a, b]}
---

```{code-cell} ipython3
:tags: [parameters]
smoke = True
seed = 0
dataset = "a"
```

```{code-cell} ipython3
from rank_lab.book import save_results, start_run

start_run(globals())
results_path = save_results({"value": seed, "dataset": dataset, "smoke": smoke}, "results.json")
```
"""


def _book() -> Path:
    """A book folder holding the tiny notebook ``tiny`` (fresh on every call)."""
    root = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_book_")) / "book"
    root.mkdir()
    (root / "tiny.md").write_text(TINY)
    return root


def _tiny() -> str:
    return str(_book() / "tiny.md")


TINY_REC = TINY.replace(
    "  results_keys: [value]\n",
    "  results_keys: [run]\n  recorded:\n    keys: [run]\n    seeds: run.seeds\n",
).replace(
    'save_results({"value": seed, "dataset": dataset, "smoke": smoke}, "results.json")',
    'save_results({"run": {"seeds": [seed], "value": 1.0 + seed, "dataset": dataset}}, '
    '"results.json")',
)


def _rec_tiny() -> str:
    """A book folder holding ``rtiny``, a notebook that declares a recorded run."""
    root = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_book_")) / "book"
    root.mkdir()
    (root / "rtiny.md").write_text(TINY_REC)
    return str(root / "rtiny.md")


def _ok_doc() -> dict:
    doc = results.failed_document({"smoke": False, "seed": 0}, ValueError("x"), notebook="rtiny")
    doc["provenance"].update(status="ok", error=None)
    doc["results"] = {"run": {"seeds": [0, 1, 2], "value": 1.5}}
    doc["cost"] = {"run_s": 3.0}
    return doc


def _spec() -> record.RecordSpec:
    return record.RecordSpec("rtiny", ("run",), "run.seeds")


def _rec() -> dict:
    return record.make_record(_ok_doc(), _spec())


def _run() -> recorded.RecordedRun:
    return recorded.RecordedRun("rtiny", Path("recorded/rtiny.json"), _rec())


def _ax():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.figure().add_subplot()


_CI = {"mean": 0.5, "lo": 0.4, "hi": 0.6}
_ROWS = [{"loss": "SupAP", "mAP@R": "54.3 [50.0, 58.6]"}, {"loss": "Smooth-AP", "mAP@R": 0.5}]


def _diff() -> dict:
    return paired_difference([0.55, 0.56, 0.57], [0.54, 0.54, 0.55])


def _param() -> parameters.Parameter:
    return parameters.Parameter("seed", 0, ("int",), min=0)


def _schema() -> parameters.ParameterSchema:
    return parameters.ParameterSchema(
        "nb",
        {
            "seed": _param(),
            "dataset": parameters.Parameter("dataset", "a", ("str",), choices=("a", "b")),
        },
    )


def _doc() -> dict:
    return results.failed_document({"seed": 0}, ValueError("boom"), notebook="nb")


def _out() -> str:
    return tempfile.mkdtemp(prefix="rank_lab_matrix_out_")


def _nb_without_parameters() -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])


ENTRIES = [
    # notebooks
    fn(notebooks.book_dir),
    fn(
        notebooks.list_notebooks,
        lambda: dict(root=str(_book())),
        {"root": "path"},
        extra={"int": ("root", lambda: 3, ("root",))},
    ),
    fn(
        notebooks.find_notebook,
        lambda: dict(name="tiny", root=str(_book())),
        {"root": "path"},
        extra={
            "unknown": ("name", lambda: "tinny", ("notebook",)),
            "int": ("name", lambda: 3, ("name",)),
        },
    ),
    fn(
        notebooks.front_matter,
        lambda: dict(md=_tiny()),
        {"md": "path"},
        extra={
            "list": ("md", lambda: _write("---\n- a\n---\n"), ("front matter",)),
            "open": ("md", lambda: _write("---\na: 1\n"), ("front matter",)),
        },
    ),
    fn(
        notebooks.read_yaml,
        dict(text="a: [1, 1e-3, yes]"),
        extra={
            "int": ("text", lambda: 3, ("text",)),
            "bad": ("text", lambda: "a: [", ("text", "YAML")),
        },
    ),
    fn(
        notebooks.suggest,
        dict(name="datset", known=["dataset", "seed"]),
        extra={
            "int": ("name", lambda: 3, ("name",)),
            "str": ("known", lambda: "dataset", ("known",)),
        },
    ),
    cls(notebooks.NotebookNotFoundError),
    # parameters
    cls(parameters.ParameterError),
    cls(parameters.ParameterTypeError),
    cls(
        parameters.Parameter,
        lambda: dict(name="seed", default=0, types=("int",), min=0),
        calls=[("check", dict(value=3, notebook="nb"), None)],
        extra={
            "str": ("check.value", lambda: "3", ("seed",)),
            "below": ("check.value", lambda: -1, ("seed",)),
            "nan": ("check.value", lambda: math.nan, ("seed",)),
        },
    ),
    cls(
        parameters.ParameterSchema,
        lambda: dict(notebook="nb", parameters=_schema().parameters),
        calls=[
            ("check", dict(values={"seed": 1, "dataset": "b"}), None),
            ("parse_cli", dict(pairs=[("seed", "1"), ("dataset", "b")]), None),
            ("resolve_paths", dict(values={"seed": 1}, base="/tmp"), None),
        ],
        extra={
            "twice": ("parse_cli.pairs", lambda: [("seed", "1"), ("seed", "2")], ("seed", "twice")),
            "unknown": ("check.values", lambda: {"sede": 1}, ("sede",)),
            "choice": ("check.values", lambda: {"dataset": "c"}, ("dataset",)),
            "list": ("check.values", lambda: [("seed", 1)], ("parameters",)),
        },
    ),
    fn(
        cells.parse_parameters_cell,
        dict(source="a = 1  # one\nb = [1, 2]\n"),
        extra={
            "int": ("source", lambda: 3, ("source",)),
            "tuple": ("source", lambda: "a, b = 1, 2", ("parameters cell",)),
            "expr": ("source", lambda: "a = 50000 // 32", ("parameters cell",)),
            "twice": ("source", lambda: "a = 1\na = 2", ("parameters cell",)),
        },
    ),
    fn(
        cells.parameters_cell_source,
        lambda: dict(nb=notebooks.to_notebook(_tiny()), where="tiny"),
        extra={"untagged": ("nb", _nb_without_parameters, ("parameters",))},
    ),
    fn(
        parameters.notebook_schema,
        lambda: dict(name="tiny", root=str(_book())),
        {"root": "path"},
        extra={"unknown": ("name", lambda: "tinny", ("notebook",))},
    ),
    fn(
        parameters.parse_parameter,
        dict(value="[1, 2]"),
        extra={"int": ("value", lambda: 3, ("value",))},
    ),
    fn(
        parameters.parse_cli_value,
        lambda: dict(raw="3", parameter=_param()),
        extra={
            "str": ("parameter", lambda: "seed", ("parameter",)),
            "int": ("raw", lambda: 3, ("raw",)),
        },
    ),
    fn(
        cells.injected_cell_source,
        dict(values={"seed": 1, "dataset": "b"}),
        extra={
            "list": ("values", lambda: [1], ("values",)),
            "nan": ("values", lambda: {"a": math.nan}, ("values",)),
            "name": ("values", lambda: {"a b": 1}, ("values",)),
        },
    ),
    # results
    fn(
        results.start_run,
        dict(namespace={"seed": 0}),
        extra={"list": ("namespace", lambda: [1], ("namespace",))},
    ),
    fn(
        results.save_results,
        lambda: dict(results={"a": 1.0}, path=_out(), cost={"t_s": 0.1}),
        extra={
            "list": ("results", lambda: [1.0], ("results",)),
            "cost": ("cost", lambda: 3, ("cost",)),
            "nan": ("results", lambda: {"a": math.nan}, ()),
        },
        legal={"results:nan": "a non-finite figure is written as null (JSON has no NaN)"},
    ),
    fn(
        results.load_results,
        lambda: dict(path=str(results.write_document(_doc(), _out()))),
        {"path": "path"},
        extra={
            "int": ("path", lambda: 3, ("path",)),
            "notadoc": ("path", lambda: _write('{"a": 1}'), ("document",)),
        },
    ),
    fn(
        provenance.provenance,
        dict(notebook="nb", device="cpu", status="ok"),
        extra={
            "status": ("status", lambda: "done", ("status",)),
            "noerror": ("status", lambda: "failed", ("error",)),
        },
    ),
    fn(
        results.failed_document,
        lambda: dict(parameters={"seed": 0}, error=ValueError("x")),
        extra={
            "params": ("parameters", lambda: 3, ("parameters",)),
            "error": ("error", lambda: "x", ("error",)),
        },
    ),
    fn(
        results.write_document,
        lambda: dict(document=_doc(), path=_out()),
        extra={
            "sections": ("document", lambda: {"results": {}}, ("document",)),
            "int": ("document", lambda: 3, ("document",)),
        },
    ),
    fn(
        results.check_document,
        lambda: dict(document=_doc()),
        extra={
            "status": (
                "document",
                lambda: {**_doc(), "provenance": {**_doc()["provenance"], "status": "?"}},
                ("status",),
            ),
            "int": ("document", lambda: 3, ("document",)),
        },
    ),
    fn(
        results.key_figures,
        dict(results={"a": {"b": 1.0}, "c": [2, 3]}, paths=["a.b", ("c", 1)]),
        extra={
            "str": ("paths", lambda: "a.b", ("paths",)),
            "absent": ("paths", lambda: ["a.z"], ("paths",)),
            "list": ("results", lambda: [1], ("results",)),
        },
    ),
    fn(
        results.print_key_figures,
        dict(results={"a": 1.0}, paths=["a"], digits=3),
        {"digits": "posint"},
        extra={"nan": ("results", lambda: {"a": math.nan}, ("paths",))},
    ),
    # runner
    cls(
        runner.NotebookRunError,
        lambda: dict(
            notebook="nb",
            ename="ValueError",
            evalue="x",
            cell=1,
            traceback=[],
            results_path=Path("results.json"),
        ),
    ),
    fn(
        runner.run_notebook,
        lambda: dict(
            name=_tiny(), parameters={"seed": 1}, output_dir=_out(), timeout=120, fresh=False
        ),
        {"timeout": "posint"},
        extra={
            "unknown": ("parameters", lambda: {"sede": 1}, ("sede",)),
            "type": ("parameters", lambda: {"seed": "1"}, ("seed",)),
            "choice": ("parameters", lambda: {"dataset": "c"}, ("dataset",)),
            "name": ("name", lambda: "no_such_notebook_anywhere", ("notebook",)),
            "out": ("output_dir", lambda: 3, ("output_dir",)),
            "out_file": ("output_dir", lambda: _write("a file"), ("out",)),
            "device": ("parameters", lambda: {"device": "cuda:99"}, ("device",)),
            "fresh": ("fresh", lambda: "yes", ("fresh",)),
        },
    ),
    cls(
        runner.NotebookInterrupted,
        lambda: dict(
            notebook="nb",
            ename="KeyboardInterrupt",
            evalue="interrupted",
            cell=None,
            traceback=[],
            results_path=Path("results.json"),
        ),
    ),
    cls(runner.OutputFolderError),
    fn(
        runner.check_device,
        dict(device="cpu", notebook="nb"),
        extra={
            "index": ("device", lambda: "cuda:99", ("device",)),
            "name": ("device", lambda: "gpu", ("device",)),
            "int": ("device", lambda: 3.5, ("device",)),
        },
    ),
    # the contract's wall times
    fn(wall_times.recorded_wall_times, lambda: dict(root=str(_book())), {"root": "path"}),
    fn(wall_times.wall_times_block, lambda: dict(root=str(_book())), {"root": "path"}),
    fn(wall_times.contract_path, lambda: dict(root=str(_book()))),
    fn(
        wall_times.update_contract,
        lambda: dict(root=_contract_book(), write=True),
        {"root": "path"},
        extra={"markers": ("root", lambda: _contract_book(""), ("markers",))},
    ),
    # twins, api page, command line
    fn(
        twins.make_twin,
        lambda: dict(
            md_path=Path(_tiny()),
            out_path=Path(_out()) / "t.ipynb",
            repo="https://x/r.git",
            ref="0123abc",
        ),
        {"md_path": "path"},
        extra={
            "ref": ("ref", lambda: "a b", ("ref",)),
            "repo": ("repo", lambda: "https://x/<org>", ("repo",)),
        },
    ),
    fn(
        twins.make_twins,
        lambda: dict(out_dir=_out(), root=_book(), repo="https://x/r.git", ref="0123abc"),
        {"root": "path"},
        extra={
            "out": ("out_dir", lambda: 3, ("out_dir",)),
            "ref": ("ref", lambda: "x@y", ("ref",)),
        },
    ),
    fn(
        twins.install_spec,
        dict(md={"rank_lab": {"install": {"extras": ["plots"], "animal_mnist": True}}}),
        extra={
            "int": ("md", lambda: 3, ("md",)),
            "book": ("md", lambda: {"rank_lab": {"install": {"extras": ["book"]}}}, ("extras",)),
            "key": ("md", lambda: {"rank_lab": {"install": {"extra": ["timm"]}}}, ("key",)),
        },
    ),
    fn(
        twins.install_cell,
        lambda: dict(spec=twins.InstallSpec(("plots",)), repo="https://x/r", ref="0123abc"),
        extra={
            "spec": ("spec", lambda: "plots", ("spec",)),
            "ref": ("ref", lambda: "../x", ("ref",)),
            "repo": ("repo", lambda: "", ("repo",)),
        },
    ),
    fn(
        twins.check_repository_url,
        dict(url="https://github.com/o/r"),
        extra={
            "unset": ("url", lambda: "", ("url",)),
            "placeholder": ("url", lambda: "https://github.com/<org>/r", ("url",)),
            "scheme": ("url", lambda: "ftp://h/r", ("url",)),
        },
    ),
    fn(
        twins.repository_url,
        lambda: dict(project=_project()),
        {"project": "path"},
        extra={"unset": ("project", lambda: _project(""), ("url",))},
    ),
    fn(
        twins.source_ref,
        lambda: dict(project=_project(git=True)),
        {"project": "path"},
        extra={"nogit": ("project", lambda: _project(), ("ref",))},
    ),
    cls(
        twins.InstallSpec,
        dict(extras=("plots",), animal_mnist=False),
        calls=[("requirement", dict(repo="https://x/r", ref="0123abc"), None)],
    ),
    cls(twins.TwinError),
    # MyST -> Colab Markdown, BibTeX
    cls(
        colab.ColabMarkdown,
        dict(name="p", equations={"e": 1}, bibliography={}, doc_link=None),
        calls=[
            ("convert", dict(text="See {eq}`e` and {func}`~a.b`."), None),
            ("references_cell", None, None),
        ],
        extra={
            "int": ("convert.text", lambda: 3, ("text",)),
            "role": ("convert.text", lambda: "{kbd}`x`", ("role",)),
            "resolver": ("convert.text", lambda: "{ref}`x`", ("ref_link",)),
            "label": ("convert.text", lambda: "{eq}`z`", ("label",)),
            "cite": ("convert.text", lambda: "{cite}`nobody2020`", ("key",)),
        },
    ),
    cls(colab.MystConversionError),
    fn(
        colab.equation_labels,
        dict(markdown_cells=["$$ a $$ (x)", "$$ b $$ (y)"]),
        extra={
            "str": ("markdown_cells", lambda: "$$ a $$ (x)", ("markdown_cells",)),
            "twice": ("markdown_cells", lambda: ["$$ a $$ (x)", "$$ b $$ (x)"], ("label",)),
        },
    ),
    fn(
        colab.doc_resolver,
        lambda: dict(md_path=Path(_tiny()), root=Path(_tiny()).parent, colab_base=None),
    ),
    fn(
        bibtex.latex_to_text,
        dict(value='J{\\"a}rvelin'),
        extra={"int": ("value", lambda: 3, ("value",))},
    ),
    fn(
        bibtex.parse_bib,
        dict(text="@misc{a, author = {A, B}, title = {T}, year = {2020}}"),
        extra={
            "int": ("text", lambda: 3, ("text",)),
            "twice": ("text", lambda: "@misc{a, title={x}}\n@misc{a, title={y}}", ("key",)),
            "open": ("text", lambda: "@misc{a, title={x}", ("entry",)),
        },
    ),
    fn(bibtex.read_bib, lambda: dict(path=_write("@misc{a, title = {T}}")), {"path": "path"}),
    cls(
        bibtex.BibEntry,
        dict(
            kind="misc", key="k", fields={"author": "A, B and C, D", "year": "2020", "title": "T"}
        ),
        calls=[("authors_short", None, None), ("reference", None, None)],
    ),
    cls(bibtex.BibError),
    # recorded full runs, their display and readings
    cls(record.RecordError),
    cls(record.RecordBuildError),
    cls(record.RecordSpec, dict(notebook="rtiny", keys=("run",), seeds="run.seeds")),
    fn(
        record.record_spec,
        lambda: dict(name=_rec_tiny()),
        extra={
            "int": ("name", lambda: 3, ("name",)),
            "unknown": ("name", lambda: "tinny", ("notebook",)),
        },
    ),
    fn(
        record.record_path,
        lambda: dict(name=_rec_tiny(), variant="gpu"),
        extra={"variant": ("variant", lambda: "GPU run", ("variant",))},
    ),
    fn(
        record.make_record,
        lambda: dict(document=_ok_doc(), spec=_spec()),
        extra={
            "spec": ("spec", lambda: "run.seeds", ("spec",)),
            "list": ("document", lambda: [1], ("document",)),
            "smoke": (
                "document",
                lambda: {**_ok_doc(), "parameters": {"smoke": True}},
                ("document",),
            ),
            "keys": ("document", lambda: {**_ok_doc(), "results": {}}, ("document",)),
        },
    ),
    fn(
        record.check_record,
        lambda: dict(record=_rec()),
        extra={
            "int": ("record", lambda: 3, ("record",)),
            "schema": ("record", lambda: {**_rec(), "schema": "x"}, ("record",)),
            "nan": ("record", lambda: {**_rec(), "results": {"x": math.nan}}, ("record",)),
        },
    ),
    fn(
        record.pin_start_commit,
        lambda: dict(record=_rec(), start_commit="0123456789", start_dirty=False),
        extra={
            "int": ("start_commit", lambda: 3, ("start_commit",)),
            "dirty": ("start_dirty", lambda: "no", ("start_dirty",)),
            "empty": ("record", lambda: {}, ("record",)),
        },
    ),
    fn(
        record.write_record,
        lambda: dict(record=_rec(), path=Path(_out()) / "r.json"),
        extra={"empty": ("record", lambda: {}, ("record",))},
    ),
    fn(
        record.record_notebook,
        lambda: dict(
            name=_rec_tiny(),
            parameters={"seed": 1},
            output_dir=_out(),
            allow_dirty=True,
            timeout=120,
        ),
        {"timeout": "posint"},
        extra={
            "smoke": ("parameters", lambda: {"smoke": True}, ("smoke",)),
            "list": ("parameters", lambda: [("seed", 1)], ("parameters",)),
            "unknown": ("parameters", lambda: {"sede": 1}, ("sede",)),
            "undeclared": ("name", _tiny, ("recorded",)),
        },
    ),
    cls(
        recorded.RecordedRun,
        lambda: dict(notebook="rtiny", path=Path("recorded/rtiny.json"), document=None),
    ),
    fn(
        recorded.load_record,
        lambda: dict(name=_rec_tiny(), variant=None),
        extra={
            "int": ("name", lambda: 3, ("name",)),
            "variant": ("variant", lambda: "A B", ("variant",)),
        },
    ),
    fn(
        recorded.record_header,
        lambda: dict(run=_run()),
        extra={"str": ("run", lambda: "rtiny", ("run",))},
    ),
    fn(
        recorded.show_header,
        lambda: dict(run=_run()),
        extra={"str": ("run", lambda: "rtiny", ("run",))},
    ),
    fn(recorded.show_markdown, dict(text="**x**"), extra={"int": ("text", lambda: 3, ("text",))}),
    fn(
        recorded.format_ci,
        dict(summary=_CI, digits=2, scale=100.0),
        {"digits": "nonnegint", "scale": "real"},
        extra={"missing": ("summary", lambda: {"mean": 1.0}, ("summary",))},
    ),
    fn(
        recorded.table_text,
        dict(rows=_ROWS, columns=["loss", "mAP@R"], digits=2),
        {"digits": "nonnegint"},
        extra={
            "dict": ("rows", lambda: {"a": 1}, ("rows",)),
            "columns": ("columns", lambda: "loss", ("columns",)),
        },
    ),
    fn(
        recorded.table_html,
        dict(rows=_ROWS, caption="c"),
        extra={"dict": ("rows", lambda: {"a": 1}, ("rows",))},
    ),
    fn(
        recorded.show_table, dict(rows=_ROWS), extra={"dict": ("rows", lambda: {"a": 1}, ("rows",))}
    ),
    fn(
        recorded.ci_errorbar,
        lambda: dict(ax=_ax(), x=[0, 1], summaries=[_CI, _CI], scale=1.0),
        {"scale": "real"},
        extra={
            "len": ("x", lambda: [0], ("x", "summaries")),
            "summary": ("summaries", lambda: [_CI, {"mean": 1.0}], ("summaries",)),
        },
    ),
    fn(
        readings.effect_sentence,
        lambda: dict(
            difference=_diff(),
            a="SupAP",
            b="Smooth-AP",
            metric="mAP@R",
            claim="Sup-AP beats Smooth-AP",
            reasons=["toy data"],
            digits=2,
            scale=100.0,
        ),
        {"digits": "nonnegint", "scale": "real"},
        extra={
            "reasons": ("reasons", lambda: [], ("reasons",)),
            "difference": ("difference", lambda: {"mean": 1.0}, ("difference",)),
            "metric": ("metric", lambda: "", ("metric",)),
            "claim": ("claim", lambda: 3, ("claim",)),
        },
    ),
    fn(
        readings.reading_markdown,
        lambda: dict(sentences=["one."], run=_run()),
        extra={
            "str": ("sentences", lambda: "one.", ("sentences",)),
            "run": ("run", lambda: 3, ("run",)),
        },
    ),
    fn(
        readings.show_reading,
        lambda: dict(sentences=["one."]),
        extra={"str": ("sentences", lambda: "one.", ("sentences",))},
    ),
    fn(kernels.curve_available),
    fn(kernels.kernel_manager_config),
    fn(kernels.encrypt_kernel_transport),
    fn(api.public_modules),
    fn(api.api_page),
    fn(
        cli.main,
        dict(argv=["list"]),
        extra={"unknown": ("argv", lambda: ["params", "no_such_notebook"], ())},
        legal={
            "argv:unknown": (
                "a usage error prints one message and returns exit code 2 (docs/book_contract.md)"
            )
        },
    ),
]


def _contract_book(block: str | None = None) -> str:
    """A checkout holding the tiny book and a docs/book_contract.md with the wall-time markers (or
    ``block``)."""
    book = _book()
    (book.parent / "docs").mkdir()
    text = f"{wall_times.BEGIN}\nold\n{wall_times.END}\n" if block is None else block
    (book.parent / "docs" / "book_contract.md").write_text(text)
    return str(book)


def _project(url: str = "https://github.com/o/r", *, git: bool = False) -> str:
    """A project folder with a ``_config.yml`` (``repository.url``), a git checkout with one commit
    if ``git``."""
    import subprocess

    root = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_project_"))
    (root / "_config.yml").write_text(f"repository: {{url: '{url}'}}\n")
    if git:
        for args in (
            ["init", "-q"],
            ["add", "-A"],
            ["-c", "user.name=t", "-c", "user.email=t@e.org", "commit", "-qm", "x"],
        ):
            subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return str(root)


def _write(text: str) -> str:
    path = Path(tempfile.mkdtemp(prefix="rank_lab_matrix_file_")) / "f.md"
    path.write_text(text)
    return str(path)


# the package re-exports the same objects (one entry each)
assert B.run_notebook is runner.run_notebook
