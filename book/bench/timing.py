"""How the book times code: medians after warm-up, on the GPU with CUDA events, on the CPU with a clock."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def gpu_ms(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median time of fn on the GPU in milliseconds (triton.testing.do_bench, CUDA events)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


# --8<-- [start:graphed]
def gpu_ms_graphed(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Like gpu_ms, but fn is captured once in a CUDA graph and the graph is what gets timed.

    A plain call runs Python on the CPU before its kernels reach the GPU. When that takes longer than the
    GPU's own work (short sequences behind a Python wrapper), the GPU waits between calls and a GPU timer
    counts the wait. Replaying a graph costs the CPU a few microseconds, so the time is the GPU's alone.
    do_bench still clears the L2 cache before every replay. fn must have run once already (compiled,
    autotuned), because a capture only records launches.
    """
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return gpu_ms(graph.replay, warmup_ms, rep_ms)
# --8<-- [end:graphed]


def cpu_ms(fn: Callable[[], object], min_repeats: int = 5, budget_s: float = 1.0) -> float:
    """Median wall time of fn on the host in milliseconds, after one warm-up call."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_repeats or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 1000:
            break
    return statistics.median(times)


def gpu_ms_or_oom(fn: Callable[[], object]) -> float | None:
    """Like gpu_ms, but an out-of-memory error gives None (recorded as such) instead of a crash."""
    import torch

    try:
        return gpu_ms(fn)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def tflops(flops: float, ms: float | None) -> float | None:
    return None if ms is None else flops / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float | None) -> float | None:
    return None if ms is None else nbytes / (ms * 1e-3) / 1e9
