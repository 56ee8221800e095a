"""The ``.ipynb`` twins of the book's notebooks, with a leading install cell (for Colab).

``python -m rank_lab.book twins --out _build/html/_notebooks`` writes one twin per notebook,
mirroring the ``book/`` layout; ``make notebooks`` runs it after the site is built.
"""

from __future__ import annotations

import os
from pathlib import Path

from .notebooks import book_dir, list_notebooks
from .notebooks import to_notebook as _to_notebook

__all__ = ["INSTALL_CELL", "make_twin", "make_twins"]

#: Default install cell of the Colab twins; ``{repo}`` is the repository URL from ``_config.yml``.
INSTALL_CELL = """# Colab / fresh machine: install rank_lab and the book extras, then restart if asked.
# On Colab pick Runtime > Change runtime type > GPU first: the notebook then runs on CUDA.
import importlib.util, subprocess, sys
if importlib.util.find_spec("rank_lab") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "rank_lab[book,faiss,timm] @ git+{repo}"], check=True)"""


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
