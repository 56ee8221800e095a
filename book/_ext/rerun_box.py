"""Sphinx extension: the ``{rerun-box}`` directive writes a chapter's "Rerun at full scale" box.

The box is generated from the chapter's front matter (``rank_lab.rerun``), the dataset table of
:mod:`rank_lab.book.rerun`, the estimates of :mod:`rank_lab.cost` and the chapter's records, by
:func:`rank_lab.book.rerun.rerun_markdown` (the Colab twins insert the same Markdown), and parsed
here as MyST. A chapter without the front-matter block fails the build with the reason.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

from rank_lab.book.rerun import RerunError, rerun_markdown


class RerunBox(SphinxDirective):
    has_content = False
    required_arguments = 0
    optional_arguments = 0

    def run(self):
        source = Path(self.env.doc2path(self.env.docname))
        try:
            text = rerun_markdown(source)
        except RerunError as exc:
            raise self.error(str(exc)) from exc
        container = nodes.container(classes=["rank-lab-rerun"])
        self.state.nested_parse(StringList(text.splitlines(), source=str(source)), self.content_offset, container)
        return [container]


def setup(app):
    app.add_directive("rerun-box", RerunBox)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
