"""Publishing: the refusals of ``make publish``, and a real publish of a minimal site to a bare
repository whose every "Open in Colab" link names a twin on the ``gh-pages`` branch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rank_lab.book.publish import (
    PublishError,
    branch_files,
    check_publishable,
    colab_links,
    github_repo,
    main,
    missing_twins,
    publish,
)

ROOT = Path(__file__).resolve().parents[2]
URL = "https://github.com/test-org/test-repo"
PAGE = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
# {title}

```{{code-cell}} ipython3
:tags: [parameters]
smoke = True
```
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def _repo(tmp: Path, url: str | None = URL) -> Path:
    """A minimal book project: two notebook pages, the real colab_links extension, execution off."""
    root = tmp / "site"
    (root / "book" / "ch").mkdir(parents=True)
    (root / "book" / "_ext").mkdir()
    shutil.copy(ROOT / "book" / "_ext" / "colab_links.py", root / "book" / "_ext")
    config = {
        "title": "mini",
        "author": "t",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},
        "html": {"use_repository_button": True},
        "sphinx": {
            "local_extensions": {"colab_links": "book/_ext"},
            "config": {"colab_notebooks_branch": "gh-pages"},
        },
    }
    if url is not None:
        config["repository"] = {"url": url, "branch": "main"}
    (root / "_config.yml").write_text(yaml.safe_dump(config))
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/ch/one\n  - file: book/two\n"
    )
    (root / "book" / "intro.md").write_text("# Intro\n\nNot a notebook: no Colab link.\n")
    (root / "book" / "ch" / "one.md").write_text(PAGE.format(title="One"))
    (root / "book" / "two.md").write_text(PAGE.format(title="Two"))
    (root / ".gitignore").write_text("_build/\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "rank_lab test")
    _git(root, "config", "user.email", "test@example.org")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "book")
    return root


def _build(root: Path) -> Path:
    """What `make book` does: jupyter-book build, then the .ipynb twins into
    _build/html/_notebooks."""
    jb = shutil.which("jupyter-book") or str(Path(sys.executable).with_name("jupyter-book"))
    subprocess.run(
        [jb, "build", str(root), "--path-output", str(root), "--builder", "html"],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    env = {**os.environ, "RANK_LAB_BOOK": str(root / "book"), "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rank_lab.book",
            "twins",
            "--out",
            str(root / "_build/html/_notebooks"),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return root / "_build" / "html"


def test_refuses_without_url_or_with_uncommitted_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _repo(tmp_path / "a", url=None)
    with pytest.raises(PublishError, match="repository.url is unset"):
        check_publishable(root)
    root = _repo(tmp_path / "b")
    assert check_publishable(root) == URL
    (root / "book" / "two.md").write_text("# changed\n")
    (root / "notes.txt").write_text("x")
    with pytest.raises(PublishError, match=r"uncommitted changes \(book/two.md, notes.txt\)"):
        check_publishable(root)
    assert main(["check", "--root", str(root)]) == 1
    assert "uncommitted changes" in capsys.readouterr().err


def test_github_repo_names() -> None:
    assert github_repo("https://github.com/rank-lab/rank_lab") == "rank-lab/rank_lab"
    assert github_repo("https://github.com/rank-lab/rank_lab.git/") == "rank-lab/rank_lab"
    assert github_repo("git@github.com:me/fork.git") == "me/fork"
    assert github_repo("https://gitlab.com/a/b") is None and github_repo("/tmp/remote.git") is None


def test_publish_to_a_bare_repository_and_every_colab_link_names_a_twin(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    html = _build(root)
    links = colab_links(html)
    expected = {
        f"https://colab.research.google.com/github/test-org/test-repo/blob/gh-pages/_notebooks/{p}.ipynb"
        for p in ("ch/one", "two")
    }
    assert {
        link for ls in links.values() for link in ls
    } == expected and "book/intro.html" not in links
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    checked = publish(root, html, remote=str(bare), check_dir=bare)
    assert set(checked) == expected
    files = branch_files(bare, "gh-pages")
    assert {
        "_notebooks/ch/one.ipynb",
        "_notebooks/two.ipynb",
        ".nojekyll",
        "book/ch/one.html",
    } <= files
    assert missing_twins(html, files, "test-org/test-repo") == []
    assert missing_twins(html, files, "someone/else") != []  # links naming another repository fail
    # a twin missing from the site: the push happens, the check fails and names the link
    (html / "_notebooks" / "two.ipynb").unlink()
    with pytest.raises(PublishError, match=r"1 Colab link\(s\) name no twin.*two.ipynb"):
        publish(root, html, remote=str(bare), check_dir=bare)
    # a remote of another GitHub repository than _config.yml's is refused before pushing
    _git(root, "remote", "add", "origin", "https://github.com/other/repo.git")
    with pytest.raises(PublishError, match="other/repo"):
        publish(root, html, remote="origin")


def test_workflow_tests_builds_and_publishes_on_main() -> None:
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = [s for job in wf["jobs"].values() for s in job["steps"]]
    runs = " ".join(str(s.get("run", "")) for s in steps)
    assert "make test" in runs and "make book" in runs and "make publish" in runs
    publish_step = next(s for s in steps if "make publish" in str(s.get("run", "")))
    assert "refs/heads/main" in publish_step["if"]
    makefile = (ROOT / "Makefile").read_text()
    assert (
        "\npublish:" in makefile
        and "rank_lab.book.publish check" in makefile
        and "\ngpu-check:" in makefile
    )
