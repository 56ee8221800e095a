"""The Colab twins: pinned install cell from the front matter, Colab Markdown, the repository URL
rule.

Every book notebook's twin is opened as JSON: its first cell pins ``rank_lab[<declared extras>] @
git+<repository.url>@<commit>`` (never the book extra), binds no public name, prints the device, and
no Markdown cell keeps MyST syntax. The converter and the BibTeX reader are checked on hand-written
inputs with exact outputs. ``tests/book/test_colab.py`` runs two twins in a fresh environment.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from rank_lab.book import front_matter, list_notebooks
from rank_lab.book.bibtex import BibEntry, BibError, latex_to_text, parse_bib, read_bib
from rank_lab.book.colab import MYST_LEFTOVER, ColabMarkdown, MystConversionError, equation_labels
from rank_lab.book.twins import (
    TWIN_EXTRAS,
    InstallSpec,
    TwinError,
    check_repository_url,
    install_cell,
    install_spec,
    make_twins,
    repository_url,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = list_notebooks()
SHA = "0123456789abcdef0123456789abcdef01234567"
PINNED = re.compile(
    r"'rank_lab(\[(?P<extras>[a-z,]+)\])? @ git\+(?P<url>\S+)@(?P<ref>[0-9a-f]{40})'"
)


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every book notebook's twin, pinned to a fixed commit, read back as plain JSON."""
    out = tmp_path_factory.mktemp("twins")
    written = make_twins(out, ref=SHA)
    assert len(written) == len(NOTEBOOKS)
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in written}


def _text(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


# ------------------------------------------------------------------------------ the book's twins
def test_twin_extras_are_the_packages_optional_dependencies() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    assert set(TWIN_EXTRAS) == extras - {"book", "test"}


@pytest.mark.parametrize("md", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_declares_what_its_twin_installs(md: Path) -> None:
    block = front_matter(md)["rank_lab"].get("install")
    assert block is not None, (
        f"{md.name}: declare rank_lab.install in the front matter (docs/book_contract.md)"
    )
    spec = install_spec(md)
    assert "plots" in spec.extras, f"{md.name}: every notebook plots with matplotlib"
    uses_animals = "load_animal_mnist(" in md.read_text(encoding="utf-8")
    assert spec.animal_mnist == uses_animals, (
        f"{md.name}: animal_mnist must be declared exactly when used"
    )


@pytest.mark.parametrize("md", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_twin_as_json_pins_the_install_and_holds_no_myst(md: Path, twins: dict[str, dict]) -> None:
    nb = twins[md.stem]
    first = nb["cells"][0]
    assert first["cell_type"] == "code" and first["metadata"]["tags"] == ["colab-install"]
    source = _text(first)
    pins = PINNED.findall(source)
    assert len(pins) == 1, f"{md.stem}: one pinned requirement expected in\n{source}"
    m = PINNED.search(source)
    assert m["ref"] == SHA and m["url"] == repository_url(ROOT)
    spec = install_spec(md)
    assert tuple((m["extras"] or "").split(",")) == spec.extras and "book" not in spec.extras
    assert ("--no-deps" in source and "animal-mnist" in source) == spec.animal_mnist
    assert "device:" in source and "torch.cuda.is_available()" in source
    tree = ast.parse(source)  # runs as a function: the notebook's namespace gains no public name
    assert [type(s).__name__ for s in tree.body] == ["FunctionDef", "Expr"] and tree.body[
        0
    ].name.startswith("_")
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "parameters" in code[1]["metadata"].get("tags", []), (
        f"{md.stem}: the parameters cell follows the install cell"
    )
    assert nb["metadata"]["accelerator"] == "GPU" and "jupytext" not in nb["metadata"]

    markdown = [_text(c) for c in nb["cells"] if c["cell_type"] == "markdown"]
    for text in markdown:
        for what, pattern in MYST_LEFTOVER.items():
            hit = pattern.search(text)
            assert hit is None, (
                f"{md.stem}: MyST {what} left in a Markdown cell: "
                f"{text[max(0, hit.start() - 60) : hit.end() + 60]!r}"
            )
    source_md = md.read_text(encoding="utf-8")
    if "{cite" in source_md:
        assert markdown[-1].startswith("## References\n\n- "), (
            f"{md.stem}: the cited entries are listed at the end"
        )
        cited = set(re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", source_md))
        n_keys = len({k.strip() for group in cited for k in group.split(",")})
        assert markdown[-1].count("\n- ") == n_keys
    n_labelled = len(re.findall(r"\$\$[ \t]*\([\w:.-]+\)", source_md))
    assert sum(t.count("\\tag{") for t in markdown) == n_labelled
    for text in markdown:  # a citation inside the text's parentheses keeps no brackets of its own
        doubled = re.search(r"\(\s*\([^()]*\b(?:1[89]|20)\d\d[a-z]?\)", text)
        assert doubled is None, (
            f"{md.stem}: doubled brackets "
            f"{text[max(0, doubled.start() - 40) : doubled.end() + 40]!r}"
        )


def test_make_notebooks_runs_the_twins_command() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = makefile[makefile.index("\nnotebooks:") :]
    assert "rank_lab.book twins --out _build/html/_notebooks" in target.split("\n\n")[0]


def test_book_runtime_helpers_import_without_the_book_extra() -> None:
    """A Colab twin imports rank_lab.book (start_run, save_results) without jupyter-book or
    papermill."""
    code = (
        "import sys, rank_lab.book; "
        "print([m for m in ('papermill', 'jupytext', 'nbformat', 'myst_nb', 'sphinx', "
        "'jupyter_book') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------ the repository URL
# and the ref
@pytest.mark.parametrize(
    "url",
    [
        None,
        "",
        "   ",
        "https://github.com/<org>/<repo>",
        "https://github.com/{org}/x",
        "github.com/rank-lab/rank_lab",
        "ftp://host/repo",
        "https://",
        "rank_lab",
    ],
)
def test_unset_or_unusable_repository_urls_are_refused(url: object) -> None:
    with pytest.raises(TwinError, match="repository.url"):
        check_repository_url(url, "_config.yml")


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/rank-lab/rank_lab",
        "https://github.com/me/fork.git",
        "git@github.com:me/fork.git",
        "ssh://git@host/x/y",
        "file://localhost/tmp/repo",
    ],
)
def test_clonable_repository_urls_pass(url: str) -> None:
    assert check_repository_url(f" {url} ") == url


def _project(tmp: Path, config: str, *, git: bool = True) -> Path:
    (tmp / "book").mkdir(parents=True)
    (tmp / "book" / "one.md").write_text(
        "---\njupytext:\n  text_representation: {extension: .md, format_name: myst}\n"
        "kernelspec: {display_name: Python 3, language: python, name: python3}\n"
        "rank_lab:\n  install: {extras: [plots]}\n---\n# One\n\nSee Eq. {eq}`e1`.\n\n$$ x = 1 $$ "
        "(e1)\n\n```{code-cell} ipython3\n:tags: [parameters]\nsmoke = True\n```\n"
    )
    (tmp / "_config.yml").write_text(config)
    if git:
        for args in (
            ["init", "-q"],
            ["add", "-A"],
            ["-c", "user.name=t", "-c", "user.email=t@e.org", "commit", "-qm", "x"],
        ):
            subprocess.run(["git", *args], cwd=tmp, check=True, capture_output=True)
    return tmp


def test_make_twins_pins_the_checkouts_commit_and_refuses_an_unset_url(tmp_path: Path) -> None:
    root = _project(tmp_path / "ok", "repository: {url: 'https://github.com/o/r'}\n")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    (written,) = make_twins(tmp_path / "out", root=root / "book")
    nb = json.loads(written.read_text())
    assert f"'rank_lab[plots] @ git+https://github.com/o/r@{head}'" in _text(nb["cells"][0])
    assert _text(nb["cells"][1]) == "# One\n\nSee Eq. (1).\n\n$$ x = 1 \\tag{1} $$"
    (root / "book" / "one.md").write_text((root / "book" / "one.md").read_text() + "\nmore\n")
    with pytest.warns(UserWarning, match="uncommitted changes"):
        make_twins(tmp_path / "out", root=root / "book")
    for config in (
        "title: x\n",
        "repository: {url: ''}\n",
        "repository: {url: 'https://github.com/<org>/<repo>'}\n",
    ):
        bad = _project(tmp_path / f"bad{len(config)}", config)
        with pytest.raises(TwinError, match=r"repository.url .*(unset|placeholder)"):
            make_twins(tmp_path / "out2", root=bad / "book")
    nogit = _project(tmp_path / "nogit", "repository: {url: 'https://github.com/o/r'}\n", git=False)
    with pytest.raises(TwinError, match="not a git checkout"):
        make_twins(tmp_path / "out3", root=nogit / "book")
    assert len(make_twins(tmp_path / "out3", root=nogit / "book", ref="v0.1.0")) == 1


def test_cli_twins_with_an_unset_url_fails_with_one_message(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", "title: no repository\n")
    env = {"RANK_LAB_BOOK": str(root / "book"), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "rank_lab.book", "twins", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: TwinError: repository.url is unset in ")


def test_install_declarations_are_checked() -> None:
    ok = {"rank_lab": {"install": {"extras": ["plots", "timm"], "animal_mnist": True}}}
    assert install_spec(ok) == InstallSpec(("plots", "timm"), True)
    assert install_spec({"rank_lab": {}}) == InstallSpec()
    for block, match in (
        ({"extras": ["book"]}, "not installable on Colab"),
        ({"extras": "timm"}, "list of extra names"),
        ({"extras": ["timm", "timm"]}, "twice"),
        ({"animal_mnist": "yes"}, "true or false"),
        ({"extra": ["timm"]}, "unknown key"),
        (["timm"], "must be a mapping"),
    ):
        with pytest.raises(TwinError, match=match):
            install_spec({"rank_lab": {"install": block}})
    spec = InstallSpec(("faiss",), False)
    assert spec.requirement("https://h/r", "abc") == "rank_lab[faiss] @ git+https://h/r@abc"
    for ref in ("", "a b", "x@y", "../x", "-rf"):
        with pytest.raises(TwinError, match="ref must be"):
            install_cell(spec, "https://h/r", ref)


def test_install_cell_runs_pip_once_per_change_and_binds_no_public_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Executed with pip replaced: the pinned requirement, animal-mnist --no-deps, the device
    line."""
    calls: list[list[str]] = []
    # nothing real could run, even unpatched
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    monkeypatch.setattr(subprocess, "run", lambda cmd, check=False, **kw: calls.append(cmd[3:]))
    namespace: dict = {}
    exec(install_cell(InstallSpec(("plots",), True), "https://github.com/o/r", SHA), namespace)
    assert [k for k in namespace if not k.startswith("_")] == []
    installs = [c for c in calls if c[0] == "install"]
    assert installs[0] == ["install", "-q", f"rank_lab[plots] @ git+https://github.com/o/r@{SHA}"]
    animal = [c for c in installs if "animal-mnist" in c]
    import importlib.util

    assert animal == (
        []
        if importlib.util.find_spec("animal_mnist")
        else [["install", "-q", "--no-deps", "animal-mnist"]]
    )
    # the checkout's editable install is another commit
    assert ["uninstall", "-q", "-y", "rank_lab"] in calls
    out = capsys.readouterr().out
    assert f"at {SHA[:12]}" in out and "device: cpu" in out


# ------------------------------------------------------------------------------ the converter
BIB = parse_bib("""
@article{solo2020x, author = {Solo, Han}, title = {One}, journal = {J}, year = {2020}}
@inproceedings{duo2021y, author = {Duo, A. and Tw{\\'o}, B.}, title = {Two}, booktitle = {Conf}, \
year = {2021}}
@misc{many2022z, author = {Many, A and Others, B and Third, C}, title = {Three {IR}}, year = \
{2022}, eprint = {2201.1}}
""")


def _conv(doc_link=None) -> ColabMarkdown:  # noqa: ANN001
    return ColabMarkdown("page", {"eq-a": 1, "eq-b": 2}, BIB, doc_link)


def test_citations_become_author_year_and_are_listed() -> None:
    c = _conv()
    text = c.convert(
        "As {cite}`solo2020x` and {cite:t}`duo2021y` show ({cite:p}`many2022z,solo2020x`)."
    )
    assert text == "As (Solo, 2020) and Duo and Twó (2021) show (Many et al., 2022; Solo, 2020)."
    assert c.cited == ["solo2020x", "duo2021y", "many2022z"]
    assert c.references_cell() == (
        "## References\n\n"
        "- A. Duo and B. Twó (2021). *Two*. Conf.\n"
        "- A Many, B Others and C Third (2022). *Three IR*. arXiv:2201.1.\n"
        "- Han Solo (2020). *One*. J."
    )
    with pytest.raises(BibError, match="page: citation key 'nope' is not in book/references.bib"):
        c.convert("{cite}`nope`")
    assert _conv().references_cell() is None


def test_citations_inside_parentheses_keep_no_brackets_of_their_own() -> None:
    c = _conv()
    assert c.convert(
        "Thesis ({cite}`solo2020x`) and ({cite}`solo2020x`, §4.2.1; {cite:p}`duo2021y` Eq. 6)."
    ) == ("Thesis (Solo, 2020) and (Solo, 2020, §4.2.1; Duo and Twó, 2021 Eq. 6).")
    assert c.convert(
        "A ({cite:t}`duo2021y`) and a new\nline ({cite}`solo2020x`) then `f(x` {cite}`solo2020x`."
    ) == ("A (Duo and Twó (2021)) and a new\nline (Solo, 2020) then `f(x` (Solo, 2020).")
    assert c.convert("(open\n\nnew paragraph {cite}`solo2020x`) $g(a$ {cite}`solo2020x`") == (
        "(open\n\nnew paragraph (Solo, 2020)) $g(a$ (Solo, 2020)"
    )


def test_equations_roles_admonitions_and_targets() -> None:
    c = _conv(lambda target: ("Other page", f"https://colab/x/{target}.ipynb"))
    src = (
        "(sec-a)=\n## A\n\nBy Eq. {eq}`eq-b`, {func}`~rank_lab.metrics.mean_ap` and "
        "{meth}`rank_lab.X.fit` differ from {class}`rank_lab.train.Trainer`, "
        "{mod}`rank_lab.losses`, {data}`rank_lab.losses.PROXY_LR`, {func}`the AP "
        "<rank_lab.metrics.mean_ap>`, {math}`x^2` and {doc}`../other`.\n\n$$\nf(x) = 1\n$$ "
        "(eq-a)\n\n$$ g = 2 $$\n\n```{note}\nA **note** with {cite}`solo2020x`.\n```\n\n"
        ":::{admonition} Careful\n:class: warning\nTwo\n\nparagraphs.\n:::\n\n"
        "```python\nx = {cite}`kept`  # code stays verbatim\n```"
    )
    assert c.convert(src) == (
        "## A\n\nBy Eq. (2), `mean_ap()` and `rank_lab.X.fit()` "
        "differ from `rank_lab.train.Trainer`, `rank_lab.losses`, `rank_lab.losses.PROXY_LR`, "
        "`the AP`, $x^2$ and [Other page](https://colab/x/../other.ipynb).\n\n"
        "$$\nf(x) = 1 \\tag{1}\n$$\n\n$$ g = 2 $$\n\n"
        "> **Note**\n>\n> A **note** with (Solo, 2020).\n\n"
        "> **Careful**\n>\n> Two\n>\n> paragraphs.\n\n"
        "```python\nx = {cite}`kept`  # code stays verbatim\n```"
    )
    for bad, match in (
        ("{eq}`eq-z`", "unknown equation label 'eq-z'"),
        ("{numref}`fig-a`", r"role \{numref\}"),
        ("```{figure} a.png\n```", r"directive \{figure\}"),
        ("```{note}\nopen", "unclosed"),
    ):
        with pytest.raises(MystConversionError, match=match):
            c.convert(bad)


def test_equation_labels_number_in_page_order() -> None:
    cells = ["$$ a $$ (one)\n\n$$ b $$\n", "```{math}\n:label: two\nc\n```\n$$\nd\n$$ (three)"]
    assert equation_labels(cells) == {"one": 1, "two": 2, "three": 3}
    with pytest.raises(MystConversionError, match="'one' is defined twice"):
        equation_labels(["$$ a $$ (one)", "$$ b $$ (one)"])


# ------------------------------------------------------------------------------ BibTeX
def test_latex_accents_and_braces() -> None:
    assert latex_to_text('J{\\"a}rvelin') == "Järvelin"
    assert latex_to_text("Ji{\\v{r}}{\\'\\i}") == "Jiří"
    assert latex_to_text("{\\v{S}}ulc and Luk{\\'a}{\\v{s}}") == "Šulc and Lukáš"
    assert (
        latex_to_text("Cumulated {IR}  Techniques, pp. 1--2")
        == "Cumulated IR Techniques, pp. 1\u20132"
    )
    with pytest.raises(TypeError):
        latex_to_text(3)  # type: ignore[arg-type]


def test_bib_entries_and_errors() -> None:
    e = BIB["many2022z"]
    assert (
        e.last_names == ["Many", "Others", "Third"]
        and e.authors_short() == "Many et al."
        and e.year == "2022"
    )
    assert (
        BibEntry("misc", "k", {}).authors_short() == "Anonymous"
        and BibEntry("misc", "k", {}).year == "n.d."
    )
    assert (
        BibEntry("misc", "k", {"author": "Ada Lovelace and others"}).authors_short()
        == "Lovelace et al."
    )
    with pytest.raises(BibError, match="key 'a' is defined twice"):
        parse_bib("@misc{a, title={x}}\n@misc{a, title={y}}")
    with pytest.raises(BibError, match="unbalanced braces"):
        parse_bib("@misc{a, title={x")
    with pytest.raises(BibError, match="never closed"):
        parse_bib("@misc{a, title={x}")
    with pytest.raises(BibError, match="expected 'field = value'"):
        parse_bib("@misc{a, title}")
    book_bib = read_bib(ROOT / "book" / "references.bib")
    assert len(book_bib) == sum(
        1
        for line in (ROOT / "book" / "references.bib").read_text().splitlines()
        if line.startswith("@")
    )
    for entry in book_bib.values():
        assert not re.search(r"[{}\\]", entry.reference()), entry.reference()


def test_doc_targets_resolve_to_the_page_title_and_its_twin(tmp_path: Path) -> None:
    from rank_lab.book.colab import doc_resolver

    book = tmp_path / "book"
    (book / "a").mkdir(parents=True)
    (book / "b").mkdir()
    (book / "a" / "one.md").write_text("# One\n")
    (book / "b" / "two.md").write_text("---\nx: 1\n---\n# The second page\n")
    resolve = doc_resolver(book / "a" / "one.md", book, "https://colab/base")
    assert resolve("../b/two") == ("The second page", "https://colab/base/b/two.ipynb")
    assert resolve("/book/b/two.md") == ("The second page", "https://colab/base/b/two.ipynb")
    assert doc_resolver(book / "a" / "one.md", book, None)("../b/two") == ("The second page", None)
    with pytest.raises(MystConversionError, match="names no page"):
        resolve("../b/three")
