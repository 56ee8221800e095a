# rank_lab: `make test` (unit + notebook tests) and `make book` (execute every notebook, build the site).
# Both create .venv when missing and install the package with its extras; a fresh machine needs only
# Python 3.11. torch: `pip install torch torchvision` takes the standard (CUDA) build, which also runs
# on CPU.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.rank_lab-installed
EXTRAS ?= book,test,plots,faiss,timm,data
PYTEST_WORKERS ?= 2

.PHONY: help setup test test-unit test-notebooks test-realdata test-colab notebook-reference book site-check notebooks publish lint format bench gpu-check clean

help:
	@echo "make setup | test | test-unit | test-notebooks | test-realdata | test-colab | notebook-reference | book | site-check | notebooks | publish | lint | format | bench | gpu-check | clean"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	$(PY) -m pip install --quiet --no-deps animal-mnist
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (rank_lab)" > /dev/null
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q tests

# `make test` runs everything below: unit tests, notebook smoke runs, every real-data branch on its
# fixture (marker realdata) and the simulated Colab run of two twins (marker colab).
test-unit: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q -m "not notebook and not realdata and not colab" tests

# The notebook tests execute every notebook in smoke mode with papermill, compare its key figures with
# tests/notebook_reference/<name>.json, and re-execute the executed copy with nbval (--nbval-lax):
# the cell tagged `nbval-check-output` must print the same text (docs/book_contract.md). The
# exercises' code solutions are cells of the notebooks: they run and assert here too.
test-notebooks: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q -m notebook tests

# Every notebook's real-data branches, each on a tiny fixture in the dataset's published layout
# (rank_lab.fixtures), weights="none", a tiny backbone, one short epoch (tests/book/test_realdata.py).
test-realdata: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q -m realdata tests

# A fresh venv (pip, ipykernel, the torch a Colab runtime ships) runs two twins' pinned install cells
# against a one-commit snapshot of the working tree, then the twins themselves (tests/book/test_colab.py).
test-colab: $(STAMP)
	$(PY) -m pytest -q -m colab tests

# Rewrite tests/notebook_reference/*.json from fresh smoke runs (tolerances kept); say why in the commit.
notebook-reference: $(STAMP)
	RANK_LAB_WRITE_REFERENCE=1 $(PY) -m pytest -n $(PYTEST_WORKERS) -q -m notebook tests/book/test_notebooks.py

# Every notebook is executed (smoke mode = the parameters cell's defaults) on every build:
# `execute_notebooks: force` in _config.yml, so no cached page can go stale when rank_lab/ changes.
# Execution errors raise (nb_execution_raise_on_error) and fail the build.
book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --path-output . --builder html
	$(MAKE) notebooks

# Every built page in headless Chromium (Debian's chromium) at 1280 and 390 px: horizontal overflow,
# raw TeX, broken images, open solutions, internal language (rank_lab.book.sitecheck); screenshots
# in _build/site-check/. `make test` runs the same check on a small site it builds
# (tests/book/test_site.py); run this after `make book` for the whole book.
site-check: $(STAMP)
	$(PY) -m rank_lab.book.sitecheck _build/html --out _build/site-check

# The Colab twins (rank_lab.book.twins): install cell pinned to this checkout's commit, on the
# repository.url of _config.yml (fails with one message when it is unset or a placeholder; forks
# change it there); TWIN_REF=<tag or commit> pins another ref.
TWIN_REF ?=
notebooks: $(STAMP)
	$(PY) -m rank_lab.book twins --out _build/html/_notebooks $(if $(TWIN_REF),--ref $(TWIN_REF))

# Build the site with its twins and push it to the gh-pages branch (ghp-import, with .nojekyll).
# Refused at once when repository.url of _config.yml is unset or the working tree has uncommitted
# changes (the twins name the commit they were built from); afterwards every "Open in Colab" link
# is checked against the files of the pushed branch.
PUBLISH_REMOTE ?= origin
publish: $(STAMP)
	$(PY) -m rank_lab.book.publish check
	$(MAKE) book
	$(PY) -m rank_lab.book.publish push --remote $(PUBLISH_REMOTE)

lint: $(STAMP)
	$(PY) -m ruff check rank_lab tests benchmarks tools

# Long trailing comments moved onto their own line first (so that ruff does not split a statement
# to make room for its comment), ruff format, then tools/wrap_long_lines.py for what ruff leaves
# over 100 characters (comments, docstrings, string literals; AST checked per file), twice so that
# ruff's re-layout of split strings settles; then both must be at a fixed point.
FORMAT_PATHS ?= rank_lab tests benchmarks tools
format: $(STAMP)
	$(PY) tools/wrap_long_lines.py --before-format $(FORMAT_PATHS)
	$(PY) -m ruff format $(FORMAT_PATHS)
	$(PY) tools/wrap_long_lines.py $(FORMAT_PATHS)
	$(PY) -m ruff format $(FORMAT_PATHS)
	$(PY) tools/wrap_long_lines.py $(FORMAT_PATHS)
	$(PY) -m ruff format --check $(FORMAT_PATHS)
	$(PY) tools/wrap_long_lines.py --check $(FORMAT_PATHS)

bench: $(STAMP)
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f --quick || exit 1; done

# GPU readiness (never in CI): the cuda tests, one notebook at full scale on synthetic data and the
# benchmarks with --device cuda; writes benchmarks/gpu_check_report.md. Fails at once without CUDA.
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py --out benchmarks/gpu_check_report.md

clean:
	rm -rf _build outputs .pytest_cache .hypothesis
