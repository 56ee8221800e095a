"""Run the book's notebooks as parameterised experiments (papermill underneath).

Command line::

    python -m rank_lab.book list
    python -m rank_lab.book run evaluating_retrieval -p dataset digits -p seed 1 --out outputs/
    python -m rank_lab.book twins --out _build/html/_notebooks

``run`` converts the jupytext MyST source (``book/**/<name>.md``) to a notebook, injects the
parameters after the cell tagged ``parameters``, executes it headlessly with errors raised, and
writes ``<out>/<name>/<name>.ipynb`` and the ``results.json`` that every notebook saves with
:func:`save_results`. ``twins`` writes ``.ipynb`` copies with a leading install cell, for Colab.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "book_dir",
    "list_notebooks",
    "find_notebook",
    "run_notebook",
    "save_results",
    "load_results",
    "make_twin",
    "make_twins",
    "parse_parameter",
    "api_page",
    "main",
]

#: Default install cell of the Colab twins; ``{repo}`` is the repository URL from ``_config.yml``.
INSTALL_CELL = """# Colab / fresh machine: install rank_lab and the book extras, then restart if asked.
# On Colab pick Runtime > Change runtime type > GPU first: the notebook then runs on CUDA.
import importlib.util, subprocess, sys
if importlib.util.find_spec("rank_lab") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "rank_lab[book,faiss,timm] @ git+{repo}"], check=True)"""


def book_dir() -> Path:
    """The folder holding the book's ``.md`` notebooks.

    ``$RANK_LAB_BOOK`` wins; else ``book/`` next to the package (a source checkout); else
    ``./book``.
    """
    env = os.environ.get("RANK_LAB_BOOK")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[1] / "book"
    return here if here.is_dir() else Path.cwd() / "book"


def _is_notebook(path: Path) -> bool:
    """A ``.md`` file is a notebook when its front matter declares a jupytext kernel."""
    try:
        head = path.read_text(encoding="utf-8")[:2000]
    except OSError:
        return False
    return head.startswith("---") and "kernelspec:" in head and "jupytext:" in head


def list_notebooks(root: Path | None = None) -> list[Path]:
    """All jupytext MyST notebooks under ``root`` (default :func:`book_dir`), sorted."""
    root = Path(root) if root is not None else book_dir()
    return sorted(p for p in root.rglob("*.md") if "_build" not in p.parts and _is_notebook(p))


def find_notebook(name: str | os.PathLike[str], root: Path | None = None) -> Path:
    """Resolve a notebook from a path or a stem such as ``"evaluating_retrieval"``.

    Raises:
        FileNotFoundError: naming the notebooks that exist when ``name`` matches none.
    """
    p = Path(name)
    if p.suffix == ".md" and p.is_file():
        return p
    stem = p.stem if p.suffix else p.name
    matches = [q for q in list_notebooks(root) if q.stem == stem]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(q.stem for q in list_notebooks(root)) or "(none)"
    if not matches:
        raise FileNotFoundError(f"no notebook named {str(name)!r}; known notebooks: {known}")
    raise FileNotFoundError(f"notebook name {str(name)!r} is ambiguous: {matches}")


def parse_parameter(value: str) -> Any:
    """Parse a ``-p key value`` value as YAML (``1`` -> int, ``false`` -> bool, ``[1,2]`` -> list)."""
    import yaml

    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _jsonable(obj: Any) -> Any:
    """Convert tensors, arrays and numpy scalars to JSON types; non-finite floats become None."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu().tolist()
    if np is not None and isinstance(obj, np.ndarray):
        obj = obj.tolist()
    if np is not None and isinstance(obj, np.generic):
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


def save_results(results: Mapping[str, Any], path: str | os.PathLike[str] = "results.json") -> Path:
    """Write a notebook's key figures to ``results.json`` (tensors and arrays converted).

    Args:
        results: a mapping of names to numbers, lists or nested mappings.
        path: the file to write; a folder gets ``results.json`` inside it.

    Returns:
        The path written.
    """
    if not isinstance(results, Mapping):
        raise TypeError(f"results must be a mapping, got {type(results).__name__}")
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(_jsonable(results), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return p


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``results.json`` written by :func:`save_results` (a folder is accepted)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    return json.loads(p.read_text(encoding="utf-8"))


def _to_notebook(md_path: Path) -> Any:
    import jupytext

    nb = jupytext.read(md_path)
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
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
    """Execute one book notebook with papermill and return its output folder.

    The notebook runs with ``output_dir/<name>`` as its working directory, so the
    ``results.json`` it writes lands next to the executed ``<name>.ipynb``. Execution errors
    raise (``papermill.PapermillExecutionError``); they are never turned into warnings.

    Args:
        name: a notebook stem (``"evaluating_retrieval"``) or a path to its ``.md`` source.
        parameters: values injected after the ``parameters`` cell (e.g. ``{"smoke": False}``).
        output_dir: parent folder of the run's output folder.
        kernel_name: Jupyter kernel; default the notebook's own (``python3``).
        timeout: per-cell timeout in seconds (``None`` for none).
        progress: show papermill's progress bar.

    Returns:
        The folder holding the executed notebook and ``results.json``.
    """
    import nbformat
    import papermill as pm

    md = find_notebook(name).resolve()
    out = Path(output_dir).resolve() / md.stem
    out.mkdir(parents=True, exist_ok=True)
    src = out / f"{md.stem}.input.ipynb"
    nbformat.write(_to_notebook(md), src)
    dst = out / f"{md.stem}.ipynb"
    env_backup = os.environ.get("RANK_LAB_BOOK")
    os.environ["RANK_LAB_BOOK"] = str(book_dir().resolve())
    try:
        pm.execute_notebook(
            str(src),
            str(dst),
            parameters=dict(parameters or {}),
            cwd=str(out),
            kernel_name=kernel_name,
            progress_bar=progress,
            execution_timeout=timeout,
            log_output=False,
        )
    finally:
        src.unlink(missing_ok=True)
        if env_backup is None:
            os.environ.pop("RANK_LAB_BOOK", None)
        else:
            os.environ["RANK_LAB_BOOK"] = env_backup
    return out


def make_twin(md_path: Path, out_path: Path, repo: str) -> Path:
    """Write the ``.ipynb`` twin of one ``.md`` notebook with an install cell first (for Colab)."""
    import nbformat

    nb = _to_notebook(Path(md_path))
    cell = nbformat.v4.new_code_cell(INSTALL_CELL.format(repo=repo))
    cell.metadata["tags"] = ["colab-install"]
    nb.cells.insert(0, cell)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_path)
    return out_path


def _repo_url(config: Path) -> str:
    import yaml

    try:
        cfg = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except OSError:
        cfg = {}
    url = (cfg.get("repository") or {}).get("url") or "https://github.com/rank-lab/rank_lab"
    return url.removesuffix("/") + ".git" if not url.endswith(".git") else url


def make_twins(out_dir: str | os.PathLike[str], root: Path | None = None, repo: str | None = None) -> list[Path]:
    """Write ``.ipynb`` twins of every notebook, mirroring the ``book/`` folder layout.

    Args:
        out_dir: destination folder (``make notebooks`` uses ``_build/html/_notebooks``).
        root: the book folder (default :func:`book_dir`).
        repo: git URL for the install cell (default: ``repository.url`` of ``_config.yml``).
    """
    root = Path(root) if root is not None else book_dir()
    repo = repo or _repo_url(root.parent / "_config.yml")
    written = []
    for md in list_notebooks(root):
        rel = md.relative_to(root).with_suffix(".ipynb")
        written.append(make_twin(md, Path(out_dir) / rel, repo))
    return written


def _public_modules() -> list[str]:
    import pkgutil

    import rank_lab

    names = []
    for info in pkgutil.walk_packages(rank_lab.__path__, "rank_lab."):
        leaf = info.name.rsplit(".", 1)[-1]
        if leaf.startswith("_") or info.ispkg:
            continue
        names.append(info.name)
    return sorted(names)


def api_page() -> str:
    """The text of ``book/api.md``: one autodoc section per public module of the package.

    ``python -m rank_lab.book api --write`` regenerates the page; a test checks it is current.
    """
    lines = [
        "# API reference",
        "",
        "Generated by `python -m rank_lab.book api --write` from the package's docstrings (Google style,",
        "with tensor shapes and the seed equation each function implements).",
        "",
    ]
    current = None
    for mod in _public_modules():
        group = ".".join(mod.split(".")[:2])
        if group != current:
            lines += [f"## `{group}`", ""]
            current = group
        lines += [f"### `{mod}`", "", "```{eval-rst}", f".. automodule:: {mod}", "   :members:", "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rank_lab.book``."""
    parser = argparse.ArgumentParser(prog="python -m rank_lab.book", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the book's notebooks")
    run = sub.add_parser("run", help="execute one notebook with parameters")
    run.add_argument("notebook", help="notebook stem or path to its .md source")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"))
    run.add_argument("--out", default="outputs", help="output folder (default: outputs/)")
    run.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds")
    run.add_argument("--kernel", default=None, help="Jupyter kernel name")
    tw = sub.add_parser("twins", help="write .ipynb twins with an install cell (for Colab)")
    tw.add_argument("--out", default="_build/html/_notebooks")
    tw.add_argument("--repo", default=None, help="git URL used by the install cell")
    api = sub.add_parser("api", help="print (or --write) the API reference page book/api.md")
    api.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)

    if args.cmd == "api":
        text = api_page()
        if args.write:
            (book_dir() / "api.md").write_text(text, encoding="utf-8")
        else:
            print(text)
        return 0

    if args.cmd == "list":
        root = book_dir()
        for p in list_notebooks(root):
            print(f"{p.stem:40s} {p.relative_to(root)}")
        return 0
    if args.cmd == "twins":
        for p in make_twins(args.out, repo=args.repo):
            print(p)
        return 0
    params = {k: parse_parameter(v) for k, v in args.parameter}
    out = run_notebook(args.notebook, params, args.out, kernel_name=args.kernel, timeout=args.timeout, progress=True)
    print(f"executed notebook: {out / (out.name + '.ipynb')}")
    res = out / "results.json"
    print(f"results: {res}" if res.exists() else "warning: the notebook wrote no results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
