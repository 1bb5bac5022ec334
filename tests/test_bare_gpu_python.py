"""`make test-gpu` on a GPU machine whose Python has only torch, triton, numpy and pytest: every test module
still collects, and the ones that need the documentation tools skip with a reason instead of failing."""

import subprocess
import sys

from book import ROOT

# Runs pytest's collection in a child Python where every package beyond the GPU stack fails to import.
BARE = r"""
import importlib.abc, sys
MISSING = {"mkdocs", "material", "pymdownx", "mkdocs_jupyter", "nbformat", "nbclient", "jupytext", "yaml",
                   "playwright", "matplotlib", "jsonschema", "bs4", "markdown", "ruff", "xdist", "zensical"}
class Bare(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Bare())
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]))
"""


def test_gpu_tests_collect_without_the_documentation_tools():
    done = subprocess.run([sys.executable, "-c", BARE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "error" not in done.stdout.splitlines()[-1].lower()
    assert "needs the documentation tools (`make setup`)" in done.stdout  # the skips say why
