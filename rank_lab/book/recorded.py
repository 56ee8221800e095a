"""Show a chapter's recorded full run beside its live smoke run: loader, header, tables, CI plots.

A chapter declares its record in the front matter (:mod:`rank_lab.book.record`) and, after its
live experiment, shows both::

    from rank_lab.book.recorded import ci_errorbar, format_ci, load_record, show_header, show_table

    rec = load_record("smooth_rank_surrogates")
    show_header(rec)            # "Recorded run (CPU, toy scale): 8 seeds on 2026-11-26, ..."
    if rec:                     # False when the record is missing: the page still builds
        show_table([...rows built from rec.results...])

A missing record never raises here: the header says plainly that there is none (the notebook
tests fail instead, for a chapter that declares a record). The header says what kind of run it was
(CPU or GPU, toy scale or real data), how long it took (wall and CPU time) and how busy the machine
was, all read from the record: a chapter states no time of its own
(:meth:`RecordedRun.time_sentence`). Tables are HTML inside a ``div.rank-lab-table`` that scrolls
sideways in the book (``book/_static/rank_lab.css``) with a plain-text twin for consoles; every
display function returns ``None`` so that a cell ending with one prints no stray value.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rank_lab._validation import check_float, check_nonneg_int

from .links import browse_url
from .notebooks import book_dir, find_notebook
from .record import VARIANT_PATTERN, RecordError, check_record, record_path

__all__ = [
    "RecordedRun",
    "load_record",
    "record_header",
    "run_kind",
    "show_header",
    "format_ci",
    "table_text",
    "table_html",
    "show_table",
    "show_markdown",
    "ci_errorbar",
]


@dataclass(frozen=True)
class RecordedRun:
    """A chapter's recorded full run, or its absence (``document is None``; ``bool(run)`` is False).

    Attributes:
        notebook: the notebook's name.
        path: where the record is (or would be): ``book/<part>/recorded/<name>.json``.
        document: the checked record (:func:`rank_lab.book.record.check_record`), or ``None``.
    """

    notebook: str
    path: Path
    document: dict[str, Any] | None

    def __bool__(self) -> bool:
        return self.document is not None

    @property
    def results(self) -> dict[str, Any]:
        """The recorded figures (the declared keys of the full run's ``results``); ``{}`` when
        missing."""
        return dict(self.document["results"]) if self.document else {}

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters of the recorded run; ``{}`` when missing."""
        return dict(self.document["parameters"]) if self.document else {}

    @property
    def provenance(self) -> dict[str, Any]:
        """The provenance of the recorded run (date, commit, device, seeds, versions); ``{}`` when
        missing."""
        return dict(self.document["provenance"]) if self.document else {}

    @property
    def seeds(self) -> list[int]:
        """The seeds of the recorded run; ``[]`` when missing."""
        return list(self.provenance.get("seeds", []))

    @property
    def wall_s(self) -> float | None:
        """Wall time of the recorded run in seconds (``None`` when missing)."""
        v = self.provenance.get("wall_s")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def cpu_s(self) -> float | None:
        """CPU time of the recorded run in seconds (``None`` when missing or not measured)."""
        v = self.provenance.get("cpu_s")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def time_sentence(self) -> str:
        """How long the recorded run took and on what, from the record (never a hand-written time).

        ``"20.4 min of wall time and 38.1 min of CPU time on a CPU with 2 logical cores (load
        average 1.9 at the start, 2.4 at the end)"``; older records without machine fields say that
        CPU time and load were not recorded.

        Raises:
            ValueError: the record is missing (``bool(run)`` is False).
        """
        if not self:
            raise ValueError(f"no recorded run of {self.notebook}: there is no time to state")
        p = self.provenance
        wall = f"{_duration(self.wall_s)} of wall time"
        if self.cpu_s is None:
            return f"{wall} on {p['device']} (CPU time and machine load were not recorded)"
        start, end = p["load_avg_start"], p["load_avg_end"]
        return (
            f"{wall} and {_duration(self.cpu_s)} of CPU time on {p['device']} with "
            f"{p['cpu_count']} logical cores (load average {start[0]:.1f} at the start, "
            f"{end[0]:.1f} at the end)"
        )


def load_record(name: str | os.PathLike[str], variant: str | None = None) -> RecordedRun:
    """Load a chapter's recorded full run; a missing file gives a :class:`RecordedRun` that is
    False.

    Args:
        name: the notebook's stem (``"smooth_rank_surrogates"``) or path to its ``.md`` source.
        variant: ``None`` for the reference record, else e.g. ``"gpu"``.

    Without the book's folder (an installed rank_lab, e.g. in a Colab twin) every record is
    missing: the header then says so instead of the notebook failing.

    Raises:
        NotebookNotFoundError: no such notebook in the book's folder.
        RecordError: the file exists but is not a valid record (a broken record is an error, not
            a missing one).
    """
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"name must be a notebook name or path, got {type(name).__name__}")
    if variant is not None and (not isinstance(variant, str) or not VARIANT_PATTERN.match(variant)):
        raise ValueError(f"variant must be a short lower-case name such as 'gpu', got {variant!r}")
    if not book_dir().is_dir() and not Path(name).is_file():
        # an installed rank_lab without the book's sources (e.g. a Colab twin): no record here
        stem = Path(name).stem if Path(name).suffix else Path(name).name
        return RecordedRun(
            stem, Path("recorded") / (f"{stem}.{variant}.json" if variant else f"{stem}.json"), None
        )
    md = find_notebook(name)
    path = record_path(md, variant)
    if not path.is_file():
        return RecordedRun(md.stem, path, None)
    doc = check_record(json.loads(path.read_text(encoding="utf-8")))
    if doc["notebook"] != md.stem:
        raise RecordError(f"{path}: the record of {doc['notebook']!r}, not of {md.stem!r}")
    return RecordedRun(md.stem, path, doc)


def _date(iso: Any) -> str:
    try:
        return _dt.datetime.fromisoformat(str(iso)).date().isoformat()
    except ValueError:
        return str(iso)


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "an unknown time"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


#: Values of the ``dataset`` parameter that are toy data (generated, or sklearn's 8x8 digits).
TOY_DATASETS = (None, "synthetic", "digits")


def run_kind(run: RecordedRun) -> str:
    """``"CPU, toy scale"``, ``"GPU, toy scale"`` or ``"CPU, real data: sop"``: what kind of run a
    record is.

    The device comes from the provenance; the scale from the ``dataset`` parameter (generated data
    and sklearn's digits are toy scale, whatever ``smoke`` says).

    Raises:
        TypeError: ``run`` is not a :class:`RecordedRun`.
        ValueError: the record is missing.
    """
    if not isinstance(run, RecordedRun):
        raise TypeError(f"run must be a RecordedRun (load_record), got {type(run).__name__}")
    if not run:
        raise ValueError(f"no recorded run of {run.notebook}")
    device = "GPU" if str(run.provenance.get("device", "")).startswith("cuda") else "CPU"
    dataset = run.parameters.get("dataset")
    scale = "toy scale" if dataset in TOY_DATASETS else f"real data: {dataset}"
    return f"{device}, {scale}"


def record_header(run: RecordedRun) -> str:
    """One Markdown line naming the recorded run, or saying plainly that there is none.

    ``"Recorded run (CPU, toy scale): 8 seeds on 2026-11-26; 20.4 min of wall time and ... CPU
    time on cpu: AMD EPYC with 2 logical cores (load average ...); rank_lab 0.1.0, torch 2.14.1;
    [the code of this run](<repository>/tree/<commit>)."`` The link is given only when the
    repository URL is browsable; a run recorded from a working copy with uncommitted changes, or
    during which the repository moved on, says so.

    Raises:
        TypeError: ``run`` is not a :class:`RecordedRun`.
    """
    if not isinstance(run, RecordedRun):
        raise TypeError(f"run must be a RecordedRun (load_record), got {type(run).__name__}")
    if not run:
        return f"No recorded run of {run.notebook} yet: the tables show the live smoke run only."
    p = run.provenance
    n = len(p["seeds"])
    text = (
        f"Recorded run ({run_kind(run)}): {n} seed{'s' if n != 1 else ''} on "
        f"{_date(p['ended_utc'])}; {run.time_sentence()}; rank_lab {p['rank_lab']}, torch "
        f"{p['torch']}"
    )
    commit = p.get("git_commit")
    url = browse_url("", commit, folder=True) if commit else None
    if url:
        text += f"; [the code of this run]({url})"
    if p.get("git_dirty"):
        text += ", with uncommitted local changes"
    if p.get("git_commit_end"):
        end = browse_url("", p["git_commit_end"], folder=True)
        text += (
            f" (the repository moved on during the run: [its state at the end]({end}))"
            if end
            else " (the repository moved on during the run)"
        )
    return text + "."


def _display(data: Mapping[str, str]) -> None:
    """Publish a MIME bundle in a Jupyter kernel; print its plain text anywhere else."""
    # only inside a notebook kernel (IPython is not a dependency)
    from IPython import get_ipython

    if get_ipython() is None:  # a script or a console without IPython
        print(data["text/plain"])
        return
    # only inside a notebook kernel (IPython is not a dependency)
    from IPython.display import display

    display(dict(data), raw=True)


def show_markdown(text: str, plain: str | None = None) -> None:
    """Display Markdown (rendered as MyST by the book) with a plain-text twin; returns ``None``.

    Args:
        text: the Markdown.
        plain: the text shown where Markdown is not rendered (default: ``text`` itself).

    Raises:
        TypeError: ``text`` or ``plain`` is not a string.
    """
    if not isinstance(text, str) or not isinstance(plain, (str, type(None))):
        raise TypeError(
            f"text and plain must be strings, got {type(text).__name__}, {type(plain).__name__}"
        )
    _display({"text/markdown": text, "text/plain": text if plain is None else plain})


def show_header(run: RecordedRun) -> None:
    """Display :func:`record_header` (a note in the book); returns ``None``."""
    line = record_header(run)
    show_markdown(f"```{{note}}\n{line}\n```" if run else f"*{line}*", plain=line)


def format_ci(summary: Mapping[str, Any] | None, digits: int = 2, scale: float = 1.0) -> str:
    """``"54.31 [53.10, 55.52]"``: a mean and its confidence interval
    (:func:`rank_lab.stats.ci_summary`).

    Args:
        summary: a mapping with ``mean``, ``lo`` and ``hi`` (``None`` gives ``"-"``).
        digits: decimals shown.
        scale: factor applied first (``100`` for a fraction shown in percent).

    Raises:
        TypeError: ``summary`` lacks ``mean``, ``lo`` or ``hi``.
        ValueError: ``digits`` negative.
    """
    if summary is None:
        return "-"
    if not isinstance(summary, Mapping) or not {"mean", "lo", "hi"} <= set(summary):
        raise TypeError(f"summary must be a mapping with mean, lo and hi, got {summary!r}")
    digits = check_nonneg_int(digits, "digits")
    scale = check_float(scale, "scale")
    m, lo, hi = (scale * float(summary[k]) for k in ("mean", "lo", "hi"))
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _cell(value: Any, digits: int) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _rows(
    rows: Any, columns: Sequence[str] | None, digits: int
) -> tuple[list[str], list[list[Any]]]:
    check_nonneg_int(digits, "digits")
    if (
        isinstance(rows, (str, bytes))
        or not isinstance(rows, Sequence)
        or not all(isinstance(r, Mapping) for r in rows)
    ):
        raise TypeError(
            f"rows must be a list of mappings (column -> value), got {type(rows).__name__}"
        )
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    elif isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"columns must be a list of column names, got {columns!r}")
    return list(columns), [[r.get(c) for c in columns] for r in rows]


def table_text(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 2
) -> str:
    """A fixed-width text table of ``rows`` (one mapping column -> value per row).

    Floats get ``digits`` decimals, ``None`` is ``-``; columns default to the keys in order of
    first appearance.

    Raises:
        TypeError: ``rows`` not a list of mappings, ``columns`` not a list of names.
    """
    cols, body = _rows(rows, columns, digits)
    cells = [cols] + [[_cell(v, digits) for v in r] for r in body]
    widths = [max(len(row[j]) for row in cells) for j in range(len(cols))]
    lines = [
        "  ".join(
            c.ljust(w) if j == 0 else c.rjust(w)
            for j, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table_html(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    digits: int = 2,
    caption: str | None = None,
) -> str:
    """The HTML of :func:`show_table`: a ``<table>`` inside ``<div class="rank-lab-table">``
    (scrolls).

    Raises:
        TypeError: see :func:`table_text`.
    """
    cols, body = _rows(rows, columns, digits)
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    trs = "".join(
        "<tr>" + "".join(f"<td>{esc(_cell(v, digits))}</td>" for v in r) + "</tr>" for r in body
    )
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="rank-lab-table"><table>{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{trs}</tbody></table></div>"
    )


def show_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    digits: int = 2,
    caption: str | None = None,
) -> None:
    """Display a table: HTML that scrolls sideways in the book, fixed-width text elsewhere; returns
    ``None``.

    Args:
        rows: one mapping column -> value per row (strings such as :func:`format_ci` output,
            numbers, ``None``).
        columns: the columns in order (default: the keys in order of first appearance).
        digits: decimals of float cells.
        caption: a caption above the table.

    Raises:
        TypeError: see :func:`table_text`.
    """
    text = table_text(rows, columns, digits)
    _display(
        {
            "text/html": table_html(rows, columns, digits, caption),
            "text/plain": (caption + "\n" if caption else "") + text,
        }
    )


def ci_errorbar(
    ax: Any,
    x: Sequence[float],
    summaries: Sequence[Mapping[str, Any]],
    *,
    scale: float = 1.0,
    **kwargs: Any,
) -> Any:
    """Plot means with their confidence intervals as error bars at positions ``x``.

    Args:
        ax: a matplotlib ``Axes``.
        x: the positions, one per summary.
        summaries: mappings with ``mean``, ``lo``, ``hi`` (:func:`rank_lab.stats.ci_summary`).
        scale: factor applied to the values (``100`` for percent).
        **kwargs: passed to ``ax.errorbar`` (``label``, ``fmt``, ``color``, ``capsize`` ...).

    Returns:
        The ``ErrorbarContainer``.

    Raises:
        ValueError: ``x`` and ``summaries`` of different lengths.
        TypeError: a summary without ``mean``, ``lo`` or ``hi``.
    """
    scale = check_float(scale, "scale")
    x = list(x)
    summaries = list(summaries)
    if len(x) != len(summaries):
        raise ValueError(f"x has {len(x)} positions but summaries has {len(summaries)}")
    for s in summaries:
        if not isinstance(s, Mapping) or not {"mean", "lo", "hi"} <= set(s):
            raise TypeError(f"summaries must be mappings with mean, lo and hi, got {s!r}")
    m = [scale * float(s["mean"]) for s in summaries]
    err = [
        [m_i - scale * float(s["lo"]) for m_i, s in zip(m, summaries, strict=True)],
        [scale * float(s["hi"]) - m_i for m_i, s in zip(m, summaries, strict=True)],
    ]
    kwargs.setdefault("fmt", "o")
    kwargs.setdefault("capsize", 3)
    return ax.errorbar(x, m, yerr=err, **kwargs)
