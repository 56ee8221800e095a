"""Clean executed outputs at their root: the tqdm front-end, the kernel transport, provenance
imports.

The notebook tests scan every executed smoke notebook for warning text
(tests/book/test_notebooks.py); these tests pin the causes that were fixed: ``tqdm.auto`` printing
``TqdmWarning: IProgress not found`` in kernels without ipywidgets, ipykernel's "running over TCP
without encryption" warning on every kernel start, and ``timm`` (through ``huggingface_hub``)
importing ``tqdm.auto`` when the provenance only wanted its version.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import rank_lab._progress as progress
from rank_lab.book import kernels

ROOT = Path(__file__).resolve().parents[2]


def test_progress_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from tqdm.std import tqdm as std

    assert progress.tqdm is std  # a test process is no Jupyter kernel
    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", object())
    monkeypatch.setattr(progress.importlib.util, "find_spec", lambda name: None)
    # no ipywidgets: no warning
    assert not progress.in_notebook_with_widgets() and progress._front_end() is std
    monkeypatch.setattr(progress.importlib.util, "find_spec", lambda name: object())
    from tqdm.notebook import tqdm as widget_bar

    assert progress.in_notebook_with_widgets() and progress._front_end() is widget_bar


def test_no_module_picks_tqdm_auto() -> None:
    pattern = re.compile(r"^\s*(from tqdm(\.auto|\.autonotebook)? import|import tqdm)", re.M)
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "rank_lab").rglob("*.py")
        if p.name != "_progress.py" and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"import tqdm from rank_lab._progress, not tqdm.auto: {offenders}"


def test_provenance_imports_neither_timm_nor_tqdm() -> None:
    code = (
        "import sys; from rank_lab.book.provenance import provenance; p = provenance(); "
        "print(p['timm'] is not None, 'timm' in sys.modules, 'tqdm.auto' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "False"]


def _execute(config: object | None) -> str:
    """Execute a one-cell notebook in a fresh kernel; the kernel's stderr (inherited) is captured by
    capfd."""
    import nbclient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    client = nbclient.NotebookClient(
        nb, timeout=120, **({"config": config} if config is not None else {})
    )
    client.execute()
    return nb.cells[0].outputs[0]["text"]


@pytest.mark.skipif(
    not kernels.curve_available(), reason="libzmq without CurveZMQ: kernels stay unencrypted"
)
def test_kernels_start_encrypted_without_the_tcp_warning(capfd: pytest.CaptureFixture[str]) -> None:
    assert kernels.kernel_manager_config().KernelManager.transport_encryption == "auto"
    assert _execute(kernels.kernel_manager_config()) == "42\n"
    assert "without encryption" not in capfd.readouterr().err
    # the control: jupyter_client's default policy is what made ipykernel warn
    from jupyter_client import KernelManager

    if KernelManager.class_traits()["transport_encryption"].default_value == "disabled":
        assert _execute(None) == "42\n"
        assert "Kernel is running over TCP without encryption" in capfd.readouterr().err


def test_book_build_enables_encryption() -> None:
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    assert (
        "kernel_transport: book/_ext" in config
        and (ROOT / "book" / "_ext" / "kernel_transport.py").is_file()
    )
    assert (
        "nb_render_markdown_format: myst" in config and "html_css_files: [rank_lab.css]" in config
    )
    assert (ROOT / "book" / "_static" / "rank_lab.css").is_file()
