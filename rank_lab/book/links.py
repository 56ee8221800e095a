"""Links from the book to the repository's files, built from ``repository.url`` of ``_config.yml``.

A page never names a repository file (``benchmarks/README.md``) as if the reader had the checkout:
it links it. The book's Sphinx role ``{repo}`` (``book/_ext/repo_links.py``), the Colab twins and
the recorded-run headers build their URLs here, from the one setting forks change
(``repository.url`` and ``repository.branch``)::

    {repo}`benchmarks/README.md`                    -> <url>/blob/<branch>/benchmarks/README.md
    {repo}`the benchmark tables <benchmarks/README.md>`

Only web-browsable repositories get links (``https://`` URLs, e.g. GitHub or GitLab); for any other
URL :func:`browse_url` returns ``None`` and callers show the path as text.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .notebooks import book_dir

__all__ = ["repository_settings", "browse_url"]


def repository_settings(project: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """``{"url", "branch"}`` of ``project/_config.yml`` (default: the folder above
    :func:`book_dir`).

    Missing file or keys give ``url`` ``None`` and ``branch`` ``"main"``.

    Raises:
        ValueError: ``_config.yml`` is not a YAML mapping.
    """
    path = (Path(project) if project is not None else book_dir().parent) / "_config.yml"
    if not path.is_file():
        return {"url": None, "branch": "main"}
    cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    repo = cfg.get("repository") or {}
    url = str(repo.get("url") or "").strip() or None
    return {"url": url, "branch": str(repo.get("branch") or "main")}


def browse_url(
    path: str,
    ref: str | None = None,
    *,
    url: str | None = None,
    branch: str | None = None,
    folder: bool | None = None,
    project: str | os.PathLike[str] | None = None,
) -> str | None:
    """The web URL of a repository file or folder, or ``None`` when the repository is not browsable.

    Args:
        path: a path relative to the repository root (``"benchmarks/README.md"``; ``""`` for the
            root).
        ref: a commit or tag (default: the configured branch).
        url: the repository URL (default: ``repository.url`` of ``_config.yml``).
        branch: the branch (default: ``repository.branch``, else ``main``).
        folder: ``True`` for a folder (``tree/``), ``False`` for a file (``blob/``); default: a
            path without a suffix, or ending with ``/``, is a folder.
        project: the folder holding ``_config.yml`` (default: above the book folder).

    Raises:
        TypeError: ``path`` or ``ref`` not strings.
        ValueError: an absolute path or one that climbs out of the repository (``..``).
    """
    if not isinstance(path, str) or (ref is not None and not isinstance(ref, str)):
        raise TypeError(f"path and ref must be strings, got {path!r}, {ref!r}")
    for name, value in (("url", url), ("branch", branch)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string or None, got {value!r}")
    if folder is not None and not isinstance(folder, bool):
        raise TypeError(f"folder must be a bool or None, got {folder!r}")
    clean = path.strip()
    clean = clean[2:] if clean.startswith("./") else clean
    if clean.startswith("/") or ".." in Path(clean).parts:
        raise ValueError(f"path must be relative to the repository root, got {path!r}")
    settings = repository_settings(project) if url is None or branch is None else {}
    url = url if url is not None else settings.get("url")
    branch = branch if branch is not None else settings.get("branch", "main")
    if not url or not url.startswith("https://"):
        return None
    base = url.rstrip("/").removesuffix(".git")
    is_folder = (
        folder
        if folder is not None
        else (clean == "" or clean.endswith("/") or not Path(clean).suffix)
    )
    kind = "tree" if is_folder else "blob"
    tail = f"/{clean.rstrip('/')}" if clean.rstrip("/") else ""
    return f"{base}/{kind}/{ref or branch}{tail}"
