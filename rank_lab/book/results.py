"""``results.json``: the document every notebook run writes (schema ``rank_lab.book.results/1``).

==============  ======================================================================================
key             content
==============  ======================================================================================
``parameters``  the effective parameter values of the run (defaults updated with the checked values)
``provenance``  ``schema``, ``notebook``, ``status`` (``"ok"`` or ``"failed"``), ``error`` (failed
                runs: ``{"type", "message"}``), ``started_utc`` / ``ended_utc`` (ISO 8601),
                ``rank_lab`` (version), ``git_commit`` / ``git_dirty`` (``None`` outside a checkout),
                ``python``, ``torch``, ``faiss``, ``timm`` (versions, ``None`` when absent),
                ``device`` (e.g. ``"cpu: AMD EPYC 7B13"``, ``"cuda:0: NVIDIA H100"``), ``threads``,
                ``runner`` (``"rank_lab.book"`` or ``"none"``: run by hand or by jupyter-book) and
                ``training``: what the run's training loops restored from checkpoints and trained
                (:func:`rank_lab.engine.run_report.training_report`; ``None`` in a document the
                runner writes for a failed run)
``results``     the figures of the notebook only: two runs with the same parameters on one machine
                give equal ``results``
``cost``        timings and throughputs (seconds, items per second), which vary between runs
==============  ======================================================================================

Under :func:`rank_lab.book.run_notebook` the runner hands the checked parameters to the kernel
(``$RANK_LAB_RUN``, a JSON file) and completes the document after the last cell; run by hand,
:func:`start_run` reads the parameters from the notebook's namespace. Every write is atomic
(a temporary file renamed over the target), so a reader never sees half a document; the file is
readable like any file the user creates (the process umask decides, as for the executed notebook).
"""  # noqa: E501

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rank_lab.engine import run_report
from rank_lab.engine.fingerprint import set_code_context

from .provenance import SCHEMA, provenance, utc_now

__all__ = [
    "SECTIONS",
    "start_run",
    "save_results",
    "load_results",
    "failed_document",
    "write_document",
    "check_document",
    "key_figures",
    "print_key_figures",
]

SECTIONS = ("parameters", "provenance", "results", "cost")
CONTEXT_ENV = "RANK_LAB_RUN"
_RUN: dict[str, Any] = {}  # the run of this process (a kernel runs one notebook): set by start_run


def _jsonable(obj: Any) -> Any:
    """Tensors, arrays and numpy scalars to JSON types; non-finite floats become ``None``."""
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu().tolist()
    if isinstance(obj, np.ndarray):
        obj = obj.tolist()
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _context() -> dict[str, Any] | None:
    path = os.environ.get(CONTEXT_ENV)
    if not path or not Path(path).is_file():
        return None
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _literal(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if depth < 4 and isinstance(value, (list, tuple)):
        return all(_literal(v, depth + 1) for v in value)
    if depth < 4 and isinstance(value, dict):
        return all(isinstance(k, str) and _literal(v, depth + 1) for k, v in value.items())
    return False


def start_run(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Start the run of a notebook: call it with ``globals()`` in the cell after the parameters
    cell.

    Under :func:`rank_lab.book.run_notebook` the parameters are the runner's checked values, and
    the kernel's values must agree with them; the notebook's code is added to the fingerprint of the
    checkpoints its training loops write, and with the runner's ``--fresh`` those loops ignore
    checkpoints written before (:mod:`rank_lab.engine.run_report`). Run by hand (or by
    jupyter-book), the parameters are the public literal values at the start of ``namespace`` (a
    dict keeps the order in which the names were first bound: the parameters cell's names come
    first, IPython's own names are left out, and the first module, function or class imported after
    them ends the list). So the cell after the parameters cell starts with its imports, not with a
    constant.

    Returns:
        The effective parameters (name -> value), also recorded in ``results.json``.

    Raises:
        TypeError: if ``namespace`` is not a mapping.
        RuntimeError: if a kernel value differs from the value the runner injected.
    """
    if not isinstance(namespace, Mapping):
        raise TypeError(f"namespace must be a mapping (globals()), got {type(namespace).__name__}")
    ctx = _context()
    if ctx is not None:
        params = dict(ctx["parameters"])
        for name, value in params.items():
            if name in namespace and _jsonable(namespace[name]) != value:
                raise RuntimeError(
                    f"parameter {name!r} is {namespace[name]!r} in the kernel, but the runner "
                    f"injected {value!r}"
                )
        _RUN.clear()
        _RUN.update(
            notebook=ctx["notebook"],
            parameters=params,
            started_utc=ctx["started_utc"],
            runner="rank_lab.book",
        )
        run_report.reset_training_report()
        run_report.start_fresh(bool(ctx.get("fresh", False)))
        set_code_context(ctx["notebook"], ctx.get("code"))
        return dict(params)
    hidden: set[str] = set()
    try:
        # only inside a notebook kernel (IPython is not a dependency)
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            hidden = set(ip.user_ns_hidden)
    except ImportError:  # pragma: no cover - IPython ships with every kernel
        pass
    params = {}
    for k, v in namespace.items():  # insertion order: the parameters cell's names come first
        if k.startswith("_") or k in hidden or k in ("In", "Out", "exit", "quit", "get_ipython"):
            continue
        if not _literal(v):  # the first import (a module, function or class) ends the parameters
            break
        params[k] = v
    _RUN.clear()
    _RUN.update(notebook=None, parameters=_jsonable(params), started_utc=utc_now(), runner="none")
    run_report.reset_training_report()
    run_report.start_fresh(False)
    set_code_context(None)
    return dict(params)


def write_document(document: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a results document atomically (temporary file in the same folder, then rename).

    Raises:
        ValueError: if the document does not follow the schema (:func:`check_document`).
    """
    doc = check_document(_jsonable(document))
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".results.", suffix=".json.tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600: give the mode of any new file
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_results(
    results: Mapping[str, Any],
    path: str | os.PathLike[str] = "results.json",
    *,
    cost: Mapping[str, Any] | None = None,
) -> Path:
    """Write a notebook's ``results.json``: its figures, its timings and the run's parameters and
    provenance.

    Args:
        results: the figures (names to numbers, lists or nested mappings; tensors and arrays are
            converted, non-finite floats become ``null``). No timings: they go in ``cost``.
        path: the file to write; a folder gets ``results.json`` inside it.
        cost: timings and throughputs of the run (seconds, items per second).

    Returns:
        The path written.

    Raises:
        TypeError: if ``results`` or ``cost`` is not a mapping.
    """
    if not isinstance(results, Mapping):
        raise TypeError(f"results must be a mapping, got {type(results).__name__}")
    if cost is not None and not isinstance(cost, Mapping):
        raise TypeError(f"cost must be a mapping or None, got {type(cost).__name__}")
    run = dict(_RUN)
    if not run:  # save_results without start_run: the runner's context, else an empty parameter set
        ctx = _context()
        run = (
            {
                "notebook": ctx["notebook"],
                "parameters": ctx["parameters"],
                "started_utc": ctx["started_utc"],
                "runner": "rank_lab.book",
            }
            if ctx
            else {"notebook": None, "parameters": {}, "started_utc": None, "runner": "none"}
        )
    params = run["parameters"]
    doc = {
        "parameters": params,
        "provenance": provenance(
            notebook=run["notebook"],
            device=params.get("device"),
            started_utc=run["started_utc"],
            runner=run["runner"],
            training=run_report.training_report(),
        ),
        "results": results,
        "cost": dict(cost or {}),
    }
    return write_document(doc, path)


def failed_document(
    parameters: Mapping[str, Any],
    error: BaseException | Mapping[str, str],
    *,
    notebook: str | None = None,
    started_utc: str | None = None,
    cost: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The document of a failed run: ``status: "failed"``, the error, no results.

    Args:
        parameters: the effective parameters of the run.
        error: the exception, or ``{"type": ..., "message": ...}``.
        notebook, started_utc, cost: as in :func:`provenance` / :func:`save_results`.

    Raises:
        TypeError: if ``parameters`` is not a mapping or ``error`` neither an exception nor a
            mapping.
    """
    if not isinstance(parameters, Mapping):
        raise TypeError(f"parameters must be a mapping, got {type(parameters).__name__}")
    if isinstance(error, BaseException):
        err = {"type": type(error).__name__, "message": str(error)}
    elif isinstance(error, Mapping) and {"type", "message"} <= set(error):
        err = {"type": str(error["type"]), "message": str(error["message"])}
    else:
        raise TypeError(
            f"error must be an exception or a mapping with type and message, got {error!r}"
        )
    return {
        "parameters": dict(parameters),
        "provenance": provenance(
            notebook=notebook,
            device=parameters.get("device"),
            started_utc=started_utc,
            status="failed",
            error=err,
            runner="rank_lab.book",
        ),
        "results": {},
        "cost": dict(cost or {}),
    }


def check_document(document: Any) -> dict[str, Any]:
    """Return ``document`` if it follows the results schema, else raise a ``ValueError`` saying why.

    Raises:
        TypeError: if ``document`` is not a mapping.
        ValueError: a missing or extra section, a section that is not a mapping, an unknown schema,
            a status other than ok/failed, a failed run without its error.
    """
    if not isinstance(document, Mapping):
        raise TypeError(f"document must be a mapping, got {type(document).__name__}")
    keys = set(document)
    if keys != set(SECTIONS):
        raise ValueError(f"document: sections {sorted(keys)}, expected {list(SECTIONS)}")
    for s in SECTIONS:
        if not isinstance(document[s], Mapping):
            raise ValueError(
                f"document: section {s!r} must be a mapping, got {type(document[s]).__name__}"
            )
    prov = document["provenance"]
    if prov.get("schema") != SCHEMA:
        raise ValueError(
            f"document: provenance.schema is {prov.get('schema')!r}, expected {SCHEMA!r}"
        )
    missing = [
        k
        for k in ("status", "started_utc", "ended_utc", "rank_lab", "torch", "device")
        if k not in prov
    ]
    if missing:
        raise ValueError(f"document: provenance lacks {missing}")
    if prov["status"] not in ("ok", "failed"):
        raise ValueError(
            f"document: provenance.status must be 'ok' or 'failed', got {prov['status']!r}"
        )
    if prov["status"] == "failed" and not prov.get("error"):
        raise ValueError("document: a failed run records its error in provenance.error")
    return dict(document)


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a ``results.json`` (a folder is accepted): the whole document.

    Raises:
        FileNotFoundError: if there is no such file.
        ValueError: if it is not a results document (:func:`check_document`).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file or folder path, got {type(path).__name__}")
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    return check_document(json.loads(p.read_text(encoding="utf-8")))


Path_ = str | tuple[str | int, ...] | list[str | int]


def key_figures(
    results: Mapping[str, Any], paths: list[Path_] | tuple[Path_, ...]
) -> dict[str, float]:
    """Pick numbers out of nested ``results``: ``{label: value}``.

    Args:
        results: the notebook's figures (nested mappings and lists).
        paths: each a dotted string (``"synthetic.raw.R@1"``, ``"rows.0.AP"``: list items by
            index) or, for keys that hold a dot, a tuple of keys (``("beta_sweep", "beta=0.1",
            "AUROC")``); the label is the dotted form in both cases.

    Raises:
        TypeError: if ``results`` is not a mapping or ``paths`` not a list of paths.
        ValueError: naming a path that does not exist, or whose value is not a finite number.
    """
    if not isinstance(results, Mapping):
        raise TypeError(f"results must be a mapping, got {type(results).__name__}")
    if (
        isinstance(paths, str)
        or not isinstance(paths, (list, tuple))
        or not all(isinstance(p, str) or (isinstance(p, (list, tuple)) and p) for p in paths)
    ):
        raise TypeError(f"paths must be a list of dotted strings or key tuples, got {paths!r}")
    data = _jsonable(results)
    out: dict[str, float] = {}
    for path in paths:
        parts = path.split(".") if isinstance(path, str) else [str(p) for p in path]
        label = ".".join(parts)
        node: Any = data
        for part in parts:
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif (
                isinstance(node, list)
                and part.lstrip("-").isdigit()
                and -len(node) <= int(part) < len(node)
            ):
                node = node[int(part)]
            else:
                raise ValueError(f"paths: {label!r} is not in the results (stopped at {part!r})")
        if isinstance(node, bool) or not isinstance(node, (int, float)) or not math.isfinite(node):
            raise ValueError(f"paths: {label!r} is {node!r}, not a finite number")
        out[label] = float(node)
    return out


def print_key_figures(
    results: Mapping[str, Any], paths: list[Path_] | tuple[Path_, ...], digits: int = 3
) -> None:
    """Print the key figures of a notebook, one ``label = value`` per line, to ``digits``
    significant digits.

    The notebook's checked cell (``# NBVAL_CHECK_OUTPUT``) calls it: the rounding keeps the printed
    text stable from run to run and nbval compares it; the notebook tests read these lines and
    compare them with ``tests/notebook_reference/<name>.json`` (with tolerances).

    Raises:
        ValueError, TypeError: see :func:`key_figures`; ``digits`` not a positive int.
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive int, got {digits!r}")
    figures = key_figures(results, paths)
    for path, value in figures.items():
        shown = f"{value:.{digits}g}"
        print(f"{path} = {'0' if shown == '-0' else shown}")
