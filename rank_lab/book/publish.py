"""Publish the built site (pages + ``.ipynb`` twins) to the repository's ``gh-pages`` branch.

``make publish`` runs ``python -m rank_lab.book.publish check`` (refuse at once when the repository
URL of ``_config.yml`` is unset or the working tree has uncommitted changes: the twins name the
commit they were built from), then ``make book``, then ``python -m rank_lab.book.publish push``:
``ghp-import`` (the tool the Jupyter Book documentation uses) commits ``_build/html`` to
``gh-pages`` with a ``.nojekyll`` file (GitHub Pages would hide ``_static/`` and ``_notebooks/``
otherwise) and pushes it; then every "Open in Colab" link of the pages is checked against the files
of that branch.

The Colab links come from ``book/_ext/colab_links.py``:
``https://colab.research.google.com/github/<org>/<repo>/blob/<branch>/_notebooks/<path>.ipynb``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

import yaml

__all__ = [
    "PublishError",
    "repository_url",
    "github_repo",
    "check_publishable",
    "colab_links",
    "branch_files",
    "missing_twins",
    "publish",
    "main",
]

COLAB = "https://colab.research.google.com/github/"
_LINK = re.compile(r'href="(https://colab\.research\.google\.com/github/[^"]+)"')


class PublishError(RuntimeError):
    """The site cannot be published as asked (the message says why and what to do)."""


def _require_dir(path: str | Path, name: str) -> Path:
    """``path`` as a ``Path``; ``FileNotFoundError`` naming ``name`` and the path unless it is a
    folder."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"{name} must be a folder path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"{name} {str(p)!r} is not an existing folder")
    return p


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PublishError(f"git {' '.join(args)} failed in {str(root)!r}: {proc.stderr.strip()}")
    return proc.stdout


def repository_url(root: str | Path) -> str:
    """``repository.url`` of ``root/_config.yml``.

    Raises:
        FileNotFoundError: ``root`` is not a folder.
        PublishError: when the file, the key or its value is missing.
    """
    config = _require_dir(root, "root") / "_config.yml"
    try:
        cfg = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise PublishError(f"cannot read {str(config)!r}: {exc}") from exc
    url = str(((cfg.get("repository") or {}).get("url")) or "").strip()
    if not url:
        raise PublishError(
            f"repository.url is unset in {str(config)!r}: set it to the repository the site is "
            "published from (e.g. https://github.com/<org>/<repo>); the Colab links and the twins' "
            "install cell use it"
        )
    return url


def github_repo(url: str) -> str | None:
    """``"<org>/<repo>"`` of a GitHub URL (https or ``git@github.com:``), else ``None``.

    Raises:
        TypeError: ``url`` is not a str.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {type(url).__name__}")
    if url.startswith("git@github.com:"):
        path = url.split(":", 1)[1]
    else:
        parts = urlparse(url)
        if parts.netloc.split("@")[-1] != "github.com":
            return None
        path = parts.path
    path = path.strip("/").removesuffix(".git")
    return path if path.count("/") == 1 else None


def check_publishable(root: str | Path) -> str:
    """Refuse to publish from a tree with uncommitted changes or without a repository URL.

    Returns:
        The repository URL.

    Raises:
        FileNotFoundError: ``root`` is not a folder.
        PublishError: naming the uncommitted files, or the unset URL.
    """
    root = _require_dir(root, "root")
    url = repository_url(root)
    dirty = [line for line in _git(root, "status", "--porcelain").splitlines() if line.strip()]
    if dirty:
        shown = ", ".join(line[3:] for line in dirty[:8]) + (" ..." if len(dirty) > 8 else "")
        raise PublishError(
            f"the working tree has uncommitted changes ({shown}): commit or stash them first, "
            "so that the published twins match a commit"
        )
    return url


def colab_links(html_dir: str | Path) -> dict[str, list[str]]:
    """Every "Open in Colab" link of the built pages: ``{page path: [links]}`` (pages with links
    only).

    Raises:
        FileNotFoundError: ``html_dir`` is not a folder (a site that was not built has no links to
            check).
    """
    html_dir = _require_dir(html_dir, "html_dir")
    out = {}
    for page in sorted(html_dir.rglob("*.html")):
        links = _LINK.findall(page.read_text(encoding="utf-8", errors="replace"))
        if links:
            out[page.relative_to(html_dir).as_posix()] = links
    return out


def branch_files(git_dir: str | Path, branch: str = "gh-pages") -> set[str]:
    """The files of ``branch`` in a repository (a work tree or a bare repository).

    Raises:
        FileNotFoundError: ``git_dir`` is not a folder.
        PublishError: git cannot list the branch (not a repository, no such branch).
    """
    return set(
        _git(_require_dir(git_dir, "git_dir"), "ls-tree", "-r", "--name-only", branch).splitlines()
    )


def missing_twins(
    html_dir: str | Path, files: set[str], repo: str, branch: str = "gh-pages"
) -> list[str]:
    """The Colab links that do not name a file of ``files`` in ``repo`` (``"<org>/<repo>"``) on
    ``branch``.

    Raises:
        FileNotFoundError: ``html_dir`` is not a folder.
        TypeError: ``files`` is not a collection of paths, ``repo`` not a str.
    """
    if isinstance(files, (str, bytes)) or not hasattr(files, "__contains__"):
        raise TypeError(f"files must be a set of file paths, got {type(files).__name__}")
    if not isinstance(repo, str):
        raise TypeError(f"repo must be '<org>/<repo>', got {type(repo).__name__}")
    prefix = f"{COLAB}{repo}/blob/{branch}/"
    bad = []
    for page, links in colab_links(html_dir).items():
        for link in links:
            if not link.startswith(prefix) or link[len(prefix) :] not in files:
                bad.append(f"{page}: {link}")
    return bad


def publish(
    root: str | Path,
    html_dir: str | Path,
    *,
    remote: str = "origin",
    branch: str = "gh-pages",
    check_dir: str | Path | None = None,
) -> list[str]:
    """Push ``html_dir`` to ``branch`` of ``remote`` with ghp-import, then check the Colab links.

    Args:
        root: the repository (its ``_config.yml`` gives the URL the links must name).
        html_dir: the built site (``_build/html`` with ``_notebooks/``).
        remote: a git remote name, or a path / URL used as is.
        branch: the branch GitHub Pages serves.
        check_dir: the repository whose ``branch`` is checked after the push (default ``root``,
            whose local ``branch`` ghp-import just wrote and pushed).

    Returns:
        The Colab links checked.

    Raises:
        FileNotFoundError: ``root`` or ``html_dir`` is not a folder.
        PublishError: no Colab link in the pages, a remote whose GitHub repository is not the
            configured one, a failed push, or links naming files absent from the branch.
    """
    root, html_dir = _require_dir(root, "root"), _require_dir(html_dir, "html_dir")
    repo = github_repo(check_publishable(root))
    if repo is None:
        raise PublishError(
            "repository.url is not a GitHub URL: the pages have no Colab links to publish"
        )
    links = [link for ls in colab_links(html_dir).values() for link in ls]
    if not links:
        raise PublishError(
            f"no 'Open in Colab' link in the pages under {str(html_dir)!r}: build the site first "
            "(make book)"
        )
    remote_url = subprocess.run(
        ["git", "remote", "get-url", remote], cwd=root, capture_output=True, text=True
    )
    if remote_url.returncode == 0 and github_repo(remote_url.stdout.strip()) not in (None, repo):
        raise PublishError(
            f"remote {remote!r} is {remote_url.stdout.strip()}, but the links name {repo} "
            "(_config.yml)"
        )
    commit = _git(root, "rev-parse", "--short", "HEAD").strip()
    cmd = [
        sys.executable,
        "-m",
        "ghp_import",
        "-n",
        "-p",
        "-f",
        "-r",
        remote,
        "-b",
        branch,
        "-m",
        f"Publish the book built from {commit}",
        str(html_dir),
    ]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PublishError(f"{' '.join(cmd)} failed: {(proc.stdout + proc.stderr).strip()}")
    bad = missing_twins(html_dir, branch_files(check_dir or root, branch), repo, branch)
    if bad:
        raise PublishError(f"{len(bad)} Colab link(s) name no twin on {branch}: {bad[:5]}")
    return links


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rank_lab.book.publish check | push [--remote R] [--branch B] [--site DIR]``."""
    ap = argparse.ArgumentParser(
        prog="python -m rank_lab.book.publish", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("command", choices=("check", "push"))
    ap.add_argument("--root", default=".", help="the repository (default: the current folder)")
    ap.add_argument("--site", default="_build/html", help="the built site (default: _build/html)")
    ap.add_argument("--remote", default="origin")
    ap.add_argument("--branch", default="gh-pages")
    args = ap.parse_args(argv)
    try:
        if args.command == "check":
            print(f"ready to publish {check_publishable(args.root)}")
        else:
            site = Path(args.root) / args.site
            links = publish(args.root, site, remote=args.remote, branch=args.branch)
            print(
                f"published {site} to {args.remote}/{args.branch}; {len(links)} Colab links name "
                "existing twins"
            )
    except (PublishError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
