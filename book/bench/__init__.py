"""Every benchmark the book bakes into its pages. A chapter registers its benchmark here."""

from book.bench import gpu_basics, vector_add
from book.bench.registry import Benchmark

ALL: list[Benchmark] = [
    gpu_basics.BENCHMARK,
    vector_add.BENCHMARK,
]


def by_name(name: str) -> Benchmark:
    for benchmark in ALL:
        if benchmark.name == name:
            return benchmark
    raise KeyError(f"no benchmark named {name!r}; known: {', '.join(b.name for b in ALL)}")
