"""The notebook runner and the Colab twins (``rank_lab.book``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from rank_lab import book

MINI = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
rank_lab:
  results_keys: [value]
---

# Mini

```{code-cell} ipython3
:tags: [parameters]
smoke = True
seed = 0
device = None
scale = 2
```

```{code-cell} ipython3
from rank_lab.book import save_results
save_results({"value": scale * (seed + 1), "smoke": smoke}, "results.json")
```
"""


def test_parse_parameter_types() -> None:
    assert book.parse_parameter("1") == 1
    assert book.parse_parameter("false") is False
    assert book.parse_parameter("0.5") == 0.5
    assert book.parse_parameter("[1, 2]") == [1, 2]
    assert book.parse_parameter("digits") == "digits"


def test_save_results_converts_tensors_and_non_finite(tmp_path: Path) -> None:
    p = book.save_results({"a": torch.tensor([1.0, 2.0]), "b": np.float32(0.5), "c": math.nan, "d": {"e": np.arange(2)}}, tmp_path)
    data = json.loads(p.read_text())
    assert data == {"a": [1.0, 2.0], "b": 0.5, "c": None, "d": {"e": [0, 1]}}
    assert book.load_results(tmp_path) == data
    with pytest.raises(TypeError, match="mapping"):
        book.save_results([1, 2], tmp_path)


def test_run_notebook_injects_parameters_and_writes_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "book"
    (root / "part").mkdir(parents=True)
    (root / "part" / "mini.md").write_text(MINI)
    monkeypatch.setenv("RANK_LAB_BOOK", str(root))
    assert [p.stem for p in book.list_notebooks()] == ["mini"]
    out = book.run_notebook("mini", {"seed": 2, "scale": 10}, tmp_path / "out")
    assert book.load_results(out) == {"value": 30, "smoke": True}
    assert (out / "mini.ipynb").exists()
    # the same through the command line
    assert book.main(["run", "mini", "-p", "seed", "1", "-p", "smoke", "false", "--out", str(tmp_path / "cli")]) == 0
    assert book.load_results(tmp_path / "cli" / "mini") == {"value": 4, "smoke": False}


def test_failing_notebook_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import papermill

    root = tmp_path / "book"
    root.mkdir()
    (root / "bad.md").write_text(MINI.replace("scale * (seed + 1)", "1 / 0"))
    monkeypatch.setenv("RANK_LAB_BOOK", str(root))
    with pytest.raises(papermill.PapermillExecutionError, match="ZeroDivisionError"):
        book.run_notebook("bad", {}, tmp_path / "out")


def test_twins_have_an_install_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "book"
    (root / "part").mkdir(parents=True)
    (root / "part" / "mini.md").write_text(MINI)
    written = book.make_twins(tmp_path / "twins", root=root, repo="https://github.com/o/r.git")
    assert written == [tmp_path / "twins" / "part" / "mini.ipynb"]
    nb = nbformat.read(written[0], as_version=4)
    assert "pip" in nb.cells[0].source and "git+https://github.com/o/r.git" in nb.cells[0].source
    assert nb.cells[0].metadata["tags"] == ["colab-install"]
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert "save_results" in nb.cells[-1].source


def test_api_page_is_current() -> None:
    page = book.book_dir() / "api.md"
    assert page.exists(), "run: python -m rank_lab.book api --write"
    assert page.read_text(encoding="utf-8") == book.api_page(), "book/api.md is stale: python -m rank_lab.book api --write"
