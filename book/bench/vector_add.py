"""Chapter 2: vector add on the CPU (torch on the host) and on the GPU (torch.add and our Triton kernel),
with the device-to-device copy bandwidth measured at each size as the reference.

The copy is a reference, not an upper bound: an add reads two vectors and writes one, a copy reads one and
writes one, and the two are different kernels. Only the datasheet peak bounds both.

Each size's host timing keeps the GPU idle for about a second, and an idle GPU lowers its clock. So before the GPU
timings of each size, the GPU works for WARM_UP_S first. The "idle" rows measure what that changes: the Triton kernel
at IDLE_SIZES, timed right after a second of idling and right after the warm-up, in turns.
"""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import cpu_ms, gbps, gpu_ms

SIZES = [10**3, 10**4, 10**5, 10**6, 10**7, 2**24, 2**26, 10**8, 2**27, 2**28]
CPU_MAX = 10**8  # the host run gets slow past this; the GPU sizes go further
TARGET_FROM = 2**26  # the chapter's target: >= 90% of copy bandwidth from here up
TARGET_SHARE = 0.90
WARM_UP_S = 0.2  # GPU work before each size's GPU timings, so that the clock is up again after the host timing
IDLE_S = 1.0  # about what a host timing lasts (cpu_ms's budget)
IDLE_SIZES = [10**4, 10**5]
IDLE_TURNS = 3
FLAT = 1.5  # times within this factor of each other read as "about the same"


def run(progress: Progress) -> list[dict]:
    rows = []
    for n in SIZES:
        rows.append(_measure(n))
        progress(f"n={n:>10}: triton {rows[-1]['triton_GBps']:7.1f} GB/s, copy {rows[-1]['copy_GBps']:7.1f} GB/s")
    for n in IDLE_SIZES:
        rows += _idle_rows(n)
        progress(f"n={n:>10}: triton after idling {rows[-2]['triton_ms'] * 1e3:.1f} µs, after a warm-up "
                 f"{rows[-1]['triton_ms'] * 1e3:.1f} µs (last turn)")
    return rows


def _warm_up(seconds: float = WARM_UP_S) -> None:
    """Keep the GPU busy for a while (matrix products), so that its clock is up when the timing starts."""
    import time

    import torch

    a = torch.randn(4096, 4096, device="cuda")
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ a
        torch.cuda.synchronize()


def _idle_rows(n: int) -> list[dict]:
    """The Triton kernel at n elements, timed after IDLE_S of an idle GPU and after a warm-up, in turns."""
    import time

    import torch

    from kernels.vector_add import add

    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    rows = []
    for turn in range(IDLE_TURNS):
        for state in ("idle", "warm"):
            torch.cuda.synchronize()
            if state == "idle":
                time.sleep(IDLE_S)
            else:
                _warm_up()
            rows.append({"kind": "idle", "n": n, "turn": turn, "state": state, "triton_ms": gpu_ms(lambda: add(x, y))})
    return rows


def _measure(n: int) -> dict:
    import torch

    from kernels.vector_add import add

    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    assert torch.equal(add(x, y), x + y), f"Triton add is wrong at n={n}"
    nbytes = 3 * n * 4  # read x, read y, write out
    _warm_up()
    triton_ms = gpu_ms(lambda: add(x, y))
    torch_ms = gpu_ms(lambda: torch.add(x, y))
    dst = torch.empty_like(x)
    copy_ms = gpu_ms(lambda: dst.copy_(x))
    host_ms = None
    if n <= CPU_MAX:
        cpu_x, cpu_y = x.cpu(), y.cpu()
        host_ms = cpu_ms(lambda: torch.add(cpu_x, cpu_y))
    return {
        "kind": "size",
        "n": n,
        "cpu_ms": host_ms,
        "torch_ms": torch_ms,
        "triton_ms": triton_ms,
        "copy_ms": copy_ms,
        "cpu_GBps": gbps(nbytes, host_ms),
        "torch_GBps": gbps(nbytes, torch_ms),
        "triton_GBps": gbps(nbytes, triton_ms),
        "copy_GBps": gbps(2 * n * 4, copy_ms),
    }


# Views

def _sizes(result: dict) -> list[dict]:
    """The rows of the size sweep (a file measured before the idle rows has only those, without a kind)."""
    return [row for row in result["rows"] if row.get("kind", "size") == "size"]


def _series(result: dict, keys: dict[str, str]) -> dict:
    xs = [row["n"] for row in _sizes(result)]
    return {label: (xs, [row[key] for row in _sizes(result)]) for label, key in keys.items()}


def time_plot(result: dict):
    return render.line_plot(
        _series(result, {"CPU (torch on the host)": "cpu_ms", "GPU: torch.add": "torch_ms",
                         "GPU: Triton add_kernel": "triton_ms"}),
        xlabel="Elements per vector", ylabel="Time (ms, median)", title="Vector add: time", logy=True,
    )


def gbps_plot(result: dict):
    return render.line_plot(
        _series(result, {"CPU (torch on the host)": "cpu_GBps", "GPU: torch.add": "torch_GBps",
                         "GPU: Triton add_kernel": "triton_GBps", "GPU: copy (reference)": "copy_GBps"}),
        xlabel="Elements per vector", ylabel="Bandwidth (GB/s, bytes read + written)",
        title="Vector add: bandwidth", logy=True,
    )


def table(result: dict) -> str:
    rows = [[f"{row['n']:,}", row["cpu_ms"], row["torch_ms"], row["triton_ms"], row["triton_GBps"],
             row["copy_GBps"], f"{row['triton_GBps'] / row['copy_GBps']:.0%}",
             None if row["cpu_ms"] is None else f"{row['cpu_ms'] / row['triton_ms']:.1f}×"]
            for row in _sizes(result)]
    return render.table(["Elements", "CPU ms", "torch.add ms", "Triton ms", "Triton GB/s", "Copy GB/s",
                         "Triton / copy", "Speed-up over CPU"], rows)


def target(result: dict) -> str:
    big = [row for row in _sizes(result) if row["n"] >= TARGET_FROM]
    shares = [row["triton_GBps"] / row["copy_GBps"] for row in big]
    met = all(share >= TARGET_SHARE for share in shares)
    verdict = "Target met" if met else "Target not met"
    kind = "success" if met else "failure"
    return (
        f'!!! {kind} "{verdict}: at least {TARGET_SHARE:.0%} of copy bandwidth from 2^26 elements up"\n\n'
        f"    From {TARGET_FROM:,} to {big[-1]['n']:,} elements the Triton kernel moves "
        f"{min(shares):.0%} to {max(shares):.0%} of the bytes per second that a plain copy of the same size "
        f"moves in the same run ({min(r['triton_GBps'] for r in big):,.0f} to "
        f"{max(r['triton_GBps'] for r in big):,.0f} GB/s).\n"
    )


def crossover(result: dict) -> str:
    """Sentences read from the rows: where the GPU overtakes the CPU, and up to where fixed costs dominate."""
    rows = sorted(_sizes(result), key=lambda row: row["n"])
    hosted = [row for row in rows if row["cpu_ms"] is not None]
    cpu_ahead = [row for row in hosted if row["cpu_ms"] <= row["triton_ms"]]
    gpu_from = next((row for row in hosted if all(r["cpu_ms"] > r["triton_ms"] for r in hosted if r["n"] >= row["n"])),
                    None)
    if gpu_from is None:
        text = (f"In this run the host CPU is as fast as the Triton kernel or faster at every size up to "
                f"{hosted[-1]['n']:,}.")
    else:
        fastest = max(hosted, key=lambda row: row["cpu_ms"] / row["triton_ms"])
        text = (f"In this run the GPU (the Triton kernel) is faster than the host CPU from {gpu_from['n']:,} "
                f"elements on: {gpu_from['cpu_ms'] / gpu_from['triton_ms']:.2f}× at {gpu_from['n']:,}, and up to "
                f"{fastest['cpu_ms'] / fastest['triton_ms']:.0f}× (at {fastest['n']:,}).")
        if cpu_ahead:
            text += f" The CPU is as fast or faster at {_listed(cpu_ahead)} elements, where the GPU time is "
            low, high = (min(row["triton_ms"] for row in cpu_ahead), max(row["triton_ms"] for row in cpu_ahead))
            if len(cpu_ahead) == 1:
                text += f"{_span_us(cpu_ahead, 'triton_ms')}, the fixed cost of a launch."
            elif high <= FLAT * low:
                text += f"{_span_us(cpu_ahead, 'triton_ms')}: about the same at each, the fixed cost of a launch."
            else:
                text += f"{_span_us(cpu_ahead, 'triton_ms')}: far from flat, so more than a launch's fixed cost."
    fixed = {name: _fixed_cost_bound(rows, key) for name, key in (("Triton kernel", "triton_GBps"),
                                                                    ("copy", "copy_GBps"))}
    if all(fixed.values()):
        text += (f" Up to {fixed['Triton kernel'][-1]['n']:,} elements for the Triton kernel, and up to "
                 f"{fixed['copy'][-1]['n']:,} for the copy, more than half of the time is fixed cost (launching "
                 f"and starting the kernel): each moves less than half the bytes per second it reaches at its best "
                 f"in this run. There the Triton / copy column compares two fixed costs, not two bandwidths.")
    return text + "\n"


def _fixed_cost_bound(rows: list[dict], key: str) -> list[dict]:
    """The rows where a kernel moves under half its best bytes per second: if time = fixed cost + bytes /
    bandwidth, the fixed cost is then more than half the time."""
    best = max(row[key] for row in rows)
    return [row for row in rows if row[key] < best / 2]


def _listed(rows: list[dict]) -> str:
    sizes = [f"{row['n']:,}" for row in rows]
    return sizes[0] if len(sizes) == 1 else ", ".join(sizes[:-1]) + " and " + sizes[-1]


def _span_us(rows: list[dict], key: str) -> str:
    lo, hi = min(row[key] for row in rows) * 1e3, max(row[key] for row in rows) * 1e3
    return f"{lo:.1f} µs" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f} to {hi:.1f} µs"


def idle(result: dict) -> str:
    """What a second of idling before the timing does to the Triton kernel's time at small sizes."""
    rows = [row for row in result["rows"] if row.get("kind") == "idle"]
    if not rows:
        return ("This run did not time the kernel after idling: it was measured before the benchmark warmed the GPU "
                "up before each size.")
    lines = []
    for n in sorted({row["n"] for row in rows}):
        times = {state: [row["triton_ms"] * 1e3 for row in rows if row["n"] == n and row["state"] == state]
                 for state in ("idle", "warm")}
        lines.append(f"- {n:,} elements: {min(times['idle']):.1f} to {max(times['idle']):.1f} µs right after "
                     f"{IDLE_S:.0f} s of idling, {min(times['warm']):.1f} to {max(times['warm']):.1f} µs right after "
                     f"{WARM_UP_S * 1e3:.0f} ms of GPU work ({len(times['idle'])} turns each).")
    return ("The Triton kernel's median time, timed in turns after idling and after a warm-up:\n\n"
            + "\n".join(lines) + "\n")


BENCHMARK = Benchmark(
    name="vector_add",
    chapter="ch02",
    title="Vector add",
    sources=["kernels/vector_add.py", "book/bench/vector_add.py"],
    run=run,
    views={"time-plot": time_plot, "gbps-plot": gbps_plot, "table": table, "target": target,
           "crossover": crossover, "idle": idle},
)
