"""Sphinx extension: serve MathJax from the built site instead of a CDN.

Sphinx loads MathJax 3 from ``cdn.jsdelivr.net`` by default: a reader offline, a network that
blocks the CDN, or the site check (``make site-check``) would see raw TeX. This extension copies
MathJax 3 (the ``es5`` build of the ``django-static-mathjax`` package, a dependency of the ``book``
extra; its Python package is named ``mathjax``) into ``_static/mathjax/`` of the built site and
points ``mathjax_path`` at it. Only what the site uses is copied: the ``tex-mml-chtml`` component,
the TeX input extensions, the CHTML output with its fonts, the menu and accessibility components.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)
_PARTS = ("tex-mml-chtml.js", "input", "output/chtml", "output/chtml.js", "ui", "a11y", "adaptors")


def _es5() -> Path | None:
    try:
        # the django-static-mathjax distribution ships MathJax 3 as the package "mathjax"
        import mathjax
    except ImportError:
        return None
    path = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return path if (path / "tex-mml-chtml.js").is_file() else None


def _configure(app, config) -> None:
    if _es5() is None:
        logger.warning("local_mathjax: django-static-mathjax is not installed; MathJax is loaded from the CDN "
                       "(pip install -e '.[book]')")
        return
    config.mathjax_path = "mathjax/tex-mml-chtml.js"


def _copy(app, exception) -> None:
    src = _es5()
    if exception is not None or src is None or app.builder.format != "html":
        return
    dest = Path(app.outdir) / "_static" / "mathjax"
    for part in _PARTS:
        s, d = src / part, dest / part
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        elif s.is_file():
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


def setup(app):
    app.connect("config-inited", _configure)
    app.connect("build-finished", _copy)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
