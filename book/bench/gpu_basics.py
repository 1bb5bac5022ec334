"""Chapter 1: the GPU's own ceilings, measured: copy bandwidth, matmul throughput, launch overhead.

Every quantity is measured in ROUNDS independent rounds: each round times every quantity once (its own
warm-up, its own median), then the next round starts. The views show the median of the rounds, and the
spread from the slowest to the fastest round, so that the reader sees how much one measurement moves
between runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gbps, gpu_ms, tflops
from book.datasheets import for_gpu

COPY_BYTES = 4 * 2**30  # a 4 GiB buffer: far larger than the 50-60 MB L2, so the copy streams from HBM
MATMUL_SIZES = [4096, 8192]
ROUNDS = 6  # about 1 s of GPU time per round


def run(progress: Progress) -> list[dict]:
    quantities = _quantities()
    rows = []
    for round_number in range(1, ROUNDS + 1):
        for describe, fn, measure in quantities:
            rows.append({**describe, **measure(gpu_ms(fn)), "round": round_number})
        progress(f"round {round_number}: " + ", ".join(_label(row) for row in rows[-len(quantities):]))
    return rows


def _quantities() -> list[tuple[dict, Callable[[], object], Callable[[float], dict]]]:
    """What each round times: (the row's description, the call, its time in ms -> the row's measurements)."""
    import torch

    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    assert torch.equal(dst, src), "device-to-device copy is wrong"
    # A copy reads every byte once and writes it once.
    quantities = [({"quantity": "copy", "dtype": "float32", "size": COPY_BYTES}, lambda: dst.copy_(src),
                   lambda ms: {"ms": ms, "TBps": gbps(2 * COPY_BYTES, ms) / 1e3})]

    for dtype in (torch.float16, torch.bfloat16):
        for n in MATMUL_SIZES:
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            ref = a[:64].double() @ b.double()
            err = ((a @ b)[:64].double() - ref).norm() / ref.norm()
            assert err < 1e-2, f"torch.matmul relative error {err:.2e}"
            quantities.append(({"quantity": "matmul", "dtype": str(dtype).removeprefix("torch."), "size": n},
                               lambda a=a, b=b: a @ b,
                               lambda ms, n=n: {"ms": ms, "TFLOPs": tflops(2 * n**3, ms)}))

    # Launch overhead: the time of a kernel that does almost nothing (adds two 1-element tensors).
    x = torch.randn(1, device="cuda")
    quantities.append(({"quantity": "tiny kernel", "dtype": "float32", "size": 1}, lambda: torch.add(x, x),
                       lambda ms: {"ms": ms, "us": ms * 1e3}))
    return quantities


# Views
# Each quantity's measurement, its unit and how it is printed.
MEASURE = {"copy": ("TBps", "TB/s", ".2f"), "matmul": ("TFLOPs", "TFLOP/s", ".0f"), "tiny kernel": ("us", "µs", ".1f")}


def _label(row: dict) -> str:
    key, unit, fmt = MEASURE[row["quantity"]]
    return f"{row['quantity']} {row['dtype']} {row['size']}: {row[key]:{fmt}} {unit}"


def _rounds(result: dict) -> list[dict]:
    """One entry per quantity, in the order measured: its first row, and its measurements over the rounds.

    Results from before the rounds existed have one row per quantity and no 'round' field: one round.
    """
    grouped: dict[tuple, dict] = {}
    for row in result["rows"]:
        key, _, _ = MEASURE[row["quantity"]]
        entry = grouped.setdefault((row["quantity"], row["dtype"], row["size"]), {"row": row, "values": []})
        entry["values"].append(row[key])
    return list(grouped.values())


def _median(result: dict, quantity: str) -> list[tuple[dict, float]]:
    return [(entry["row"], statistics.median(entry["values"])) for entry in _rounds(result)
            if entry["row"]["quantity"] == quantity]


def _name(row: dict) -> str:
    if row["quantity"] == "copy":
        return f"Device-to-device copy, {row['size'] / 2**30:.0f} GiB (bytes read + written)"
    if row["quantity"] == "matmul":
        return f"`torch.matmul` {row['dtype']}, {row['size']}³"
    return "Time of a kernel on one element (launch overhead)"


def ceilings_table(result: dict) -> str:
    """Measured ceilings (median of the rounds) beside the datasheet peaks, with the ratio."""
    sheet = for_gpu(result["provenance"]["gpu"])
    peaks = {"copy": sheet.hbm_tbps if sheet else None, "matmul": sheet.dense_fp16_tflops if sheet else None}
    rows = []
    for entry in _rounds(result):
        row, value = entry["row"], statistics.median(entry["values"])
        _, unit, fmt = MEASURE[row["quantity"]]
        peak = peaks.get(row["quantity"])
        rows.append([_name(row), f"{value:{fmt}} {unit}", f"{peak:g} {unit}" if peak else "—", _ratio(value, peak)])
    rounds = max(len(entry["values"]) for entry in _rounds(result))
    measured = f"Measured (median of {rounds} rounds)" if rounds > 1 else "Measured"
    source = (f"Datasheet peaks: {sheet.source} ({sheet.model}, {sheet.sms} SMs), dense, no sparsity."
              if sheet else "")
    return render.table(["Quantity", measured, "Datasheet peak", "Measured / peak"], rows) + "\n\n" + source


def _ratio(measured: float, peak: float | None) -> str:
    return f"{measured / peak:.0%}" if peak else "—"


def spread_table(result: dict) -> str:
    """Each quantity over the rounds: median, slowest and fastest round, and the spread between them."""
    entries = _rounds(result)
    rounds = max(len(entry["values"]) for entry in entries)
    if rounds < 2:
        return ("These results hold one round per quantity, so they show no spread; the benchmark measures "
                "several rounds since, and the table appears with its next run.")
    rows = []
    for entry in entries:
        _, unit, fmt = MEASURE[entry["row"]["quantity"]]
        values = entry["values"]
        middle = statistics.median(values)
        rows.append([_name(entry["row"]), f"{middle:{fmt}} {unit}", f"{min(values):{fmt}} to {max(values):{fmt}}",
                     f"{(max(values) - min(values)) / middle:.1%}"])
    widest = max(entries, key=lambda entry: _spread(entry["values"]))
    matmul_widest = max(_spread(entry["values"]) for entry in entries if entry["row"]["quantity"] == "matmul")
    table = render.table(["Quantity", f"Median of {rounds} rounds", "Lowest to highest round",
                          "Spread (highest − lowest) / median"], rows)
    return (table + f"\n\nThe widest spread is {_spread(widest['values']):.1%}, for "
            f"{_name(widest['row']).split(' (')[0]}; the widest for a `torch.matmul` is {matmul_widest:.1%}.")


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def roofline_plot(result: dict):
    """The roofline drawn with the measured ceilings (medians of the rounds), and where three kernels sit on it."""
    import matplotlib.pyplot as plt
    import numpy as np

    bandwidth = _median(result, "copy")[0][1] * 1e12
    best = max(value for _, value in _median(result, "matmul"))
    peak = best * 1e12
    intensity = np.logspace(-2, 4, 200)
    attainable = np.minimum(peak, bandwidth * intensity) / 1e12
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    ax.loglog(intensity, attainable, color="black", linewidth=1.5, label="measured roofline")
    ridge = peak / bandwidth
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    ax.annotate(f"ridge ≈ {ridge:.0f} FLOP/byte", (ridge, best / 30), rotation=90, fontsize=8, ha="right")
    points = {"vector add (fp32)": 1 / 12, "softmax (fp16)": 1.25, "matmul 4096³ (fp16)": 4096 / 3}
    for label, x in points.items():
        ax.plot(x, min(peak, bandwidth * x) / 1e12, "o", label=f"{label}: {x:.3g} FLOP/byte")
    ax.set_xlabel("Arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("Attainable throughput (TFLOP/s)")
    ax.set_title(f"Roofline of {result['provenance']['gpu']} from measured ceilings")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


BENCHMARK = Benchmark(
    name="gpu_basics",
    chapter="ch01",
    title="GPU ceilings",
    sources=["book/bench/gpu_basics.py"],
    run=run,
    views={"ceilings": ceilings_table, "spread": spread_table, "roofline": roofline_plot},
)
