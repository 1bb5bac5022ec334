"""How the book times code: medians after warm-up, on the GPU with CUDA events, on the CPU with a clock."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def gpu_ms(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median time of fn on the GPU in milliseconds (triton.testing.do_bench, CUDA events)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


# --8<-- [start:interleaved]
def gpu_ms_interleaved(fns: dict[str, Callable[[], object]], budget_ms: float = 2500.0) -> dict[str, float]:
    """Median GPU time of each fn in milliseconds, the calls replayed from CUDA graphs and taken in turns.

    Two things can bend a side-by-side timing, and this timer removes both:

    - The CPU. A plain call runs Python before its kernels reach the GPU; when that takes longer than the
      GPU's work (short sequences behind a Python wrapper), the GPU waits and a GPU timer counts the wait.
      Each fn is captured once in a CUDA graph, and replaying a graph costs the CPU a few microseconds.
    - The clock. Under load a GPU runs into its power limit and its clock moves by several percent within
      a second. Timing one implementation after another lets that drift favour one of them. Here the
      calls take turns (a, b, c, then b, c, a, ...), so every implementation sees the same clock history.

    As in do_bench, the L2 cache is cleared before every call, each call is timed by a pair of CUDA events,
    and the median is kept. Each fn must have run once already (compiled, autotuned): a capture only
    records launches.
    """
    import torch

    graphs = {name: _capture(fn) for name, fn in fns.items()}
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # larger than any GPU's L2 cache
    first = {name: _replay_ms(graph, flush, calls=5) for name, graph in graphs.items()}  # warm-up, and a guess
    turns = max(10, min(1000, int(budget_ms / sum(first.values()))))
    names = list(graphs)
    events = {name: [] for name in names}
    for turn in range(turns):
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            start.record()
            graphs[name].replay()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: statistics.median(start.elapsed_time(end) for start, end in pairs)
            for name, pairs in events.items()}


def _capture(fn: Callable[[], object]):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _replay_ms(graph, flush, calls: int) -> float:
    """Mean time of a few replays, each after an L2 flush (the flushes included: this is only a guess)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        flush.zero_()
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls
# --8<-- [end:interleaved]


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
