"""Chapter 11, steps 8-13: the Gluon backward (kernels/flash_attention_backward_hopper.py, as step 13 leaves it)
beside chapter 11's last Triton backward (step 6) and every SDPA backend, over chapter 10's grid, in one run.

Each row times the backward alone, replayed from CUDA graphs in turns (chapter 7's timer). Our two kernels are
called on one saved forward (chapter 9's output and logsumexp); the SDPA backends run autograd.grad on their own
saved graphs. FLOPs as in chapter 10: 2.5 times the forward's 4·B·H·N²·D, halved for causal. Before timing, every
implementation's gradients of the first (batch, head) are checked against float64 autograd, and the Gluon
kernel's gradients of every head against the Triton kernel's.
"""

from __future__ import annotations

from book import render
from book.bench.backward import BACKENDS, BACKWARD_FLOPS, DTYPES, GRAD_RTOL, SIZES
from book.bench.backward_fast import (
    FLOOR_RATIO,
    NAMES,
    SHAPES,
    TARGET_FROM,
    _attentions,
    _autograd_backward,
    _checked,
    _expected,
    _inputs,
    _label,
    _triton_switches,
)
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops

BUDGET_MS = 1500  # GPU time per row, over every implementation
AGREEMENT = {"float16": 2e-3, "bfloat16": 1e-2}  # Gluon against Triton, relative, every head
KERNELS = {"gluon": "Gluon (step 13)", "triton": "Triton (step 6)"}
PRODUCTS_COUNTED = 5  # the FLOP convention: the backward is 2.5 forwards, five N x N x D products per tile
PRODUCTS_RUN = {False: 7, True: 5}  # what the Triton kernels run: dQ by a second pass repeats two, atomic adds none


def _measure(dtype_name: str, d: int, causal: bool, n: int, progress: Progress) -> dict:
    import torch

    from kernels import flash_attention_backward_fast, flash_attention_backward_hopper, flash_attention_fast

    q, k, v, do = _inputs(dtype_name, d, n)
    batch, heads = q.shape[:2]
    flops = BACKWARD_FLOPS * 4 * batch * heads * n * n * d * (0.5 if causal else 1.0)
    expected = _expected(q, k, v, do, causal)
    out, lse = flash_attention_fast.attention(q, k, v, causal=causal, return_lse=True)
    fns = {
        "gluon": lambda: flash_attention_backward_hopper.attention_backward(do, q, k, v, out, lse, causal=causal),
        "triton": lambda: flash_attention_backward_fast.attention_backward(do, q, k, v, out, lse, causal=causal,
                                                                           **_triton_switches()),
    }
    row = {"kind": "speed", "dtype": dtype_name, "head_dim": d, "causal": causal, "N": n}
    for name, fn in fns.items():
        row[f"{name}_grad_err"] = _checked(fn, expected, dtype_name, name)
    gluon, triton = fns["gluon"](), fns["triton"]()
    row["gluon_vs_triton"] = max(((a.float() - b.float()).norm() / b.float().norm()).item()
                                 for a, b in zip(gluon, triton, strict=True))
    if not row["gluon_vs_triton"] <= AGREEMENT[dtype_name]:
        raise AssertionError(f"Gluon and Triton gradients differ by {row['gluon_vs_triton']:.1e} (relative)")
    for name in BACKENDS:
        backward = _autograd_backward(_attentions()[name], q, k, v, do, causal)
        row[f"{name}_grad_err"] = None if backward is None else _checked(backward, expected, dtype_name, name)
        if backward is not None:
            fns[name] = backward
    torch.cuda.synchronize()
    times = gpu_ms_interleaved(fns, budget_ms=BUDGET_MS)
    for name in (*KERNELS, *BACKENDS):
        row[f"{name}_backward"] = tflops(flops, times.get(name))
    progress(f"{dtype_name} d={d} causal={causal} N={n}: gluon {row['gluon_backward']:.0f}, triton "
             f"{row['triton_backward']:.0f}, cuDNN {row['sdpa_cudnn_backward'] or 0:.0f} TFLOP/s (backward)")
    return row


def run(progress: Progress) -> list[dict]:
    return [_measure(dtype, d, causal, n, progress) for dtype in DTYPES for d, causal in SHAPES for n in SIZES]


# ---------------------------------------------------------------------------------------------------
# Views


def _best_peer(row: dict) -> float | None:
    return max((row[f"{p}_backward"] for p in BACKENDS if row[f"{p}_backward"]), default=None)


def table(result: dict) -> str:
    """Backward TFLOP/s per row: both kernels, the SDPA backends, and the Gluon kernel's ratios."""
    body = []
    for r in result["rows"]:
        gluon = r["gluon_backward"]
        body.append([r["dtype"], r["head_dim"], "yes" if r["causal"] else "no", f"{r['N']:,}", gluon,
                     r["triton_backward"], r["sdpa_cudnn_backward"], r["sdpa_flash_backward"],
                     r["sdpa_efficient_backward"], f"{gluon / r['triton_backward']:.2f}×",
                     f"{gluon / _best_peer(r):.2f}×"])
    return render.table(["dtype", "D", "causal", "N", "Gluon", "Triton", "cuDNN", "FA2", "mem-eff.",
                         "Gluon / Triton", "Gluon / best SDPA"], body) + (
        "\n\nBackward TFLOP/s (2.5 times the forward's FLOPs over the time of the backward alone). Triton is "
        "chapter 11's last Triton kernel (step 6).")


def columns(result: dict) -> str:
    """Per head dim and mask, from N = 2,048 on: how the Gluon kernel compares with the Triton one and with SDPA."""
    body = []
    for d, causal in SHAPES:
        rows = [r for r in result["rows"] if (r["head_dim"], r["causal"]) == (d, causal) and r["N"] >= TARGET_FROM]
        versus_triton = [r["gluon_backward"] / r["triton_backward"] for r in rows]
        gluon_share = [r["gluon_backward"] / _best_peer(r) for r in rows]
        triton_share = [r["triton_backward"] / _best_peer(r) for r in rows]
        body.append([_label(d, causal), f"{sum(x > 1 for x in versus_triton)} of {len(rows)}",
                     f"{min(versus_triton):.2f}–{max(versus_triton):.2f}×",
                     f"{min(gluon_share):.2f}–{max(gluon_share):.2f}×",
                     f"{min(triton_share):.2f}–{max(triton_share):.2f}×",
                     f"Gluon {sum(x >= FLOOR_RATIO for x in gluon_share)} of {len(rows)}, "
                     f"Triton {sum(x >= FLOOR_RATIO for x in triton_share)} of {len(rows)}"])
    return render.table(["column", "Gluon faster than Triton", "Gluon / Triton", "Gluon / best SDPA",
                         "Triton / best SDPA", f"rows ≥ {FLOOR_RATIO:.1f}× best SDPA"], body) + (
        f"\n\nRows with N ≥ {TARGET_FROM:,}, fp16 and bf16 together; ratios from unrounded TFLOP/s.")


def executed(result: dict) -> str:
    """Step 6's rate of tensor-core work: the products per tile it runs, not the five the FLOPs credit."""
    run = PRODUCTS_RUN[_triton_switches()["ATOMIC_DQ"]]
    rows = [r for r in result["rows"] if r["N"] >= TARGET_FROM and r["triton_backward"] and r["sdpa_cudnn_backward"]]
    ours = [r["triton_backward"] * run / PRODUCTS_COUNTED for r in rows]
    cudnn = [r["sdpa_cudnn_backward"] for r in rows]
    above = [mine / r["sdpa_cudnn_backward"] for mine, r in zip(ours, rows, strict=True)]
    return (f"Every TFLOP/s here credits {PRODUCTS_COUNTED} matrix products per tile. Step 6 runs {run}, so from "
            f"N = {TARGET_FROM:,} on its tensor cores did {min(ours):.0f} to {max(ours):.0f} TFLOP/s of products, in "
            f"the same rows where cuDNN's credited rate was {min(cudnn):.0f} to {max(cudnn):.0f}. Row by row, the "
            f"products step 6 ran came faster than cuDNN's credited rate in {sum(x > 1 for x in above)} of "
            f"{len(above)} rows; the ratio of the two runs from {min(above):.2f}× to {max(above):.2f}×.")


def checks(result: dict) -> str:
    """The largest relative error of the first head's gradients against float64, per implementation and dtype."""
    names = {**KERNELS, **{p: NAMES[p] for p in BACKENDS}}
    body = []
    for dtype in DTYPES:
        rows = [r for r in result["rows"] if r["dtype"] == dtype]
        worst = [max((r[f"{n}_grad_err"] for r in rows if r.get(f"{n}_grad_err") is not None), default=None)
                 for n in names]
        agreement = max(r["gluon_vs_triton"] for r in rows)
        body.append([dtype, *[None if w is None else f"{w:.1e}" for w in worst], f"{GRAD_RTOL[dtype]:.0e}",
                     f"{agreement:.1e}"])
    return render.table(["dtype", *names.values(), "allowed", "Gluon vs Triton, every head"], body)


BENCHMARK = Benchmark(
    name="backward_hopper",
    chapter="ch11",
    title="Chapter 11, steps 8-13: the Gluon backward against the Triton one and every SDPA backend",
    sources=["kernels/flash_attention_backward_hopper.py", "kernels/flash_attention_backward_fast.py",
             "kernels/flash_attention_fast.py", "kernels/flash_attention_hopper.py", "kernels/hopper_schedule.py",
             "book/bench/backward.py", "book/bench/backward_fast.py", "book/bench/backward_hopper.py"],
    run=run,
    views={"table": table, "columns": columns, "checks": checks, "executed": executed},
    awaiting_gpu="issue 20: the Gluon backward's first GPU run",
)
