# rank_lab: `make test` (unit + notebook tests) and `make book` (execute every notebook, build the site).
# Both create .venv when missing and install the package with its extras; a fresh machine needs only
# Python 3.11. torch: `pip install torch torchvision` takes the standard (CUDA) build, which also runs
# on CPU.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.rank_lab-installed
EXTRAS ?= book,test,faiss,timm,data
PYTEST_WORKERS ?= 2

.PHONY: help setup test test-unit test-notebooks notebook-reference book notebooks publish lint bench gpu-check clean

help:
	@echo "make setup | test | test-unit | test-notebooks | notebook-reference | book | notebooks | publish | lint | bench | gpu-check | clean"

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

test-unit: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q -m "not notebook" tests

# The notebook tests execute every notebook in smoke mode with papermill, compare its key figures with
# tests/notebook_reference/<name>.json, and re-execute the executed copy with nbval (--nbval-lax):
# the cells marked `# NBVAL_CHECK_OUTPUT` must print the same text (docs/book_contract.md).
test-notebooks: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q -m notebook tests

# Rewrite tests/notebook_reference/*.json from fresh smoke runs (tolerances kept); say why in the commit.
notebook-reference: $(STAMP)
	RANK_LAB_WRITE_REFERENCE=1 $(PY) -m pytest -n $(PYTEST_WORKERS) -q -m notebook tests/test_notebooks.py

# Every notebook is executed (smoke mode = the parameters cell's defaults) on every build:
# `execute_notebooks: force` in _config.yml, so no cached page can go stale when rank_lab/ changes.
# Execution errors raise (nb_execution_raise_on_error) and fail the build.
book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --path-output . --builder html
	$(MAKE) notebooks

notebooks: $(STAMP)
	$(PY) -m rank_lab.book twins --out _build/html/_notebooks

# Build the site with its twins and push it to the gh-pages branch (ghp-import, with .nojekyll).
# Refused at once when repository.url of _config.yml is unset or the working tree has uncommitted
# changes (the twins name the commit they were built from); afterwards every "Open in Colab" link
# is checked against the files of the pushed branch.
PUBLISH_REMOTE ?= origin
publish: $(STAMP)
	$(PY) -m rank_lab.publish check
	$(MAKE) book
	$(PY) -m rank_lab.publish push --remote $(PUBLISH_REMOTE)

lint: $(STAMP)
	$(PY) -m ruff check rank_lab tests benchmarks

bench: $(STAMP)
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f --quick || exit 1; done

# GPU readiness (never in CI): the cuda tests, one notebook at full scale on synthetic data and the
# benchmarks with --device cuda; writes benchmarks/gpu_check_report.md. Fails at once without CUDA.
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py --out benchmarks/gpu_check_report.md

clean:
	rm -rf _build outputs .pytest_cache .hypothesis
