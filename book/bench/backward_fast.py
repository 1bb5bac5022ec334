"""Chapter 11: the fast backward (kernels/flash_attention_backward_fast.py), one change per step, against every SDPA
backend in the same run.

Three kinds of rows, all timing the backward alone: the forward runs once, outside the timer, and each timed call
is autograd.grad (or the backward wrapper) on its saved graph, replayed from a CUDA graph in turns with the others
(chapter 7's timer). FLOPs as in chapter 10: 2.5 times the forward's 4·B·H·N²·D, halved for causal.

- "step": the worklog. fp16, N = 4096, 16K tokens per batch, head dim 64 (32 heads) and 128 (16 heads), causal
  and not; chapter 10's readable backward, every step (steps 8-13 are the Gluon kernel), and the SDPA backends.
- "dq": the ways to produce dQ, over N, fp16: in Triton a second pass or atomic adds, with every other switch as
  in the last Triton step; and the final Gluon kernel (step 13), which adds dQ through the copy engine.
- "speed": the final fast backward (step 13) beside chapter 10's kernels and every SDPA backend over chapter 10's
  grid (fp16 and bf16, N from 1K to 16K), the backward alone and the forward with the backward (a training step's
  attention; the fast path's forward is chapter 9's kernel).
Before timing, every implementation's gradients of the first (batch, head) are checked against float64 autograd.
"""

from __future__ import annotations

import statistics

from book import render
from book.bench.backward import BACKENDS, BACKWARD_FLOPS, DTYPES, GRAD_RTOL, HEADS, SIZES, TOKENS, _plain, speed_panels
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops
from book.bench.worklog import Step

N = 4096
SHAPES = [(d, causal) for d in (64, 128) for causal in (False, True)]
DQ_SIZES = [1024, 16384]  # N = 4096 is the worklog's atomic step
STEP_BUDGET_MS = 3000  # GPU time per worklog column, over all its steps and peers, per repetition
STEP_REPEATS = 3  # each column's turns run this many times: the spread of a step's ratio to its baseline
SPEED_BUDGET_MS = 1500  # GPU time per row of the dq and speed kinds
TARGET_FROM = 2048
TARGET_RATIO = 1.0  # fast backward / the fastest SDPA backend, N >= TARGET_FROM
FLOOR_RATIO = 0.8
NAMES = {"fast": "chapter 11's fast backward", "readable": "chapter 10's kernels", "sdpa_cudnn": "cuDNN",
         "sdpa_flash": "FlashAttention-2", "sdpa_efficient": "memory-efficient"}


_OFF = {"TRANSPOSED": False, "SPLIT_DIAGONAL": False, "ATOMIC_DQ": False, "USE_TMA": False, "GLUON": False,
        "KV_IN_REGISTERS": False, "DQ_BY_TURNS": False, "LONGEST_FIRST": False, "ROWS_IN_ACCUMULATORS": False,
        "ROWS_IN_SHARED": False}
_GLUON = {**_OFF, "TRANSPOSED": True, "SPLIT_DIAGONAL": True, "USE_TMA": True, "GLUON": True}

STEPS = [
    Step("readable", "Chapter 10's kernels", "The readable backward as chapter 10 ships it: masks on every load, "
         "the head dim padded to a power of two, 64 x 64 tiles, the causal mask only on the tiles that cross the "
         "diagonal.", "The starting point."),
    Step("specialize", "Specialize the shapes", "The same three kernels for head dim 64 or 128 and lengths that "
         "are a multiple of 128 only: no load needs a mask, D and the base-2 logsumexp are computed once per row "
         "in the first kernel; chapter 10's tiles and its split of the causal loops.",
         "A few percent at most: the masks cost a compare and a select per element loaded, next to five "
         "matrix products per tile.", {**_OFF, "SPLIT_DIAGONAL": True}, pinned=(64, 64, 4, 2)),
    Step("autotune", "Autotune tiles, warps, stages", "Let Triton time four tile shapes, warp counts and "
         "pipeline depths per kernel, up to 128 keys per dK/dV program (with 8 warps at head dim 128).",
         "10-25%: with 128 keys per program each Q and dO tile loaded serves twice as many keys, and 8 warps "
         "give the tensor cores two warpgroups of work.", {**_OFF, "SPLIT_DIAGONAL": True}),
    Step("transposed", "Keys as rows in the dK/dV kernel", "Compute Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, so that Pᵀ and "
         "dSᵀ come out of the tensor cores in the layout of the first operand of dV += Pᵀ dO and dK += dSᵀ Q.",
         "5-15%: two transposes of a register tile per step, each a round trip through shared memory, go away; "
         "the dK/dV kernel is the larger of the two.", {**_OFF, "TRANSPOSED": True, "SPLIT_DIAGONAL": True}),
    Step("nosplit", "Without chapter 10's split (ablation)", "Causal only: turn the split off again in step 3's "
         "kernels, so every tile the causal loops visit gets the element-wise mask, to measure what chapter 10's "
         "split is worth here.",
         "Written after the same change was measured the other way round (as a step that added the split to these "
         "kernels): causal 0-10% slower; non-causal unchanged.", {**_OFF, "TRANSPOSED": True}, kept=False),
    Step("atomic", "dQ by atomic adds", "Drop the second kernel: the dK/dV kernel also computes each tile's share "
         "of dQ (dS K) and adds it into an fp32 buffer with atomic adds; a small kernel scales and rounds it.",
         "Five products per tile instead of seven, so up to 1.3x if the adds were free. They are not: every tile "
         "sends BLOCK_M x D fp32 additions to L2, and programs of the same head collide on the same rows. A gain "
         "of 0-15%, or a loss at head dim 128, where each tile sends twice as many.",
         {**_OFF, "TRANSPOSED": True, "SPLIT_DIAGONAL": True, "ATOMIC_DQ": True}, kept=False),
    Step("tma", "Load tiles through TMA", "Tensor descriptors for every tile: Hopper's copy engine fetches them "
         "into shared memory, and no thread computes addresses.",
         "0-5%: the loads are already asynchronous copies that the pipeline hides; fewer address instructions.",
         {**_OFF, "TRANSPOSED": True, "SPLIT_DIAGONAL": True, "USE_TMA": True}),
    Step("tma_atomic", "dQ by atomic adds, through TMA", "Step 5 again on top of step 6: the dK/dV kernel "
         "computes each tile's share of dQ, and one bulk reduce of the copy engine adds the whole 64 x D tile "
         "into the fp32 buffer from shared memory, instead of one atomic add per element from the threads.",
         "Written after a probe of this change, so not blind: about even at head dim 64, a loss of a fifth or "
         "more at head dim 128. Our guess at why: the dK/dV kernel now also holds dQ's share of each tile and "
         "runs a fifth product in the same warps, and at head dim 128 that crowds dK and dV.",
         {**_OFF, "TRANSPOSED": True, "SPLIT_DIAGONAL": True, "USE_TMA": True, "ATOMIC_DQ": True}, kept=False),
    Step("gluon", "The schedule by hand, in Gluon", "Step 7's five products per tile, in a kernel written in "
         "Gluon (kernels/flash_attention_backward_hopper.py): one warp copies, two warpgroups compute 64 keys each, "
         "and each adds its half of dQ's share through the copy engine.",
         "Not blind: written after this kernel's own benchmark had measured it beside step 6 over the whole grid. "
         "Faster than step 6 at head dim 128 without the mask, by under a tenth; about level at head dim 64 "
         "without it; a little slower with the mask, most at head dim 64.", dict(_GLUON)),
    Step("kv_registers", "K and V in registers (head dim 64)", "Step 8 with each warpgroup's K and V loaded once "
         "into registers, as the first operand of Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, instead of read from shared memory "
         "by every block's products. Head dim 64 only: at 128 no registers are free, and the kernel is step 8's.",
         "Not blind: written after a probe of this step and the next. By our byte count (snippets/ch11/"
         "shared_traffic.py), a block of step 8 at head dim 64 moves 208 KiB through shared memory, 1.30x what "
         "it serves while the tensor cores work; this step leaves 176 KiB (1.10x). Up to 1.18x faster if shared "
         "memory alone set the pace; less, since it does not. Head dim 128: the same kernel as step 8.",
         {**_GLUON, "KV_IN_REGISTERS": True}),
    Step("dq_turns", "dQ's share by turns (head dim 64)", "Each block's dQ share (dS K over the program's 128 keys, "
         "every column) is computed by one warpgroup, the two taking turns block by block, instead of half the "
         "columns by each on every block: dSᵀ and K are read from shared memory once per block instead of twice. "
         "Head dim 64 only: at 128 a whole share needs more registers and shared memory than are free.",
         "Not blind either. The count: 160 KiB per block, 1.00x the tensor cores' time, so up to 1.10x faster "
         "than step 9, again less in practice. Head dim 128: the same kernel as step 8.",
         {**_GLUON, "KV_IN_REGISTERS": True, "DQ_BY_TURNS": True}),
    Step("longest_first", "Longest programs first (causal)", "Causal only: start the Gluon kernel's programs in "
         "another order. A program whose keys come early has the longest loop; instead of every key block of one "
         "head before the next head, the grid starts the first key block of four heads, then their second, and "
         "so on. Nothing else changes.",
         "Not blind: written after a probe of launch orders at N = 2K-16K. Causal: about a tenth faster at head "
         "dim 64 and somewhat less at 128; non-causal: the same kernel and order, unchanged. The probe does not "
         "say why: at N = 16K its programs were busy almost all the time in both orders, so there it is not a "
         "shorter tail; each block of queries took less time.",
         {**_GLUON, "KV_IN_REGISTERS": True, "DQ_BY_TURNS": True, "LONGEST_FIRST": True}),
    Step("rows_in_accumulators", "Start Sᵀ and dPᵀ from the rows (head dim 128)", "Head dim 128 only: the "
         "products Sᵀ = K Qᵀ and dPᵀ = V dOᵀ start from -L₂/qk_scale and -D (each query's base-2 logsumexp and "
         "D, broadcast over the keys) instead of from zero, so Pᵀ = exp2(qk_scale · Sᵀ) and dSᵀ = Pᵀ ∘ dPᵀ need "
         "neither row afterwards. Head dim 64: the same kernel as step 11.",
         "Not blind: written after a probe at N = 2K-16K. At head dim 128 the compiled kernel stops spilling "
         "registers (the rows took 16 registers each per computing thread, held across the block), so a few "
         "percent faster, more with the mask than without. At head dim 64 nothing spilled, and the probe found "
         "the change slower there: the two rows must now be loaded before the products start.",
         {**_GLUON, "KV_IN_REGISTERS": True, "DQ_BY_TURNS": True, "LONGEST_FIRST": True,
          "ROWS_IN_ACCUMULATORS": True}),
    Step("rows_in_shared", "The copy warp brings the rows", "Each Q block's base-2 logsumexp and D (64 floats "
         "each) travel with Q and dO: the copy warp adds them to the same copies and barriers, into two small "
         "ring slots of shared memory, and the computing warps read them there instead of loading them from "
         "global memory themselves. Both head dims.",
         "Not blind: written after a profile of step 12 and a probe of this step at N = 2K-16K. The profiler's "
         "stall samples put many of the computing warps' waits on those two loads (an L2 round trip each, issued "
         "just before the products that need them at head dim 128), so at head dim 128 a tenth or more faster, "
         "with the mask and without. At head dim 64 the loads were issued after the products started, so about "
         "level there.",
         {**_GLUON, "KV_IN_REGISTERS": True, "DQ_BY_TURNS": True, "LONGEST_FIRST": True,
          "ROWS_IN_ACCUMULATORS": True, "ROWS_IN_SHARED": True}),
]


def _final_switches() -> dict[str, bool]:
    return {**_OFF, **[s for s in STEPS if s.kept and s.switches is not None][-1].switches}


def _triton_switches() -> dict[str, bool]:
    """The last kept step that runs the Triton kernels (step 6)."""
    return {**_OFF, **[s for s in STEPS if s.kept and s.switches is not None and not s.switches["GLUON"]][-1].switches}


# ---------------------------------------------------------------------------------------------------
# Measuring


def _inputs(dtype_name: str, d: int, n: int):
    import torch

    dtype = getattr(torch, dtype_name)
    heads, batch = HEADS[d], TOKENS // n
    return [torch.randn(batch, heads, n, d, device="cuda", dtype=dtype) for _ in range(4)]


def _sdpa(backend: str):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn(q, k, v, causal):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _attentions() -> dict:
    from kernels import flash_attention, flash_attention_backward_fast

    return {"fast": lambda q, k, v, causal: flash_attention_backward_fast.attention(q, k, v, causal=causal),
            "readable": lambda q, k, v, causal: flash_attention.attention(q, k, v, causal=causal),
            **{name: _sdpa(backend) for name, backend in BACKENDS.items()}}


def _expected(q, k, v, do, causal: bool):
    """dq, dk, dv of the first (batch, head) by float64 autograd."""
    import torch

    exact = [t[:1, :1].detach().double().requires_grad_() for t in (q, k, v)]
    return torch.autograd.grad(_plain(*exact, causal), exact, do[:1, :1].double())


def _error(grads, expected) -> float:
    return max(((g[:1, :1].double() - e).norm() / e.norm()).item() for g, e in zip(grads, expected, strict=True))


def _autograd_backward(attn, q, k, v, do, causal: bool):
    """The backward alone: the forward runs once here; each call of the returned function runs autograd.grad on
    the saved graph. None if the implementation refuses these inputs."""
    import torch

    inputs = [t.detach().requires_grad_() for t in (q, k, v)]
    # Autograd runs each backward op on the stream its forward op ran on. The timer captures its CUDA graphs on
    # torch.cuda.graph's default capture stream, so the forward runs there too.
    torch.cuda.graph(torch.cuda.CUDAGraph())  # creates that stream on first use
    stream = torch.cuda.graph.default_capture_stream
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            out = attn(*inputs, causal)
    except RuntimeError as error:  # a pinned SDPA backend that does not take these inputs
        if "out of memory" in str(error).lower():
            raise
        return None
    finally:
        torch.cuda.current_stream().wait_stream(stream)

    def backward():
        return torch.autograd.grad(out, inputs, do, retain_graph=True)
    return backward


def _autograd_step(attn, q, k, v, do, causal: bool):
    import torch

    inputs = [t.detach().requires_grad_() for t in (q, k, v)]
    return lambda: torch.autograd.grad(attn(*inputs, causal), inputs, do)


def _checked(fn, expected, dtype_name: str, label: str):
    """Run fn once (compile, autotune) and check its gradients; raise if they are wrong."""
    err = _error(fn(), expected)
    if not err <= GRAD_RTOL[dtype_name]:
        raise AssertionError(f"{label}: gradients wrong, relative error {err:.2e}")
    return err


def _step_fns(q, k, v, do, causal: bool):
    """The worklog's steps as backward-only calls on the same saved forward (chapter 5's output and logsumexp)."""
    from kernels import flash_attention, flash_attention_backward, flash_attention_backward_fast

    out, lse = flash_attention.attention(q, k, v, causal=causal, return_lse=True)
    fns = {}
    for step in STEPS:
        if step.switches is None:
            fns[step.key] = lambda: flash_attention_backward.attention_backward(do, q, k, v, out, lse, causal=causal)
        else:
            tiles = {} if step.pinned is None else {"dkdv_config": flash_attention_backward_fast.config(*step.pinned),
                                                    "dq_config": flash_attention_backward_fast.config(*step.pinned)}
            fns[step.key] = (lambda step=step, tiles=tiles: flash_attention_backward_fast.attention_backward(
                do, q, k, v, out, lse, causal=causal, **tiles, **step.switches))
    return fns


def _with_spills(call):
    """call()'s result and the n_spills of the Gluon kernel it ran: that kernel's local memory per thread in 4-byte
    words, where ptxas keeps the registers it spills (None where Triton keeps no cache to read it from). The
    kernel's in-memory cache is emptied first, so the one compiled kernel in it afterwards is call()'s (Triton
    reloads it from its disk cache)."""
    from kernels import flash_attention_backward_hopper as hopper

    caches = getattr(hopper._hopper_bwd_kernel, "device_caches", None)
    if caches is None:
        return call(), None
    caches.clear()
    result = call()
    compiled = [kernel for cache in caches.values() for kernel in cache[0].values()]
    return result, compiled[0].n_spills if len(compiled) == 1 else None


def _measure_steps(d: int, causal: bool, progress: Progress) -> list[dict]:
    import torch

    from kernels import flash_attention_backward_fast

    q, k, v, do = _inputs("float16", d, N)
    batch, heads = q.shape[:2]
    flops = BACKWARD_FLOPS * 4 * batch * heads * N * N * d * (0.5 if causal else 1.0)
    expected = _expected(q, k, v, do, causal)
    rows, fns = {}, {}
    for key, fn in _step_fns(q, k, v, do, causal).items():
        rows[key] = {"kind": "step", "step": key, "head_dim": d, "causal": causal, "N": N, "error": None}
        step = next(s for s in STEPS if s.key == key)
        try:
            if step.switches is not None and step.switches["GLUON"]:
                rows[key]["grad_err"], rows[key]["spills"] = _with_spills(
                    lambda: _checked(fn, expected, "float16", key))  # noqa: B023 - called at once
            else:
                rows[key]["grad_err"] = _checked(fn, expected, "float16", key)
            if step.switches is not None and step.pinned is None and not step.switches["GLUON"]:
                rows[key]["configs"] = flash_attention_backward_fast.tuned_configs(step.switches["ATOMIC_DQ"])
            fns[key] = fn
        except Exception as error:  # noqa: BLE001 - a step that fails is a result too
            rows[key]["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
    for fn in fns.values():  # _with_spills emptied the Gluon kernel's cache: load each step's kernel again
        fn()
    peers = {}
    for name in BACKENDS:
        fn = _autograd_backward(_attentions()[name], q, k, v, do, causal)
        if fn is not None:
            _checked(fn, expected, "float16", name)
            peers[name] = fn
    torch.cuda.synchronize()
    # The same turns, STEP_REPEATS times: the first gives the table; the repetitions show how much a ratio of two
    # steps timed in the same turns moves by itself (the noise bound of the worklog).
    repeats = [gpu_ms_interleaved({**fns, **peers}, budget_ms=STEP_BUDGET_MS) for _ in range(STEP_REPEATS)]
    times = repeats[0]
    for key, row in rows.items():
        row["tflops_repeats"] = [tflops(flops, again.get(key)) for again in repeats]
    peer_tflops = {name: tflops(flops, times.get(name)) for name in BACKENDS}
    best = max((t for t in peer_tflops.values() if t is not None), default=None)
    for key, row in rows.items():
        row.update(peer_tflops, tflops=tflops(flops, times.get(key)))
        row["share_of_best_peer"] = row["tflops"] / best if row["tflops"] and best else None
        progress(f"step d={d} causal={causal} {key:>10}: "
                 + (f"{row['tflops']:.0f} TFLOP/s" if row["tflops"] else row["error"]))
    return list(rows.values())


def _measure_dq(d: int, causal: bool, n: int, progress: Progress) -> dict:
    import torch

    from kernels import flash_attention_backward_fast as fast
    from kernels import flash_attention_fast

    q, k, v, do = _inputs("float16", d, n)
    batch, heads = q.shape[:2]
    flops = BACKWARD_FLOPS * 4 * batch * heads * n * n * d * (0.5 if causal else 1.0)
    expected = _expected(q, k, v, do, causal)
    out, lse = flash_attention_fast.attention(q, k, v, causal=causal, return_lse=True)
    fns = {}
    for name, switches in (("second_pass", _triton_switches()), ("atomic", {**_triton_switches(), "ATOMIC_DQ": True}),
                           ("gluon", _final_switches())):
        fn = (lambda switches=switches: fast.attention_backward(do, q, k, v, out, lse, causal=causal, **switches))
        _checked(fn, expected, "float16", name)
        fns[name] = fn
    torch.cuda.synchronize()
    times = gpu_ms_interleaved(fns, budget_ms=SPEED_BUDGET_MS)
    row = {"kind": "dq", "head_dim": d, "causal": causal, "N": n,
           **{f"{name}_backward": tflops(flops, times[name]) for name in fns}}
    progress(f"dq d={d} causal={causal} N={n}: second pass {row['second_pass_backward']:.0f}, atomic adds "
             f"{row['atomic_backward']:.0f}, Gluon {row['gluon_backward']:.0f} TFLOP/s")
    return row


def _measure_speed(dtype_name: str, d: int, causal: bool, n: int, progress: Progress) -> dict:
    import torch

    q, k, v, do = _inputs(dtype_name, d, n)
    batch, heads = q.shape[:2]
    forward_flops = 4 * batch * heads * n * n * d * (0.5 if causal else 1.0)
    expected = _expected(q, k, v, do, causal)
    row = {"kind": "speed", "dtype": dtype_name, "head_dim": d, "causal": causal, "N": n}
    fns = {}
    for name, attn in _attentions().items():
        backward = _autograd_backward(attn, q, k, v, do, causal)
        row[f"{name}_grad_err"] = None
        if backward is None:
            continue
        row[f"{name}_grad_err"] = _checked(backward, expected, dtype_name, name)
        step = _autograd_step(attn, q, k, v, do, causal)
        step()
        fns[f"{name}:backward"], fns[f"{name}:step"] = backward, step
    torch.cuda.synchronize()
    times = gpu_ms_interleaved(fns, budget_ms=SPEED_BUDGET_MS)
    for name in _attentions():
        row[f"{name}_backward"] = tflops(BACKWARD_FLOPS * forward_flops, times.get(f"{name}:backward"))
        row[f"{name}_step"] = tflops((1 + BACKWARD_FLOPS) * forward_flops, times.get(f"{name}:step"))
    peers = ", ".join(f"{NAMES[p]} {row[f'{p}_backward']:.0f}" for p in BACKENDS if row[f"{p}_backward"])
    progress(f"{dtype_name} d={d} causal={causal} N={n}: fast {row['fast_backward']:.0f}, readable "
             f"{row['readable_backward']:.0f}; {peers} TFLOP/s (backward)")
    return row


def run(progress: Progress) -> list[dict]:
    rows = []
    for d, causal in SHAPES:
        rows += _measure_steps(d, causal, progress)
    for d, causal in SHAPES:
        for n in DQ_SIZES:
            rows.append(_measure_dq(d, causal, n, progress))
    for dtype in DTYPES:
        for d, causal in SHAPES:
            for n in SIZES:
                rows.append(_measure_speed(dtype, d, causal, n, progress))
    return rows


# ---------------------------------------------------------------------------------------------------
# Views


def _label(d: int, causal: bool) -> str:
    return f"D={d} {'causal' if causal else 'non-causal'}"


def _rows(result: dict, kind: str) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == kind]


def steps_table(result: dict) -> str:
    """One row per step: backward TFLOP/s per shape, with the share of the fastest SDPA backend; then the peers."""
    by = {(r["step"], r["head_dim"], r["causal"]): r for r in _rows(result, "step")}
    body = []
    for i, step in enumerate(STEPS):
        cells = []
        for d, c in SHAPES:
            row = by.get((step.key, d, c))
            cells.append("did not run" if row is None or row["tflops"] is None
                         else f"{row['tflops']:.0f} ({row['share_of_best_peer']:.2f}×)")
        body.append([i, step.title if step.kept else f"*{step.title}*", *cells])
    first = {(r["head_dim"], r["causal"]): r for r in _rows(result, "step") if r["step"] == STEPS[0].key}
    for name in ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient"):
        body.append(["", f"SDPA {NAMES[name]}", *(first[s][name] if s in first else None for s in SHAPES)])
    return render.table(["#", "step", *(_label(d, c) for d, c in SHAPES)], body) + (
        f"\n\nBackward TFLOP/s at N = {N:,}, fp16, {TOKENS:,} tokens per batch; in brackets the share of the "
        "fastest SDPA backend timed in the same turns. Steps in italics were tried and left out of the final kernel.")


def tile_changes(result: dict) -> str:
    """The tiles the autotuner picked in each autotuned step, where they differ from the last kept step before it."""
    by = {(r["step"], r["head_dim"], r["causal"]): r for r in _rows(result, "step")}
    kernels = {"dkdv": "dK/dV", "dq": "dQ"}

    def tiles(step: Step, d: int, causal: bool) -> dict | None:
        if step.pinned is not None:
            return dict.fromkeys(kernels, "{}x{}, {} warps, {} stages".format(*step.pinned))
        return (by.get((step.key, d, causal)) or {}).get("configs")

    lines, base = [], STEPS[0]
    for step in STEPS[1:]:
        if step.pinned is None and not step.switches["GLUON"]:  # the Gluon kernel has no autotuner
            parts = []
            for d, c in SHAPES:
                now, before = tiles(step, d, c), tiles(base, d, c)
                changed = [f"{name} {before[k]} → {now[k]}" for k, name in kernels.items()
                           if now and before and now.get(k) and before.get(k) and now[k] != before[k]]
                if changed:
                    parts.append(f"{_label(d, c)}: {', '.join(changed)}")
            lines.append(f"- **{step.title}** (against *{base.title}*): {'; '.join(parts) or 'no tile changed'}.")
        if step.kept:
            base = step
    return "\n".join(lines) + ("\n\nA tile is written as query rows x keys, warps, pipeline stages. A step without "
                               "a dQ kernel (atomic adds) is compared on dK/dV only. The Gluon kernel (steps "
                               "8-13) has fixed tiles and is not listed.")


def spills(result: dict) -> str:
    """Registers spilled by the compiled Gluon kernel of each step, per column."""
    by = {(r["step"], r["head_dim"], r["causal"]): r for r in _rows(result, "step")}
    body = []
    for i, step in enumerate(STEPS):
        if step.switches is not None and step.switches["GLUON"]:
            cells = [(by.get((step.key, d, c)) or {}).get("spills") for d, c in SHAPES]
            body.append([i, step.title, *("not recorded" if n is None else n for n in cells)])
    return render.table(["#", "step", *(_label(d, c) for d, c in SHAPES)], body) + (
        "\n\nLocal memory per thread of the kernel each step compiled to, in 4-byte words (Triton's n_spills, "
        "where ptxas keeps the registers it spills); 0: nothing spilled.")


def predictions(result: dict) -> str:
    """Each step's change and the prediction written before it was first measured."""
    del result
    return "\n".join(f"- **{i}. {s.title}.** {s.change} *Prediction:* {s.prediction}"
                     for i, s in enumerate(STEPS) if i)


def dq_table(result: dict) -> str:
    """The ways to produce dQ, over N: a second pass, atomic adds (both Triton), and the final Gluon kernel."""
    body = [[r["head_dim"], "yes" if r["causal"] else "no", f"{r['N']:,}", r["second_pass_backward"],
             r["atomic_backward"], r["gluon_backward"], f"{r['atomic_backward'] / r['second_pass_backward']:.2f}×",
             f"{r['gluon_backward'] / r['second_pass_backward']:.2f}×"]
            for r in _rows(result, "dq")]
    return render.table(["D", "causal", "N", "second pass", "atomic adds", "Gluon (step 13)", "atomic / second pass",
                         "Gluon / second pass"], body) + (
        "\n\nBackward TFLOP/s, fp16, timed in turns. The two Triton columns have every other switch as in step 6.")


def table(result: dict) -> str:
    """Backward TFLOP/s over the grid: the fast backward, chapter 10's kernels and every SDPA backend."""
    body = []
    for r in _rows(result, "speed"):
        peers = [r[f"{p}_backward"] for p in BACKENDS if r[f"{p}_backward"]]
        body.append([r["dtype"], r["head_dim"], "yes" if r["causal"] else "no", f"{r['N']:,}", r["fast_backward"],
                     r["readable_backward"], r["sdpa_cudnn_backward"], r["sdpa_flash_backward"],
                     r["sdpa_efficient_backward"], f"{r['fast_backward'] / max(peers):.2f}×"])
    return render.table(["dtype", "D", "causal", "N", "fast", "ch. 10", "cuDNN", "FA2", "mem-eff.",
                         "fast / best SDPA"], body) + (
        "\n\nBackward TFLOP/s (2.5 times the forward's FLOPs over the time of the backward alone); — means the "
        "backend refused these inputs.")


def step_table(result: dict) -> str:
    """Forward-and-backward TFLOP/s over the grid: a training step's attention."""
    body = []
    for r in _rows(result, "speed"):
        peers = [r[f"{p}_step"] for p in BACKENDS if r[f"{p}_step"]]
        body.append([r["dtype"], r["head_dim"], "yes" if r["causal"] else "no", f"{r['N']:,}", r["fast_step"],
                     r["readable_step"], r["sdpa_cudnn_step"], r["sdpa_flash_step"], r["sdpa_efficient_step"],
                     f"{r['fast_step'] / max(peers):.2f}×"])
    return render.table(["dtype", "D", "causal", "N", "fast", "ch. 10", "cuDNN", "FA2", "mem-eff.",
                         "fast / best SDPA"], body) + (
        "\n\nForward and backward TFLOP/s (3.5 times the forward's FLOPs over the step's time); the fast column's "
        "forward is chapter 9's kernel.")


def targets(result: dict) -> str:
    """Where the fast backward meets its targets against the fastest SDPA backend, and where not."""
    ratios = {}
    for r in _rows(result, "speed"):
        peers = {p: r[f"{p}_backward"] for p in BACKENDS if r[f"{p}_backward"]}
        if r["N"] >= TARGET_FROM and r["fast_backward"] and peers:
            ratios[(r["dtype"], r["head_dim"], r["causal"], r["N"])] = r["fast_backward"] / max(peers.values())
    met = sum(ratio >= TARGET_RATIO for ratio in ratios.values())
    floor = sum(ratio >= FLOOR_RATIO for ratio in ratios.values())
    dtype, d, causal, n = min(ratios, key=ratios.get)
    best_key = max(ratios, key=ratios.get)
    return (f"From N = {TARGET_FROM:,} on, the fast backward is at or above the fastest SDPA backend in {met} of "
            f"{len(ratios)} rows, and at or above {FLOOR_RATIO:.1f}× of it in {floor}. Its ratio runs from "
            f"{min(ratios.values()):.2f} ({dtype}, head dim {d}, {'causal' if causal else 'non-causal'}, N = {n:,}) to "
            f"{max(ratios.values()):.2f} ({best_key[0]}, head dim {best_key[1]}, "
            f"{'causal' if best_key[2] else 'non-causal'}, N = {best_key[3]:,}).")


def noise(result: dict) -> str:
    """The final kernel timed twice on the same shape, minutes apart: how far apart the two readings are."""
    final = [s for s in STEPS if s.kept][-1].key
    grid = {(r["head_dim"], r["causal"], r["N"]): r["fast_backward"] for r in _rows(result, "speed")
            if r["dtype"] == "float16"}
    again = [(r["N"], r["tflops"], grid.get((r["head_dim"], r["causal"], r["N"])))
             for r in _rows(result, "step") if r["step"] == final]
    again += [(r["N"], r["gluon_backward"], grid.get((r["head_dim"], r["causal"], r["N"])))
              for r in _rows(result, "dq")]
    spread = {}
    for n, first, second in again:
        if first and second:
            spread.setdefault(n, []).append(max(first, second) / min(first, second) - 1)
    return ("The final kernel timed twice on the same shape, once in the grid and once in the worklog or the dQ "
            "table, fp16, over the four columns: " + "; ".join(
                f"at N = {n:,} the two readings differ by up to {max(d):.1%}" for n, d in sorted(spread.items()))
            + " (the larger reading over the smaller, from unrounded TFLOP/s).")


def _ratio_spreads(result: dict) -> dict[tuple[int, bool], list[float]]:
    """Per column, how much each step's ratio to the last kept step before it moved between the repetitions of
    the same turns (max / min - 1)."""
    by = {(r["step"], r["head_dim"], r["causal"]): r for r in _rows(result, "step")}
    spreads: dict[tuple[int, bool], list[float]] = {}
    for d, c in SHAPES:
        base = STEPS[0]
        for step in STEPS[1:]:
            now, before = by.get((step.key, d, c)), by.get((base.key, d, c))
            pairs = list(zip((now or {}).get("tflops_repeats") or [], (before or {}).get("tflops_repeats") or [],
                             strict=False))
            ratios = [a / b for a, b in pairs if a and b]
            if len(ratios) > 1:
                spreads.setdefault((d, c), []).append(max(ratios) / min(ratios) - 1)
            if step.kept:
                base = step
    return spreads


def ratio_noise(result: dict) -> str:
    """How much a step's ratio to the last kept step before it moves when the same turns run again: per column, the
    largest spread (max / min - 1) over the worklog's steps. The bound a change must pass to count."""
    spreads = _ratio_spreads(result)
    if not spreads:
        return "This run did not repeat the worklog's turns."
    parts = [f"{_label(d, c)}: up to {max(s):.1%} (median {statistics.median(s):.1%})" for (d, c), s in spreads.items()]
    return (f"Each column's turns ran {STEP_REPEATS} times. A step's ratio to the last kept step before it moved "
            "between the repetitions by: " + "; ".join(parts) + ".")


def one_step(index: int):
    """The view of step `index`: its TFLOP/s in each column against the last kept step before it, and whether the
    change passes the column's noise bound (the largest spread of ratio_noise)."""
    def view(result: dict) -> str:
        by = {(r["step"], r["head_dim"], r["causal"]): r for r in _rows(result, "step")}
        step = STEPS[index]
        base = next(s for s in reversed(STEPS[:index]) if s.kept)
        bounds = {column: max(s) for column, s in _ratio_spreads(result).items()}
        body = []
        for d, c in SHAPES:
            now, before = by.get((step.key, d, c)), by.get((base.key, d, c))
            if not (now and before and now["tflops"] and before["tflops"]):
                body.append([_label(d, c), None, "did not run", None, None])
                continue
            change, bound = now["tflops"] / before["tflops"] - 1, bounds.get((d, c))
            digits = 2 if bound is not None and f"{abs(change):.1%}" == f"{bound:.1%}" else 1  # tell them apart
            verdict = None if bound is None else (
                f"{'beyond' if abs(change) > bound else 'within'} the noise (±{bound:.{digits}%})")
            body.append([_label(d, c), f"{before['tflops']:.0f}", f"{now['tflops']:.0f}", f"{change:+.{digits}%}",
                         verdict])
        headers = ["column", f"step {STEPS.index(base)} TFLOP/s", f"step {index} TFLOP/s", "change", "verdict"]
        return render.table(headers, body) + f"\n\nAgainst step {STEPS.index(base)}, {base.title}."
    return view


def versus_readable(result: dict) -> str:
    """The fast backward against chapter 10's kernels, over the whole grid."""
    ratios = [r["fast_backward"] / r["readable_backward"] for r in _rows(result, "speed")
              if r["fast_backward"] and r["readable_backward"]]
    return (f"Against chapter 10's kernels, measured in the same turns, the fast backward is "
            f"{min(ratios):.2f}× to {max(ratios):.2f}× as fast over all {len(ratios)} rows (ratios of unrounded "
            f"times).")


def checks(result: dict) -> str:
    """The largest relative error of the first head's gradients against float64, per implementation and dtype."""
    body = []
    for dtype in DTYPES:
        rows = [r for r in _rows(result, "speed") if r["dtype"] == dtype]
        worst = [max((r[f"{n}_grad_err"] for r in rows if r.get(f"{n}_grad_err") is not None), default=None)
                 for n in NAMES]
        body.append([dtype, *[None if w is None else f"{w:.1e}" for w in worst], f"{GRAD_RTOL[dtype]:.0e}"])
    return render.table(["dtype", *NAMES.values(), "allowed"], body)


def plot(result: dict):
    """Backward TFLOP/s against N, bf16, one panel per head dim and causal setting."""
    rows = [r for r in _rows(result, "speed") if r["dtype"] == "bfloat16"]
    return speed_panels(rows, SHAPES, NAMES, _label, "backward TFLOP/s (bf16)")


BENCHMARK = Benchmark(
    name="backward_fast",
    chapter="ch11",
    title="Chapter 11: the fast backward, step by step, against every SDPA backend",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_backward.py",
             "kernels/flash_attention_backward_fast.py", "kernels/flash_attention_backward_hopper.py",
             "kernels/flash_attention_fast.py",
             "kernels/flash_attention_hopper.py", "kernels/hopper_schedule.py", "book/bench/backward.py",
             "book/bench/backward_fast.py"],
    run=run,
    views={"steps": steps_table, "tiles": tile_changes, "predictions": predictions,
           "spills": spills, "dq": dq_table,
           "noise": noise, "ratio-noise": ratio_noise, "table": table, "step-table": step_table, "targets": targets,
           "versus-readable": versus_readable,
           "checks": checks, "plot": plot, **{f"step-{i}": one_step(i) for i in range(1, len(STEPS))}},
    awaiting_gpu="issue 20: the fast backward's first GPU run",
)
