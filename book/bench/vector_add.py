"""Chapter 2: vector add on the CPU (torch on the host) and on the GPU (torch.add and our Triton kernel),
with the device-to-device copy bandwidth measured at each size as the reference.

The copy is a reference, not an upper bound: an add reads two vectors and writes one, a copy reads one and
writes one, and the two are different kernels. Only the datasheet peak bounds both.
"""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import cpu_ms, gbps, gpu_ms

SIZES = [10**3, 10**4, 10**5, 10**6, 10**7, 2**24, 2**26, 10**8, 2**27, 2**28]
CPU_MAX = 10**8  # the host run gets slow past this; the GPU sizes go further
TARGET_FROM = 2**26  # the chapter's target: >= 90% of copy bandwidth from here up
TARGET_SHARE = 0.90


def run(progress: Progress) -> list[dict]:
    rows = []
    for n in SIZES:
        rows.append(_measure(n))
        progress(f"n={n:>10}: triton {rows[-1]['triton_GBps']:7.1f} GB/s, copy {rows[-1]['copy_GBps']:7.1f} GB/s")
    return rows


def _measure(n: int) -> dict:
    import torch

    from kernels.vector_add import add

    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    assert torch.equal(add(x, y), x + y), f"Triton add is wrong at n={n}"
    nbytes = 3 * n * 4  # read x, read y, write out
    triton_ms = gpu_ms(lambda: add(x, y))
    torch_ms = gpu_ms(lambda: torch.add(x, y))
    dst = torch.empty_like(x)
    copy_ms = gpu_ms(lambda: dst.copy_(x))
    host_ms = None
    if n <= CPU_MAX:
        cpu_x, cpu_y = x.cpu(), y.cpu()
        host_ms = cpu_ms(lambda: torch.add(cpu_x, cpu_y))
    return {
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


def _series(result: dict, keys: dict[str, str]) -> dict:
    xs = [row["n"] for row in result["rows"]]
    return {label: (xs, [row[key] for row in result["rows"]]) for label, key in keys.items()}


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
            for row in result["rows"]]
    return render.table(["Elements", "CPU ms", "torch.add ms", "Triton ms", "Triton GB/s", "Copy GB/s",
                         "Triton / copy", "Speed-up over CPU"], rows)


def target(result: dict) -> str:
    big = [row for row in result["rows"] if row["n"] >= TARGET_FROM]
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
    rows = sorted(result["rows"], key=lambda row: row["n"])
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
                f"elements on: {gpu_from['cpu_ms'] / gpu_from['triton_ms']:.1f}× at {gpu_from['n']:,}, and up to "
                f"{fastest['cpu_ms'] / fastest['triton_ms']:.0f}× (at {fastest['n']:,}).")
        if cpu_ahead:
            text += (f" The CPU is as fast or faster at {_listed(cpu_ahead)} elements, where the GPU time is "
                     f"{_span_us(cpu_ahead, 'triton_ms')}: about the same at each of them: the fixed cost of a launch.")
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


BENCHMARK = Benchmark(
    name="vector_add",
    chapter="ch02",
    title="Vector add",
    sources=["kernels/vector_add.py", "book/bench/vector_add.py"],
    run=run,
    views={"time-plot": time_plot, "gbps-plot": gbps_plot, "table": table, "target": target,
           "crossover": crossover},
)
