"""The site check (``make site-check``, :mod:`rank_lab.book.sitecheck`) on a small site built here.

``make test`` (CI) builds no book, so this test builds a sample with the book's own ``_config.yml``,
extensions and styles: the intro's map, a notebook page with every piece of a chapter's apparatus
(opening boxes, a wide table from ``show_table``, display and inline math, an exercise with a gated
code solution and one with a text solution in dropdowns, a ``{repo}`` link, the rerun box), and a
page with each defect the check must catch (a wide element that does not scroll, raw TeX, a broken
image, an open solution, internal language, an unlinked repository file). It runs the check in
headless Chromium at 1280 and 390 px: the good pages pass, the bad page fails on each defect.
Without Chromium the test fails and says how to install it (``.ci/run`` installs it).
``make site-check`` runs the same check on every page of the full build (``make book``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rank_lab.book.sitecheck import check_site, find_browser, main, site_pages

ROOT = Path(__file__).resolve().parents[2]

TOC = """format: jb-book
root: book/intro
parts:
  - caption: "I. Sample"
    numbered: true
    chapters:
      - file: book/part/good
      - file: book/part/bad
"""

GOOD = """---
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
  rerun:
    datasets: [sop]
    parameters: {dataset: sop, data_dir: /path/to/Stanford_Online_Products}
    estimate: {backbone: resnet18, image_size: 224, epochs: 1, dataset: sop, batch_size: 32}
    expect:
      - {what: "R@1 on SOP", value: "81.2", where: "Ramzi thesis, Tab. 3.3"}
---

(good)=
# A good page

```{admonition} What you will learn
:class: tip

- that $\\mathrm{AP} = \\frac{1}{|\\Omega^+|}\\sum_k \
\\operatorname{rank}^+(k)/\\operatorname{rank}(k)$ renders.
```

$$
\\mathrm{AP} = \\sum_n \\big(R(n) - R(n-1)\\big) P(n)
$$ (eq-ap)

```{code-cell} ipython3
from rank_lab.book.recorded import show_table

# the longest code line the notebooks allow (90 characters) fits the desktop column: .....
rows = [{"method": f"method {i}", **{f"metric {k}": 0.5 + 0.01 * k for k in range(14)}}
        for i in range(3)]
show_table(rows, digits=3, caption="a table wider than a phone: it scrolls in its own box")
```

The tables of {repo}`benchmarks/README.md` are linked, not named.

```{rerun-box}
```

## Exercises

```{exercise} A derivation
:label: good-ex-1

Show that AP is at most 1.
```

```{solution} good-ex-1
:class: dropdown

Every precision is at most 1.
```

```{exercise} A computation
:label: good-ex-2

Compute $2 + 2$.
```

````{solution-start} good-ex-2
:class: dropdown
````

```{code-cell} ipython3
assert 2 + 2 == 4
print("2 + 2 = 4")
```

````{solution-end}
````
"""

BAD = """(bad)=
# A bad page

<div style="width: 2400px">A line of text that runs far past the right edge of the column without \
a scrollbar.</div>

The bound $\\frac{1}{2$ is broken TeX.

![a figure that is not there](missing_figure.png)

As the HEAD of this project moved, see benchmarks/README.md.

```{exercise} Open
:label: bad-ex

Why?
```

```{solution} bad-ex

Shown open: no dropdown.
```
"""


@pytest.fixture(scope="module")
def sample_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("site")
    (project / "book" / "part").mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", project / "_config.yml")
    (project / "_toc.yml").write_text(TOC)
    for folder in ("_ext", "_static"):
        shutil.copytree(
            ROOT / "book" / folder,
            project / "book" / folder,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(ROOT / "book" / "references.bib", project / "book" / "references.bib")
    (project / "book" / "intro.md").write_text(
        "# Sample\n\n```{figure} _static/book_map.svg\n:alt: the map\n\nThe map of the "
        "book.\n```\n\n{ref}`good` and {ref}`bad`.\n"
    )
    (project / "book" / "part" / "good.md").write_text(GOOD)
    (project / "book" / "part" / "bad.md").write_text(BAD)
    env = {**os.environ, "RANK_LAB_BOOK": str(project / "book"), "PYTHONPATH": str(ROOT)}
    build = subprocess.run(
        [
            str(Path(sys.executable).parent / "jupyter-book"),
            "build",
            str(project),
            "--path-output",
            str(project),
            "--builder",
            "html",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-2000:]
    return project / "_build" / "html"


def _browser() -> None:
    if find_browser() is None:
        pytest.fail(
            "no Chromium for the site check: install Debian's chromium (apt-get install -y "
            "chromium; .ci/run does) or set RANK_LAB_CHROMIUM"
        )


def test_good_pages_pass_the_site_check(sample_site: Path, tmp_path: Path) -> None:
    _browser()
    pages = [sample_site / "book" / "intro.html", sample_site / "book" / "part" / "good.html"]
    assert sorted(p.name for p in site_pages(sample_site)) == [
        "bad.html",
        "good.html",
        "intro.html",
    ]
    problems = check_site(sample_site, tmp_path / "shots", pages=pages)
    assert not problems, "\n".join(map(str, problems))
    shots = sorted(
        p.relative_to(tmp_path / "shots").as_posix() for p in (tmp_path / "shots").rglob("*.jpg")
    )
    assert shots == [
        "1280/book__intro.jpg",
        "1280/book__part__good.jpg",
        "390/book__intro.jpg",
        "390/book__part__good.jpg",
    ]
    html = (sample_site / "book" / "part" / "good.html").read_text()
    assert (
        "solution dropdown" in html and "Exercise 1.1" in html and "1. </span>A good page" in html
    )
    assert (
        "_static/mathjax/tex-mml-chtml.js" in html
        and (sample_site / "_static" / "mathjax").is_dir()
    )
    assert (
        "Rerun at full scale" in html
        and "https://github.com/" in html
        and "benchmarks/README.md" in html
    )


def test_the_site_check_catches_each_defect(sample_site: Path) -> None:
    _browser()
    problems = check_site(sample_site, None, pages=[sample_site / "book" / "part" / "bad.html"])
    kinds = {(p.width, p.kind) for p in problems}
    for width in (1280, 390):
        for kind in ("overflow", "raw TeX", "broken image", "open solution"):
            assert (width, kind) in kinds, (width, kind, problems)
    texts = " ".join(p.detail for p in problems if p.kind == "internal language")
    assert "HEAD" in texts and "of this project" in texts
    assert [p.detail for p in problems if p.kind == "repository file not linked"] == [
        "benchmarks/README.md"
    ]


def test_the_command_line_exit_codes(
    sample_site: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _browser()
    assert main([str(sample_site), "--out", str(tmp_path), "--page", "book/part/good.html"]) == 0
    assert "site check: 1 pages at 1280 px, 390 px: 0 problem(s)" in capsys.readouterr().out
    assert main([str(sample_site), "--out", str(tmp_path), "--page", "book/part/bad.html"]) == 1
    assert main([str(tmp_path / "nothing")]) == 2
    assert "no built site" in capsys.readouterr().err
    monkeypatch.setenv("RANK_LAB_CHROMIUM", str(tmp_path / "no-such-browser"))
    assert main([str(sample_site)]) == 2
    assert "apt-get install -y chromium" in capsys.readouterr().err
