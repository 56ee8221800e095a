"""Sphinx extension: the ``{repo}`` role links a repository file from its path.

``{repo}`benchmarks/README.md``` becomes a link titled ``benchmarks/README.md`` to
``<repository.url>/blob/<repository.branch>/benchmarks/README.md`` (``_config.yml``; a folder gets
``tree/``); ``{repo}`the benchmark tables <benchmarks/README.md>``` gives the link its own title.
A path that does not exist in the checkout is an error of the build (a broken link would otherwise
ship). The URLs come from :func:`rank_lab.book.links.browse_url`, which the Colab twins use too.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

from rank_lab.book.links import browse_url

_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


def _repo_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    app = env.app
    m = _TITLED.match(text.strip())
    title, target = (m.group("title").strip(), m.group("target").strip()) if m else (text.strip(), text.strip())
    root = Path(app.srcdir)
    if not (root / target).exists():
        msg = inliner.reporter.error(f"{{repo}}`{target}`: no such file or folder in the repository ({root / target})",
                                     line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    opts = app.config.html_theme_options or {}
    url = browse_url(target, url=opts.get("repository_url") or None, branch=opts.get("repository_branch") or "main",
                     folder=(root / target).is_dir())
    if url is None:
        return [nodes.literal(rawtext, title)], []
    return [nodes.reference(rawtext, "", nodes.literal(title, title), refuri=url, classes=["rank-lab-repo"])], []


def setup(app):
    app.add_role("repo", _repo_role)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
