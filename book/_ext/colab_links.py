"""Sphinx extension: an "Open in Colab" / "Download .ipynb" bar on every notebook page.

Colab cannot open the jupytext ``.md`` sources, so ``make notebooks`` writes ``.ipynb`` twins
(with an install cell first) into ``_build/html/_notebooks/``, mirroring ``book/``. This extension
links each notebook page to its twin: a relative download link, and a Colab link to the twin as
published on the repository's ``gh-pages`` branch (``colab_notebooks_branch``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse


def _is_notebook(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8")[:2000]
    except OSError:
        return False
    return head.startswith("---") and "kernelspec:" in head and "jupytext:" in head


def _colab_base(app) -> str | None:
    url = (app.config.html_theme_options or {}).get("repository_url") or ""
    parts = urlparse(url)
    if parts.netloc != "github.com":
        return None
    org_repo = parts.path.strip("/").removesuffix(".git")
    return f"https://colab.research.google.com/github/{org_repo}/blob/{app.config.colab_notebooks_branch}/_notebooks"


def _add_links(app, pagename, templatename, context, doctree) -> None:
    if doctree is None or not pagename.startswith("book/"):
        return
    src = Path(app.env.doc2path(pagename))
    if src.suffix != ".md" or not _is_notebook(src):
        return
    rel = pagename.removeprefix("book/") + ".ipynb"
    download = context["pathto"](f"_notebooks/{rel}", 1)
    links = [f'<a href="{download}" download>Download .ipynb</a>']
    base = _colab_base(app)
    if base:
        links.insert(0, f'<a href="{base}/{rel}" target="_blank" rel="noopener">Open in Colab</a>')
    bar = (
        '<div class="admonition tip rank-lab-colab"><p class="admonition-title">Run this page</p><p>'
        + " &middot; ".join(links)
        + " &mdash; the notebook starts with an install cell; on Colab choose a GPU runtime and "
        "set <code>smoke = False</code> in the parameters cell for the full-scale run.</p></div>"
    )
    context["body"] = bar + context.get("body", "")


def setup(app):
    app.add_config_value("colab_notebooks_branch", "gh-pages", "html")
    app.connect("html-page-context", _add_links)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
