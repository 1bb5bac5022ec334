"""Chapter 4: the fused Triton softmax against torch.softmax, with the copy of the same bytes as the reference.

The copy is a reference, not an upper bound: softmax and copy are different kernels, and a single-block
softmax moves the same bytes as the copy, so it can match it or beat it by a little. The online path moves
1.5 times the copy's bytes (two reads, one write), so without L2 hits it reaches at most 2/3 of the copy's
speed, counted in the copy's bytes.

For each dtype and row length, the tensor holds TENSOR_BYTES (far more than the L2 cache), so every kernel
streams from HBM. Bandwidth counts the bytes a softmax must move: the input read once and the output written
once, 2 * numel * itemsize, the same bytes a copy of the tensor moves.
"""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gbps, gpu_ms_or_oom

TENSOR_BYTES = 512 * 2**20  # 512 MiB per input tensor
N_COLS = [256, 512, 1000, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
DTYPES = ["float32", "float16"]
SINGLE_BLOCK_SHARE = 0.85  # target: at least this share of the copy bandwidth for rows that fit in one block
ONLINE_NO_REUSE = 2 / 3  # the online path's share of the copy's speed if its second read never hits in L2
L2_HELP_MARGIN = 0.02  # above the no-reuse share by more than this: the L2 cache served part of the second read
TORCH_SLACK = 0.02  # "not slower than torch.softmax": within 2%, about the run-to-run spread of a timing
CHECK_ROWS = 64  # rows checked against a float64 reference before timing


def run(progress: Progress) -> list[dict]:
    rows = []
    for dtype in DTYPES:
        for n_cols in N_COLS:
            rows.append(_measure(dtype, n_cols))
            r = rows[-1]
            progress(f"{dtype} n_cols={n_cols:>6} ({r['path']}): triton {r['triton_GBps']:6.0f} GB/s, "
                     f"torch {r['torch_GBps']:6.0f}, copy {r['copy_GBps']:6.0f}")
    return rows


def _measure(dtype_name: str, n_cols: int) -> dict:
    import torch

    from kernels.softmax import launch_config, softmax

    dtype = getattr(torch, dtype_name)
    itemsize = torch.empty((), dtype=dtype).element_size()
    n_rows = TENSOR_BYTES // (n_cols * itemsize)
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)

    # Correct before fast: the first and last rows against a float64 reference.
    out = softmax(x)
    for part in (slice(0, CHECK_ROWS), slice(n_rows - CHECK_ROWS, n_rows)):
        ref = torch.softmax(x[part].double(), dim=-1)
        err = ((out[part].double() - ref).norm() / ref.norm()).item()
        assert err < (1e-5 if dtype == torch.float32 else 2e-3), f"softmax wrong: {dtype_name} {n_cols}: {err:.2e}"
    del out

    nbytes = 2 * x.numel() * itemsize  # read x once, write the output once
    triton_ms = gpu_ms_or_oom(lambda: softmax(x))
    torch_ms = gpu_ms_or_oom(lambda: torch.softmax(x, dim=-1))
    dst = torch.empty_like(x)
    copy_ms = gpu_ms_or_oom(lambda: dst.copy_(x))
    config = launch_config(n_cols)
    row = {
        "dtype": dtype_name,
        "n_cols": n_cols,
        "n_rows": n_rows,
        "MiB": x.numel() * itemsize / 2**20,
        "path": config["path"],
        "block_size": config["block_size"],
        "rows_per_program": config["rows_per_program"],
        "num_warps": config["num_warps"],
        "triton_ms": triton_ms,
        "torch_ms": torch_ms,
        "copy_ms": copy_ms,
        "triton_GBps": gbps(nbytes, triton_ms),
        "torch_GBps": gbps(nbytes, torch_ms),
        "copy_GBps": gbps(nbytes, copy_ms),
    }
    return row


# Views
# Functions of a result dict, computed from its rows.

def _span(lo: float, hi: float, fmt: str, unit: str = "") -> str:
    """'90% to 93%', or just '90%' when both ends round the same."""
    a, b = format(lo, fmt) + unit, format(hi, fmt) + unit
    return a if a == b else f"{a} to {b}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def gbps_plot(result: dict):
    import matplotlib.pyplot as plt

    dtypes = [d for d in DTYPES if any(r["dtype"] == d for r in result["rows"])]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(7.5, 3.8), sharey=True, squeeze=False)
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        rows = sorted((r for r in result["rows"] if r["dtype"] == dtype), key=lambda r: r["n_cols"])
        for key, label, marker in [("triton_GBps", "Triton softmax (ours)", "o"),
                                   ("torch_GBps", "torch.softmax", "s"),
                                   ("copy_GBps", "copy of the same bytes", "")]:
            points = [(r["n_cols"], r[key]) for r in rows if r[key] is not None]
            if points:
                style = {"linestyle": "--", "color": "grey"} if key == "copy_GBps" else {}
                ax.plot(*zip(*points, strict=True), marker=marker or None, markersize=4, label=label, **style)
        online = [r["n_cols"] for r in rows if r["path"] == "online"]
        if online:
            ax.axvspan(min(online), max(online), color="tab:orange", alpha=0.08, label="online two-pass path")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("Row length (values)")
        ax.set_title(dtype)
    axes[0][0].set_ylabel("GB/s (bytes read + written)")
    axes[0][0].set_ylim(bottom=0)
    axes[0][-1].legend(fontsize=8, loc="lower left")
    fig.suptitle("Softmax over rows of a 512 MiB tensor", fontsize=10)
    fig.tight_layout()
    return fig


def table(result: dict) -> str:
    rows = []
    for r in sorted(result["rows"], key=lambda r: (DTYPES.index(r["dtype"]) if r["dtype"] in DTYPES else 9,
                                                    r["n_cols"])):
        share = _ratio(r["triton_GBps"], r["copy_GBps"])
        speed = _ratio(r["torch_ms"], r["triton_ms"])
        rows.append([r["dtype"], f"{r['n_cols']:,}", f"{r['n_rows']:,}", r["path"], r["triton_GBps"],
                     r["torch_GBps"], r["copy_GBps"], None if share is None else f"{share:.0%}",
                     None if speed is None else f"{speed:.2f}×"])
    return render.table(["dtype", "Row length", "Rows", "Path", "Triton GB/s", "torch GB/s", "Copy GB/s",
                         "Triton / copy", "Speed vs torch"], rows)


def target(result: dict) -> str:
    # Each verdict uses the rows that have the timings it needs (None: out of memory or not run).
    vs_copy = [r for r in result["rows"] if r["triton_ms"] is not None and r["copy_ms"] is not None]
    rows = [r for r in result["rows"] if r["triton_ms"] is not None and r["torch_ms"] is not None]
    single = [r for r in vs_copy if r["path"] == "single block"]
    shares = [r["triton_GBps"] / r["copy_GBps"] for r in single]
    speeds = [r["torch_ms"] / r["triton_ms"] for r in rows]
    out = []

    if shares:
        met = min(shares) >= SINGLE_BLOCK_SHARE
        worst = single[shares.index(min(shares))]
        out.append(
            f'!!! {"success" if met else "failure"} "{"Target met" if met else "Target not met"}: at least '
            f'{SINGLE_BLOCK_SHARE:.0%} of copy bandwidth for rows that fit in one block"\n\n'
            f"    For rows of {min(r['n_cols'] for r in single):,} to {max(r['n_cols'] for r in single):,} values "
            f"(the single-block path), the kernel moves {_span(min(shares), max(shares), '.0%')} of the bytes per "
            f"second of a copy of the same tensor in the same run ("
            f"{_span(min(r['triton_GBps'] for r in single), max(r['triton_GBps'] for r in single), ',.0f')} "
            f"GB/s). The lowest share is at {worst['dtype']}, "
            f"{worst['n_cols']:,} values per row.\n"
        )

    if speeds:
        met = min(speeds) >= 1 - TORCH_SLACK
        slowest = rows[speeds.index(min(speeds))]
        slower = [r for r, s in zip(rows, speeds, strict=True) if s < 1 - TORCH_SLACK]
        detail = ("" if met else " Slower than torch at: " + ", ".join(
            f"{r['dtype']} {r['n_cols']:,} ({r['torch_ms'] / r['triton_ms']:.2f}×)" for r in slower) + ".")
        out.append(
            f'!!! {"success" if met else "failure"} "{"Target met" if met else "Target not met"}: not slower '
            f'than torch.softmax at any row length (within {TORCH_SLACK:.0%})"\n\n'
            f"    Over {len(rows)} measured shapes, the Triton kernel runs at "
            f"{_span(min(speeds), max(speeds), '.2f', '×')} "
            f"the speed of torch.softmax (torch's time divided by ours). The lowest ratio is at "
            f"{slowest['dtype']} with {slowest['n_cols']:,} values per row ({slowest['path']} path).{detail}\n"
        )

    online = [r for r in vs_copy if r["path"] == "online"]
    if online:
        o_shares = [r["triton_GBps"] / r["copy_GBps"] for r in online]
        if max(o_shares) > ONLINE_NO_REUSE + L2_HELP_MARGIN:
            reading = "above that share, so the L2 cache served part of the second read"
        elif max(o_shares) >= ONLINE_NO_REUSE - L2_HELP_MARGIN:
            reading = "about that share, so the data show no help from the L2 cache"
        else:
            reading = "below that share: the path does not reach even the speed its traffic allows"
        out.append(
            f"Rows longer than one block ({min(r['n_cols'] for r in online):,} values and up) take the online "
            f"two-pass path. It reads every value twice and writes it once, 1.5 times a copy's bytes, so if the "
            f"second read never hits in the L2 cache it can reach about {ONLINE_NO_REUSE:.1%} of the copy's speed "
            f"(counted, as everywhere here, in the copy's bytes). In this run it moved "
            f"{_span(min(o_shares), max(o_shares), '.0%')} of the copy's bytes per second: {reading}.\n"
        )
    return "\n".join(out) if out else "No complete rows in this result.\n"


BENCHMARK = Benchmark(
    name="softmax",
    chapter="ch04",
    title="Fused softmax vs torch.softmax",
    sources=["kernels/softmax.py", "book/bench/softmax.py"],
    run=run,
    views={"gbps-plot": gbps_plot, "table": table, "target": target},
)
