"""Project plumbing: dependencies listed once in two places, the book's config, the CI entry."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_lists_the_pyproject_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted |= set(extra)
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {p for p in pip if not p.startswith("-e")}
    assert {r.replace(" ", "") for r in listed} == {r.replace(" ", "") for r in wanted}
    assert {_name(r) for r in listed} == {_name(r) for r in wanted}


def test_extras_exist() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {"faiss", "timm", "book", "test"} <= set(extras)
    assert any(
        _name(r) == "jupyter-book" and ">=1.0.4.post1" in r and "<2" in r for r in extras["book"]
    )


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make book" in readme
    assert "make test" in ci
    makefile = (ROOT / "Makefile").read_text()
    for target in ("test:", "book:", "notebooks:"):
        assert f"\n{target}" in makefile


def test_toc_entries_exist_and_config_raises_on_errors() -> None:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for ch in part["chapters"]:
            files.append(ch["file"])
            files += [s["file"] for s in ch.get("sections", [])]
    for f in files:
        assert (ROOT / f"{f}.md").exists(), f"_toc.yml names {f} but {f}.md does not exist"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "force"
    assert config["sphinx"]["config"]["nb_execution_raise_on_error"] is True


def test_every_citation_is_in_the_bibliography() -> None:
    bib = (ROOT / "book" / "references.bib").read_text()
    keys = set(re.findall(r"@\w+\{([^,\s]+),", bib))
    dupes = [k for k in keys if len(re.findall(r"@\w+\{" + re.escape(k) + ",", bib)) > 1]
    assert not dupes, f"duplicate bib keys: {dupes}"
    cited: set[str] = set()
    for md in (ROOT / "book").rglob("*.md"):
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", md.read_text(encoding="utf-8")):
            cited |= {k.strip() for k in group.split(",")}
    assert cited - keys == set(), f"cited but not in references.bib: {sorted(cited - keys)}"
