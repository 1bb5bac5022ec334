# Two commands do everything on a fresh machine:
#   make serve   build the book and serve it on http://127.0.0.1:8000 (rebuilds on edits)
#   make test    lint, run every test, and build the site with --strict
# On a GPU machine:
#   make bench              run every benchmark and write results/<gpu>/<name>.json
#   make bench ONLY="ch02"  only the benchmarks of the chapters named
#   make test-gpu           the GPU tests
SHELL := /bin/bash
export NO_MKDOCS_2_WARNING := 1
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The GPU machine brings its own torch and triton; use its python for GPU work.
GPU_PY ?= python3
PIP_EXTRA ?=

.PHONY: setup serve build test test-gpu bench bench-gpu-all outputs lint clean

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

lint: setup
	$(PY) -m ruff check .

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest

outputs: setup
	$(PY) -m book.snippets --write

test-gpu:
	$(GPU_PY) -m pytest -m gpu tests

bench:
	$(GPU_PY) -m book.bench $(if $(ONLY),--only $(ONLY),)

clean:
	rm -rf site .pytest_cache .ruff_cache
