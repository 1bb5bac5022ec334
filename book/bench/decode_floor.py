"""Chapter 12: where a small decode step's time goes. At batch 1, 32 query heads on 8 KV heads, head dim 128, fp16,
for a few cache lengths, one run times from CUDA graphs in turns (chapter 7's timer):

- a graph of one empty kernel, and of two: what any step of one or two kernels pays before it reads a byte;
- the book's step (kernels/flash_decoding.py) on an empty cache: the same launches, the same programs loading their
  queries and writing their partial states, and the merge, but no key to read (every length 0);
- the book's step on the full cache, and cuDNN's (the fastest SDPA backend in chapter 12's decode run);

beside the limit, the bytes of K and V over the copy bandwidth measured in the same run (as the decode benchmark
measures it).
"""

from __future__ import annotations

from book import render
from book.bench.decode import HEAD_DIM, TARGET_SMALL, MiB, _copy_bandwidths
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved

CONTEXTS = [1024, 8192, 32768]
Q_HEADS, KV_HEADS = 32, 8
TARGET_CONTEXT = 8192  # the context of chapter 12's small-step target
NAMES = {"empty_one": "one empty kernel", "empty_two": "two empty kernels",
         "ours_empty": "ours, empty cache", "ours": "ours", "sdpa_cudnn": "cuDNN"}


def _empty_kernel():
    """A Triton kernel that does nothing: timing its launch measures what every kernel pays to start and end."""
    import triton

    @triton.jit
    def empty():
        pass

    return empty


def _steps(context: int, device: str = "cuda") -> dict:
    """The callables timed at one cache length, each checked first: the empty step gives zeros, ours matches
    the math backend."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import flash_decoding

    q = torch.randn(1, Q_HEADS, 1, HEAD_DIM, device=device, dtype=torch.float16)
    k, v = (torch.randn(1, KV_HEADS, context, HEAD_DIM, device=device, dtype=torch.float16) for _ in range(2))
    full = torch.full((1,), context, device=device, dtype=torch.int32)
    empty = torch.zeros_like(full)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    empty_kernel = _empty_kernel()

    def one():
        empty_kernel[(1,)]()

    def two():
        empty_kernel[(1,)]()
        empty_kernel[(1,)]()

    # check_lengths=False, as in the decode benchmark: the host-side check cannot be captured in a graph.
    steps = {"empty_one": one, "empty_two": two,
             "ours_empty": lambda: flash_decoding.decode(q, k, v, empty, check_lengths=False),
             "ours": lambda: flash_decoding.decode(q, k, v, full, check_lengths=False)}
    if device == "cuda":
        steps["sdpa_cudnn"] = cudnn
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    got = steps["ours"]().float()
    assert ((got - expected).norm() / expected.norm()).item() < 2e-2, "ours: wrong decode output"
    assert torch.equal(steps["ours_empty"](), torch.zeros_like(q)), "ours on an empty cache must give zeros"
    for name in ("empty_one", "empty_two", *(["sdpa_cudnn"] if device == "cuda" else [])):
        steps[name]()  # compiled before the timer captures it
    return steps


def _row(context: int, bandwidth: float, progress: Progress, device: str = "cuda") -> dict:
    import torch

    steps = _steps(context, device)
    if device == "cuda":
        torch.cuda.synchronize()
    times = gpu_ms_interleaved(steps, budget_ms=1500)
    kv_bytes = 2 * KV_HEADS * context * HEAD_DIM * 2
    row = {"kind": "floor", "context": context, "kv_bytes": kv_bytes, "limit_us": kv_bytes / bandwidth * 1e6}
    row |= {f"{name}_us": times[name] * 1e3 if name in times else None for name in NAMES}
    progress(f"L={context}: " + ", ".join(f"{name} {row[f'{name}_us']:.1f} us" for name in NAMES
                                          if row[f"{name}_us"] is not None)
             + f"; limit {row['limit_us']:.1f} us")
    return row


def run(progress: Progress) -> list[dict]:
    ways = _copy_bandwidths()
    bandwidth = max(ways.values())
    progress("copy bandwidth " + ", ".join(f"{name} {b / 1e9:.0f} GB/s" for name, b in ways.items()))
    return [{"kind": "copy", "bytes_per_s": bandwidth, "ways": ways}] + [
        _row(context, bandwidth, progress) for context in CONTEXTS]


# ---------------------------------------------------------------------------------------------------
# Views


def _floor_rows(result: dict) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == "floor"]


def table(result: dict) -> str:
    """Microseconds of each graph at each cache length, beside the limit."""
    body = [[f"{r['context']:,}", f"{r['kv_bytes'] / MiB:,.0f}", f"{r['limit_us']:.1f}",
             *(None if r[f"{name}_us"] is None else f"{r[f'{name}_us']:.1f}" for name in NAMES),
             f"{r['ours_empty_us'] - r['empty_two_us']:.1f}", f"{r['ours_us'] - r['ours_empty_us']:.1f}"]
            for r in _floor_rows(result)]
    return render.table(["context", "K+V MiB", "limit µs", *(f"{label} µs" for label in NAMES.values()),
                         "ours on an empty cache less two empty kernels: our own fixed cost, µs",
                         "ours less ours on an empty cache: the reading, µs"], body) + (
        "\n\nBatch 1, 32 query heads on 8 KV heads, head dim 128, fp16, one query; each timed from a CUDA graph, in "
        "turns, with the L2 cache cleared before each call. An empty cache: every length 0, so the step launches "
        "the same programs and reads no key.")


def target(result: dict) -> str:
    """What the 60% target at batch 1 with an 8K context asks for, set against the floors measured here."""
    r = next(r for r in _floor_rows(result) if r["context"] == TARGET_CONTEXT)
    allowed = r["limit_us"] / TARGET_SMALL
    return (f"At {TARGET_CONTEXT:,} keys the limit is {r['limit_us']:.1f} µs, so {TARGET_SMALL:.0%} of it allows a "
            f"step of at most {allowed:.1f} µs. Two empty kernels take {r['empty_two_us']:.1f} µs, the book's step "
            f"on an empty cache {r['ours_empty_us']:.1f} µs, and on the full cache {r['ours_us']:.1f} µs, "
            f"{r['ours_us'] - r['ours_empty_us']:.1f} µs more than on the empty one for "
            f"{r['kv_bytes'] / MiB:,.0f} MiB that the copy moves in {r['limit_us']:.1f} µs. A step that paid only "
            f"two empty kernels' time and then read at the copy's rate would take "
            f"{r['empty_two_us'] + r['limit_us']:.1f} µs, {r['limit_us'] / (r['empty_two_us'] + r['limit_us']):.0%} of "
            f"the limit; with one kernel, {r['empty_one_us'] + r['limit_us']:.1f} µs, "
            f"{r['limit_us'] / (r['empty_one_us'] + r['limit_us']):.0%}.")


BENCHMARK = Benchmark(
    name="decode_floor",
    chapter="ch12",
    title="Chapter 12: where a small decode step's time goes",
    sources=["kernels/flash_decoding.py", "book/bench/decode.py", "book/bench/decode_floor.py"],
    run=run,
    views={"table": table, "target": target},
    awaiting_gpu="issue 21: the floor benchmark's first GPU run",
)
