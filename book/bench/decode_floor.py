"""Chapter 13: where a small decode step's time goes. With 32 query heads on 8 KV heads, head dim 128, fp16, at batch 1
for a few cache lengths and at the two shapes of 256 MiB (the closest to the 85% target), one run times from CUDA
graphs in turns (chapter 7's timer):

- a graph of one empty kernel, and of two: what any step of one or two kernels pays before it reads a byte;
- the book's step (kernels/flash_decoding.py) on an empty cache: the same launches, the same programs loading their
  queries and writing their partial states, and the merge where there is one, but no key to read (every length 0);
- the book's step on the full cache, and cuDNN's (the fastest SDPA backend in chapter 12's decode run);

beside the limit, the bytes of K and V over the copy bandwidth measured in the same run (as the decode benchmark
measures it). The same five graphs are timed again as a model's decode graph runs them: one graph of LAYERS layers, each
with its own queries, keys and values and all sharing one tensor of lengths, its time divided by LAYERS. The timer
clears the L2 cache by reading, as the decode benchmark does (CLEAR_L2); our step and cuDNN's
are also timed with the L2 cleared by writing, as do_bench clears it, to measure what that choice changes. Every
shape is timed twice, in two passes over all of them, so that the run shows how much its readings move between
passes.

Steps back to back are not what a model runs: between two attention steps it runs the rest of the layer, and our
step's programmatic dependent launch (PDL: the next kernel starts its programs while the previous one finishes)
can only overlap a step with what precedes it. So the graph of LAYERS layers is also timed with a stand-in for the
rest of each layer: the two projection GEMMs of Llama-3.1-8B's attention block (the hidden state, 4,096 wide, times
the query/key/value weights, 4,096 x 6,144, before the step; the step's output times the output weights,
4,096 x 4,096, after it), every layer with its own weights, in cuBLAS through torch.matmul. It is timed alone, with
our step, with our step launched without PDL, and with cuDNN's step; the attention's share of a layer is the
layer's time less the GEMMs' alone. Back to back, our step is also timed without PDL.
"""

from __future__ import annotations

from book import render
from book.bench.decode import CLEAR_L2, HEAD_DIM, LARGE_BYTES, TARGET_LARGE, TARGET_SMALL, MiB, _copy_bandwidths, _plan
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved

# (batch, cache length): batch 1 at three lengths, then the two shapes of 256 MiB, the closest to the 85% target
SHAPES = [(1, 1024), (1, 8192), (1, 32768), (8, 8192), (64, 1024)]
PASSES = 2
Q_HEADS, KV_HEADS = 32, 8
TARGET_CONTEXT = 8192  # the context of chapter 12's small-step target, at batch 1
WRITTEN = ("ours", "sdpa_cudnn")  # also timed with the L2 cleared by writing
LAYERS = 32  # the layers of the graph that times a step as a model's decode graph replays it
HIDDEN, QKV_WIDTH = 4096, 6144  # Llama-3.1-8B: hidden size; query, key and value projections (32 + 2 x 8 heads x 128)
NAMES = {"empty_one": "one empty kernel", "empty_two": "two empty kernels",
         "ours_empty": "ours, empty cache", "ours": "ours", "sdpa_cudnn": "cuDNN"}
LAYER_NAMES = {"ours_no_pdl": "ours without PDL"}  # timed only per layer
WITH_GEMMS = {"gemms": "the GEMMs alone", "gemms_ours": "GEMMs and ours", "gemms_ours_no_pdl":
              "GEMMs and ours without PDL", "gemms_sdpa_cudnn": "GEMMs and cuDNN"}


def _empty_kernel():
    """A Triton kernel that does nothing: timing its launch measures what every kernel pays to start and end."""
    import triton

    # --8<-- [start:empty]
    @triton.jit
    def empty():
        pass
    # --8<-- [end:empty]

    return empty


def _steps(batch: int, context: int, device: str = "cuda", layers: int = 1) -> dict:
    """The callables timed at one shape, each checked first: the empty step gives zeros, ours matches the math
    backend (on the first sequence). With layers > 1, each callable runs its step once per layer, every layer on
    its own queries, keys and values (as a model's layers are), all sharing the lengths (as a model's layers do)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import flash_decoding

    # --8<-- [start:steps]
    inputs = [(torch.randn(batch, Q_HEADS, 1, HEAD_DIM, device=device, dtype=torch.float16),
               *(torch.randn(batch, KV_HEADS, context, HEAD_DIM, device=device, dtype=torch.float16) for _ in range(2)))
              for _ in range(layers)]
    q, k, v = inputs[0]
    full = torch.full((batch,), context, device=device, dtype=torch.int32)
    no_keys = torch.zeros_like(full)
    empty_kernel = _empty_kernel()

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return [torch.nn.functional.scaled_dot_product_attention(*x, enable_gqa=True) for x in inputs][0]

    def one():
        for _ in inputs:
            empty_kernel[(1,)]()

    def two():
        for _ in inputs:
            empty_kernel[(1,)]()
            empty_kernel[(1,)]()

    # check_lengths=False, as in the decode benchmark: the host-side check cannot be captured in a graph.
    steps = {"empty_one": one, "empty_two": two,
             "ours_empty": lambda: [flash_decoding.decode(*x, no_keys, check_lengths=False) for x in inputs][0],
             "ours": lambda: [flash_decoding.decode(*x, full, check_lengths=False) for x in inputs][0]}
    if device == "cuda":
        steps["sdpa_cudnn"] = cudnn
    # --8<-- [end:steps]
    if layers > 1:  # the same step launched without programmatic dependent launch
        no_pdl = [flash_decoding.Decoder(*x, full, pdl=False) for x in inputs]
        steps["ours_no_pdl"] = lambda: [step(*x, full) for step, x in zip(no_pdl, inputs, strict=True)][0]
    expected = torch.nn.functional.scaled_dot_product_attention(q[:1].float(), k[:1].float(), v[:1].float(),
                                                                enable_gqa=True)
    got = steps["ours"]()[:1].float()
    assert ((got - expected).norm() / expected.norm()).item() < 2e-2, "ours: wrong decode output"
    assert torch.equal(steps["ours_empty"](), torch.zeros_like(q)), "ours on an empty cache must give zeros"
    for name in ("empty_one", "empty_two", *(["sdpa_cudnn"] if device == "cuda" else [])):
        steps[name]()  # compiled before the timer captures it
    return steps


def _with_gemms(batch: int, context: int, device: str, layers: int = LAYERS) -> dict:
    """A graph's callables of `layers` layers, each layer's step between the two projection GEMMs of its attention
    block (Llama-3.1-8B's sizes, fp16, every layer its own weights, queries, keys and values), and the GEMMs alone."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import flash_decoding

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, device=device, dtype=torch.float16) * scale

    inputs = [(randn(batch, Q_HEADS, 1, HEAD_DIM), randn(batch, KV_HEADS, context, HEAD_DIM),
               randn(batch, KV_HEADS, context, HEAD_DIM)) for _ in range(layers)]
    full = torch.full((batch,), context, device=device, dtype=torch.int32)
    w_qkv = [randn(HIDDEN, QKV_WIDTH, scale=HIDDEN**-0.5) for _ in range(layers)]
    w_out = [randn(HIDDEN, HIDDEN, scale=HIDDEN**-0.5) for _ in range(layers)]
    hidden, attended = randn(batch, HIDDEN), randn(batch, HIDDEN)  # the layer's input; the step's output, reshaped
    ours = [flash_decoding.Decoder(*x, full) for x in inputs]
    no_pdl = [flash_decoding.Decoder(*x, full, pdl=False) for x in inputs]

    def cudnn(layer):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(*inputs[layer], enable_gqa=True)

    def layer_by_layer(step=None):
        def run():
            for layer in range(layers):
                hidden @ w_qkv[layer]
                if step is not None:
                    step(layer)
                attended @ w_out[layer]
        return run

    timed = {"gemms": layer_by_layer(), "gemms_ours": layer_by_layer(lambda i: ours[i](*inputs[i], full)),
             "gemms_ours_no_pdl": layer_by_layer(lambda i: no_pdl[i](*inputs[i], full))}
    if device == "cuda":
        timed["gemms_sdpa_cudnn"] = layer_by_layer(cudnn)
    for run in timed.values():
        run()  # compiled (and cuDNN's plan made) before the timer captures it
    return timed


def _kernels(batch: int, context: int, device: str) -> int:
    """How many kernels the book's step launches at this shape: one where the wrapper picks one split (no merge)."""
    import torch

    probe = torch.empty(batch, Q_HEADS, 1, HEAD_DIM, device=device, dtype=torch.float16)  # only its shape is read
    return 1 if _plan(probe, KV_HEADS, context)["splits"] == 1 else 2


def _row(batch: int, context: int, bandwidth: float, progress: Progress, device: str = "cuda",
         pass_: int = 0) -> dict:
    import torch

    steps = _steps(batch, context, device)
    if device == "cuda":
        torch.cuda.synchronize()
    times = gpu_ms_interleaved(steps, budget_ms=1500, clear_l2=CLEAR_L2)
    written = gpu_ms_interleaved({name: steps[name] for name in WRITTEN if name in steps}, budget_ms=1500,
                                 clear_l2="write")
    del steps
    layered = gpu_ms_interleaved(_steps(batch, context, device, LAYERS), budget_ms=3000, clear_l2=CLEAR_L2)
    with_gemms = gpu_ms_interleaved(_with_gemms(batch, context, device, LAYERS), budget_ms=3000, clear_l2=CLEAR_L2)
    kv_bytes = 2 * batch * KV_HEADS * context * HEAD_DIM * 2
    row = {"kind": "floor", "pass": pass_, "batch": batch, "context": context,
           "kernels": _kernels(batch, context, device), "kv_bytes": kv_bytes,
           "limit_us": kv_bytes / bandwidth * 1e6}
    row |= {f"{name}_us": times[name] * 1e3 if name in times else None for name in NAMES}
    row |= {f"{name}_written_us": written[name] * 1e3 if name in written else None for name in WRITTEN}
    row |= {"layers": LAYERS} | {f"layer_{name}_us": layered[name] * 1e3 / LAYERS if name in layered else None
                                 for name in NAMES | LAYER_NAMES}
    row |= {f"layer_{name}_us": with_gemms[name] * 1e3 / LAYERS if name in with_gemms else None for name in WITH_GEMMS}
    timed = ", ".join(f"{name} {row[f'{name}_us']:.1f} us" for name in NAMES if row[f"{name}_us"] is not None)
    progress(f"pass {pass_ + 1}, B={batch} L={context}: {timed}; limit {row['limit_us']:.1f} us")
    return row


def run(progress: Progress) -> list[dict]:
    ways = _copy_bandwidths()
    bandwidth = max(ways.values())
    progress("copy bandwidth " + ", ".join(f"{name} {b / 1e9:.0f} GB/s" for name, b in ways.items()))
    return [{"kind": "copy", "bytes_per_s": bandwidth, "ways": ways}] + [
        _row(batch, context, bandwidth, progress, pass_=pass_) for pass_ in range(PASSES) for batch, context in SHAPES]


# ---------------------------------------------------------------------------------------------------
# Views


def _floor_rows(result: dict, pass_: int = 0) -> list[dict]:
    """The rows of one pass (the first by default: the tables and sentences read it)."""
    return [r for r in result["rows"] if r["kind"] == "floor" and r.get("pass", 0) == pass_]


def _own_fixed_us(r: dict) -> float:
    """Our step on an empty cache less an empty graph of as many kernels as the step launches."""
    return r["ours_empty_us"] - (r["empty_one_us"] if r.get("kernels", 2) == 1 else r["empty_two_us"])


def table(result: dict) -> str:
    """Microseconds of each graph at each shape, beside the copy reference."""
    body = [[str(r.get("batch", 1)), f"{r['context']:,}", f"{r['kv_bytes'] / MiB:,.0f}", str(r.get("kernels", 2)),
             f"{r['limit_us']:.1f}",
             *(None if r[f"{name}_us"] is None else f"{r[f'{name}_us']:.1f}" for name in NAMES),
             f"{_own_fixed_us(r):.1f}", f"{r['ours_us'] - r['ours_empty_us']:.1f}"]
            for r in _floor_rows(result)]
    return render.table(["batch", "context", "K+V MiB", "our kernels", "copy reference µs",
                         *(f"{label} µs" for label in NAMES.values()),
                         "our own fixed cost µs", "the reading µs"], body) + (
        "\n\n32 query heads on 8 KV heads, head dim 128, fp16, one query per sequence; each timed from a CUDA graph, "
        "in turns, with the L2 cache cleared by reading before each call. An empty cache: every length 0, so the step "
        "launches the same programs and reads no key. Our step launches one kernel where it uses one split per "
        "sequence (no merge), two otherwise. Our own fixed cost: ours on an empty cache less as many empty kernels "
        "as it launches. The reading: ours less ours on an empty cache.")


def target(result: dict) -> str:
    """What the 60% target at batch 1 with an 8K context asks for, set against the floors measured here."""
    r = next(r for r in _floor_rows(result) if r["context"] == TARGET_CONTEXT and r.get("batch", 1) == 1)
    allowed = r["limit_us"] / TARGET_SMALL
    return (f"At {TARGET_CONTEXT:,} keys the copy reference is {r['limit_us']:.1f} µs, so {TARGET_SMALL:.0%} of it "
            f"allows a step of at most {allowed:.2f} µs. Two empty kernels take {r['empty_two_us']:.1f} µs, the "
            f"book's step on an empty cache {r['ours_empty_us']:.1f} µs, and on the full cache {r['ours_us']:.1f} µs, "
            f"{r['ours_us'] - r['ours_empty_us']:.1f} µs more than on the empty one for "
            f"{r['kv_bytes'] / MiB:,.0f} MiB that the copy moves in {r['limit_us']:.1f} µs. A step that paid only "
            f"two empty kernels' time and then read at the copy's rate would take "
            f"{r['empty_two_us'] + r['limit_us']:.2f} µs, {r['limit_us'] / (r['empty_two_us'] + r['limit_us']):.1%} of "
            f"the copy reference; with one kernel, {r['empty_one_us'] + r['limit_us']:.2f} µs, "
            f"{r['limit_us'] / (r['empty_one_us'] + r['limit_us']):.1%}.")


def large(result: dict) -> str:
    """The shapes of 256 MiB or more taken apart: the step's time against what the 85% target allows, its empty-cache
    time and its reading, and what a step with the same empty-cache time that then read at the copy's rate would
    reach."""
    body = []
    for r in (r for r in _floor_rows(result) if r["kv_bytes"] >= LARGE_BYTES):
        reading = r["ours_us"] - r["ours_empty_us"]
        body.append([str(r["batch"]), f"{r['context']:,}", f"{r['kv_bytes'] / MiB:,.0f}", f"{r['limit_us']:.1f}",
                     f"{r['limit_us'] / TARGET_LARGE:.1f}",
                     f"{r['ours_us']:.1f} ({r['limit_us'] / r['ours_us']:.0%})",
                     f"{r['sdpa_cudnn_us']:.1f} ({r['limit_us'] / r['sdpa_cudnn_us']:.0%})",
                     f"{r['ours_empty_us']:.1f}", f"{_own_fixed_us(r):.1f}", f"{reading:.1f}",
                     f"{reading / r['limit_us']:.2f}",
                     f"{r['ours_empty_us'] + r['limit_us']:.1f} "
                     f"({r['limit_us'] / (r['ours_empty_us'] + r['limit_us']):.0%})"])
    return render.table(["batch", "context", "K+V MiB", "copy reference µs",
                         f"{TARGET_LARGE:.0%} of the copy reference allows µs", "ours µs (of the copy reference)",
                         "cuDNN µs (of the copy reference)", "ours, empty cache µs",
                         "our own fixed cost µs", "the reading µs", "the reading over the copy's time",
                         "ours on an empty cache, then a read at the copy's rate µs (of the copy reference)"], body) + (
        "\n\nThe first pass of the fixed-cost table's run, 32 query heads: its times differ a little from chapter 12's "
        "decode table.")


def clearing(result: dict) -> str:
    """Our step and cuDNN's with the L2 cache cleared by reading (the book's timing) and by writing (do_bench's)."""
    body, added = [], []
    for r in _floor_rows(result):
        if r.get("ours_written_us") is None:
            continue
        cells = []
        for name in WRITTEN:
            read, written = r[f"{name}_us"], r[f"{name}_written_us"]
            if read is None or written is None:
                cells += [None, None, None]
                continue
            added.append(written - read)
            cells += [f"{read:.1f}", f"{written:.1f}", f"{written - read:.1f}"]
        body.append([str(r["batch"]), f"{r['context']:,}", f"{r['kv_bytes'] / MiB:,.0f}", f"{r['limit_us']:.1f}",
                     *cells, f"{r['limit_us'] / r['ours_written_us']:.0%}"])
    if not body:
        return "This run did not time the steps with the L2 cache cleared by writing."
    return render.table(["batch", "context", "K+V MiB", "copy reference µs", "ours, cleared by reading µs",
                         "ours, cleared by writing µs", "ours: added µs", "cuDNN, cleared by reading µs",
                         "cuDNN, cleared by writing µs", "cuDNN: added µs",
                         "ours cleared by writing, of the copy reference"],
                        body) + (
        f"\n\nThe same graphs, the first of two passes. Clearing the L2 cache by writing 256 MiB before each call, "
        f"as do_bench does, added {min(added):.1f} to {max(added):.1f} µs to a step.")


def layers(result: dict) -> str:
    """Each step timed alone (one call per graph) and per layer of a graph of many layers, beside the copy reference."""
    rows = [r for r in _floor_rows(result) if r.get("layer_ours_us") is not None]
    if not rows:
        return "This run did not time the steps inside a graph of many layers."
    body = [[str(r["batch"]), f"{r['context']:,}", f"{r['kv_bytes'] / MiB:,.0f}", f"{r['limit_us']:.1f}",
             *(f"{r[f'{prefix}{name}_us']:.1f}" for name in ("empty_two", "ours", "sdpa_cudnn")
               for prefix in ("", "layer_")),
             f"{r['limit_us'] / r['ours_us']:.0%}", f"{r['limit_us'] / r['layer_ours_us']:.0%}",
             f"{r['limit_us'] / r['layer_sdpa_cudnn_us']:.0%}"] for r in rows]
    r = next(r for r in rows if r["context"] == TARGET_CONTEXT and r["batch"] == 1)
    two = r["layer_empty_two_us"]
    second = {(x["batch"], x["context"]): x for x in _floor_rows(result, 1)}
    moves = [abs(again[f"layer_{name}_us"] / first[f"layer_{name}_us"] - 1) for first in rows
             if (again := second.get((first["batch"], first["context"]))) is not None
             for name in ("ours", "sdpa_cudnn")]
    table_ = render.table(["batch", "context", "K+V MiB", "copy reference µs", "two empty kernels, alone µs",
                           "two empty kernels, per layer µs", "ours, alone µs", "ours, per layer µs",
                           "cuDNN, alone µs", "cuDNN, per layer µs", "ours alone, of the copy reference",
                           "ours per layer, of the copy reference", "cuDNN per layer, of the copy reference"], body)
    return table_ + (
        f"\n\nAlone: each step in a graph of its own, as in the tables above. Per layer: one graph runs the step for "
        f"each of {r['layers']} layers, every layer with its own queries, keys and values and all of them sharing one "
        f"tensor of lengths, and its time is divided by {r['layers']}. The first of two passes; the L2 cache "
        f"cleared by reading before each graph."
        + (f" Between passes, ours and cuDNN's per layer changed by at most {max(moves):.1%}." if moves else "")
        + f"\n\nPer layer, two empty kernels take {two:.1f} µs at batch 1 with {TARGET_CONTEXT:,} keys, against "
        f"{r['empty_two_us']:.1f} µs alone. There our step takes {r['layer_ours_us']:.2f} µs per layer, "
        f"{r['limit_us'] / r['layer_ours_us']:.1%} of the copy reference ({r['limit_us'] / r['ours_us']:.1%} "
        f"alone), and cuDNN's {r['layer_sdpa_cudnn_us']:.2f} µs ({r['limit_us'] / r['layer_sdpa_cudnn_us']:.1%}). "
        f"{TARGET_SMALL:.0%} of the copy reference allows {r['limit_us'] / TARGET_SMALL:.2f} µs; two empty kernels "
        f"per layer and then a read at the copy's rate would take {two + r['limit_us']:.2f} µs, "
        f"{r['limit_us'] / (two + r['limit_us']):.1%} of the copy reference. Our step on an empty cache takes "
        f"{r['layer_ours_empty_us']:.2f} µs per layer: {r['layer_ours_empty_us'] - two:.2f} µs of its own fixed "
        f"cost beyond the two empty kernels.")


def with_gemms(result: dict) -> str:
    """Per layer, with the projection GEMMs between the steps: each step's share (the layer less the GEMMs alone),
    with and without programmatic dependent launch, and the same without the GEMMs."""
    rows = [r for r in _floor_rows(result) if r.get("layer_gemms_us") is not None]
    if not rows:
        return "This run did not time the steps between a layer's GEMMs."
    body = []
    for r in rows:
        shares = {name: r[f"layer_gemms_{name}_us"] - r["layer_gemms_us"] for name in ("ours", "ours_no_pdl",
                                                                                       "sdpa_cudnn")}
        body.append([str(r["batch"]), f"{r['context']:,}", f"{r['limit_us']:.1f}", f"{r['layer_gemms_us']:.1f}",
                     *(f"{shares[name]:.1f}" for name in shares),
                     f"{shares['sdpa_cudnn'] / shares['ours']:.3f}", f"{r['limit_us'] / shares['ours']:.0%}",
                     f"{r['layer_ours_us']:.1f}", f"{r['layer_ours_no_pdl_us']:.1f}"])
    r = next(r for r in rows if r["context"] == TARGET_CONTEXT and r["batch"] == 1)
    ours = r["layer_gemms_ours_us"] - r["layer_gemms_us"]
    return render.table(["batch", "context", "copy reference µs", "GEMMs alone, per layer µs", "ours: added µs",
                         "ours without PDL: added µs", "cuDNN: added µs", "cuDNN added / ours added",
                         "ours added, of the copy reference", "back to back: ours per layer µs",
                         "back to back: ours without PDL µs"], body) + (
        f"\n\nOne graph of {r['layers']} layers; in each, the query/key/value GEMM ({HIDDEN:,} x {QKV_WIDTH:,}), the "
        f"step, and the output GEMM ({HIDDEN:,} x {HIDDEN:,}), fp16 cuBLAS, every layer its own weights; its time "
        f"over {r['layers']}. Added: the layer with the step less the layer with the GEMMs alone. The first of two "
        f"passes; the L2 cache cleared by reading before each graph. PDL: programmatic dependent launch. At batch 1 "
        f"with {TARGET_CONTEXT:,} keys our step adds {ours:.2f} µs to a layer, {r['limit_us'] / ours:.1%} of the "
        f"copy reference ({TARGET_SMALL:.0%} allows {r['limit_us'] / TARGET_SMALL:.2f} µs).")


def repeat(result: dict) -> str:
    """Both passes side by side: our step and cuDNN's in each, how far each moved, and how far their ratio moved."""
    second = {(r["batch"], r["context"]): r for r in _floor_rows(result, 1)}
    body, moves, ratio_moves = [], [], []
    for first in _floor_rows(result):
        again = second.get((first.get("batch", 1), first["context"]))
        if again is None:
            continue
        moved = max(abs(again[f"{name}_us"] / first[f"{name}_us"] - 1) for name in ("ours", "sdpa_cudnn"))
        ratios = [r["sdpa_cudnn_us"] / r["ours_us"] for r in (first, again)]
        ratio_moved = abs(ratios[1] / ratios[0] - 1)
        moves.append(moved)
        ratio_moves.append(ratio_moved)
        body.append([str(first["batch"]), f"{first['context']:,}",
                     *(f"{r['ours_us']:.1f}" for r in (first, again)),
                     *(f"{r['sdpa_cudnn_us']:.1f}" for r in (first, again)),
                     *(f"{ratio:.3f}" for ratio in ratios), f"{moved:.1%}", f"{ratio_moved:.1%}"])
    if not body:
        return "This run has one pass."
    return render.table(["batch", "context", "ours µs, pass 1", "ours µs, pass 2", "cuDNN µs, pass 1",
                         "cuDNN µs, pass 2", "cuDNN / ours, pass 1", "cuDNN / ours, pass 2",
                         "the larger change of ours or cuDNN", "change of the ratio"], body) + (
        f"\n\nThe same graphs timed in two passes over all shapes, one after the other. Between passes, our step or "
        f"cuDNN's changed by at most {max(moves):.1%}, and the ratio of the two by at most {max(ratio_moves):.1%}.")


BENCHMARK = Benchmark(
    name="decode_floor",
    chapter="ch13",
    title="Chapter 13: where a small decode step's time goes",
    sources=["kernels/flash_decoding.py", "book/bench/decode.py", "book/bench/decode_floor.py"],
    run=run,
    views={"table": table, "target": target, "large": large, "clearing": clearing, "layers": layers,
           "with-gemms": with_gemms, "repeat": repeat},
    awaiting_gpu="issue 21: the floor benchmark's first GPU run",
)
