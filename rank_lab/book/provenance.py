"""The ``provenance`` section of ``results.json``: versions, git commit, device, UTC times, status.

See :mod:`rank_lab.book.results` for the whole document (schema ``rank_lab.book.results/1``).
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA", "provenance"]

SCHEMA = "rank_lab.book.results/1"


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(module: str) -> str | None:
    """The installed version of ``module``'s distribution, read from its metadata (no import).

    Importing a package only to read ``__version__`` has side effects in a notebook kernel:
    ``timm`` imports ``huggingface_hub``, which imports ``tqdm.auto``, which warns when ipywidgets
    is absent. ``None`` when the module is not installed.
    """
    import importlib.util
    from importlib import metadata

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
    import torch

    from rank_lab.utils import get_device

    try:
        dev = get_device(device if isinstance(device, (str, torch.device)) or device is None else None)
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
) -> dict[str, Any]:
    """The ``provenance`` section: versions, git commit, device, UTC times and status of a run.

    Args:
        notebook: the notebook's name (``None`` when unknown, e.g. run by hand).
        device: the run's ``device`` parameter (``None``: CUDA when present), resolved to a name.
        started_utc: start time (ISO 8601); default now.
        status: ``"ok"`` or ``"failed"``.
        error: for a failed run, ``{"type": ..., "message": ...}``.
        runner: ``"rank_lab.book"`` when the runner executed the notebook, else ``"none"``.

    Raises:
        ValueError: if ``status`` is neither ``"ok"`` nor ``"failed"``, or a failed run has no error.
    """
    import torch

    import rank_lab

    if status not in ("ok", "failed"):
        raise ValueError(f"status must be 'ok' or 'failed', got {status!r}")
    if (status == "failed") != (error is not None):
        raise ValueError("error must be given exactly when status is 'failed'")
    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "schema": SCHEMA,
        "notebook": notebook,
        "status": status,
        "error": dict(error) if error is not None else None,
        "started_utc": started_utc or _utc_now(),
        "ended_utc": _utc_now(),
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
    }
