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
def gpu_ms_interleaved(fns: dict[str, Callable[[], object]], budget_ms: float = 2500.0,
                       clear_l2: str = "write") -> dict[str, float]:
    """Median GPU time of each fn in milliseconds, the calls replayed from CUDA graphs and taken in turns.

    Two things can bend a side-by-side timing, and this timer removes both:

    - The CPU. A plain call runs Python before its kernels reach the GPU; when that takes longer than the
      GPU's work (short sequences behind a Python wrapper), the GPU waits and a GPU timer counts the wait.
      Each fn is captured once in a CUDA graph, and replaying a graph costs the CPU a few microseconds.
    - The clock. Under load a GPU runs into its power limit and its clock moves by several percent within
      a second. Timing one implementation after another lets that drift favour one of them. Here the
      calls take turns (a, b, c, then b, c, a, ...), so every implementation sees the same clock history.

    As in do_bench, the L2 cache is cleared before every call, each call is timed by a pair of CUDA events,
    and the median is kept. clear_l2="write" clears it as do_bench does, by writing 256 MiB; the L2 is then full
    of written lines that must go back to memory when the timed call's reads evict them. clear_l2="read" reads
    256 MiB instead, leaving lines that can be dropped (chapter 12 says when that matters). Each fn must have run
    once already (compiled, autotuned): a capture only records launches.
    """
    import torch

    if clear_l2 not in ("write", "read"):
        raise ValueError(f'clear_l2 must be "write" or "read", got {clear_l2!r}')
    graphs = {name: _capture(fn) for name, fn in fns.items()}
    flush = _l2_clearer(clear_l2)
    first = {name: _replay_ms(graph, flush, calls=5) for name, graph in graphs.items()}  # warm-up, and a guess
    turns = max(10, min(1000, int(budget_ms / sum(first.values()))))
    names = list(graphs)
    events = {name: [] for name in names}
    for turn in range(turns):
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush()
            start.record()
            graphs[name].replay()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: statistics.median(start.elapsed_time(end) for start, end in pairs)
            for name, pairs in events.items()}


def _l2_clearer(how: str) -> Callable[[], object]:
    """A call that clears the L2 cache: it writes, or reads, a buffer of 256 MiB, larger than any GPU's L2."""
    import torch

    if how == "write":
        buffer = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
        return buffer.zero_
    buffer, total = torch.ones(64 * 2**20, device="cuda"), torch.empty((), device="cuda")
    return lambda: torch.sum(buffer, dim=0, out=total)


def _capture(fn: Callable[[], object]):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _replay_ms(graph, flush: Callable[[], object], calls: int) -> float:
    """Mean time of a few replays, each after an L2 flush (the flushes included: this is only a guess)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        flush()
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
