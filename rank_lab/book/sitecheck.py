"""The built site checked as a reader sees it: every page in headless Chromium, at two widths.

``make site-check`` (``python -m rank_lab.book.sitecheck _build/html``) opens every page of the
built book in Debian's ``chromium`` (driven by Playwright, ``executable_path``: no browser download)
at a desktop width (1280 px) and a phone width (390 px), waits for MathJax, and reports:

* **overflow**: the page scrolls sideways, or an element of the article (text, a table, an output)
  runs past the right edge of the column without a scrolling container between them
  (``overflow-x: auto`` containers, such as the book's tables and code blocks, are fine); at the
  desktop width a notebook's code cell or output that needs to scroll sideways is reported too (a
  code line or output wider than the column);
* **raw TeX**: ``$...$``, ``\\(``, ``\\[`` or ``\\begin{`` left in the text after MathJax, or a
  MathJax error;
* **broken images**: an ``<img>`` that did not load;
* **open solutions**: an exercise's solution that is not folded when the page opens;
* **internal language**: :data:`rank_lab.book.audit.INTERNAL_WORDS` in the visible text, and
  repository files named in text without a link (not on the API reference, :data:`REFERENCE_PAGES`,
  whose docstrings document the package's own tooling).

A full-page screenshot of each page at each width lands in ``_build/site-check/<width>/``. Without a
browser the check stops at once and says how to get one (exit 2); problems exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .audit import internal_language

__all__ = [
    "WIDTHS",
    "BrowserMissingError",
    "SiteProblem",
    "find_browser",
    "site_pages",
    "check_site",
    "main",
]

#: The widths every page is checked at: a desktop window and a phone.
WIDTHS = (1280, 390)
#: Pages of the build that are not reading pages (search, indexes, highlighted module sources).
SKIPPED = ("search.html", "genindex.html", "py-modindex.html")
#: The package reference (autodoc): checked for overflow, TeX and images, not for the word list or
#: unlinked paths, since the docstrings document the package's own tooling (git HEAD, nbval, files).
REFERENCE_PAGES = ("book/api.html",)
SKIPPED_DIRS = ("_static", "_sources", "_notebooks", "_modules", "_images", "site-check")

_REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:benchmarks|tests|tools|docs|rank_lab)/[\w./-]+\.(?:py|md|json|yml)"
    r"|bench_\w+\.py|gpu_check_report\.md)"
)

# Runs in the page: collects what a reader would see wrong, as plain JSON.
_PROBE = r"""
(desktop) => {
  const out = {overflow: [], tex: [], images: [], open: [], text: "", unlinked: ""};
  const vw = window.innerWidth;
  if (document.documentElement.scrollWidth > vw + 1) {
    out.overflow.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px wide at ${vw} px`);
  }
  const article = document.querySelector("article.bd-article") || document.body;
  const right = Math.min(vw, article.getBoundingClientRect().right) + 2;
  const scrolls = (el) => {
    for (let p = el.parentElement; p && p !== article.parentElement; p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX;
      if (ox === "auto" || ox === "scroll" || ox === "hidden") return true;
    }
    return false;
  };
  const describe = (el) => {
    const cls = (el.className && typeof el.className === "string") ? "." + el.className.trim().split(/\s+/).slice(0, 2).join(".") : "";
    const text = (el.innerText || "").trim().replace(/\s+/g, " ").slice(0, 60);
    return `<${el.tagName.toLowerCase()}${cls}> "${text}"`;
  };
  const seen = new Set();
  for (const el of article.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || getComputedStyle(el).visibility === "hidden") continue;
    if (el.closest("mjx-container, .MathJax")) continue;
    if (r.right > right && !scrolls(el)) {
      const top = el.closest("p, pre, table, div.cell_output, li, dl, figure, h1, h2, h3, div.highlight") || el;
      if (!seen.has(top)) { seen.add(top); out.overflow.push(`${describe(top)} ends at ${Math.round(r.right)} px, the column at ${Math.round(right)} px`); }
    }
  }
  if (desktop) {  // a notebook's code line or output wider than the column (docstring examples may scroll)
    for (const pre of article.querySelectorAll("div.cell pre")) {
      if (pre.checkVisibility() && pre.scrollWidth > pre.clientWidth + 1) {
        out.overflow.push(`${describe(pre)} needs ${pre.scrollWidth} px, the column gives ${pre.clientWidth} px`);
      }
    }
  }
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const texts = [], unlinked = [];
  while (walker.nextNode()) {
    const node = walker.currentNode, el = node.parentElement;
    if (!el || el.closest("script, style, mjx-container, .MathJax, mjx-assistive-mml")) continue;
    const visible = el.offsetParent !== null || el.closest("details, .toggle-hidden, .dropdown");
    if (!visible) continue;
    texts.push(node.textContent);
    if (!el.closest("a, pre, .cell_input")) unlinked.push(node.textContent);
    if (el.closest("pre, code, .cell_input, .cell_output, dt.sig, .sig")) continue;
    const t = node.textContent;
    const m = t.match(/\$[^$\s][^$]*\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$\$/);
    if (m) out.tex.push(`"${t.trim().slice(0, 80)}"`);
  }
  for (const err of article.querySelectorAll("mjx-merror, .mjx-merror")) out.tex.push(`MathJax error: ${err.textContent.slice(0, 80)}`);
  for (const img of document.querySelectorAll("article img, .bd-content img")) {
    if (!img.complete || img.naturalWidth === 0) out.images.push(img.getAttribute("src") || "(no src)");
  }
  // a solution is folded when sphinx-togglebutton has closed it (class toggle-hidden) on load
  for (const sol of article.querySelectorAll("div.solution")) {
    if (!sol.classList.contains("toggle-hidden")) out.open.push(describe(sol));
  }
  out.text = texts.join(" ");
  out.unlinked = unlinked.join(" ");
  return out;
}
"""  # noqa: E501


class BrowserMissingError(RuntimeError):
    """No Chromium to run the site check with (the message says how to install one)."""


@dataclass(frozen=True)
class SiteProblem:
    """One problem of one page at one width."""

    page: str
    width: int
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.page} @ {self.width} px: {self.kind}: {self.detail}"


def find_browser() -> str | None:
    """The Chromium to use: ``$RANK_LAB_CHROMIUM``, else ``chromium`` / ``chromium-browser`` on the
    PATH."""
    env = os.environ.get("RANK_LAB_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def site_pages(html_dir: str | os.PathLike[str]) -> list[Path]:
    """The reading pages of a built site (no search page, indexes, sources or highlighted modules).

    Raises:
        FileNotFoundError: ``html_dir`` has no ``index.html`` (build the site first: ``make book``).
    """
    root = Path(html_dir)
    if not (root / "index.html").is_file():
        raise FileNotFoundError(
            f"{root} holds no built site (no index.html): run `make book` first"
        )
    pages = []
    for page in sorted(root.rglob("*.html")):
        rel = page.relative_to(root)
        if rel.parts[0] in SKIPPED_DIRS or rel.name in SKIPPED or rel.as_posix() == "index.html":
            continue
        pages.append(page)
    return pages


def check_site(
    html_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    widths: Sequence[int] = WIDTHS,
    pages: Sequence[str | os.PathLike[str]] | None = None,
    browser: str | None = None,
) -> list[SiteProblem]:
    """Open every page of a built site at each width; return the problems (empty: the site passes).

    Args:
        html_dir: the built site (``_build/html``).
        out_dir: where screenshots go (``<out_dir>/<width>/<page>.jpg``); ``None``: no screenshots.
        widths: viewport widths in CSS pixels.
        pages: pages to check (default :func:`site_pages`).
        browser: the Chromium executable (default :func:`find_browser`).

    Raises:
        BrowserMissingError: no Chromium.
        FileNotFoundError: no built site.
        TypeError, ValueError: ``widths`` not positive ints, ``browser`` not an executable file,
            ``pages`` not a list of existing files, ``out_dir`` not a path (checked before Chromium
            starts).
    """
    if (
        isinstance(widths, (str, bytes))
        or not isinstance(widths, Sequence)
        or not widths
        or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths)
    ):
        raise ValueError(
            f"widths must be a non-empty list of positive viewport widths (ints), got {widths!r}"
        )
    if out_dir is not None and not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a folder (a path) or None, got {out_dir!r}")
    if pages is not None and (
        isinstance(pages, (str, os.PathLike))
        or not isinstance(pages, Sequence)
        or not all(isinstance(p, (str, os.PathLike)) for p in pages)
    ):
        raise TypeError(f"pages must be a list of page paths, got {pages!r}")
    if browser is not None and (not isinstance(browser, str) or not Path(browser).is_file()):
        raise ValueError(f"browser must be the path of a Chromium executable, got {browser!r}")
    browser = browser or find_browser()
    if browser is None:
        raise BrowserMissingError(
            "the site check needs Chromium and found none: install Debian's chromium "
            "(apt-get install -y chromium) or set RANK_LAB_CHROMIUM to a Chromium binary"
        )
    root = Path(html_dir).resolve()
    todo = [Path(p).resolve() for p in pages] if pages is not None else site_pages(root)
    absent = [str(p) for p in todo if not p.is_file()]
    if absent:
        raise ValueError(f"pages holds files that do not exist: {absent}")
    # optional dependency (extra "test"), imported where the check runs
    from playwright.sync_api import sync_playwright

    problems: list[SiteProblem] = []
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=browser, args=["--no-sandbox", "--disable-gpu"])
        try:
            for width in widths:
                context = chrome.new_context(
                    viewport={"width": int(width), "height": 900}, offline=True
                )
                page = context.new_page()
                for path in todo:
                    name = (
                        path.relative_to(root).as_posix()
                        if path.is_relative_to(root)
                        else path.name
                    )
                    page.goto(path.as_uri(), wait_until="load")
                    page.evaluate(
                        "() => (window.MathJax && MathJax.startup && MathJax.startup.promise) "
                        "? MathJax.startup.promise : null"
                    )
                    page.wait_for_timeout(150)
                    found = page.evaluate(_PROBE, width >= 1000)
                    problems += [SiteProblem(name, width, "overflow", d) for d in found["overflow"]]
                    problems += [SiteProblem(name, width, "raw TeX", d) for d in found["tex"]]
                    problems += [
                        SiteProblem(name, width, "broken image", d) for d in found["images"]
                    ]
                    problems += [
                        SiteProblem(name, width, "open solution", d) for d in found["open"]
                    ]
                    if width == widths[0] and name not in REFERENCE_PAGES:
                        problems += [
                            SiteProblem(name, width, "internal language", h)
                            for h in internal_language(found["text"])
                        ]
                        problems += [
                            SiteProblem(name, width, "repository file not linked", m.group(1))
                            for m in _REPO_PATH.finditer(found["unlinked"])
                        ]
                    if out_dir is not None:
                        shot = (
                            Path(out_dir)
                            / str(width)
                            / (name.replace("/", "__").removesuffix(".html") + ".jpg")
                        )
                        shot.parent.mkdir(parents=True, exist_ok=True)
                        _screenshot(page, shot)
                context.close()
        finally:
            chrome.close()
    return problems


def _screenshot(page: object, path: Path, max_height: int = 16_000) -> None:
    """A full-page screenshot, cut at ``max_height`` pixels (Chromium cannot capture the longest
    pages)."""
    height = int(page.evaluate("document.documentElement.scrollHeight"))
    width = int(page.viewport_size["width"])
    page.screenshot(
        path=str(path),
        full_page=True,
        type="jpeg",
        quality=55,
        timeout=120_000,
        clip={"x": 0, "y": 0, "width": width, "height": min(height, max_height)},
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rank_lab.book.sitecheck [HTML_DIR] [--out DIR] [--page PAGE ...]``: 0 clean, 1
    problems,
    2 no browser or no built site."""
    ap = argparse.ArgumentParser(
        prog="python -m rank_lab.book.sitecheck", description=__doc__.splitlines()[0]
    )
    ap.add_argument("html_dir", nargs="?", default="_build/html")
    ap.add_argument(
        "--out", default=None, help="screenshots folder (default: <html_dir>/../site-check)"
    )
    ap.add_argument(
        "--page", action="append", default=None, help="check only this page (repeatable)"
    )
    args = ap.parse_args(argv)
    out = args.out or str(Path(args.html_dir).resolve().parent / "site-check")
    try:
        pages = [Path(args.html_dir) / p for p in args.page] if args.page else None
        problems = check_site(args.html_dir, out, pages=pages)
    except (BrowserMissingError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = len(pages) if pages is not None else len(site_pages(args.html_dir))
    for p in problems:
        print(p)
    print(
        f"site check: {n} pages at {', '.join(f'{w} px' for w in WIDTHS)}: "
        f"{len(problems)} problem(s); screenshots in {out}"
    )
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
