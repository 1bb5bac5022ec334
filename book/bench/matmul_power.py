"""Chapter 1: why cuBLAS's matmul throughput differs between the book's runs, measured in one run.

Chapter 1's table and chapter 3's run time `torch.matmul` (cuBLAS) on 8192 x 8192 matrices slower than the
worklog of chapters 7 and 9, which times the same fp16 matmul in turns with attention kernels. Those are different
runs. This one times the same matmul four ways, in rounds, with the SM clock and the power draw sampled while each
way runs (nvidia-smi, book/telemetry.py):

- "back to back": plain calls, one after the other (`do_bench`, chapter 1's timer, here for 2 s);
- "alone, in turns": replayed from a CUDA graph, the L2 cleared before each call, nothing else in the turns
  (chapter 3's timer, with the matmul as its only contender);
- "in turns with attention": the same, taking turns with SDPA's causal attention forward (cuDNN or whichever
  backend PyTorch picks) at the worklog's shape (4 x 16 heads x 4,096 x 128), as the worklog times its
  matmul;
- "in turns with a pause": the same, taking turns with a kernel that only waits about a millisecond on one SM
  (`torch.cuda._sleep`), so the GPU draws little power between two matmuls.

Inputs are random normal, as in chapters 1 and 3, fp16 and bf16.
"""

from __future__ import annotations

import statistics

from book import render, telemetry
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms, gpu_ms_interleaved, tflops

N = 8192
DTYPES = ["float16", "bfloat16"]
ROUNDS = 3
BUDGET_MS = 2000  # GPU time per way per round
ATTENTION_SHAPE = (4, 16, 4096, 128)  # batch, heads, length, head dim: the worklog's shape at head dim 128
PAUSE_CYCLES = 2_000_000  # about 1 ms at the H200's clocks
MODES = ["back to back", "alone, in turns", "in turns with attention", "in turns with a pause"]


def _ways(a, b) -> dict:
    """Each way: a function that times the matmul that way and returns its median time in ms."""
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.randn(*ATTENTION_SHAPE, device="cuda", dtype=a.dtype) for _ in range(3))

    def matmul():
        return a @ b

    def attention():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def pause():
        torch.cuda._sleep(PAUSE_CYCLES)

    matmul(), attention(), pause()
    torch.cuda.synchronize()
    return {
        "back to back": lambda: gpu_ms(matmul, rep_ms=BUDGET_MS),
        "alone, in turns": lambda: gpu_ms_interleaved({"matmul": matmul}, budget_ms=BUDGET_MS)["matmul"],
        "in turns with attention": lambda: gpu_ms_interleaved({"matmul": matmul, "attention": attention},
                                                              budget_ms=BUDGET_MS)["matmul"],
        "in turns with a pause": lambda: gpu_ms_interleaved({"matmul": matmul, "pause": pause},
                                                            budget_ms=BUDGET_MS)["matmul"],
    }


def run(progress: Progress) -> list[dict]:
    import torch

    rows = []
    for dtype_name in DTYPES:
        dtype = getattr(torch, dtype_name)
        a, b = (torch.randn(N, N, device="cuda", dtype=dtype) for _ in range(2))
        ref = a[:64].double() @ b.double()
        err = ((a @ b)[:64].double() - ref).norm() / ref.norm()
        assert err < 1e-2, f"torch.matmul relative error {err:.2e}"
        ways = _ways(a, b)
        for round_number in range(1, ROUNDS + 1):
            shift = (round_number - 1) % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                with telemetry.Sampler() as sampler:
                    ms = ways[mode]()
                clocks = sampler.summary()
                rows.append({"dtype": dtype_name, "n": N, "mode": mode, "round": round_number, "ms": ms,
                             "TFLOPs": tflops(2 * N**3, ms),
                             "sm_mhz": clocks.get("sm_mhz", {}).get("median"),
                             "power_w": clocks.get("power_w", {}).get("median"),
                             "samples": clocks.get("samples", 0)})
                r = rows[-1]
                progress(f"{dtype_name} round {round_number} {mode}: {r['TFLOPs']:.0f} TFLOP/s, "
                         f"SM {r['sm_mhz']} MHz, {r['power_w']} W")
    return rows


# Views

def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def _by_way(result: dict) -> list[tuple[str, str, list[dict]]]:
    return [(dtype, mode, [r for r in result["rows"] if r["dtype"] == dtype and r["mode"] == mode])
            for dtype in DTYPES for mode in MODES]


def table(result: dict) -> str:
    rows = []
    for dtype, mode, picked in _by_way(result):
        speeds = [r["TFLOPs"] for r in picked]
        clock, power = _median(picked, "sm_mhz"), _median(picked, "power_w")
        rows.append([dtype, mode, f"{statistics.median(speeds):.0f}", f"{min(speeds):.0f}–{max(speeds):.0f}",
                     "–" if clock is None else f"{clock:.0f}", "–" if power is None else f"{power:.0f}"])
    return render.table(["dtype", "How it was timed", "TFLOP/s (median of rounds)", "Range over rounds",
                         "SM clock (MHz)", "Power (W)"], rows)


def summary(result: dict) -> str:
    fp16 = {mode: statistics.median(r["TFLOPs"] for r in picked)
            for dtype, mode, picked in _by_way(result) if dtype == "float16"}
    low, high = min(fp16, key=fp16.get), max(fp16, key=fp16.get)
    return (f"In this run the same fp16 {N:,}³ matmul ran at {fp16[low]:.0f} TFLOP/s {low} and at {fp16[high]:.0f} "
            f"{high}: {fp16[high] / fp16[low]:.2f}× apart. The clock and power columns show the GPU's state "
            "during each way.")


BENCHMARK = Benchmark(
    name="matmul_power",
    chapter="ch01",
    title="One cuBLAS matmul timed four ways: back to back, alone in turns, between attention calls, between pauses",
    sources=["book/bench/timing.py", "book/telemetry.py", "book/bench/matmul_power.py"],
    run=run,
    views={"table": table, "summary": summary},
    awaiting_gpu="issue 54: the probe of the cuBLAS gap between chapters 1, 3 and 9",
)
