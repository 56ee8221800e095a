"""The progress bars of rank_lab: one choice of tqdm front-end for the whole package.

``tqdm.auto`` picks ``tqdm.notebook`` inside any Jupyter kernel and, when ipywidgets is missing,
falls back to the text bar after printing ``TqdmWarning: IProgress not found`` into the cell's
output. rank_lab chooses instead: the widget bar only inside a Jupyter kernel where ipywidgets is
installed, else the text bar of ``tqdm.std``, without a warning. Every module imports ``tqdm``
from here (``from rank_lab._progress import tqdm``), never from ``tqdm.auto``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

__all__ = ["tqdm", "in_notebook_with_widgets"]


def in_notebook_with_widgets() -> bool:
    """Whether this process is a Jupyter kernel that can draw widget progress bars (ipywidgets)."""
    if "ipykernel.zmqshell" not in sys.modules:  # a console, a script, a test
        return False
    try:
        return importlib.util.find_spec("ipywidgets") is not None
    except (ImportError, ValueError):
        return False


def _front_end() -> Any:
    if in_notebook_with_widgets():
        from tqdm.notebook import tqdm as bar
    else:
        from tqdm.std import tqdm as bar
    return bar


#: The tqdm class of rank_lab's progress bars (``tqdm.notebook.tqdm`` or ``tqdm.std.tqdm``).
tqdm = _front_end()
