# Two commands do everything on a fresh machine:
#   make serve   build the book and serve it on http://127.0.0.1:8000 (rebuilds on edits)
#   make test    lint, run every test, and build the site with --strict
# Writing the book (CONTRIBUTING.md):
#   make chapter NAME="10-backward" TITLE="The backward pass"   start a chapter from templates/
#   make check [GREP=ch10]                                      list what chapters still miss, with the fix
# On a GPU machine (maintainers; CONTRIBUTING.md, "After review: the GPU workflow"):
#   make refresh               GPU tests, every benchmark, then the site built from the fresh numbers
#   make refresh ONLY="ch03 ch05"   the same, benchmarking only the chapters (or benchmarks) named
#   make bench ONLY="ch02"     only the benchmarks; make test-gpu: only the GPU tests
SHELL := /bin/bash
export NO_MKDOCS_2_WARNING := 1
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The GPU machine brings its own torch and triton; use its python for GPU work.
GPU_PY ?= python3
PIP_EXTRA ?=
# GPU tests run in this many processes (pytest-xdist): most of their time is Triton compiling and autotuning
# each new shape, which is CPU work. Each process takes GPU memory; lower it on a GPU with less than 80 GB.
GPU_TEST_WORKERS ?= 8
# `make refresh` works in a virtual environment on top of GPU_PY: it sees the machine's GPU builds of torch
# and triton, and adds the pinned tools to test, benchmark and build the site.
# An air-gapped GPU machine: `make wheelhouse WHEELHOUSE=DIR` on a machine with network fetches every wheel the
# GPU virtual environment needs, for the GPU machine's Python (WHEEL_PYTHON) and platform; copy DIR over and
# run `make refresh WHEELHOUSE=DIR` there: pip then installs from DIR alone (--no-index).
WHEELHOUSE ?=
WHEEL_PYTHON ?= 3.12
WHEEL_PLATFORMS ?= manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
PIP_FROM = $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE),)
GPU_VENV := .venv-gpu
GPU_VENV_PY := $(GPU_VENV)/bin/python
GPU_STAMP := $(GPU_VENV)/.installed

.PHONY: setup serve build build-zensical test check chapter test-gpu bench setup-gpu refresh outputs lint clean wheelhouse

$(STAMP): requirements/cpu.txt requirements/docs.txt requirements/test.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(PIP_EXTRA) \
		-r requirements/cpu.txt -r requirements/docs.txt -r requirements/test.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

serve: setup
	$(PY) -m mkdocs serve

build: setup
	$(PY) -m mkdocs build --strict
	$(PY) -m book.site_check site

build-zensical: setup
	$(PY) -m book.bake
	$(PY) -m zensical build -f build/baked.yml
	$(PY) -m book.site_check build/site-baked

lint: setup
	$(PY) -m ruff check .

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest

check: setup
	$(PY) -m book.checks $(if $(GREP),--grep "$(GREP)",)

chapter: setup
	$(PY) -m book.new_chapter "$(NAME)" "$(TITLE)" $(if $(SECTION),--section "$(SECTION)",)

outputs: setup
	$(PY) -m book.snippets --write
	$(PY) -m book.notebooks --write

# Runs on a bare GPU Python too (torch, triton, numpy, pytest): without pytest-xdist the tests run in one process,
# and the tests that need the documentation tools skip with a reason.
test-gpu:
	$(GPU_PY) -m pytest -m gpu $$($(GPU_PY) -c "import importlib.util as u; \
	print('-n $(GPU_TEST_WORKERS)' if u.find_spec('xdist') else '')") tests

bench:
	$(GPU_PY) -m book.bench --precompile $(if $(ONLY),--only $(ONLY),)

$(GPU_STAMP): requirements/docs.txt requirements/test.txt pyproject.toml
	$(GPU_PY) -m venv --system-site-packages $(GPU_VENV)
	$(GPU_VENV_PY) -m pip install -q --disable-pip-version-check $(PIP_FROM) -r requirements/docs.txt \
		-r requirements/test.txt
	$(GPU_VENV_PY) -m pip install -q --disable-pip-version-check $(PIP_FROM) --no-deps -e .
	touch $(GPU_STAMP)

wheelhouse:
	@test -n "$(WHEELHOUSE)" || { echo "usage: make wheelhouse WHEELHOUSE=DIR [WHEEL_PYTHON=3.12]"; exit 2; }
	python3 -m pip download -q --disable-pip-version-check --only-binary=:all: -d $(WHEELHOUSE) \
		--python-version $(WHEEL_PYTHON) --implementation cp $(foreach p,$(WHEEL_PLATFORMS),--platform $(p)) \
		-r requirements/docs.txt -r requirements/test.txt "setuptools>=68"

setup-gpu: $(GPU_STAMP)

refresh:
	@$(GPU_PY) -c "import importlib.util as u, sys; t = u.find_spec('torch') and __import__('torch'); \
	t and t.cuda.is_available() or sys.exit('make refresh needs a CUDA GPU and torch in GPU_PY ($(GPU_PY)); \
	without a GPU the site uses the committed results (make build).')"
	$(MAKE) --no-print-directory setup-gpu
	$(GPU_VENV_PY) -m pytest -q -m gpu -n $(GPU_TEST_WORKERS) tests
	$(GPU_VENV_PY) -m book.bench --precompile $(if $(ONLY),--only $(ONLY),)
	$(GPU_VENV_PY) -m mkdocs build --strict
	$(GPU_VENV_PY) -m book.site_check site

clean:
	rm -rf site build .pytest_cache .ruff_cache
