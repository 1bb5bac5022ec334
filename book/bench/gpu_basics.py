"""Chapter 1: the GPU's own ceilings, measured: copy bandwidth, matmul throughput, launch overhead."""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gbps, gpu_ms, tflops
from book.datasheets import for_gpu

COPY_BYTES = 4 * 2**30  # a 4 GiB buffer: far larger than the 50-60 MB L2, so the copy streams from HBM
MATMUL_SIZES = [4096, 8192]


def run(progress: Progress) -> list[dict]:
    import torch

    rows = [_copy_row()]
    progress(f"copy 4 GiB: {rows[-1]['TBps']:.2f} TB/s")

    for dtype in (torch.float16, torch.bfloat16):
        for n in MATMUL_SIZES:
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            ref = a[:64].double() @ b.double()
            err = ((a @ b)[:64].double() - ref).norm() / ref.norm()
            assert err < 1e-2, f"torch.matmul relative error {err:.2e}"
            ms = gpu_ms(lambda a=a, b=b: a @ b)
            rows.append({"quantity": "matmul", "dtype": str(dtype).removeprefix("torch."), "size": n, "ms": ms,
                         "TFLOPs": tflops(2 * n**3, ms)})
            progress(f"matmul {rows[-1]['dtype']} {n}: {rows[-1]['TFLOPs']:.0f} TFLOP/s")

    # Launch overhead: the time of a kernel that does almost nothing (adds two 1-element tensors).
    x = torch.randn(1, device="cuda")
    ms = gpu_ms(lambda: torch.add(x, x))
    rows.append({"quantity": "tiny kernel", "dtype": "float32", "size": 1, "ms": ms, "us": ms * 1e3})
    progress(f"tiny kernel: {ms * 1e3:.1f} us")
    return rows


def _copy_row() -> dict:
    import torch

    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    assert torch.equal(dst, src), "device-to-device copy is wrong"
    ms = gpu_ms(lambda: dst.copy_(src))
    # A copy reads every byte once and writes it once.
    return {"quantity": "copy", "dtype": "float32", "size": COPY_BYTES, "ms": ms,
            "TBps": gbps(2 * COPY_BYTES, ms) / 1e3}


def ceilings_table(result: dict) -> str:
    """Measured ceilings beside the datasheet peaks, with the ratio."""
    sheet = for_gpu(result["provenance"]["gpu"])
    rows = []
    for row in result["rows"]:
        if row["quantity"] == "copy":
            peak = sheet.hbm_tbps if sheet else None
            rows.append(["Device-to-device copy, 4 GiB (bytes read + written)", f"{row['TBps']:.2f} TB/s",
                         f"{peak} TB/s" if peak else "—", _ratio(row["TBps"], peak)])
        elif row["quantity"] == "matmul":
            peak = sheet.dense_fp16_tflops if sheet else None
            rows.append([f"`torch.matmul` {row['dtype']}, {row['size']}³", f"{row['TFLOPs']:.0f} TFLOP/s",
                         f"{peak:.0f} TFLOP/s" if peak else "—", _ratio(row["TFLOPs"], peak)])
        elif row["quantity"] == "tiny kernel":
            rows.append(["Time of a kernel on one element (launch overhead)", f"{row['us']:.1f} µs", "—", "—"])
    source = f"Datasheet peaks: {sheet.source} ({sheet.model}), dense, no sparsity." if sheet else ""
    return render.table(["Quantity", "Measured", "Datasheet peak", "Measured / peak"], rows) + "\n\n" + source


def _ratio(measured: float, peak: float | None) -> str:
    return f"{measured / peak:.0%}" if peak else "—"


def roofline_plot(result: dict):
    """The roofline drawn with the measured ceilings, and where three kernels sit on it."""
    import matplotlib.pyplot as plt
    import numpy as np

    copy = next(r for r in result["rows"] if r["quantity"] == "copy")
    best = max(r["TFLOPs"] for r in result["rows"] if r["quantity"] == "matmul")
    bandwidth = copy["TBps"] * 1e12
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
    views={"ceilings": ceilings_table, "roofline": roofline_plot},
)
