"""What a benchmark is: a name, the chapter it belongs to, the sources it measures, how to run it,
and the views (tables, figures, sentences) that pages render from its results."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Progress = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[2]

# Kernel modules that a listed kernel imports but that do not change what a benchmark measures, and why. Every
# other kernel module a listed kernel reaches by its imports (at the top or inside a function) joins the
# benchmark's sources on its own: a change to it changes what was measured, and only sources make results stale.
UNMEASURED_IMPORTS = {
    "kernels/validate.py": "input checks the wrappers make before launching; no benchmark has listed them",
    "kernels/flash_attention_backward.py": "imported by the forward kernels for their autograd Function and by "
                                           "the fast backward for its fallback; the benchmarks that leave it out "
                                           "run neither",
}
UNMEASURED_FOR = {  # the same, for one benchmark only
    "backward_hopper": {"kernels/flash_attention.py": "part of the fast backward's fallback, which the benchmark's "
                                                      "shapes never take"},
}


def kernel_imports(path: str) -> set[str]:
    """The kernel modules (kernels/*.py) that the file at `path` imports, anywhere in it."""
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


def reached_kernels(sources: list[str]) -> set[str]:
    """Every kernel module the listed kernels reach through their imports, the listed ones included."""
    reached, todo = set(), [s for s in sources if s.startswith("kernels/")]
    while todo:
        path = todo.pop()
        if path not in reached:
            reached.add(path)
            todo += kernel_imports(path)
    return reached


class BenchmarkSkipped(Exception):
    """Raised by a benchmark's run when this machine lacks something it needs (a profiler, say); the message
    says what, in one line. No results file is written, so the pages keep the committed results."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    chapter: str
    title: str
    sources: list[str]
    run: Callable[[Progress], list[dict]]
    views: dict[str, Callable[[dict], object]] = field(default_factory=dict)
    # Why a new benchmark has no results file yet (say which issue tracks its first GPU run). While set,
    # the checks accept the missing file; pages show "No measurements yet". Stale results still fail.
    awaiting_gpu: str = ""
    # A run too long for one sitting: module attributes to override, one dict per part (book/bench/parts.py).
    parts: list[dict] = field(default_factory=list)

    def __post_init__(self):
        """The sources as listed, then every kernel module they reach that can change the measurement."""
        unmeasured = UNMEASURED_IMPORTS | UNMEASURED_FOR.get(self.name, {})
        joined = sorted(reached_kernels(self.sources) - set(self.sources) - set(unmeasured))
        object.__setattr__(self, "sources", [*self.sources, *joined])
