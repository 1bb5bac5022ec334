"""Chapter 3: the tiled Triton matmul against torch.matmul (cuBLAS), square sizes, fp16 and bf16, same run."""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms, tflops
from book.datasheets import for_gpu

SIZES = [256, 512, 1024, 2048, 4096, 8192]
DTYPES = ["float16", "bfloat16"]
TARGET_SIZES = (4096, 8192)
TARGET_RATIO = 0.9  # the chapter's target: at least 0.9x cuBLAS at the target sizes, both dtypes
GOAL_RATIO = 1.0  # the real goal: as fast as cuBLAS or faster
BOUNDS = {"float16": 2e-3, "bfloat16": 1.5e-2}  # relative error against float64, as in tests/test_matmul.py
CHECK_ROWS = 256  # rows of C checked against float64 before timing


def run(progress: Progress) -> list[dict]:
    rows = []
    for dtype in DTYPES:
        for n in SIZES:
            row = _measure(n, dtype)
            rows.append(row)
            progress(f"{dtype} {n}: triton {row['triton_TFLOPs']:6.1f} TFLOP/s, cuBLAS {row['torch_TFLOPs']:6.1f} "
                     f"TFLOP/s, ratio {row['ratio']:.2f} ({row['config']})")
    return rows


def _measure(n: int, dtype_name: str) -> dict:
    import torch

    from kernels.matmul import describe, matmul, matmul_kernel

    dtype = getattr(torch, dtype_name)
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    c = matmul(a, b)  # the first call for a shape autotunes it
    config = describe(matmul_kernel.best_config)
    ref = a[:CHECK_ROWS].double() @ b.double()
    errors = {name: ((out[:CHECK_ROWS].double() - ref).norm() / ref.norm()).item()
              for name, out in (("triton", c), ("torch", a @ b))}
    # Only our kernel must pass before it is timed; cuBLAS's error is recorded beside it.
    assert errors["triton"] < BOUNDS[dtype_name], f"Triton {dtype_name} {n}: relative error {errors['triton']:.2e}"
    triton_ms = gpu_ms(lambda: matmul(a, b))
    torch_ms = gpu_ms(lambda: torch.matmul(a, b))
    flops = 2 * n**3
    return {
        "dtype": dtype_name,
        "n": n,
        "triton_ms": triton_ms,
        "torch_ms": torch_ms,
        "triton_TFLOPs": tflops(flops, triton_ms),
        "torch_TFLOPs": tflops(flops, torch_ms),
        "ratio": torch_ms / triton_ms,  # Triton's throughput over cuBLAS's
        "config": config,
        "triton_rel_error": errors["triton"],
        "torch_rel_error": errors["torch"],
    }


def _rows(result: dict, dtype: str) -> list[dict]:
    return sorted((row for row in result["rows"] if row["dtype"] == dtype), key=lambda row: row["n"])


def tflops_plot(result: dict):
    series = {}
    for dtype in DTYPES:
        rows = _rows(result, dtype)
        xs = [row["n"] for row in rows]
        series[f"Triton matmul, {dtype}"] = (xs, [row["triton_TFLOPs"] for row in rows])
        series[f"torch.matmul (cuBLAS), {dtype}"] = (xs, [row["torch_TFLOPs"] for row in rows])
    sheet = for_gpu(result["provenance"]["gpu"])
    hlines = None
    if sheet:
        hlines = {f"datasheet peak, dense fp16/bf16: {sheet.dense_fp16_tflops:.0f}": sheet.dense_fp16_tflops}
    return render.line_plot(series, xlabel="Matrix size n (n × n times n × n)", ylabel="TFLOP/s (2n³ FLOPs / time)",
                            title="Tiled matmul: Triton vs cuBLAS", hlines=hlines)


def table(result: dict) -> str:
    rows = []
    for dtype in DTYPES:
        for row in _rows(result, dtype):
            rows.append([dtype, f"{row['n']:,}", row["triton_TFLOPs"], row["torch_TFLOPs"], f"{row['ratio']:.2f}×",
                         row["triton_ms"], row["torch_ms"], row["config"]])
    return render.table(["dtype", "n", "Triton TFLOP/s", "cuBLAS TFLOP/s", "Triton / cuBLAS", "Triton ms",
                         "cuBLAS ms", "Block sizes the autotuner picked"], rows)


def target(result: dict) -> str:
    targeted = [row for row in result["rows"] if row["n"] in TARGET_SIZES]
    worst = min(targeted, key=lambda row: row["ratio"])
    if worst["ratio"] >= GOAL_RATIO:
        kind, verdict = "success", f"Goal met: as fast as cuBLAS or faster at {_sizes()}, both dtypes"
    elif worst["ratio"] >= TARGET_RATIO:
        kind, verdict = "success", (f"Target met: at least {TARGET_RATIO}× cuBLAS at {_sizes()}, both dtypes; "
                                    f"the {GOAL_RATIO:.1f}× goal is not reached yet")
    else:
        kind, verdict = "failure", f"Target not met: below {TARGET_RATIO}× cuBLAS at {_sizes()}"
    ratios = "; ".join(f"{row['dtype']} {row['n']}: {row['ratio']:.2f}× ({row['triton_TFLOPs']:.0f} vs "
                       f"{row['torch_TFLOPs']:.0f} TFLOP/s)" for row in sorted(targeted, key=_order))
    text = (f'!!! {kind} "{verdict}"\n\n'
            f"    Triton over cuBLAS, measured in the same run: {ratios}. The weakest is {worst['dtype']} at "
            f"{worst['n']}, at {worst['ratio']:.2f}×.")
    sheet = for_gpu(result["provenance"]["gpu"])
    if sheet:
        best = max(targeted, key=lambda row: row["triton_TFLOPs"])
        text += (f" The fastest Triton run, {best['dtype']} at {best['n']}, reaches "
                 f"{best['triton_TFLOPs'] / sheet.dense_fp16_tflops:.0%} of the datasheet peak "
                 f"({sheet.dense_fp16_tflops:.0f} TFLOP/s dense, {sheet.source}).")
    return text + "\n"


def small_sizes(result: dict) -> str:
    """A sentence on the small sizes, where neither library fills the GPU."""
    small = [row for row in result["rows"] if row["n"] < min(TARGET_SIZES)]
    lo, hi = min(small, key=lambda row: row["ratio"]), max(small, key=lambda row: row["ratio"])
    beaten = [row for row in small if row["ratio"] < TARGET_RATIO]
    text = (f"Below {min(TARGET_SIZES):,}, Triton runs at {lo['ratio']:.2f}× ({lo['dtype']}, n = {lo['n']:,}) to "
            f"{hi['ratio']:.2f}× ({hi['dtype']}, n = {hi['n']:,}) the speed of cuBLAS.")
    if beaten:
        listed = ", ".join(f"{row['dtype']} {row['n']:,}" for row in sorted(beaten, key=_order))
        text += f" It is below {TARGET_RATIO}× at {listed}."
    else:
        text += f" It stays at or above {TARGET_RATIO}× at every small size."
    return text


def _order(row: dict) -> tuple[int, int]:
    return DTYPES.index(row["dtype"]), row["n"]


def _sizes() -> str:
    return " and ".join(f"{n:,}" for n in TARGET_SIZES)


BENCHMARK = Benchmark(
    name="matmul",
    chapter="ch03",
    title="Tiled matmul vs cuBLAS",
    sources=["kernels/matmul.py", "book/bench/matmul.py"],
    run=run,
    views={"tflops-plot": tflops_plot, "table": table, "target": target, "small-sizes": small_sizes},
)
