"""The command line of the book: ``python -m rank_lab.book {list,params,run,record,twins,api}``.

Subcommands: ``list``, ``params``, ``run``, ``record``, ``twins``, ``api`` and ``wall-times`` (the
recorded full runs' wall times, the generated table of ``docs/book_contract.md``).

Exit codes: 0 success; 1 the notebook failed while running (its ``results.json`` records
``status: "failed"``: a cell raised or ran past ``--timeout``); 130 interrupted by Ctrl-C (recorded
the same way, error ``KeyboardInterrupt``); 2 a usage error refused before anything ran (unknown
notebook, unknown parameter or one given twice, wrong type, value outside the choices or range, a
device this machine lacks, an ``--out`` that cannot hold the run, a bad option value; for
``record``: a notebook that declares no record, ``-p smoke true``, a checkout with uncommitted
changes). User errors (those above, and a missing or unreadable dataset folder, data or weight file,
a checkpoint of another run or a corrupt one, no network for the weights, a full run refused on a
CPU) print one line without a traceback; ``--traceback`` shows it.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from .api import api_page
from .cells import is_checked_cell
from .notebooks import NotebookNotFoundError, book_dir, find_notebook, list_notebooks
from .parameters import ParameterError, notebook_schema
from .record import RecordBuildError, RecordError, record_notebook, record_path
from .recorded import load_record, record_header
from .results import load_results
from .runner import NotebookInterrupted, NotebookRunError, OutputFolderError, run_notebook
from .twins import make_twins
from .wall_times import contract_path, update_contract, wall_times_block

__all__ = ["USER_ERRORS", "main"]

#: Exception names raised inside a notebook that are the user's to fix: one message, no traceback.
USER_ERRORS = (
    "DatasetFolderError",
    "WeightsUnavailableError",
    "WeightsFileError",
    "EmbeddingFileError",
    "FullRunOnCPUError",
    "FileNotFoundError",
    "ParameterError",
    "ParameterTypeError",
    "TwinError",
    "MystConversionError",
    "BibError",
    "CheckpointMismatchError",
    "CheckpointCorruptError",
    "CellTimeoutError",
    "KeyboardInterrupt",
    "OutputFolderError",
)
#: Errors of a checkpoint: the line adds how to start fresh from the command line.
CHECKPOINT_ERRORS = ("CheckpointMismatchError", "CheckpointCorruptError")
FRESH_HINT = (
    "to start fresh from the command line: --fresh (or a new --out, for checkpoints kept in the "
    "output folder)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

EXAMPLES = """examples:
  python -m rank_lab.book list
  python -m rank_lab.book params evaluating_retrieval
  python -m rank_lab.book run evaluating_retrieval -p dataset digits -p seed 1 --out outputs/
  python -m rank_lab.book record smooth_rank_surrogates
  python -m rank_lab.book twins --out _build/html/_notebooks [--ref v0.1.0]
values of -p are YAML 1.2 literals: false, 3, 0.5, 1e-3, [1, 2], null; anything else is a string
(yes and no too: a bool is true or false); give each name once."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (``error: ...``, exit 2)."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--timeout takes whole seconds (a positive integer), got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"--timeout takes whole seconds (a positive integer), got {text!r}"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m rank_lab.book",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the book's notebooks as parameterised experiments.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    sub.add_parser("list", help="list the book's notebooks")
    pa = sub.add_parser("params", help="show a notebook's parameters, defaults and constraints")
    pa.add_argument("notebook", help="notebook stem or path to its .md source")
    run = sub.add_parser("run", help="execute one notebook with checked parameters")
    run.add_argument("notebook", help="notebook stem or path to its .md source")
    run.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="a parameter (repeatable); VALUE is a YAML literal",
    )
    run.add_argument("--out", default="outputs", help="output folder (default: outputs/)")
    run.add_argument(
        "--fresh",
        action="store_true",
        help="train from the start: ignore the checkpoints of an earlier run (and replace them)",
    )
    run.add_argument("--timeout", type=_seconds, default=None, help="per-cell timeout in seconds")
    run.add_argument("--kernel", default=None, help="Jupyter kernel name")
    run.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    rec = sub.add_parser(
        "record",
        help="run one notebook at full scale (smoke=False) and write its record "
        "book/<part>/recorded/<name>.json",
    )
    rec.add_argument("notebook", help="notebook stem or path to its .md source")
    rec.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="a parameter (repeatable); VALUE is a YAML literal; smoke is always false",
    )
    rec.add_argument(
        "--out", default="outputs", help="folder of the executed notebook (default: outputs/)"
    )
    rec.add_argument(
        "--variant",
        default=None,
        help="write <name>.<variant>.json (e.g. gpu) instead of <name>.json",
    )
    rec.add_argument(
        "--allow-dirty", action="store_true", help="record from a checkout with uncommitted changes"
    )
    rec.add_argument(
        "--fresh",
        action="store_true",
        help="train from the start: ignore the checkpoints of an earlier run (and replace them)",
    )
    rec.add_argument("--timeout", type=_seconds, default=None, help="per-cell timeout in seconds")
    rec.add_argument("--kernel", default=None, help="Jupyter kernel name")
    rec.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    rec.add_argument("--quiet", action="store_true", help="no progress bar")
    tw = sub.add_parser(
        "twins", help="write the Colab .ipynb twins (pinned install cell, Colab Markdown)"
    )
    tw.add_argument("--out", default="_build/html/_notebooks")
    tw.add_argument(
        "--repo",
        default=None,
        help="git URL of the install cell (default: repository.url of _config.yml)",
    )
    tw.add_argument(
        "--ref",
        default=None,
        help="commit or tag the install cell pins (default: the checkout's HEAD)",
    )
    api = sub.add_parser("api", help="print (or --write) the API reference page book/api.md")
    api.add_argument("--write", action="store_true")
    wt = sub.add_parser(
        "wall-times",
        help="print (or --write into docs/book_contract.md) the recorded full runs' wall times",
    )
    wt.add_argument("--write", action="store_true")
    return parser


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def _params(name: str) -> int:
    schema = notebook_schema(name)
    width = max(len(n) for n in schema.names) if schema.names else 0
    for n, p in schema.parameters.items():
        print(
            f"{n:{width}s} = {p.default!r:24s} # {p.expected()}"
            + (f"; {p.comment}" if p.comment else "")
        )
    return 0


def _report_failure(exc: NotebookRunError, args: argparse.Namespace, after: str = "") -> int:
    """One line for a failed run (the traceback first, for an unexpected error or
    ``--traceback``)."""
    if (args.traceback or exc.ename not in USER_ERRORS) and exc.traceback:
        print(_ANSI.sub("", "\n".join(exc.traceback)), file=sys.stderr)
    hint = f"; {FRESH_HINT}" if exc.ename in CHECKPOINT_ERRORS else ""
    _error(" ".join(f"{exc}{hint}".split()))  # one line, whatever the message's own line breaks
    print(f"results: {exc.results_path} (status: failed){after}", file=sys.stderr)
    if isinstance(exc, NotebookInterrupted):
        # the interrupted kernel client leaves a pending task, which asyncio reports at exit
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        return 130
    return 1


def _run(args: argparse.Namespace) -> int:
    md = find_notebook(args.notebook)
    overrides = notebook_schema(md).parse_cli([tuple(p) for p in args.parameter])
    try:
        out = run_notebook(
            md,
            overrides,
            args.out,
            kernel_name=args.kernel,
            timeout=args.timeout,
            progress=not args.quiet,
            fresh=args.fresh,
        )
    except NotebookRunError as exc:
        return _report_failure(exc, args)
    executed = out / f"{out.name}.ipynb"
    print(f"executed notebook: {executed}")
    print(f"results: {out / 'results.json'}")
    resumed = _resume_line(out / "results.json")
    if resumed:
        print(resumed)
    figures = _key_figures_text(executed)
    if figures:
        print("key figures:\n" + figures.rstrip("\n"))
    return 0


def _record(args: argparse.Namespace) -> int:
    md = find_notebook(args.notebook)
    overrides = notebook_schema(md).parse_cli([tuple(p) for p in args.parameter])
    target = record_path(md, args.variant)
    try:
        path = record_notebook(
            md,
            overrides,
            output_dir=args.out,
            variant=args.variant,
            allow_dirty=args.allow_dirty,
            timeout=args.timeout,
            kernel_name=args.kernel,
            progress=not args.quiet,
            fresh=args.fresh,
        )
    except NotebookRunError as exc:
        return _report_failure(exc, args, f"; the record {target} was left as it was")
    except RecordBuildError as exc:
        _error(str(exc))
        print(f"the record {target} was left as it was", file=sys.stderr)
        return 1
    print(f"record: {path}")
    print(record_header(load_record(md, args.variant)))
    return 0


def _resume_line(results: object) -> str:
    """``"training: ..."`` when the run's loops resumed from checkpoints (else ``""``)."""
    training = load_results(results)["provenance"].get("training") or {}
    if not training.get("resumed"):
        return ""
    done, back = training.get("trained", {}), training.get("restored", {})
    return (
        f"training: resumed from checkpoints ({back.get('steps', 0)} steps restored, "
        f"{done.get('steps', 0)} trained in this run; provenance.training in results.json; --fresh "
        "trains from the start)"
    )


def _key_figures_text(executed: object) -> str:
    """The printed output of the notebook's checked cell
    (:func:`~rank_lab.book.cells.is_checked_cell`), or ``""``."""
    # optional dependency (extra "book"), imported where it is used
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    for cell in nb.cells:
        if is_checked_cell(cell):
            return "".join(
                o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout"
            )
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rank_lab.book``; returns the exit code (0, 1 or 2, see the
    module)."""
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "api":
            text = api_page()
            if args.write:
                (book_dir() / "api.md").write_text(text, encoding="utf-8")
            else:
                print(text)
            return 0
        if args.cmd == "wall-times":
            if args.write:
                update_contract(write=True)
                print(contract_path())
            else:
                print(wall_times_block())
            return 0
        if args.cmd == "list":
            root = book_dir()
            for p in list_notebooks(root):
                print(f"{p.stem:40s} {p.relative_to(root)}")
            return 0
        if args.cmd == "params":
            return _params(args.notebook)
        if args.cmd == "twins":
            for p in make_twins(args.out, repo=args.repo, ref=args.ref):
                print(p)
            return 0
        if args.cmd == "record":
            return _record(args)
        return _run(args)
    except (NotebookNotFoundError, ParameterError, RecordError, OutputFolderError) as exc:
        if getattr(args, "traceback", False):
            traceback.print_exc()
        _error(str(exc))
        return 2
    except Exception as exc:  # noqa: BLE001 - one message for the user; --traceback shows the rest
        if getattr(args, "traceback", False) or type(exc).__name__ not in USER_ERRORS:
            traceback.print_exc()
        _error(" ".join(f"{type(exc).__name__}: {exc}".split()))
        return 1
