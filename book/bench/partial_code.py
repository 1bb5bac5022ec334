"""Chapter 11 (the real-shapes page): what the Gluon forward's partial-length code costs at a whole length.

The Gluon forward compiles one of two variants (kernels/flash_attention_hopper.py, WHOLE): at lengths that are a
multiple of 128 the code without bounds masks or row-by-row stores, at any other length the code with them. The
any-length benchmark compares ours at N = 1,000, 5,000 and 8,191 with ours at the nearest multiple of 128, so its
ratio mixes two things: the other variant of the code, and the length itself (a partial last tile and block).
This probe separates them, at the any-length benchmark's shapes (Llama-3.1-8B: 32 query heads, 8 K/V heads, head
dim 128, bf16, causal, the batch of the partial length), and at GPT-2's (12 heads of dim 64) at the two lengths
where the real-model benchmark has its prefill behind cuDNN. Three calls per row, timed in the same turns from CUDA
graphs (chapter 7's timer):

- "whole code": the kernel as the wrapper launches it at the whole length;
- "partial code": the same launch at the whole length with WHOLE=False forced, the code other lengths run;
- "partial length": the wrapper at the partial length (which runs the partial code).

TFLOP/s count the causal forward's FLOPs of each call's own length. The code's cost is partial code / whole code
at the same length; the length's cost is partial length / partial code, to be read against the tile count's
ceiling (the page's note "What the tiles allow"). The partial code's output at the whole length is checked against
the whole code's first.
"""

from __future__ import annotations

import contextlib

from book import render
from book.bench.any_length import DTYPE, MODEL, neighbour
from book.bench.real_models import MODELS, batch_size, forward_flops
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops

GPT2 = next(model for model in MODELS if model.name == "GPT-2")
CASES = [(MODEL, 1000), (MODEL, 5000), (MODEL, 8191),  # the any-length rows that stay below the tile count
         (GPT2, 3000), (GPT2, 8191)]  # GPT-2's prefill rows behind cuDNN
BUDGET_MS = 1500
AGREE = 1e-2  # partial code against whole code at a whole length, largest absolute difference (bf16 outputs)


@contextlib.contextmanager
def _forced_partial():
    """Within the block, every launch of the Gluon forward compiles and runs its partial-length variant."""
    from kernels import flash_attention_hopper as hopper

    kernel = hopper._hopper_fwd_kernel

    class Forced:
        def __getitem__(self, grid):
            launch = kernel[grid]
            return lambda *args, **kwargs: launch(*args, **{**kwargs, "WHOLE": False})

    hopper._hopper_fwd_kernel = Forced()
    try:
        yield
    finally:
        hopper._hopper_fwd_kernel = kernel


def measure(model, n: int) -> dict:
    import torch

    from kernels import flash_attention_hopper as hopper

    whole, batch = neighbour(n), batch_size(n)
    dtype = getattr(torch, DTYPE)

    def inputs(length):
        q = torch.randn(batch, model.heads, length, model.head_dim, device="cuda", dtype=dtype)
        k, v = (torch.randn(batch, model.kv_heads, length, model.head_dim, device="cuda", dtype=dtype)
                for _ in range(2))
        return q, k, v

    at_whole, at_partial = inputs(whole), inputs(n)
    scale = model.head_dim**-0.5

    def call(q, k, v):
        return hopper.attention(q, k, v, causal=True, sm_scale=scale, return_lse=False)

    def forced(q, k, v):
        with _forced_partial():
            return call(q, k, v)

    fns = {"whole_code": lambda: call(*at_whole), "partial_code": lambda: forced(*at_whole),
           "partial_length": lambda: call(*at_partial)}
    difference = (fns["partial_code"]().float() - fns["whole_code"]().float()).abs().max().item()
    assert difference <= AGREE, f"partial code differs from whole code at N={whole} by {difference:.2e}"
    fns["partial_length"]()
    times = gpu_ms_interleaved(fns, budget_ms=BUDGET_MS)
    flops = {"whole_code": forward_flops(batch, model.heads, whole, model.head_dim),
             "partial_code": forward_flops(batch, model.heads, whole, model.head_dim),
             "partial_length": forward_flops(batch, model.heads, n, model.head_dim)}
    row = {"model": model.name, "head_dim": model.head_dim, "dtype": DTYPE, "N": n, "whole": whole, "batch": batch,
           "max_difference": difference}
    for name, ms in times.items():
        row[f"{name}_ms"] = ms
        row[name] = tflops(flops[name], ms)
    row["code_cost"] = row["partial_code"] / row["whole_code"]
    row["length_cost"] = row["partial_length"] / row["partial_code"]
    row["to_whole"] = row["partial_length"] / row["whole_code"]
    return row


def run(progress: Progress) -> list[dict]:
    rows = []
    for model, n in CASES:
        rows.append(measure(model, n))
        r = rows[-1]
        progress(f"{model.name} N={n} ({r['whole']}), B={r['batch']}: whole code {r['whole_code']:.0f}, partial code "
                 f"{r['partial_code']:.0f}, partial length {r['partial_length']:.0f} TFLOP/s; code "
                 f"{r['code_cost']:.3f}, length {r['length_cost']:.3f}")
    return rows


# Views

def table(result: dict) -> str:
    rows = [[r["model"], f"{r['N']:,}", f"{r['whole']:,}", r["batch"], f"{r['whole_code']:.0f}",
             f"{r['partial_code']:.0f}", f"{r['code_cost']:.3f}", f"{r['partial_length']:.0f}",
             f"{r['length_cost']:.3f}", f"{r['to_whole']:.3f}"] for r in result["rows"]]
    return render.table(["Model", "N", "Whole length", "Batch", "Whole code (TFLOP/s)", "Partial code, whole length",
                         "Code's cost: partial / whole code", "Partial code, length N",
                         "Length's cost: length N / whole length", "Both: N / whole (the any-length ratio, this run)"],
                        rows) + ("\n\nThe three ratios are speeds (TFLOP/s over TFLOP/s): below 1 is slower. "
                                 "The two costs multiply to the last column.")


def summary(result: dict) -> str:
    rows = result["rows"]
    code = [r["code_cost"] for r in rows]
    length = [r["length_cost"] for r in rows]
    lengths = ", ".join(f"{r['model']} at N = {r['N']:,}" for r in rows)
    return (f"At the whole lengths, the partial-length code ran at {min(code):.3f} to {max(code):.3f} of the "
            f"whole-length code's speed; at the partial lengths, the same code ran at {min(length):.3f} to "
            f"{max(length):.3f} of its own speed at the whole length (bf16, causal; {lengths}).")


BENCHMARK = Benchmark(
    name="partial_code",
    chapter="ch11",
    title="The partial-length code of the Gluon forward at whole lengths: the code's cost and the length's",
    sources=["kernels/flash_attention_hopper.py", "kernels/hopper_schedule.py", "book/bench/any_length.py",
             "book/bench/real_models.py", "book/bench/partial_code.py"],
    run=run,
    views={"table": table, "summary": summary},
    awaiting_gpu="issue 51: the probe that separates the partial-length code's cost from the length's",
)
