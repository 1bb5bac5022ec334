"""The benchmark command: on a machine without a GPU it stops with a one-line explanation."""

import subprocess
import sys

import pytest

from book import ROOT
from book.bench import ALL, by_name
from book.bench.registry import UNMEASURED_FOR, UNMEASURED_IMPORTS, reached_kernels
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


def test_every_kernel_a_listed_kernel_imports_is_a_source():
    """A kernel module that a listed kernel reaches joins the sources by itself (kernels/launch.py in the decode
    benchmarks, say), unless the registry says why it cannot change the measurement."""
    for benchmark in ALL:
        allowed = UNMEASURED_IMPORTS | UNMEASURED_FOR.get(benchmark.name, {})
        missing = sorted(reached_kernels(benchmark.sources) - set(benchmark.sources) - set(allowed))
        assert not missing, f"{benchmark.name} runs code from {missing} but does not list it in its sources"
    assert "kernels/launch.py" in by_name("decode").sources


def test_an_unmeasured_import_needs_its_reason():
    assert all(reason for reason in UNMEASURED_IMPORTS.values())
    assert all(reason for reasons in UNMEASURED_FOR.values() for reason in reasons.values())
