"""Run the book's notebooks as parameterised experiments with a checked contract.

Command line (:mod:`rank_lab.book.cli`)::

    python -m rank_lab.book list
    python -m rank_lab.book params evaluating_retrieval
    python -m rank_lab.book run evaluating_retrieval -p dataset digits -p seed 1 --out outputs/
    python -m rank_lab.book record smooth_rank_surrogates
    python -m rank_lab.book twins --out _build/html/_notebooks

The modules:

* :mod:`~rank_lab.book.notebooks`: where the notebooks are (``book/**/<name>.md``, jupytext MyST);
* :mod:`~rank_lab.book.parameters`: the parameters cell is the schema, the front matter holds the
  constraints; values are checked before any cell runs; :mod:`~rank_lab.book.cells` reads the
  parameters cell and writes the injected one;
* :mod:`~rank_lab.book.runner`: papermill execution with the checked values injected;
* :mod:`~rank_lab.book.results`: ``results.json`` (parameters, provenance, results, cost), its
  :mod:`~rank_lab.book.provenance` section;
* :mod:`~rank_lab.book.record`: recorded full runs (``book/<part>/recorded/<name>.json``);
  :mod:`~rank_lab.book.recorded` shows them beside the live smoke run (header, tables, CI plots);
  :mod:`~rank_lab.book.readings` words the "What this run shows" box from the confidence intervals;
* :mod:`~rank_lab.book.kernels`: encrypted kernel transport for the runner and the book build;
* :mod:`~rank_lab.book.twins`: the Colab ``.ipynb`` twins; :mod:`~rank_lab.book.api`:
  ``book/api.md``.

The contract is documented in ``docs/book_contract.md``.
"""

from __future__ import annotations

from .api import api_page
from .cli import main
from .notebooks import NotebookNotFoundError, book_dir, find_notebook, front_matter, list_notebooks
from .parameters import (
    Parameter,
    ParameterError,
    ParameterSchema,
    ParameterTypeError,
    notebook_schema,
    parse_parameter,
)
from .readings import effect_sentence, reading_markdown, show_reading
from .record import (
    RecordBuildError,
    RecordError,
    check_record,
    record_notebook,
    record_path,
    record_spec,
)
from .recorded import (
    RecordedRun,
    ci_errorbar,
    format_ci,
    load_record,
    record_header,
    show_header,
    show_markdown,
    show_table,
)
from .results import (
    check_document,
    key_figures,
    load_results,
    print_key_figures,
    save_results,
    start_run,
)
from .runner import NotebookRunError, run_notebook
from .twins import make_twin, make_twins

__all__ = [
    "book_dir",
    "list_notebooks",
    "find_notebook",
    "front_matter",
    "notebook_schema",
    "run_notebook",
    "start_run",
    "save_results",
    "load_results",
    "check_document",
    "key_figures",
    "print_key_figures",
    "record_notebook",
    "record_spec",
    "record_path",
    "check_record",
    "load_record",
    "record_header",
    "show_header",
    "show_table",
    "show_markdown",
    "format_ci",
    "ci_errorbar",
    "effect_sentence",
    "reading_markdown",
    "show_reading",
    "make_twin",
    "make_twins",
    "parse_parameter",
    "api_page",
    "main",
    "Parameter",
    "ParameterSchema",
    "ParameterError",
    "ParameterTypeError",
    "NotebookNotFoundError",
    "NotebookRunError",
    "RecordedRun",
    "RecordError",
    "RecordBuildError",
]
