"""Recorded full runs: ``python -m rank_lab.book record NAME`` (schema
``rank_lab.book.recorded/1``).

A chapter that shows a full-scale run declares it in its front matter::

    rank_lab:
      results_keys: [settings, training, ...]
      recorded:
        keys: [training]          # the results kept in the record (a subset of results_keys)
        seeds: training.seeds     # dotted path, inside those keys, to the list of seeds of the run

:func:`record_notebook` runs the notebook with ``smoke = False`` (plus checked parameters),
through :func:`rank_lab.book.run_notebook`, and writes ``book/<part>/recorded/<name>.json``:

==============  ======================================================================================
key             content
==============  ======================================================================================
``schema``      ``"rank_lab.book.recorded/1"``
``notebook``    the notebook's name
``parameters``  the effective parameters of the run (``smoke`` is ``False``)
``provenance``  the run's ``results.json`` provenance (status ``"ok"``, UTC times, versions,
                ``git_commit`` / ``git_dirty``, ``device``, ``threads``) plus ``seeds`` (the list at
                the declared path), ``wall_s`` (the runner's wall time), ``variant``, and the
                machine while it ran: ``cpu_s`` (CPU time of the run's processes: the kernel and
                what it started), ``cpu_count`` (logical CPUs) and ``load_avg_start`` /
                ``load_avg_end`` (the 1, 5 and 15 minute load averages at the start and the end:
                how busy the machine was, which the wall time depends on)
``results``     the declared keys of the run's ``results`` (figures only: small, no per-item arrays)
==============  ======================================================================================

Rules (:func:`check_record`): at most :data:`MAX_RECORD_BYTES` of JSON, no list longer than
:data:`MAX_LIST_ITEMS`, finite numbers. The file is written atomically and only after a run that
succeeded: a failed or refused run never touches a good record. A record is made from a clean
git checkout (``allow_dirty=True`` / ``--allow-dirty`` overrides, and the header then says so),
so its commit names the code that produced it.
"""  # noqa: E501

from __future__ import annotations

import json
import math
import os
import re
import resource
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .notebooks import find_notebook, front_matter
from .parameters import ParameterError, notebook_schema
from .provenance import git_output, utc_now
from .results import load_results
from .runner import run_notebook

__all__ = [
    "RECORD_SCHEMA",
    "MACHINE_KEYS",
    "MAX_RECORD_BYTES",
    "MAX_LIST_ITEMS",
    "RecordError",
    "RecordBuildError",
    "RecordSpec",
    "record_spec",
    "record_path",
    "make_record",
    "check_record",
    "write_record",
    "record_notebook",
    "pin_start_commit",
    "machine_snapshot",
    "machine_usage",
]

RECORD_SCHEMA = "rank_lab.book.recorded/1"
#: A record is figures only: this many bytes of JSON at most.
MAX_RECORD_BYTES = 64 * 1024
#: No list of a record is longer (per-seed values and short curves pass; per-item arrays do not).
MAX_LIST_ITEMS = 100
VARIANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_SECTIONS = ("schema", "notebook", "parameters", "provenance", "results")
#: What the record tool measures about the machine during a run (optional in older records).
MACHINE_KEYS = ("cpu_s", "cpu_count", "load_avg_start", "load_avg_end")


class RecordError(ValueError):
    """A record that cannot be made or read: no declaration, a smoke run, a dirty checkout, a bad
    file."""


class RecordBuildError(RecordError):
    """The full run succeeded, but its results cannot be recorded (missing keys, too large): nothing
    written."""


@dataclass(frozen=True)
class RecordSpec:
    """A chapter's ``rank_lab.recorded`` declaration: the ``keys`` kept and the ``seeds`` path."""

    notebook: str
    keys: tuple[str, ...]
    seeds: str


def record_spec(name: str | os.PathLike[str]) -> RecordSpec | None:
    """The record declared by a notebook's front matter, or ``None`` when it declares none.

    Raises:
        NotebookNotFoundError: no such notebook.
        RecordError: a declaration that is not ``{keys: [...], seeds: "a.b"}``, keys outside
            ``results_keys``, a seeds path outside the kept keys.
    """
    md = find_notebook(name)
    meta = front_matter(md).get("rank_lab") or {}
    decl = meta.get("recorded")
    if decl is None:
        return None
    where = f"{md.name}: rank_lab.recorded"
    if not isinstance(decl, Mapping) or set(decl) - {"keys", "seeds"} or "seeds" not in decl:
        raise RecordError(
            f"{where} must be a mapping {{keys: [...], seeds: <dotted path>}}, got {decl!r}"
        )
    results_keys = list(meta.get("results_keys") or [])
    keys = decl.get("keys", results_keys)
    if (
        isinstance(keys, str)
        or not isinstance(keys, list)
        or not keys
        or not all(isinstance(k, str) for k in keys)
    ):
        raise RecordError(f"{where}.keys must be a non-empty list of result keys, got {keys!r}")
    unknown = [k for k in keys if k not in results_keys]
    if unknown:
        raise RecordError(f"{where}.keys {unknown} are not in rank_lab.results_keys {results_keys}")
    seeds = decl["seeds"]
    if not isinstance(seeds, str) or seeds.split(".")[0] not in keys:
        raise RecordError(
            f"{where}.seeds must be a dotted path inside the kept keys {keys}, got {seeds!r}"
        )
    return RecordSpec(md.stem, tuple(keys), seeds)


def record_path(name: str | os.PathLike[str], variant: str | None = None) -> Path:
    """``book/<part>/recorded/<name>.json`` (``<name>.<variant>.json`` for a variant such as
    ``gpu``).

    Raises:
        NotebookNotFoundError: no such notebook.
        ValueError: a variant that is not a short lower-case name.
    """
    md = find_notebook(name)
    if variant is not None and (not isinstance(variant, str) or not VARIANT_PATTERN.match(variant)):
        raise ValueError(f"variant must be a short lower-case name such as 'gpu', got {variant!r}")
    return md.parent / "recorded" / (f"{md.stem}.{variant}.json" if variant else f"{md.stem}.json")


def _at(results: Mapping[str, Any], path: str) -> Any:
    node: Any = results
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            raise RecordError(f"document: the run's results have no {path!r} (stopped at {part!r})")
    return node


def make_record(
    document: Mapping[str, Any],
    spec: RecordSpec,
    variant: str | None = None,
    machine: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record of a successful full run, from its ``results.json`` document.

    Args:
        document: a ``results.json`` document (:func:`rank_lab.book.load_results`) of status ``ok``.
        spec: the notebook's declaration (:func:`record_spec`).
        variant: ``None`` for the chapter's reference record, else e.g. ``"gpu"``.
        machine: what :func:`machine_usage` measured around the run (the keys of
            :data:`MACHINE_KEYS`), or ``None``.

    Returns:
        The record (see the module), checked by :func:`check_record`.

    Raises:
        RecordError: a failed or smoke run, missing keys or seeds, a record too large.
    """
    if not isinstance(spec, RecordSpec):
        raise TypeError(f"spec must be a RecordSpec (record_spec), got {type(spec).__name__}")
    if not isinstance(document, Mapping) or not isinstance(document.get("provenance"), Mapping):
        raise TypeError(f"document must be a results.json document, got {type(document).__name__}")
    prov = dict(document["provenance"])
    if prov.get("status") != "ok":
        raise RecordError(
            f"document: the run did not succeed (status {prov.get('status')!r}): nothing to record"
        )
    params = dict(document.get("parameters") or {})
    if params.get("smoke") is not False:
        raise RecordError(
            "document: a record is a full run, the run's smoke parameter must be False"
        )
    results = document.get("results") or {}
    missing = [k for k in spec.keys if k not in results]
    if missing:
        raise RecordError(f"document: the run's results lack the recorded keys {missing}")
    seeds = _at(results, spec.seeds)
    prov.update(
        seeds=seeds,
        wall_s=(document.get("cost") or {}).get("run_s"),
        variant=variant,
        recorded_utc=utc_now(),
    )
    if machine is not None:
        if not isinstance(machine, Mapping) or set(machine) != set(MACHINE_KEYS):
            raise TypeError(
                f"machine must be a mapping with the keys {list(MACHINE_KEYS)}, got {machine!r}"
            )
        prov.update(machine)
    record = {
        "schema": RECORD_SCHEMA,
        "notebook": spec.notebook,
        "parameters": params,
        "provenance": prov,
        "results": {k: results[k] for k in spec.keys},
    }
    return check_record(record)


def _long_lists(obj: Any, path: str = "results") -> list[str]:
    out: list[str] = []
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out += _long_lists(v, f"{path}.{k}")
    elif isinstance(obj, list):
        if len(obj) > MAX_LIST_ITEMS:
            out.append(f"{path} ({len(obj)} items)")
        for i, v in enumerate(obj):
            out += _long_lists(v, f"{path}.{i}")
    return out


def _non_finite(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return any(_non_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_non_finite(v) for v in obj)
    return isinstance(obj, float) and not math.isfinite(obj)


def check_record(record: Any) -> dict[str, Any]:
    """Return ``record`` if it follows schema ``rank_lab.book.recorded/1``, else raise saying why.

    Raises:
        TypeError: ``record`` is not a mapping.
        RecordError: other sections, another schema, a failed or smoke run, no seeds (a non-empty
            list of ints), a list longer than :data:`MAX_LIST_ITEMS`, a non-finite number, more
            than :data:`MAX_RECORD_BYTES` of JSON.
    """
    if not isinstance(record, Mapping):
        raise TypeError(f"record must be a mapping, got {type(record).__name__}")
    if set(record) != set(_SECTIONS):
        raise RecordError(f"record: sections {sorted(record)}, expected {list(_SECTIONS)}")
    if record["schema"] != RECORD_SCHEMA:
        raise RecordError(f"record: schema {record['schema']!r}, expected {RECORD_SCHEMA!r}")
    prov, params, results = record["provenance"], record["parameters"], record["results"]
    if not all(isinstance(s, Mapping) for s in (prov, params, results)):
        raise RecordError("record: parameters, provenance and results must be mappings")
    if prov.get("status") != "ok" or params.get("smoke") is not False:
        raise RecordError("record: only a successful full run (status ok, smoke False) is recorded")
    missing = [
        k
        for k in (
            "started_utc",
            "ended_utc",
            "rank_lab",
            "torch",
            "device",
            "git_commit",
            "seeds",
            "wall_s",
        )
        if k not in prov
    ]
    if missing:
        raise RecordError(f"record: provenance lacks {missing}")
    seeds = prov["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise RecordError(
            f"record: provenance.seeds must be a non-empty list of ints, got {seeds!r}"
        )
    _check_machine(prov)
    long = _long_lists(results)
    if long:
        raise RecordError(
            f"record: lists longer than {MAX_LIST_ITEMS} items (per-item arrays do not belong "
            f"in a record): {long[:3]}"
        )
    if _non_finite(record):
        raise RecordError("record: holds NaN or inf")
    size = len(json.dumps(record, indent=1, sort_keys=True))
    if size > MAX_RECORD_BYTES:
        raise RecordError(
            f"record: {size} bytes of JSON, more than {MAX_RECORD_BYTES}: keep figures only"
        )
    return dict(record)


def _check_machine(prov: Mapping[str, Any]) -> None:
    """The machine fields of a provenance, when present: CPU seconds, CPU count, two load
    triples."""
    present = [k for k in MACHINE_KEYS if k in prov]
    if not present:
        return  # a record made before the record tool measured the machine
    if len(present) != len(MACHINE_KEYS):
        raise RecordError(f"record: provenance has {present} but not all of {list(MACHINE_KEYS)}")
    cpu, count = prov["cpu_s"], prov["cpu_count"]
    if isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or not cpu >= 0:
        raise RecordError(f"record: provenance.cpu_s must be a number of seconds >= 0, got {cpu!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise RecordError(f"record: provenance.cpu_count must be an int >= 1, got {count!r}")
    for key in ("load_avg_start", "load_avg_end"):
        load = prov[key]
        if (
            not isinstance(load, list)
            or len(load) != 3
            or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in load
            )
        ):
            raise RecordError(
                f"record: provenance.{key} must be the 3 load averages (1, 5, 15 min), got {load!r}"
            )


def machine_snapshot() -> dict[str, Any]:
    """The machine now: CPU seconds used so far by this process and its reaped children, load
    averages.

    Returns:
        ``{"cpu_s", "cpu_count", "load_avg"}``: ``cpu_s`` sums user and system time of this process
        and of every child process that has exited (a notebook's kernel, and what the kernel
        started and waited for); ``load_avg`` is ``os.getloadavg()`` (``[0, 0, 0]`` where the
        system has none).
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:  # no load average on this system
        load = [0.0, 0.0, 0.0]
    return {
        "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
        "cpu_count": os.cpu_count() or 1,
        "load_avg": load,
    }


def machine_usage(start: Mapping[str, Any], end: Mapping[str, Any]) -> dict[str, Any]:
    """The machine fields of a record (:data:`MACHINE_KEYS`) from two :func:`machine_snapshot`
    calls.

    Raises:
        TypeError: a snapshot that is not a mapping from :func:`machine_snapshot`.
    """
    for name, snap in (("start", start), ("end", end)):
        if not isinstance(snap, Mapping) or not {"cpu_s", "cpu_count", "load_avg"} <= set(snap):
            raise TypeError(f"{name} must be a machine_snapshot() mapping, got {snap!r}")
        try:
            float(snap["cpu_s"]), int(snap["cpu_count"]), list(snap["load_avg"])
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name} must be a machine_snapshot() mapping (numbers and a list), got {snap!r}"
            ) from exc
    return {
        "cpu_s": round(max(0.0, float(end["cpu_s"]) - float(start["cpu_s"])), 2),
        "cpu_count": int(end["cpu_count"]),
        "load_avg_start": list(start["load_avg"]),
        "load_avg_end": list(end["load_avg"]),
    }


def write_record(record: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Check ``record`` and write it atomically (a temporary file renamed over ``path``).

    Raises:
        RecordError, TypeError: see :func:`check_record`; nothing is written then.
    """
    rec = check_record(record)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".record.", suffix=".json.tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(rec, indent=1, sort_keys=True, allow_nan=False) + "\n")
        os.chmod(tmp, 0o644)  # a committed file, readable like the chapter (mkstemp makes it 0600)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def record_notebook(
    name: str | os.PathLike[str],
    parameters: Mapping[str, Any] | None = None,
    *,
    output_dir: str | os.PathLike[str] = "outputs",
    variant: str | None = None,
    allow_dirty: bool = False,
    timeout: int | None = None,
    kernel_name: str | None = None,
    progress: bool = False,
    fresh: bool = False,
) -> Path:
    """Run a notebook at full scale (``smoke = False``) and write its record; return the record's
    path.

    Everything is checked before the run starts: the notebook declares a record, the parameters
    pass its schema, ``smoke`` is not set to ``True``, the git checkout is clean (unless
    ``allow_dirty``). The executed notebook and its ``results.json`` stay in
    ``output_dir/<name>/``. Only a successful run writes the record; a failure leaves an existing
    record as it was.

    Args:
        name: a notebook stem or path to its ``.md`` source.
        parameters: extra parameters (name -> value), checked against the schema.
        output_dir: parent folder of the run's output folder.
        variant: ``None`` (the chapter's reference record) or a short name such as ``"gpu"``.
        allow_dirty: record from a checkout with uncommitted changes to tracked files.
        timeout: per-cell timeout in seconds (``None``: none).
        kernel_name: Jupyter kernel (default the notebook's).
        progress: show papermill's progress bar.
        fresh: the training loops ignore checkpoints of earlier runs (:func:`run_notebook`); the
            record's ``provenance.training`` says what was restored and trained either way.

    Raises:
        RecordError: no declaration, ``smoke=True`` asked for, a dirty checkout (before the run).
        RecordBuildError: the run's results lack the declared keys or seeds, or are too large.
        ParameterError / ParameterTypeError: a parameter the notebook refuses.
        NotebookRunError: a cell raised (the record is untouched).
    """
    md = find_notebook(name)
    spec = record_spec(md)
    if spec is None:
        raise RecordError(
            f"{md.stem} declares no recorded run: add rank_lab.recorded {{keys, seeds}} to its "
            "front matter (docs/book_contract.md)"
        )
    if parameters is not None and not isinstance(parameters, Mapping):
        raise TypeError(f"parameters must be a mapping, got {type(parameters).__name__}")
    given = dict(parameters or {})
    if given.get("smoke", False) is not False:
        raise ParameterError(
            f"parameter 'smoke' of {md.stem}: a record is a full run, smoke must be false"
        )
    target = record_path(md, variant)
    values = notebook_schema(md).check({**given, "smoke": False})
    start_dirty = bool(git_output("status", "--porcelain", "--untracked-files=no"))
    if not allow_dirty and start_dirty:
        raise RecordError(
            "the git checkout has uncommitted changes: commit them first, so that the record "
            "names the code that produced it (or pass allow_dirty / --allow-dirty)"
        )
    # the code the run starts from (HEAD may move meanwhile)
    start_commit = git_output("rev-parse", "HEAD")
    before = machine_snapshot()
    out = run_notebook(
        md,
        values,
        output_dir,
        kernel_name=kernel_name,
        timeout=timeout,
        progress=progress,
        fresh=fresh,
    )
    machine = machine_usage(before, machine_snapshot())
    try:
        record = make_record(load_results(out), spec, variant, machine)
    except RecordError as exc:
        raise RecordBuildError(
            f"{md.stem} ran, but {out / 'results.json'} cannot be recorded: {exc}"
        ) from exc
    return write_record(pin_start_commit(record, start_commit, start_dirty), target)


def pin_start_commit(
    record: Mapping[str, Any], start_commit: str | None, start_dirty: bool | None = None
) -> dict[str, Any]:
    """The record with ``git_commit`` (and ``git_dirty``) as they were when the run started.

    The notebook's ``results.json`` reads ``git rev-parse HEAD`` when it saves its results, which
    names a later commit when someone commits while a long full run goes on. The record keeps the
    start commit as ``git_commit`` and, when HEAD moved, the end one as ``git_commit_end`` (the
    header of the chapter then says so). Likewise ``git_dirty`` is the state of the checkout at the
    start (an edit made in the checkout while the run goes on does not change the code it runs).

    Args:
        record: a record (:func:`make_record`).
        start_commit: ``git rev-parse HEAD`` before the run, ``None`` outside a git checkout.
        start_dirty: whether tracked files had uncommitted changes before the run; ``None``
            keeps the flag of the run's ``results.json``.

    Returns:
        The record, checked by :func:`check_record`.

    Raises:
        TypeError: ``start_commit`` not a string or ``None``, ``start_dirty`` not a bool or
            ``None``; ``record`` not a mapping.
        RecordError: ``record`` breaks the rules of :func:`check_record`.
    """
    if start_commit is not None and not isinstance(start_commit, str):
        raise TypeError(
            f"start_commit must be a commit string or None, got {type(start_commit).__name__}"
        )
    if start_dirty is not None and not isinstance(start_dirty, bool):
        raise TypeError(f"start_dirty must be a bool or None, got {type(start_dirty).__name__}")
    record = dict(check_record(record))
    prov = dict(record["provenance"])
    end = prov.get("git_commit")
    if start_commit and end != start_commit:
        prov.update(git_commit=start_commit, git_commit_end=end)
    if start_dirty is not None:
        prov["git_dirty"] = start_dirty
    record["provenance"] = prov
    return check_record(record)
