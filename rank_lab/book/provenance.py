"""The ``provenance`` section of ``results.json``: versions, git commit, device, UTC times, status.

See :mod:`rank_lab.book.results` for the whole document (schema ``rank_lab.book.results/1``).
The commit is that of the git checkout rank_lab is imported from or, for rank_lab installed by pip
from a git URL (a Colab twin's install cell), the commit pip recorded (PEP 610 ``direct_url.json``).
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import platform
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import rank_lab
from rank_lab.utils import get_device

__all__ = ["SCHEMA", "provenance"]

SCHEMA = "rank_lab.book.results/1"


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def git_output(*args: str) -> str | None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def installed_commit() -> str | None:
    """The commit of a rank_lab installed by pip from a git URL (``direct_url.json``), or
    ``None``."""
    try:
        text = metadata.distribution("rank_lab").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        info = json.loads(text) if text else {}
    except ValueError:
        return None
    vcs = info.get("vcs_info") if isinstance(info, dict) else None
    commit = vcs.get("commit_id") if isinstance(vcs, dict) and vcs.get("vcs") == "git" else None
    return commit if isinstance(commit, str) and commit else None


def _version(module: str) -> str | None:
    """The installed version of ``module``'s distribution, read from its metadata (no import).

    Importing a package only to read ``__version__`` has side effects in a notebook kernel:
    ``timm`` imports ``huggingface_hub``, which imports ``tqdm.auto``, which warns when ipywidgets
    is absent. ``None`` when the module is not installed.
    """
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    for dist in metadata.packages_distributions().get(module, []) + [module]:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _device_name(device: Any) -> str:
    try:
        dev = get_device(
            device if isinstance(device, (str, torch.device)) or device is None else None
        )
    except (ValueError, TypeError):
        return f"{device} (unavailable)"
    if dev.type == "cuda":
        return f"{dev}: {torch.cuda.get_device_name(dev)}"
    return f"{dev}: {_cpu_name()}"


def provenance(
    *,
    notebook: str | None = None,
    device: Any = None,
    started_utc: str | None = None,
    status: str = "ok",
    error: Mapping[str, str] | None = None,
    runner: str = "none",
    training: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``provenance`` section: versions, git commit, device, UTC times and status of a run.

    Args:
        notebook: the notebook's name (``None`` when unknown, e.g. run by hand).
        device: the run's ``device`` parameter (``None``: CUDA when present), resolved to a name.
        started_utc: start time (ISO 8601); default now.
        status: ``"ok"`` or ``"failed"``.
        error: for a failed run, ``{"type": ..., "message": ...}``.
        runner: ``"rank_lab.book"`` when the runner executed the notebook, else ``"none"``.
        training: what the run's training loops restored and trained
            (:func:`rank_lab.engine.run_report.training_report`), ``None`` when unknown.

    Raises:
        ValueError: if ``status`` is neither ``"ok"`` nor ``"failed"``, or a failed run has no
            error.
    """
    if status not in ("ok", "failed"):
        raise ValueError(f"status must be 'ok' or 'failed', got {status!r}")
    if (status == "failed") != (error is not None):
        raise ValueError("error must be given exactly when status is 'failed'")
    commit = git_output("rev-parse", "HEAD")
    dirty = git_output("status", "--porcelain", "--untracked-files=no")
    if commit is None:
        commit = installed_commit()
        dirty = None if commit is None else ""  # pip installed the files of that commit
    return {
        "schema": SCHEMA,
        "notebook": notebook,
        "status": status,
        "error": dict(error) if error is not None else None,
        "started_utc": started_utc or utc_now(),
        "ended_utc": utc_now(),
        "rank_lab": rank_lab.__version__,
        "git_commit": commit,
        "git_dirty": None if dirty is None else bool(dirty),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "faiss": _version("faiss"),
        "timm": _version("timm"),
        "device": _device_name(device),
        "threads": torch.get_num_threads(),
        "runner": runner,
        "training": None if training is None else dict(training),
    }
