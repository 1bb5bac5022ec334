"""Every benchmark the book bakes into its pages.

A chapter adds a module to this package that defines BENCHMARK (a registry.Benchmark); it is found
automatically, and `python -m book.bench --list` shows it.
"""

import importlib
import pkgutil

from book.bench.registry import Benchmark

_NOT_BENCHMARKS = {"registry", "timing", "precompile", "parts", "__main__"}


def _discover() -> list[Benchmark]:
    found = []
    for module in pkgutil.iter_modules(__path__):
        if module.name in _NOT_BENCHMARKS:
            continue
        found.append(importlib.import_module(f"{__name__}.{module.name}").BENCHMARK)
    return sorted(found, key=lambda b: (b.chapter, b.name))


ALL: list[Benchmark] = _discover()


def by_name(name: str) -> Benchmark:
    for benchmark in ALL:
        if benchmark.name == name:
            return benchmark
    raise KeyError(f"no benchmark named {name!r}; known: {', '.join(b.name for b in ALL)}")
