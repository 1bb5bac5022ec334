"""Chapter 10: the backward pass of chapter 5's kernel (kernels/flash_attention_backward.py) against every SDPA
backend that runs and a plain PyTorch attention, in one run; and the peak memory of a training step.

Speed rows (kind "speed"): fp16 and bf16, 16K tokens per batch, head dim 64 (32 heads) and 128 (16 heads), N from
1K to 16K, causal and not. Each implementation is timed twice in the same turns (CUDA graphs, calls taken in
turns, chapter 7's timer): the forward alone, and the forward with the backward (autograd.grad of the output
for a random dO). The backward's time is the difference. FLOPs: forward 4*B*H*N*N*D (halved for causal), the
backward 2.5 times that (FlashAttention-2 paper, section 4.1: five matrix products instead of two).
Before timing, every implementation's gradients for the first head are checked against a float64 reference.

Memory rows (kind "memory"): one sequence, 8 heads, head dim 64, fp16, N from 4K up: the peak memory a
forward-and-backward step allocates beyond its inputs and dO, until the plain attention runs out of memory.
"""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops

SIZES = [1024, 2048, 4096, 8192, 16384]
TOKENS = 16384
HEADS = {64: 32, 128: 16}
DTYPES = ["float16", "bfloat16"]
MEMORY_SIZES = [4096, 8192, 16384, 32768, 65536]
MEMORY_HEADS = 8
BACKWARD_FLOPS = 2.5  # times the forward's (FlashAttention-2 paper, section 4.1)
TARGET_FROM = 2048
TARGET_RATIO = 1.0  # readable backward / SDPA's FlashAttention-2 backend, N >= TARGET_FROM
FLOOR_RATIO = 0.9
# Relative error of the first head's gradients against float64 allowed per dtype (as in the kernel's tests).
GRAD_RTOL = {"float16": 1e-2, "bfloat16": 5e-2}
BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION"}
NAMES = {"ours": "chapter 10's kernels", "sdpa_flash": "FlashAttention-2", "sdpa_cudnn": "cuDNN",
         "sdpa_efficient": "memory-efficient", "plain": "plain PyTorch"}
GiB = 2**30


def _plain(q, k, v, causal: bool):
    import torch

    s = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _implementations() -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import flash_attention

    def sdpa(backend):
        def fn(q, k, v, causal):
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return fn

    return {"ours": lambda q, k, v, causal: flash_attention.attention(q, k, v, causal=causal),
            **{name: sdpa(backend) for name, backend in BACKENDS.items()}, "plain": _plain}


def _grad_error(attn, q, k, v, do, causal: bool) -> float | None:
    """Largest relative error of dq, dk, dv of the first (batch, head) against float64 autograd; None if the
    implementation refuses these inputs (a pinned SDPA backend that does not support them)."""
    import torch

    inputs = [t[:1, :1].detach().clone().requires_grad_() for t in (q, k, v)]
    try:
        grads = torch.autograd.grad(attn(*inputs, causal), inputs, do[:1, :1])
    except RuntimeError as error:
        if "out of memory" in str(error).lower():
            raise
        return None
    exact = [t.detach().double().requires_grad_() for t in inputs]
    expected = torch.autograd.grad(_plain(*exact, causal), exact, do[:1, :1].double())
    return max(((g.double() - e).norm() / e.norm()).item() for g, e in zip(grads, expected, strict=True))


def _step(attn, q, k, v, do, causal: bool, backward: bool):
    import torch

    inputs = [t.detach().requires_grad_() for t in (q, k, v)]

    def forward_only():
        with torch.no_grad():
            return attn(*inputs, causal)

    def forward_and_backward():
        return torch.autograd.grad(attn(*inputs, causal), inputs, do)

    return forward_and_backward if backward else forward_only


def _speed_row(dtype_name: str, d: int, causal: bool, n: int) -> dict:
    import torch

    dtype = getattr(torch, dtype_name)
    heads, batch = HEADS[d], TOKENS // n
    q, k, v, do = (torch.randn(batch, heads, n, d, device="cuda", dtype=dtype) for _ in range(4))
    row = {"kind": "speed", "dtype": dtype_name, "head_dim": d, "causal": causal, "N": n}
    fns = {}
    for name, attn in _implementations().items():
        if name == "plain" and n > 4096:  # its N x N matrices for every head: time it only while they are small
            row[f"{name}_grad_err"] = None
            continue
        err = _grad_error(attn, q, k, v, do, causal)
        row[f"{name}_grad_err"] = err
        if err is None:
            continue
        assert err <= GRAD_RTOL[dtype_name], (f"{name}: gradients wrong at {dtype_name} d={d} causal={causal} "
                                              f"N={n}: relative error {err:.2e}")
        for mode in (False, True):
            fn = _step(attn, q, k, v, do, causal, backward=mode)
            fn()  # compile, autotune, and allocate outside the capture
            fns[(name, mode)] = fn
    torch.cuda.synchronize()
    timed = gpu_ms_interleaved({f"{name}:{int(mode)}": fn for (name, mode), fn in fns.items()})
    forward_flops = 4 * batch * heads * n * n * d * (0.5 if causal else 1.0)
    for name in _implementations():
        fwd, both = timed.get(f"{name}:0"), timed.get(f"{name}:1")
        row[f"{name}_forward_ms"] = fwd
        row[f"{name}_step_ms"] = both
        row[f"{name}_backward_ms"] = None if fwd is None or both is None else both - fwd
        row[f"{name}_backward"] = tflops(BACKWARD_FLOPS * forward_flops, row[f"{name}_backward_ms"])
        row[f"{name}_step"] = tflops((1 + BACKWARD_FLOPS) * forward_flops, both)
    return row


def _peak_bytes(fn) -> int | None:
    """Peak memory one call of fn allocates beyond what was allocated before it, after a first call that
    compiles and autotunes (the autotuner's own buffers must not count); None when it runs out of memory."""
    import torch

    try:
        fn()  # the first call at a new shape may autotune
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        grads = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del grads
        return peak
    except torch.OutOfMemoryError:
        return None
    except RuntimeError as error:  # a pinned backend that refuses the inputs
        if "out of memory" in str(error).lower():
            return None
        raise
    finally:
        torch.cuda.empty_cache()


def _memory_row(n: int) -> dict:
    import torch

    q, k, v, do = (torch.randn(1, MEMORY_HEADS, n, 64, device="cuda", dtype=torch.float16) for _ in range(4))
    row = {"kind": "memory", "N": n, "H": MEMORY_HEADS, "head_dim": 64}
    for name, attn in _implementations().items():
        row[f"{name}_peak_bytes"] = _peak_bytes(_step(attn, q, k, v, do, False, backward=True))
    row["score_matrix_bytes"] = MEMORY_HEADS * n * n * 2  # one fp16 N x N matrix for every head
    return row


def run(progress: Progress) -> list[dict]:
    rows = []
    for dtype in DTYPES:
        for d in (64, 128):
            for causal in (False, True):
                for n in SIZES:
                    rows.append(_speed_row(dtype, d, causal, n))
                    r = rows[-1]
                    peers = {NAMES[p]: r[f"{p}_backward"] for p in BACKENDS if r[f"{p}_backward"] is not None}
                    progress(f"{dtype} d={d} causal={causal} N={n}: backward ours {r['ours_backward']:.0f} "
                             f"TFLOP/s; " + ", ".join(f"{p} {t:.0f}" for p, t in peers.items()))
    for n in MEMORY_SIZES:
        rows.append(_memory_row(n))
        r = rows[-1]
        progress(f"memory N={n}: " + ", ".join(
            f"{name} {'out of memory' if r[f'{name}_peak_bytes'] is None else round(r[f'{name}_peak_bytes'] / GiB, 2)}"
            for name in NAMES) + " GiB")
    return rows


# ---------------------------------------------------------------------------------------------------
# Views


def _speed(result: dict) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == "speed"]


def table(result: dict) -> str:
    """Backward TFLOP/s per row for every implementation, and ours against the FlashAttention-2 backend."""
    body = []
    for r in _speed(result):
        ratio = (r["ours_backward"] / r["sdpa_flash_backward"]
                 if r["ours_backward"] and r["sdpa_flash_backward"] else None)
        body.append([r["dtype"], r["head_dim"], "yes" if r["causal"] else "no", f"{r['N']:,}",
                     r["ours_backward"], r["sdpa_flash_backward"], r["sdpa_cudnn_backward"],
                     r["sdpa_efficient_backward"], r["plain_backward"], ratio and f"{ratio:.2f}×"])
    return render.table(["dtype", "head dim", "causal", "N", "ours", "FA2", "cuDNN", "mem-eff.", "plain",
                         "ours / FA2"], body) + (
        "\n\nBackward TFLOP/s (2.5 times the forward's FLOPs over the backward's time, which is the forward and "
        "backward step's time minus the forward's, both timed in the same turns); — means the implementation "
        "refused these inputs or was not timed (plain PyTorch above N = 4,096).")


def step_table(result: dict) -> str:
    """Forward-and-backward TFLOP/s per row: what a training step's attention sees."""
    body = [[r["dtype"], r["head_dim"], "yes" if r["causal"] else "no", f"{r['N']:,}", r["ours_step"],
             r["sdpa_flash_step"], r["sdpa_cudnn_step"], r["sdpa_efficient_step"], r["plain_step"]]
            for r in _speed(result)]
    return render.table(["dtype", "head dim", "causal", "N", "ours", "FA2", "cuDNN", "mem-eff.", "plain"], body) + (
        "\n\nForward and backward TFLOP/s (3.5 times the forward's FLOPs over the step's time).")


def plot(result: dict):
    """Backward TFLOP/s against N, fp16, one panel per head dim and causal setting."""
    rows = [r for r in _speed(result) if r["dtype"] == "float16"]
    return speed_panels(rows, sorted({(r["head_dim"], r["causal"]) for r in rows}), NAMES,
                        lambda d, causal: f"head dim {d}, {'causal' if causal else 'non-causal'}",
                        "backward TFLOP/s (fp16)")


def speed_panels(rows: list[dict], shapes, names: dict[str, str], title, ylabel: str):
    """One panel per (head dim, causal) of shapes, one line per implementation of names: its backward TFLOP/s."""
    panels = {}
    for d, causal in shapes:
        chosen = sorted((r for r in rows if r["head_dim"] == d and r["causal"] == causal), key=lambda r: r["N"])
        panels[title(d, causal)] = {label: ([r["N"] for r in chosen], [r[f"{name}_backward"] for r in chosen])
                                    for name, label in names.items()}
    return render.panel_plot(panels, xlabel="N", ylabel=ylabel, panel_width=11.0 / len(panels), height=3.6)


def targets(result: dict) -> str:
    """Where the readable backward meets its target against the FlashAttention-2 backend, and where not."""
    chosen = [r for r in _speed(result) if r["N"] >= TARGET_FROM and r["ours_backward"] and r["sdpa_flash_backward"]]
    ratios = {(r["dtype"], r["head_dim"], r["causal"], r["N"]): r["ours_backward"] / r["sdpa_flash_backward"]
              for r in chosen}
    met = sum(ratio >= TARGET_RATIO for ratio in ratios.values())
    low_key = min(ratios, key=ratios.get)
    dtype, d, causal, n = low_key
    return (f"From N = {TARGET_FROM:,} on, the readable backward is at or above SDPA's FlashAttention-2 backend in "
            f"{met} of {len(ratios)} rows (ratios {min(ratios.values()):.2f} to {max(ratios.values()):.2f}); the "
            f"lowest is {dtype}, head dim {d}, {'causal' if causal else 'non-causal'}, N = {n:,}. "
            + ("Nowhere below " if min(ratios.values()) >= FLOOR_RATIO else "Below ")
            + f"{FLOOR_RATIO:.1f}×" + ("." if min(ratios.values()) >= FLOOR_RATIO else " in some rows."))


def checks(result: dict) -> str:
    """The largest relative error of the first head's gradients against float64, per implementation and dtype,
    over every row where it ran: what was checked before anything was timed."""
    body = []
    for dtype in DTYPES:
        rows = [r for r in _speed(result) if r["dtype"] == dtype]
        worst = [max((r[f"{name}_grad_err"] for r in rows if r.get(f"{name}_grad_err") is not None), default=None)
                 for name in NAMES]
        body.append([dtype, *[None if w is None else f"{w:.1e}" for w in worst], f"{GRAD_RTOL[dtype]:.0e}"])
    return render.table(["dtype", *NAMES.values(), "allowed"], body)


def memory_table(result: dict) -> str:
    """Peak memory of a forward-and-backward step beyond its inputs, in GiB, as N grows."""
    rows = [r for r in result["rows"] if r["kind"] == "memory"]

    def gib(value):
        return "out of memory" if value is None else f"{value / GiB:.3g}"

    body = [[f"{r['N']:,}", gib(r["ours_peak_bytes"]), gib(r["sdpa_flash_peak_bytes"]),
             gib(r["sdpa_cudnn_peak_bytes"]), gib(r["sdpa_efficient_peak_bytes"]), gib(r["plain_peak_bytes"]),
             f"{r['score_matrix_bytes'] / GiB:.3g}"] for r in rows]
    return render.table(["N", "ours GiB", "FA2 GiB", "cuDNN GiB", "mem-eff. GiB", "plain GiB",
                         "one N×N matrix, all heads, GiB"], body)


BENCHMARK = Benchmark(
    name="backward",
    chapter="ch10",
    title="Backward pass: chapter 10's kernels against every SDPA backend",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_backward.py", "book/bench/backward.py"],
    run=run,
    views={"table": table, "step-table": step_table, "plot": plot, "targets": targets, "checks": checks,
           "memory-table": memory_table},
    awaiting_gpu="issue 20: the backward benchmark's first GPU run",
)
