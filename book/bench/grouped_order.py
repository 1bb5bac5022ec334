"""Chapter 3: what grouped ordering is worth, measured: the Triton matmul with GROUP_M from 1 (row-major) to 64.

Chapter 3 counts the panels of A and B that the programs in flight read (its snippet and exercise 4) and predicts
that grouping tile-rows saves L2 traffic. This probe times chapter 3's kernel (`kernels.matmul.matmul`, pointer
loads) on square fp16 and bf16 matrices of 8192, with the tile shape the autotuner picks there and GROUP_M set to
1, 2, 4, 8 (the kernel's default), 16 and 64, every setting timed in the same turns from CUDA graphs (chapter 7's
timer), next to cuBLAS. Random normal inputs; each setting's first 256 rows are checked against float64 first.
"""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops

N = 8192
DTYPES = ["float16", "bfloat16"]
GROUPS = [1, 2, 4, 8, 16, 64]
DEFAULT = 8
CHECK_ROWS = 256
BOUND = 1e-2  # relative error of the first rows against float64
BUDGET_MS = 3000


def measure(dtype_name: str) -> list[dict]:
    import torch
    import triton

    from kernels.matmul import describe, matmul, matmul_kernel

    dtype = getattr(torch, dtype_name)
    a, b = (torch.randn(N, N, device="cuda", dtype=dtype) for _ in range(2))
    matmul(a, b)  # autotunes this shape
    best = matmul_kernel.best_config
    configs = {g: triton.Config({**best.kwargs, "GROUP_M": g}, num_warps=best.num_warps,
                                num_stages=best.num_stages) for g in GROUPS}
    ref = a[:CHECK_ROWS].double() @ b.double()
    for g, config in configs.items():
        error = ((matmul(a, b, config)[:CHECK_ROWS].double() - ref).norm() / ref.norm()).item()
        assert error < BOUND, f"GROUP_M={g} {dtype_name}: relative error {error:.2e}"
    fns = {f"group_{g}": (lambda config=config: matmul(a, b, config)) for g, config in configs.items()}
    times = gpu_ms_interleaved({**fns, "cublas": lambda: torch.matmul(a, b)}, budget_ms=BUDGET_MS)
    return [{"dtype": dtype_name, "n": N, "config": describe(best), "group_m": g,
             "ms": times[f"group_{g}"], "TFLOPs": tflops(2 * N**3, times[f"group_{g}"]),
             "to_default": times[f"group_{DEFAULT}"] / times[f"group_{g}"],
             "cublas_TFLOPs": tflops(2 * N**3, times["cublas"])} for g in GROUPS]


def run(progress: Progress) -> list[dict]:
    rows = []
    for dtype_name in DTYPES:
        rows += measure(dtype_name)
        progress(f"{dtype_name} {N}: " + ", ".join(f"GROUP_M={r['group_m']} {r['TFLOPs']:.0f}"
                                                    for r in rows[-len(GROUPS):]) + " TFLOP/s")
    return rows


# Views

def table(result: dict) -> str:
    rows = [[r["dtype"], r["group_m"], f"{r['TFLOPs']:.0f}", f"{r['to_default']:.3f}", f"{r['cublas_TFLOPs']:.0f}",
             r["config"]] for r in result["rows"]]
    return render.table(["dtype", "GROUP_M", "TFLOP/s", f"Speed / GROUP_M = {DEFAULT}", "cuBLAS, same turns",
                         "Tile (autotuned at GROUP_M = 8)"], rows)


def summary(result: dict) -> str:
    parts = []
    for dtype in DTYPES:
        speeds = [r["TFLOPs"] for r in result["rows"] if r["dtype"] == dtype]
        parts.append(f"{dtype}: the fastest setting {max(speeds) / min(speeds):.3f}× the slowest")
    return (f"At {N:,}³ in this run, one median per setting, no repeated rounds: " + "; ".join(parts)
            + ". Differences this small cannot rank the settings.")


BENCHMARK = Benchmark(
    name="grouped_order",
    chapter="ch03",
    title="Grouped ordering measured: the Triton matmul at GROUP_M from 1 to 64",
    sources=["kernels/matmul.py", "book/bench/grouped_order.py"],
    run=run,
    views={"table": table, "summary": summary},
    awaiting_gpu="issue 54: grouped ordering measured, asked by chapter 3's reader",
)
