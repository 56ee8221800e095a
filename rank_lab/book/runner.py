"""Execute one book notebook headlessly with checked parameters (papermill underneath).

:func:`run_notebook` checks the parameters against the notebook's schema
(:mod:`rank_lab.book.parameters`), the requested device and the output folder before anything
runs, resolves relative path parameters against the caller's working directory, injects the values
itself (a cell tagged ``injected-parameters`` after the cell tagged ``parameters``: papermill only
executes), and completes the notebook's ``results.json`` (:mod:`rank_lab.book.results`) with the
run's provenance and wall time. A run that fails, times out or is interrupted writes a
``results.json`` with ``status: "failed"`` and the error in its own folder, so no earlier result is
left there looking current.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .cells import injected_cell_source
from .kernels import kernel_manager_config
from .notebooks import book_dir, find_notebook, to_notebook
from .parameters import ParameterError, notebook_schema
from .results import CONTEXT_ENV, failed_document, load_results, utc_now, write_document

__all__ = [
    "NotebookRunError",
    "NotebookInterrupted",
    "OutputFolderError",
    "check_device",
    "run_notebook",
]


class NotebookRunError(RuntimeError):
    """A cell of the notebook raised: ``ename`` / ``evalue`` are the kernel's exception, ``cell``
    its index.

    ``results_path`` is the ``results.json`` written with ``status: "failed"``; ``traceback`` the
    kernel's traceback lines.
    """

    def __init__(
        self,
        notebook: str,
        ename: str,
        evalue: str,
        cell: int | None,
        traceback: list[str],
        results_path: Path,
    ) -> None:
        where = f" in cell {cell}" if cell is not None else ""
        super().__init__(f"{notebook} failed{where}: {ename}: {evalue}")
        self.notebook, self.ename, self.evalue, self.cell = notebook, ename, evalue, cell
        self.traceback, self.results_path = traceback, results_path


class NotebookInterrupted(NotebookRunError):
    """The run was interrupted (Ctrl-C): ``results.json`` records ``status: "failed"`` with the
    error ``{"type": "KeyboardInterrupt", "message": "interrupted ..."}``."""


class OutputFolderError(ValueError):
    """The output folder cannot hold the run (a file is in the way, no permission): nothing ran."""


def check_device(device: Any, notebook: str = "the notebook") -> None:
    """Refuse a ``device`` parameter this machine cannot run, before anything runs.

    Raises:
        ParameterError: a name torch does not know, CUDA without a GPU, or a GPU index past the
            last one.
    """
    if device is None or (isinstance(device, str) and device.lower() == "auto"):
        return
    where = f"parameter 'device' of {notebook}: got {device!r}"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ParameterError(
            f"{where}, which is not a torch device name (cpu, cuda, cuda:1, ...)"
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError(
                f"{where}, but this machine has no CUDA GPU (torch.cuda.is_available() is "
                "False): use -p device cpu, or null for CUDA when present"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ParameterError(
                f"{where}, but this machine has {torch.cuda.device_count()} CUDA device(s) "
                f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})"
            )
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ParameterError(f"{where}, but this machine has no MPS device: use -p device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ParameterError(f"{where}: notebooks run on cpu or cuda (null: CUDA when present)")


def _output_folder(output_dir: str | os.PathLike[str], name: str) -> Path:
    """``output_dir/name``, created; refuses a file in the way or a folder that cannot be
    written."""
    base = Path(output_dir).expanduser().absolute()
    for p in (base, *base.parents):
        if p.exists() and not p.is_dir():
            raise OutputFolderError(
                f"--out {str(output_dir)!r}: {str(p)!r} is a file, not a folder; "
                "name a folder (it is created when missing)"
            )
        if p.exists():
            break
    out = base / name
    if out.exists() and not out.is_dir():
        raise OutputFolderError(
            f"--out {str(output_dir)!r}: {str(out)!r} is a file, not the run's folder; "
            "move it or name another --out"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputFolderError(
            f"--out {str(output_dir)!r}: cannot create {str(out)!r} ({exc.strerror or exc})"
        ) from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputFolderError(
            f"--out {str(output_dir)!r}: the folder {str(out)!r} is not writable"
        )
    return out


def _inject(nb: Any, values: Mapping[str, Any]) -> Any:
    # optional dependency (extra "book"), imported where it is used
    import nbformat

    if not values:
        return nb
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    cell = nbformat.v4.new_code_cell(injected_cell_source(values))
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, cell)
    return nb


#: The kernel's own log stays off the console: a cell's error reaches the user through papermill
#: (one line from the command line), and an interrupted or timed-out run would otherwise add the
#: kernel's shutdown noise ("KeyboardInterrupt caught in kernel", a closed-socket traceback) to that
#: line.
KERNEL_ARGUMENTS = ("--IPKernelApp.log_level=CRITICAL",)


def _code_of(nb: Any) -> str:
    """The notebook's code cells (the checkpoints' code fingerprint), without the injected
    values."""
    return "\n\n".join(
        c.source
        for c in nb.cells
        if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])
    )


def run_notebook(
    name: str | os.PathLike[str],
    parameters: Mapping[str, Any] | None = None,
    output_dir: str | os.PathLike[str] = "outputs",
    *,
    kernel_name: str | None = None,
    timeout: int | None = 1800,
    progress: bool = False,
    fresh: bool = False,
) -> Path:
    """Execute one book notebook with checked parameters and return its output folder.

    The notebook runs with ``output_dir/<name>`` as its working directory, so the ``results.json``
    it writes lands next to the executed ``<name>.ipynb``. Parameters are checked first: an
    unknown name, a wrong type, a value outside the front matter's choices or range or a device this
    machine lacks raises before any cell runs, and the output folder is left as it was. Relative
    values of path parameters (front matter ``path``) are resolved against the current working
    directory (the caller's), not the output folder.

    The notebook's training loops resume from the checkpoints they find (for example in the output
    folder of an earlier run) only when those were written for the same data, code and
    configuration (:class:`~rank_lab.engine.checkpoint.CheckpointMismatchError` otherwise);
    ``results.json`` records what they restored and trained (``provenance.training``).

    Args:
        name: a notebook stem (``"evaluating_retrieval"``) or a path to its ``.md`` source.
        parameters: name -> Python value (e.g. ``{"smoke": False}``), checked against the schema.
        output_dir: parent folder of the run's output folder.
        kernel_name: Jupyter kernel; default the notebook's own (``python3``).
        timeout: per-cell timeout in seconds (``None`` for none).
        progress: show papermill's progress bar.
        fresh: the training loops ignore checkpoints written before this run (they train from the
            start and replace them).

    Returns:
        The folder holding the executed notebook and ``results.json`` (status ``"ok"``).

    Raises:
        NotebookNotFoundError: no such notebook.
        ParameterError / ParameterTypeError: a ``ValueError`` / ``TypeError`` naming the parameter.
        OutputFolderError: ``output_dir`` cannot hold the run (a file in the way, not writable).
        NotebookRunError: a cell raised or ran past ``timeout`` (``results.json`` then records
            ``status: "failed"``).
        NotebookInterrupted: Ctrl-C (recorded the same way, error type ``KeyboardInterrupt``).
    """
    # optional dependency (extra "book"), imported where it is used
    import nbformat

    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1
    ):
        raise ValueError(f"timeout must be a positive int (seconds) or None, got {timeout!r}")
    if not isinstance(output_dir, (str, os.PathLike)):
        raise TypeError(f"output_dir must be a folder path, got {type(output_dir).__name__}")
    if not isinstance(fresh, bool):
        raise TypeError(f"fresh must be a bool, got {type(fresh).__name__}")
    md = find_notebook(name).resolve()
    schema = notebook_schema(md)
    checked = schema.check(parameters)
    relative_defaults = {
        n: p.default
        for n, p in schema.parameters.items()
        if n not in checked and p.path and p.resolve(p.default, Path.cwd()) != p.default
    }
    overrides = schema.resolve_paths({**checked, **relative_defaults})
    effective = {**schema.defaults(), **overrides}
    check_device(effective.get("device"), md.stem)
    out = _output_folder(output_dir, md.stem)

    results_path = out / "results.json"
    results_path.unlink(missing_ok=True)  # never leave an earlier run's figures beside this run
    src = out / f"{md.stem}.input.ipynb"
    dst = out / f"{md.stem}.ipynb"
    nb = to_notebook(md)
    code = _code_of(nb)
    nb = _inject(nb, overrides)
    nb.metadata.setdefault("papermill", {})["parameters"] = overrides
    nbformat.write(nb, src)
    started = utc_now()
    context = out / ".rank_lab_run.json"
    context.write_text(
        json.dumps(
            {
                "notebook": md.stem,
                "parameters": effective,
                "started_utc": started,
                "fresh": fresh,
                "code": code,
            }
        ),
        encoding="utf-8",
    )
    t0 = time.perf_counter()
    error = _execute(src, dst, out, context, kernel_name, progress, timeout)
    wall = time.perf_counter() - t0
    if error is None and not results_path.is_file():
        error = RuntimeError(
            f"{md.stem} ran to the end but wrote no results.json (save_results was not called)"
        )
    if error is not None:
        return _fail(md.stem, effective, started, wall, error, results_path, dst, timeout)
    doc = load_results(results_path)
    doc["cost"]["run_s"] = wall
    doc["provenance"]["runner"] = "rank_lab.book"
    write_document(doc, results_path)
    return out


def _execute(
    src: Path,
    dst: Path,
    out: Path,
    context: Path,
    kernel_name: str | None,
    progress: bool,
    timeout: int | None,
) -> BaseException | None:
    """Run papermill on ``src`` (working directory ``out``); return the error, if any."""
    # optional dependency (extra "book"), imported where it is used
    import papermill as pm

    saved = {k: os.environ.get(k) for k in ("RANK_LAB_BOOK", CONTEXT_ENV)}
    os.environ["RANK_LAB_BOOK"] = str(book_dir().resolve())
    os.environ[CONTEXT_ENV] = str(context)
    # its errors ("Kernel died ...") are reported by the caller, in one line
    log = logging.getLogger("papermill")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        pm.execute_notebook(
            str(src),
            str(dst),
            parameters=None,
            cwd=str(out),
            kernel_name=kernel_name,
            progress_bar=progress,
            execution_timeout=timeout,
            log_output=False,
            # encrypted kernel transport, no warning
            config=kernel_manager_config(),
            extra_arguments=list(KERNEL_ARGUMENTS),
        )
    except BaseException as exc:  # noqa: BLE001 - recorded by the caller, then re-raised
        return exc
    finally:
        log.setLevel(level)
        src.unlink(missing_ok=True)
        context.unlink(missing_ok=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return None


def _running_cell(dst: Path) -> int | None:
    """The execution number of the cell that was running or failed in the partly executed
    notebook."""
    # optional dependency (extra "book"), imported where it is used
    import nbformat

    try:
        nb = nbformat.read(dst, as_version=4)
    except Exception:  # noqa: BLE001 - not written yet, or half written: no cell to name
        return None
    code = [c for c in nb.cells if c.cell_type == "code"]
    started = [
        (i, c)
        for i, c in enumerate(code, start=1)
        if c.metadata.get("papermill", {}).get("start_time")
    ]
    if not started:
        return None
    i, c = started[-1]  # the last cell that started (papermill marks a timed-out cell "completed")
    return c.get("execution_count") or i


def _fail(
    notebook: str,
    effective: dict[str, Any],
    started: str,
    wall: float,
    error: BaseException,
    results_path: Path,
    dst: Path,
    timeout: int | None,
) -> Path:
    # optional dependency (extra "book"), imported where it is used
    import papermill as pm

    def record(ename: str, evalue: str) -> None:
        write_document(
            failed_document(
                effective,
                {"type": ename, "message": evalue},
                notebook=notebook,
                started_utc=started,
                cost={"run_s": wall},
            ),
            results_path,
        )

    if isinstance(error, pm.PapermillExecutionError):
        record(error.ename, error.evalue)
        raise NotebookRunError(
            notebook,
            error.ename,
            error.evalue,
            error.exec_count,
            list(error.traceback),
            results_path,
        ) from error
    if type(error).__name__ == "CellTimeoutError":  # nbclient's, raised through papermill
        cell = _running_cell(dst)
        where = f"cell {cell}" if cell is not None else "a cell"
        msg = (
            f"{where} ran longer than the per-cell timeout of {timeout} s (--timeout; raise it or "
            "leave it unset)"
        )
        record("CellTimeoutError", msg)
        raise NotebookRunError(notebook, "CellTimeoutError", msg, cell, [], results_path) from error
    if isinstance(error, KeyboardInterrupt):
        cell = _running_cell(dst)
        msg = f"interrupted (Ctrl-C) after {wall:.1f} s" + (
            f", in cell {cell}" if cell is not None else ""
        )
        record("KeyboardInterrupt", msg)
        raise NotebookInterrupted(
            notebook, "KeyboardInterrupt", msg, cell, [], results_path
        ) from error
    write_document(
        failed_document(
            effective, error, notebook=notebook, started_utc=started, cost={"run_s": wall}
        ),
        results_path,
    )
    raise error
