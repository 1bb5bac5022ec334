"""The benchmark command: on a machine without a GPU it stops with a one-line explanation."""

import subprocess
import sys

import pytest

from book import ROOT
from book.bench import ALL
from tests.conftest import HAS_CUDA


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_bench_without_gpu_exits_non_zero_with_one_line():
    done = subprocess.run([sys.executable, "-m", "book.bench"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0
    assert "No CUDA GPU" in done.stderr and "results/" in done.stderr


def test_every_benchmark_lists_existing_sources():
    for benchmark in ALL:
        for source in benchmark.sources:
            assert (ROOT / source).is_file(), f"{benchmark.name} lists {source}, which does not exist"
        assert benchmark.views, f"{benchmark.name} has no views for the pages"
