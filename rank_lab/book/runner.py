"""Execute one book notebook headlessly with checked parameters (papermill underneath).

:func:`run_notebook` checks the parameters against the notebook's schema
(:mod:`rank_lab.book.parameters`) before anything runs, injects them itself (a cell tagged
``injected-parameters`` after the cell tagged ``parameters``: papermill only executes), and
completes the notebook's ``results.json`` (:mod:`rank_lab.book.results`) with the run's
provenance and wall time. A run that fails writes a ``results.json`` with ``status: "failed"``
and the error in its own folder, so no earlier result is left there looking current.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .cells import injected_cell_source
from .kernels import kernel_manager_config
from .notebooks import book_dir, find_notebook, to_notebook
from .parameters import notebook_schema
from .results import _CONTEXT_ENV, _utc_now, failed_document, load_results, write_document

__all__ = ["NotebookRunError", "run_notebook"]


class NotebookRunError(RuntimeError):
    """A cell of the notebook raised: ``ename`` / ``evalue`` are the kernel's exception, ``cell`` its index.

    ``results_path`` is the ``results.json`` written with ``status: "failed"``; ``traceback`` the
    kernel's traceback lines.
    """

    def __init__(self, notebook: str, ename: str, evalue: str, cell: int | None, traceback: list[str],
                 results_path: Path) -> None:
        where = f" in cell {cell}" if cell is not None else ""
        super().__init__(f"{notebook} failed{where}: {ename}: {evalue}")
        self.notebook, self.ename, self.evalue, self.cell = notebook, ename, evalue, cell
        self.traceback, self.results_path = traceback, results_path


def _inject(nb: Any, values: Mapping[str, Any]) -> Any:
    import nbformat

    if not values:
        return nb
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    cell = nbformat.v4.new_code_cell(injected_cell_source(values))
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, cell)
    return nb


def run_notebook(
    name: str | os.PathLike[str],
    parameters: Mapping[str, Any] | None = None,
    output_dir: str | os.PathLike[str] = "outputs",
    *,
    kernel_name: str | None = None,
    timeout: int | None = 1800,
    progress: bool = False,
) -> Path:
    """Execute one book notebook with checked parameters and return its output folder.

    The notebook runs with ``output_dir/<name>`` as its working directory, so the ``results.json``
    it writes lands next to the executed ``<name>.ipynb``. Parameters are checked first: an
    unknown name, a wrong type or a value outside the front matter's choices or range raises before
    any cell runs, and the output folder is left as it was.

    Args:
        name: a notebook stem (``"evaluating_retrieval"``) or a path to its ``.md`` source.
        parameters: name -> Python value (e.g. ``{"smoke": False}``), checked against the schema.
        output_dir: parent folder of the run's output folder.
        kernel_name: Jupyter kernel; default the notebook's own (``python3``).
        timeout: per-cell timeout in seconds (``None`` for none).
        progress: show papermill's progress bar.

    Returns:
        The folder holding the executed notebook and ``results.json`` (status ``"ok"``).

    Raises:
        NotebookNotFoundError: no such notebook.
        ParameterError / ParameterTypeError: a ``ValueError`` / ``TypeError`` naming the parameter.
        NotebookRunError: a cell raised (``results.json`` then records ``status: "failed"``).
    """
    import nbformat
    import papermill as pm

    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
        raise ValueError(f"timeout must be a positive int (seconds) or None, got {timeout!r}")
    if not isinstance(output_dir, (str, os.PathLike)):
        raise TypeError(f"output_dir must be a folder path, got {type(output_dir).__name__}")
    md = find_notebook(name).resolve()
    schema = notebook_schema(md)
    overrides = schema.check(parameters)
    effective = {**schema.defaults(), **overrides}

    out = Path(output_dir).resolve() / md.stem
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results_path.unlink(missing_ok=True)  # never leave an earlier run's figures beside this run
    src = out / f"{md.stem}.input.ipynb"
    dst = out / f"{md.stem}.ipynb"
    nb = _inject(to_notebook(md), overrides)
    nb.metadata.setdefault("papermill", {})["parameters"] = overrides
    nbformat.write(nb, src)
    started = _utc_now()
    context = out / ".rank_lab_run.json"
    context.write_text(json.dumps({"notebook": md.stem, "parameters": effective, "started_utc": started}),
                       encoding="utf-8")
    saved = {k: os.environ.get(k) for k in ("RANK_LAB_BOOK", _CONTEXT_ENV)}
    os.environ["RANK_LAB_BOOK"] = str(book_dir().resolve())
    os.environ[_CONTEXT_ENV] = str(context)
    t0 = time.perf_counter()
    error: BaseException | None = None
    try:
        pm.execute_notebook(str(src), str(dst), parameters=None, cwd=str(out), kernel_name=kernel_name,
                            progress_bar=progress, execution_timeout=timeout, log_output=False,
                            config=kernel_manager_config())  # encrypted kernel transport, no warning
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised below
        error = exc
    finally:
        src.unlink(missing_ok=True)
        context.unlink(missing_ok=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    wall = time.perf_counter() - t0
    if error is None and not results_path.is_file():
        error = RuntimeError(f"{md.stem} ran to the end but wrote no results.json (save_results was not called)")
    if error is not None:
        return _fail(md.stem, effective, started, wall, error, results_path)
    doc = load_results(results_path)
    doc["cost"]["run_s"] = wall
    doc["provenance"]["runner"] = "rank_lab.book"
    write_document(doc, results_path)
    return out


def _fail(notebook: str, effective: dict[str, Any], started: str, wall: float, error: BaseException,
          results_path: Path) -> Path:
    import papermill as pm

    if isinstance(error, pm.PapermillExecutionError):
        err = {"type": error.ename, "message": error.evalue}
        write_document(failed_document(effective, err, notebook=notebook, started_utc=started,
                                       cost={"run_s": wall}), results_path)
        raise NotebookRunError(notebook, error.ename, error.evalue, error.exec_count, list(error.traceback),
                               results_path) from error
    write_document(failed_document(effective, error, notebook=notebook, started_utc=started, cost={"run_s": wall}),
                   results_path)
    raise error
