"""The benchmark command: on a machine without a GPU it stops with a one-line explanation."""

import ast
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


# Kernel modules that a listed kernel imports but a benchmark may leave out of its sources, and why. Anything
# else a listed kernel imports (at the top or inside a function) must be listed: a change to it changes what
# the benchmark measured, and only listed sources make results stale.
UNLISTED_IMPORTS = {
    "kernels/validate.py": "input checks the wrappers make before launching; no benchmark has listed them",
    "kernels/flash_attention_backward.py": "imported by the forward kernels for their autograd Function and by "
                                           "the fast backward for its fallback; the benchmarks that leave it out "
                                           "run neither",
}
UNLISTED_FOR = {  # the same, for one benchmark only
    "backward_hopper": {"kernels/flash_attention.py": "part of the fast backward's fallback, which the benchmark's "
                                                      "shapes never take"},
}


def _kernel_imports(path: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name.replace(".", "/") + ".py" for name in names if name.startswith("kernels.")}
    return {path for path in found if (ROOT / path).is_file()}


def test_every_kernel_a_listed_kernel_imports_is_listed():
    for benchmark in ALL:
        reached, todo = set(), [s for s in benchmark.sources if s.startswith("kernels/")]
        while todo:
            path = todo.pop()
            if path not in reached:
                reached.add(path)
                todo += _kernel_imports(path)
        allowed = UNLISTED_IMPORTS | UNLISTED_FOR.get(benchmark.name, {})
        missing = sorted(reached - set(benchmark.sources) - set(allowed))
        assert not missing, f"{benchmark.name} runs code from {missing} but does not list it in its sources"
