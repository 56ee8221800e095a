"""The ``.ipynb`` twins of the book's notebooks, for Colab: a pinned install cell, Colab Markdown.

``python -m rank_lab.book twins --out _build/html/_notebooks`` (``make notebooks``, after the site
is built) writes one twin per notebook, mirroring the ``book/`` layout. A twin differs from its
``.md`` source in three ways:

* its first cell installs rank_lab **at the commit the site was built from**
  (``rank_lab[<extras>] @ git+<repository.url>@<commit>``), with exactly the extras the notebook
  declares in its front matter (``rank_lab: install: {extras: [...], animal_mnist: true}``), never
  the ``book`` or ``test`` extras, plus ``animal-mnist --no-deps`` where declared; then it prints
  the device the notebook will run on. It binds no public name, so the parameters cell that
  follows stays the first thing :func:`rank_lab.book.start_run` reads;
* its Markdown is converted for Colab (:mod:`rank_lab.book.colab`): citations, equation numbers,
  roles as code, admonitions, with the cited references listed in a last cell;
* its metadata asks Colab for a GPU runtime.

The repository URL is ``repository.url`` of ``_config.yml`` (forks change it there). It counts as
**unset** when the key is missing or empty, or holds a template placeholder (``<org>``, ``{repo}``)
or anything that is not a URL pip can clone (``https://``, ``http://``, ``ssh://``, ``git://``,
``file://`` or ``git@host:path``): :func:`make_twins` then raises :class:`TwinError` and
``make notebooks`` fails with that message.
"""

from __future__ import annotations

import os
import re
import subprocess
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from rank_lab.book.publish import github_repo

from .bibtex import read_bib
from .colab import ColabMarkdown, doc_resolver, equation_labels, ref_resolver
from .links import browse_url
from .notebooks import book_dir, front_matter, list_notebooks
from .notebooks import to_notebook as _to_notebook
from .rerun import rerun_markdown

__all__ = [
    "TWIN_EXTRAS",
    "TwinError",
    "InstallSpec",
    "install_spec",
    "install_cell",
    "repository_url",
    "check_repository_url",
    "source_ref",
    "make_twin",
    "make_twins",
]

#: The extras of pyproject.toml a twin may install (``book`` and ``test`` are for building and
#: testing).
TWIN_EXTRAS = ("plots", "faiss", "timm", "data")
_URL_SCHEMES = ("https", "http", "ssh", "git", "file")
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


class TwinError(ValueError):
    """The twins cannot be written as asked (unset repository URL, bad install declaration, no
    commit)."""


@dataclass(frozen=True)
class InstallSpec:
    """What a twin installs: rank_lab's ``extras`` and, with ``animal_mnist``,
    ``animal-mnist --no-deps``."""

    extras: tuple[str, ...] = ()
    animal_mnist: bool = False

    def requirement(self, repo: str, ref: str) -> str:
        """The pip requirement ``rank_lab[extras] @ git+<repo>@<ref>``."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"rank_lab{extras} @ git+{repo}@{ref}"


def install_spec(md: str | os.PathLike[str] | Mapping[str, Any]) -> InstallSpec:
    """The install declaration of a notebook (its front matter's ``rank_lab.install``).

    A notebook without the block installs rank_lab alone (the book's notebooks all declare it:
    tested).

    Args:
        md: a notebook's ``.md`` path, or its front matter as a mapping.

    Raises:
        TwinError: an unknown key, an extra that is not in :data:`TWIN_EXTRAS` (``book`` is refused:
            it pulls the Sphinx stack into Colab), or a non-bool ``animal_mnist``.
        TypeError: ``md`` is neither a path nor a mapping.
    """
    if not isinstance(md, (str, os.PathLike, Mapping)):
        raise TypeError(
            f"md must be a notebook path or its front matter (a mapping), got {type(md).__name__}"
        )
    meta = front_matter(md) if isinstance(md, (str, os.PathLike)) else md
    name = Path(md).stem if isinstance(md, (str, os.PathLike)) else "notebook"
    block = (meta.get("rank_lab") or {}).get("install")
    if block is None:
        return InstallSpec()
    if not isinstance(block, Mapping):
        raise TwinError(
            f"{name}: rank_lab.install must be a mapping {{extras: [...], animal_mnist: bool}}"
        )
    unknown = set(block) - {"extras", "animal_mnist"}
    if unknown:
        raise TwinError(
            f"{name}: unknown key(s) {sorted(unknown)} in rank_lab.install; known: extras, "
            "animal_mnist"
        )
    extras = block.get("extras", []) or []
    if isinstance(extras, str) or not all(isinstance(e, str) for e in extras):
        raise TwinError(
            f"{name}: rank_lab.install.extras must be a list of extra names, got {extras!r}"
        )
    bad = [e for e in extras if e not in TWIN_EXTRAS]
    if bad:
        raise TwinError(
            f"{name}: rank_lab.install.extras {bad} not installable on Colab; choose from "
            f"{list(TWIN_EXTRAS)} (the book and test extras are for building the site and running "
            "the tests)"
        )
    if len(set(extras)) != len(extras):
        raise TwinError(f"{name}: rank_lab.install.extras lists an extra twice: {extras}")
    animal = block.get("animal_mnist", False)
    if not isinstance(animal, bool):
        raise TwinError(
            f"{name}: rank_lab.install.animal_mnist must be true or false, got {animal!r}"
        )
    return InstallSpec(tuple(extras), animal)


def check_repository_url(url: object, where: str = "_config.yml") -> str:
    """``url`` stripped, when it is a git URL pip can clone; the module docstring says what counts
    as unset.

    Raises:
        TwinError: unset, a placeholder or not a clonable URL (the message names ``where``).
    """
    text = "" if url is None else str(url).strip()
    hint = (
        f"set repository.url in {where} to the repository the site is built from "
        "(e.g. https://github.com/<org>/<repo>; forks change it there): the twins' install cell "
        "and the Colab links use it"
    )
    if not text:
        raise TwinError(f"repository.url is unset in {where}: {hint}")
    if re.search(r"[<>{}\s]", text):
        raise TwinError(f"repository.url {text!r} in {where} is a placeholder: {hint}")
    parts = urlparse(text)
    scp_like = re.match(r"^[\w.-]+@[\w.-]+:[^/].*", text) is not None
    if not scp_like and (
        parts.scheme not in _URL_SCHEMES
        or not parts.path.strip("/")
        or (parts.scheme != "file" and not parts.netloc)
    ):
        raise TwinError(
            f"repository.url {text!r} in {where} is not a git URL pip can clone "
            f"({', '.join(s + '://' for s in _URL_SCHEMES)} or git@host:path): {hint}"
        )
    return text


def _config(project: Path) -> dict[str, Any]:
    path = project / "_config.yml"
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise TwinError(f"cannot read {str(path)!r}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise TwinError(f"{str(path)!r} is not a YAML mapping")
    return cfg


def repository_url(project: str | os.PathLike[str]) -> str:
    """The checked ``repository.url`` of ``project/_config.yml`` (:func:`check_repository_url`)."""
    project = Path(project)
    return check_repository_url(
        (_config(project).get("repository") or {}).get("url"), str(project / "_config.yml")
    )


def source_ref(project: str | os.PathLike[str]) -> str:
    """The commit (``git rev-parse HEAD``) of the checkout ``project``, which the twins pin.

    Warns (``UserWarning``) when the working tree has uncommitted changes: the twins install the
    commit, not those changes (``make publish`` refuses such a tree).

    Raises:
        TwinError: ``project`` is not in a git checkout with a commit (pass ``ref`` / ``--ref``
            then).
    """
    project = Path(project)

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True)

    head = git("rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        raise TwinError(
            f"{str(project)!r} is not a git checkout with a commit: the twins pin the commit the "
            f"site is built from; pass ref (python -m rank_lab.book twins --ref <tag or commit>). "
            f"git said: {head.stderr.strip()}"
        )
    if git("status", "--porcelain").stdout.strip():
        warnings.warn(
            f"uncommitted changes in {str(project)!r}: the twins install commit "
            f"{head.stdout.strip()[:12]}, not the working tree",
            UserWarning,
            stacklevel=2,
        )
    return head.stdout.strip()


def install_cell(spec: InstallSpec, repo: str, ref: str) -> str:
    """Source of a twin's first cell: pip-install ``spec`` at ``ref`` of ``repo``, then print the
    device.

    Runs as a function, so the notebook's namespace gains no public name. Installing again at the
    same commit only adds missing extras (pip finds the rest installed).

    Raises:
        TwinError: ``ref`` is not a commit or tag name, or ``repo`` is not a clonable URL.
        TypeError: ``spec`` is not an :class:`InstallSpec`.
    """
    if not isinstance(spec, InstallSpec):
        raise TypeError(
            f"spec must be an InstallSpec (install_spec of a notebook), got {type(spec).__name__}"
        )
    repo = check_repository_url(repo, "the repo argument")
    if not isinstance(ref, str) or not _REF.match(ref) or ".." in ref:
        raise TwinError(f"ref must be a commit or a tag name, got {ref!r}")
    requirement = spec.requirement(repo, ref)
    animal = (
        (
            '    if importlib.util.find_spec("animal_mnist") is None:  # data files only: no '
            "dependencies\n"
            '        pip("--no-deps", "animal-mnist")\n'
        )
        if spec.animal_mnist
        else ""
    )
    what = f"rank_lab{'[' + ','.join(spec.extras) + ']' if spec.extras else ''}" + (
        " and animal-mnist" if spec.animal_mnist else ""
    )
    return (
        f"# Installs {what} at commit {ref[:12]} of {repo}: the code this page was built from.\n"
        "# On Colab: Runtime > Change runtime type > a GPU first (full runs need it), then Runtime "
        "> Run all.\ndef _install_rank_lab():\n"
        "    import importlib, importlib.metadata, importlib.util, json, subprocess, sys\n"
        f"    requirement, ref = {requirement!r}, {ref!r}\n"
        "    def pip(*args):\n"
        '        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], '
        "check=True)\n    try:  # another commit installed: replace it\n"
        "        vcs = "
        'json.loads(importlib.metadata.distribution("rank_lab").read_text("direct_url.json") or '
        '"{}")\n        if ref not in (vcs.get("vcs_info", {}).get("commit_id"), '
        'vcs.get("vcs_info", {}).get("requested_revision")):\n            '
        'subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "rank_lab"], '
        "check=True)\n    except importlib.metadata.PackageNotFoundError:\n"
        "        pass\n"
        "    pip(requirement)\n"
        f"{animal}"
        "    importlib.invalidate_caches()\n"
        "    import torch\n"
        '    print("rank_lab", importlib.metadata.version("rank_lab"), "at", ref[:12])\n'
        "    if torch.cuda.is_available():\n"
        '        print("device: cuda:0 -", torch.cuda.get_device_name(0))\n'
        "    else:\n"
        '        print("device: cpu - no GPU: the smoke run (smoke = True) works; for smoke = '
        'False choose "\n              "Runtime > Change runtime type > GPU and run this cell '
        'again")\n'
        "_install_rank_lab()"
    )


def _colab_base(cfg: Mapping[str, Any], repo: str) -> str | None:
    org_repo = github_repo(repo)
    branch = ((cfg.get("sphinx") or {}).get("config") or {}).get(
        "colab_notebooks_branch", "gh-pages"
    )
    return (
        f"https://colab.research.google.com/github/{org_repo}/blob/{branch}/_notebooks"
        if org_repo
        else None
    )


def make_twin(
    md_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    repo: str,
    ref: str,
    *,
    root: str | os.PathLike[str] | None = None,
) -> Path:
    """Write the Colab twin of one ``.md`` notebook (install cell, Colab Markdown, references).

    Args:
        md_path: the notebook's jupytext MyST source.
        out_path: the ``.ipynb`` to write (parent folders are created).
        repo: git URL of the repository (:func:`check_repository_url`).
        ref: the commit or tag the install cell pins.
        root: the book folder (default :func:`book_dir`): ``references.bib`` and ``{doc}`` targets.

    Raises:
        TwinError: a bad install declaration, URL or ref.
        MystConversionError / BibError: MyST syntax without a Colab rendering, an unknown label or
        key.
    """
    # optional dependency (extra "book"), imported where it is used
    import nbformat

    md_path = Path(md_path)
    root = Path(root) if root is not None else book_dir()
    spec = install_spec(md_path)
    cell = nbformat.v4.new_code_cell(install_cell(spec, repo, ref))
    cell.metadata["tags"] = ["colab-install"]
    nb = _to_notebook(md_path)
    markdown = [c for c in nb.cells if c.cell_type == "markdown"]
    bib_path = root / "references.bib"
    bib = read_bib(bib_path) if bib_path.is_file() else {}
    cfg = _config(root.parent) if (root.parent / "_config.yml").is_file() else {}
    base = _colab_base(cfg, repo)
    branch = str((cfg.get("repository") or {}).get("branch") or "main")
    root_dir = root.parent
    conv = ColabMarkdown(
        md_path.stem,
        equation_labels([c.source for c in markdown]),
        bib,
        doc_resolver(md_path, root, base),
        ref_link=ref_resolver(root, base),
        repo_link=lambda path: browse_url(
            path, url=repo, branch=branch, folder=(root_dir / path).is_dir()
        ),
        rerun=lambda: rerun_markdown(md_path),
    )
    for c in markdown:
        c.source = conv.convert(c.source)
    refs = conv.references_cell()
    if refs:
        nb.cells.append(nbformat.v4.new_markdown_cell(refs))
    nb.cells.insert(0, cell)
    nb.metadata.pop("jupytext", None)
    nb.metadata["accelerator"] = "GPU"
    nb.metadata["colab"] = {"provenance": [], "gpuType": "T4"}
    nb.metadata["rank_lab"] = {"source": md_path.name, "repository": repo, "ref": ref}
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_path)
    return out_path


def make_twins(
    out_dir: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    repo: str | None = None,
    ref: str | None = None,
) -> list[Path]:
    """Write the Colab twins of every notebook, mirroring the ``book/`` folder layout.

    Args:
        out_dir: destination folder (``make notebooks`` uses ``_build/html/_notebooks``).
        root: the book folder (default :func:`book_dir`); its parent holds ``_config.yml``.
        repo: git URL for the install cell (default: ``repository.url`` of ``_config.yml``).
        ref: commit or tag to pin (default: :func:`source_ref`, the checkout's ``HEAD``).

    Raises:
        TwinError: unset repository URL, no commit, a bad install declaration.
    """
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a folder path, got {type(out_dir).__name__}")
    root = Path(root) if root is not None else book_dir()
    notebooks = list_notebooks(root)
    repo = (
        check_repository_url(repo, "the repo argument")
        if repo is not None
        else repository_url(root.parent)
    )
    ref = ref if ref is not None else source_ref(root.parent)
    return [
        make_twin(
            md, Path(out_dir) / md.relative_to(root).with_suffix(".ipynb"), repo, ref, root=root
        )
        for md in notebooks
    ]
