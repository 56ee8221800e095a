"""Every book notebook runs headlessly in smoke mode (papermill through ``rank_lab.book``).

For each notebook: no cell errors (papermill raises), no error output is left in the executed
notebook (the nbval-lax check), and ``results.json`` exists and holds the keys listed under
``rank_lab: results_keys`` in the notebook's front matter, with finite numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import pytest
import yaml

from rank_lab.book import find_notebook, list_notebooks, run_notebook

NOTEBOOKS = list_notebooks()


def _front_matter(md: Path) -> dict:
    text = md.read_text(encoding="utf-8")
    return yaml.safe_load(text.split("---", 2)[1]) or {}


def _finite_numbers(obj: object) -> bool:
    if isinstance(obj, dict):
        return all(_finite_numbers(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite_numbers(v) for v in obj)
    if isinstance(obj, float):
        return math.isfinite(obj)
    return True


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no jupytext notebook found under book/"


def test_every_notebook_is_in_the_toc() -> None:
    toc = (Path(__file__).resolve().parents[1] / "_toc.yml").read_text(encoding="utf-8")
    root = Path(__file__).resolve().parents[1]
    for md in NOTEBOOKS:
        assert md.relative_to(root).with_suffix("").as_posix() in toc, f"{md} is missing from _toc.yml"


@pytest.mark.parametrize("md", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_declares_parameters_and_results(md: Path) -> None:
    meta = _front_matter(md)
    assert meta.get("rank_lab", {}).get("results_keys"), f"{md.name}: no rank_lab.results_keys in front matter"
    text = md.read_text(encoding="utf-8")
    assert ":tags: [parameters]" in text, f"{md.name}: no cell tagged parameters"
    for name in ("smoke", "seed", "device"):
        assert f"\n{name} =" in text, f"{md.name}: parameter {name!r} missing"
    assert "save_results(" in text, f"{md.name}: does not write results.json"


@pytest.mark.notebook
@pytest.mark.parametrize("md", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_smoke_mode(md: Path, tmp_path: Path) -> None:
    out = run_notebook(md, {"smoke": True, "seed": 0, "device": "cpu"}, tmp_path, timeout=600)
    nb = nbformat.read(out / f"{md.stem}.ipynb", as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{md.name}: error outputs {errors[:1]}"
    results_file = out / "results.json"
    assert results_file.exists(), f"{md.name} wrote no results.json"
    results = json.loads(results_file.read_text())
    missing = set(_front_matter(md)["rank_lab"]["results_keys"]) - set(results)
    assert not missing, f"{md.name}: results.json lacks {sorted(missing)}"
    assert _finite_numbers(results), f"{md.name}: results.json holds NaN or inf"


def test_find_notebook_errors_name_the_known_ones() -> None:
    with pytest.raises(FileNotFoundError, match="known notebooks"):
        find_notebook("no_such_chapter")
