"""Chapter 12: one decode step at the shapes of real models, called as users and servers call it, against every SDPA
backend, in one run.

Models (their attention only: query heads / K/V heads, head dim): Llama-3.1-8B (32/8, 128), Qwen2.5-7B (28/4, 128),
one GPU's shard of Llama-3.1-70B split over 8 GPUs (8/1, 128), Llama-2-7B (32/32, 128) and Llama-2-13B (40/40, 128),
both multi-head, and Gemma 7B (16/16, 256). One new token per sequence, bf16; batch 1, 4, 16 and 64; contexts of
2,048, 20,000 and 100,000 keys per sequence, where K and V together take at most MAX_KV_BYTES.

Rows:

- "grid": every sequence of the batch at the full context. Timed two ways. In CUDA graphs, taken in turns (chapter
  7's timer): ours (a Decoder's call) and each SDPA backend with enable_gqa; this is the GPU's time, as a server that
  replays its steps sees it. As plain calls from Python (do_bench): ours by decode(), the one-line convenience that
  plans on every call, ours by a Decoder made once, and each SDPA backend; this is what a loop without graphs sees.
  Beside them, the CPU time of one call with the GPU idle (host_us: synchronize, then time the call until it
  returns).
- "mixed": Llama-3.1-8B at batch 16, one sequence of 100,000 keys and fifteen of 2,048, as in a server's batch.
  Ours reads each sequence's own length, planned two ways: from the shapes alone, and from the lengths as the host
  knows them (host_lengths). SDPA takes one length for the whole batch, so a caller pads every sequence to the
  longest: it is timed on the padded cache (its answers for the short sequences would also need a mask).
- "short_in_long": Llama-3.1-8B, 2,048 keys per sequence in a cache allocated for 131,072 (the way servers
  allocate), batch 1 and 16: ours captured for the capacity, against ours and cuDNN on a cache of exactly 2,048.
- "host": where the host time of a plain call goes, Llama-3.1-8B at batch 1 and 20,000 keys: decode() with and
  without its length checks, making a Decoder (the plan), the Decoder's shape check alone, its call with two
  launches (split and merge) and with one (a single split), and three floors: launching an empty Triton kernel
  through Triton's JIT and through its compiled handle (kernels/launch.py, as a Decoder launches), and a
  one-element torch add.

- "first_try": the seven shapes of a first try as a new user, before the Decoder existed (batch, query/KV heads,
  context: 1, 28/4, 20,000; 1, 32/8, 16,384; 4, 28/4, 20,000; 2, 32/32, 12,288; 2, 40/40, 12,288; 16, 32/8, 4,096;
  48, 32/8, 2,048), measured as the grid rows are.
- "copy": the copy reference of chapter 12 (book/bench/decode.py: 2 GiB copied three ways, the fastest kept), so
  that each grid row's time can be read as a share of the time to copy its K and V bytes at that rate.

Every implementation's output for sequence 0 (and, in the mixed row, for a short sequence too) is compared with
float32 attention before timing; ours out of tolerance stops the run, an SDPA backend out of tolerance or refusing
the shapes is recorded as such and not timed.
"""

from __future__ import annotations

import functools
import statistics
import time

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms, gpu_ms_interleaved

MiB = 2**20
# (name, query heads, K/V heads, head dim)
MODELS = [
    ("Llama-3.1-8B", 32, 8, 128),  # 4 query heads per K/V head
    ("Qwen2.5-7B", 28, 4, 128),  # 7 per K/V head
    ("Llama-3.1-70B, 1/8 shard", 8, 1, 128),  # 64/8 heads over 8 GPUs: multi-query attention on each
    ("Llama-2-7B", 32, 32, 128),  # multi-head
    ("Llama-2-13B", 40, 40, 128),  # multi-head
    ("Gemma 7B", 16, 16, 256),  # multi-head, head dim 256
]
BATCHES = [1, 4, 16, 64]
CONTEXTS = [2048, 20000, 100000]
DTYPE = "bfloat16"
MAX_KV_BYTES = 40 * 2**30
BUDGET_MS = 1000  # GPU time per row in graphs, over every implementation
HOST_CALLS = 50
RTOL = 2e-2  # relative error of a bf16 decode step against float32 (chapter 12's benchmark)
MIXED = (16, 100000, 2048)  # batch, the long sequence, the short ones
LLAMA_8B = MODELS[0]  # the shape of the mixed, short-in-long and host rows
SHORT_IN_LONG_BATCHES = [1, 16]
SHORT_IN_LONG = (2048, 131072)  # keys, capacity
HOST_SHAPE = (1, 20000)  # batch, context
FIRST_TRY = [(MODELS[1], 1, 20000), (MODELS[0], 1, 16384), (MODELS[1], 4, 20000), (MODELS[3], 2, 12288),
             (MODELS[4], 2, 12288), (MODELS[0], 16, 4096), (MODELS[0], 48, 2048)]  # (model, batch, context)
LARGE_BYTES = 256 * 2**20  # rows with at least this much K and V are held to TARGET_LARGE of the copy reference
TARGET_LARGE = 0.85
TARGET = 1.0  # ours / the fastest SDPA backend: in graphs, and as plain calls against cuDNN's plain calls
LEVEL = 0.98  # in graphs, a row within 2% of the fastest backend counts as level (issue 52: the spread of runs)
SDPA_BACKENDS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION"}
NAMES = {"ours": "ours (a Decoder)", "ours_decode": "ours (decode())", "sdpa_cudnn": "cuDNN",
         "sdpa_flash": "FlashAttention-2", "sdpa_efficient": "memory-efficient"}


# ---------------------------------------------------------------------------------------------------
# Measuring


def host_us(fn, calls: int = HOST_CALLS) -> float:
    """Median CPU time of one call in microseconds with the GPU idle: wait for the GPU, then time the call until it
    returns (its kernels queued, not finished)."""
    import torch

    fn()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def _sdpa(q, k, v, backend: str):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    grouped = q.shape[1] != k.shape[1]

    def fn():
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=grouped)
    return fn


def _reference(q, k, v, b: int, length: int):
    """float32 attention of sequence b's new token against its first `length` keys."""
    import torch

    return torch.nn.functional.scaled_dot_product_attention(
        q[b:b + 1].float(), k[b:b + 1, :, :length].float(), v[b:b + 1, :, :length].float(),
        enable_gqa=q.shape[1] != k.shape[1])


def _error(out, expected, b: int) -> float:
    return ((out[b:b + 1].float() - expected).norm() / expected.norm()).item()


def _checked(row: dict, fns: dict, expected: dict) -> dict:
    """The implementations whose output for each sequence in `expected` is within RTOL; the others are recorded in
    the row with what went wrong. Ours must pass."""
    import torch

    kept = {}
    for name, fn in fns.items():
        try:
            out = fn()
            err = max(_error(out, ref, b) for b, ref in expected.items())
        except RuntimeError as error:  # a backend that refuses the shapes, or runs out of memory
            torch.cuda.empty_cache()
            row[f"{name}_refused"] = str(error).splitlines()[0][:100]
            continue
        row[f"{name}_error"] = err
        if err > RTOL:
            assert not name.startswith("ours"), f"{name}: relative error {err:.2e} at {row}"
            row[f"{name}_refused"] = f"relative error {err:.1e} over {RTOL:.0e}"
            continue
        kept[name] = fn
    return kept


def _inputs(batch: int, heads: int, kv_heads: int, head_dim: int, capacity: int):
    import torch

    dtype = getattr(torch, DTYPE)
    q = torch.randn(batch, heads, 1, head_dim, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, capacity, head_dim, device="cuda", dtype=dtype) for _ in range(2))
    return q, k, v


def grid_row(model: tuple, batch: int, context: int, kind: str = "grid") -> dict | None:
    """One model at one batch and context: graphs, plain calls and host time of ours and every SDPA backend."""
    import torch

    from kernels import flash_decoding

    name, heads, kv_heads, head_dim = model
    kv_bytes = 2 * batch * kv_heads * context * head_dim * 2
    if kv_bytes > MAX_KV_BYTES:
        return None
    q, k, v = _inputs(batch, heads, kv_heads, head_dim, context)
    lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    step = flash_decoding.Decoder(q, k, v, lens)
    fns = {"ours": lambda: step(q, k, v, lens),
           "ours_decode": lambda: flash_decoding.decode(q, k, v, lens, check_lengths=False)}
    fns |= {key: _sdpa(q, k, v, backend) for key, backend in SDPA_BACKENDS.items()}
    row = {"kind": kind, "model": name, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
           "batch": batch, "context": context, "kv_bytes": kv_bytes, "splits": step.num_splits,
           "block_n": step.split_meta["BLOCK_N"], "stages": step.split_meta["num_stages"]}
    fns = _checked(row, fns, {0: _reference(q, k, v, 0, context)})
    torch.cuda.synchronize()
    graphed = gpu_ms_interleaved({key: fn for key, fn in fns.items() if key != "ours_decode"}, budget_ms=BUDGET_MS)
    for key in NAMES:
        row[f"{key}_us"] = None if key not in graphed else graphed[key] * 1e3
        row[f"{key}_plain_us"] = None if key not in fns else gpu_ms(fns[key]) * 1e3
        row[f"{key}_host_us"] = None if key not in fns else host_us(fns[key])
    return row


def mixed_row() -> dict:
    """One long sequence and many short ones in a batch: ours reads each length, SDPA the padded cache."""
    import torch

    from kernels import flash_decoding

    batch, long, short = MIXED
    name, heads, kv_heads, head_dim = LLAMA_8B
    q, k, v = _inputs(batch, heads, kv_heads, head_dim, long)
    lengths = [long] + [short] * (batch - 1)
    lens = torch.tensor(lengths, device="cuda", dtype=torch.int32)
    step = flash_decoding.Decoder(q, k, v, lens, host_lengths=lengths)
    by_shapes = flash_decoding.Decoder(q, k, v, lens)
    row = {"kind": "mixed", "model": name, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
           "batch": batch, "long": long, "short": short, "splits": step.num_splits,
           "splits_by_shapes": by_shapes.num_splits,
           "kv_bytes_read": 2 * kv_heads * head_dim * 2 * (long + short * (batch - 1)),
           "kv_bytes_padded": 2 * batch * kv_heads * head_dim * 2 * long}
    ours = _checked(row, {"ours": lambda: step(q, k, v, lens), "ours_by_shapes": lambda: by_shapes(q, k, v, lens)},
                    {0: _reference(q, k, v, 0, long), 1: _reference(q, k, v, 1, short)})
    padded = _checked(row, {key: _sdpa(q, k, v, backend) for key, backend in SDPA_BACKENDS.items()},
                      {0: _reference(q, k, v, 0, long)})  # correct for the long sequence only: no mask
    times = gpu_ms_interleaved(ours | padded, budget_ms=BUDGET_MS)
    for key in ("ours", "ours_by_shapes", *SDPA_BACKENDS):
        row[f"{key}_us"] = None if key not in times else times[key] * 1e3
    return row


def short_in_long_row(batch: int) -> dict:
    """2,048 keys in a cache allocated for 131,072: ours planned for the capacity, ours and cuDNN on 2,048."""
    import torch

    from kernels import flash_decoding

    keys, capacity = SHORT_IN_LONG
    name, heads, kv_heads, head_dim = LLAMA_8B
    q, k, v = _inputs(batch, heads, kv_heads, head_dim, capacity)
    k_exact, v_exact = k[:, :, :keys].contiguous(), v[:, :, :keys].contiguous()
    lens = torch.full((batch,), keys, device="cuda", dtype=torch.int32)
    in_capacity = flash_decoding.Decoder(q, k, v, lens)
    exact = flash_decoding.Decoder(q, k_exact, v_exact, lens)
    row = {"kind": "short_in_long", "model": name, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
           "batch": batch, "keys": keys, "capacity": capacity, "splits_capacity": in_capacity.num_splits,
           "splits_exact": exact.num_splits}
    fns = {"ours_capacity": lambda: in_capacity(q, k, v, lens),
           "ours_exact": lambda: exact(q, k_exact, v_exact, lens),
           "sdpa_cudnn": _sdpa(q, k_exact, v_exact, SDPA_BACKENDS["sdpa_cudnn"])}
    fns = _checked(row, fns, {0: _reference(q, k, v, 0, keys)})
    times = gpu_ms_interleaved(fns, budget_ms=BUDGET_MS)
    for key in ("ours_capacity", "ours_exact", "sdpa_cudnn"):
        row[f"{key}_us"] = None if key not in times else times[key] * 1e3
    return row


def host_row() -> dict:
    """Where the CPU time of a plain call goes, each part timed alone with the GPU idle."""
    import torch
    import triton

    from kernels import flash_decoding
    from kernels.launch import Launch

    batch, context = HOST_SHAPE
    name, heads, kv_heads, head_dim = LLAMA_8B
    q, k, v = _inputs(batch, heads, kv_heads, head_dim, context)
    lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    step = flash_decoding.Decoder(q, k, v, lens)
    single = flash_decoding.Decoder(q, k, v, lens, num_splits=1)
    one = torch.zeros(1, device="cuda")
    empty = _empty_kernel()
    empty_handle = Launch(empty, (1,))
    parts = {
        "decode_checked": lambda: flash_decoding.decode(q, k, v, lens),
        "decode": lambda: flash_decoding.decode(q, k, v, lens, check_lengths=False),
        "plan": lambda: flash_decoding.Decoder(q, k, v, lens),
        "call": lambda: step(q, k, v, lens),
        "call_one_launch": lambda: single(q, k, v, lens),
        "check": lambda: step.check(q, k, v, lens),
        "empty_triton_launch": lambda: empty[(1,)](one),
        "empty_handle_launch": lambda: empty_handle(one),
        "torch_add": lambda: one.add_(1.0),
        "sdpa_cudnn": _sdpa(q, k, v, SDPA_BACKENDS["sdpa_cudnn"]),
    }
    row = {"kind": "host", "model": name, "batch": batch, "context": context, "splits": step.num_splits,
           "triton": triton.__version__}
    for key, fn in parts.items():
        row[f"{key}_us"] = host_us(fn, calls=4 * HOST_CALLS)
    return row


@functools.cache
def _empty_kernel():
    """A Triton kernel that does nothing: its launch is Triton's floor for any launch."""
    import triton

    @triton.jit
    def empty(x):
        pass
    return empty


def _freed(measure, *args):
    """measure(*args), then the memory of its tensors back to the driver, so that the next shape fits."""
    import torch

    row = measure(*args)
    torch.cuda.empty_cache()
    return row


def grid_rows() -> list[dict]:
    shapes = [(model, batch, context) for model in MODELS for batch in BATCHES for context in CONTEXTS]
    return [row for row in (_freed(grid_row, *shape) for shape in shapes) if row is not None]


def copy_row() -> dict:
    """Chapter 12's copy reference, measured in this run: bytes per second of each way to copy 2 GiB."""
    from book.bench.decode import _copy_bandwidths

    ways = _copy_bandwidths()
    return {"kind": "copy", **ways, "reference": max(ways.values())}


def other_rows() -> list[dict]:
    """The first try's shapes, the mixed batch, the short sequences in a large cache, the host parts, the copy."""
    return ([_freed(grid_row, *shape, "first_try") for shape in FIRST_TRY] + [_freed(mixed_row)]
            + [_freed(short_in_long_row, batch) for batch in SHORT_IN_LONG_BATCHES] + [_freed(host_row)]
            + [_freed(copy_row)])


def run(progress: Progress) -> list[dict]:
    rows = grid_rows() + other_rows()
    for row in rows:
        progress(_line(row))
    return rows


def _line(row: dict) -> str:
    if row["kind"] == "copy":
        return f"copy reference {row['reference'] / 1e12:.2f} TB/s"
    if row["kind"] not in ("grid", "first_try"):
        return f"{row['kind']}: " + ", ".join(f"{key} {value:.1f}" for key, value in row.items() if key.endswith("_us")
                                              and value is not None)
    times = ", ".join(f"{key} {row[f'{key}_us']:.1f}" for key in NAMES if row.get(f"{key}_us") is not None)
    return (f"{row['model']} B={row['batch']} L={row['context']}: graphs {times} us; plain ours "
            f"{row['ours_plain_us']:.1f} / decode() {row['ours_decode_plain_us']:.1f} / cuDNN "
            f"{_fmt(row.get('sdpa_cudnn_plain_us'))} us")


# ---------------------------------------------------------------------------------------------------
# Views


def _fmt(value: float | None, digits: int = 1) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"


def _rows(result: dict, kind: str) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == kind]


def _fastest(row: dict, suffix: str = "_us") -> tuple[str | None, float | None]:
    times = {key: row.get(f"{key}{suffix}") for key in SDPA_BACKENDS}
    times = {key: t for key, t in times.items() if t is not None}
    if not times:
        return None, None
    key = min(times, key=times.get)
    return key, times[key]


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or denominator is None else numerator / denominator


def _x(value: float | None, digits: int = 3) -> str | None:
    return None if value is None else f"{value:.{digits}f}×"


def graphs_table(result: dict) -> str:
    body = []
    for r in _rows(result, "grid"):
        key, best = _fastest(r)
        body.append([r["model"], f"{r['heads']}/{r['kv_heads']}", r["head_dim"], r["batch"], f"{r['context']:,}",
                     _fmt(r["ours_us"]), *(_fmt(r.get(f"{k}_us")) for k in SDPA_BACKENDS),
                     _x(_ratio(best, r["ours_us"]), digits=4)])
    headers = ["model", "heads q/kv", "D", "batch", "context", "ours µs", "cuDNN µs", "FA2 µs", "mem-eff. µs",
               "fastest SDPA / ours"]
    return render.table(headers, body) + (
        "\n\nMicroseconds per decode step (one new token per sequence, bf16), replayed from CUDA graphs and taken in "
        "turns, the L2 cache cleared by writing before each call (the grid of the decode tables clears it by "
        "reading). Ours is a Decoder's call (planned once). FA2 and mem-eff.: SDPA's FlashAttention-2 and "
        "memory-efficient backends. — means the backend refused the shapes, ran out of memory or was out of "
        "tolerance. The last column is above 1 where ours is faster.")


def first_try_table(result: dict) -> str:
    """The first try's shapes, now: ours (a Decoder) and the fastest backend in graphs, and the plain calls."""
    body = []
    for r in _rows(result, "first_try"):
        key, best = _fastest(r)
        body.append([r["batch"], f"{r['heads']}/{r['kv_heads']}", f"{r['context']:,}", _fmt(r["ours_us"]),
                     _fmt(best), _x(_ratio(best, r["ours_us"])), _fmt(r["ours_plain_us"]),
                     _fmt(r["ours_decode_plain_us"]), _fmt(r.get("sdpa_cudnn_plain_us")),
                     _x(_ratio(r.get("sdpa_cudnn_plain_us"), r["ours_plain_us"]))])
    headers = ["batch", "heads q/kv", "context", "graphs: ours µs", "graphs: fastest SDPA µs", "fastest / ours",
               "plain: Decoder µs", "plain: decode() µs", "plain: cuDNN µs", "cuDNN / Decoder"]
    return render.table(headers, body) + (
        "\n\nbf16, head dim 128, one new token per sequence, timed as the grid rows are (graphs in turns; plain calls "
        "by do_bench). Ratios above 1: ours is faster.")


def _copy_share(result: dict, row: dict, key: str) -> float | None:
    """The time to copy the row's K and V at the run's copy reference, over the row's time in graphs."""
    copy = _rows(result, "copy")
    if not copy or row.get(f"{key}_us") is None:
        return None
    return row["kv_bytes"] / copy[0]["reference"] / (row[f"{key}_us"] * 1e-6)


def plain_table(result: dict) -> str:
    body = []
    for r in _rows(result, "grid"):
        body.append([r["model"], r["batch"], f"{r['context']:,}", _fmt(r["ours_decode_plain_us"]),
                     _fmt(r["ours_plain_us"]), _fmt(r.get("sdpa_cudnn_plain_us")),
                     _x(_ratio(r.get("sdpa_cudnn_plain_us"), r["ours_decode_plain_us"])),
                     _x(_ratio(r.get("sdpa_cudnn_plain_us"), r["ours_plain_us"])),
                     _fmt(r["ours_decode_host_us"]), _fmt(r["ours_host_us"]), _fmt(r.get("sdpa_cudnn_host_us"))])
    headers = ["model", "batch", "context", "decode() µs", "Decoder µs", "cuDNN µs", "cuDNN / decode()",
               "cuDNN / Decoder", "host: decode()", "host: Decoder", "host: cuDNN"]
    return render.table(headers, body) + (
        "\n\nPlain calls from Python, one after another (do_bench: the median of calls each timed by CUDA events "
        "after the L2 cache is cleared); when a call's CPU time exceeds the GPU's, the GPU waits and the time shows "
        "it. Host columns: the CPU time of one call with the GPU idle, in microseconds. Ratios above 1: ours is "
        "faster. decode() is called with check_lengths=False, as in the first try; the host-time table times it "
        "both ways.")


def host_table(result: dict) -> str:
    rows = _rows(result, "host")
    if not rows:
        return "This run did not time the host parts."
    r = rows[0]
    labels = [("decode_checked", "decode(), with its length checks (they wait for the GPU)"),
              ("decode", "decode(check_lengths=False): its kept plan looked up, new buffers, the call"),
              ("plan", "making a Decoder: checks, plan, buffers"),
              ("call", "a Decoder's call: shape check and two launches"),
              ("call_one_launch", "a Decoder's call with one split: shape check and one launch"),
              ("check", "the shape check alone"),
              ("empty_triton_launch", "launching an empty Triton kernel through Triton's JIT"),
              ("empty_handle_launch", "launching it through its compiled handle, as a Decoder does"),
              ("torch_add", "a one-element torch add (a launch from PyTorch's C++)"),
              ("sdpa_cudnn", "SDPA with the cuDNN backend")]
    body = [[label, _fmt(r.get(f"{key}_us"))] for key, label in labels]
    return render.table(["what the CPU does", "µs"], body) + (
        f"\n\nCPU time of one call with the GPU idle (median of {4 * HOST_CALLS}), {r['model']}, batch {r['batch']}, "
        f"{r['context']:,} keys, {r['splits']} splits, Triton {r['triton']}.")


def mixed_sentence(result: dict) -> str:
    rows = _rows(result, "mixed")
    if not rows:
        return "This run did not time a mixed batch."
    r = rows[0]
    key, best = _fastest(r)
    return (f"{r['model']}, batch {r['batch']}: one sequence of {r['long']:,} keys and {r['batch'] - 1} of "
            f"{r['short']:,}. Ours reads {r['kv_bytes_read'] / MiB:,.0f} MiB of K and V in {r['ours_us']:.1f} µs "
            f"({r['kv_bytes_read'] / r['ours_us'] / 1e3:,.0f} GB/s); the fastest SDPA backend, "
            f"{NAMES.get(key, key)}, padded to the longest, reads {r['kv_bytes_padded'] / MiB:,.0f} MiB in "
            f"{_fmt(best)} µs: {_x(_ratio(best, r['ours_us']))} ours (CUDA graphs, in turns)."
            + ("" if r.get("ours_by_shapes_us") is None else
               f" Ours was planned from the lengths as the host knows them ({r['splits']} splits); planned from the "
               f"shapes alone it takes {r['splits_by_shapes']} split"
               f"{'s' if r['splits_by_shapes'] != 1 else ''} and {r['ours_by_shapes_us']:.1f} µs "
               f"({r['kv_bytes_read'] / r['ours_by_shapes_us'] / 1e3:,.0f} GB/s)."))


def short_in_long_table(result: dict) -> str:
    body = [[r["batch"], f"{r['keys']:,}", f"{r['capacity']:,}", r["splits_capacity"], _fmt(r["ours_capacity_us"]),
             r["splits_exact"], _fmt(r["ours_exact_us"]), _fmt(r.get("sdpa_cudnn_us")),
             _x(_ratio(r["ours_exact_us"], r["ours_capacity_us"]))] for r in _rows(result, "short_in_long")]
    headers = ["batch", "keys", "capacity", "splits", "ours in the large cache µs", "splits", "ours, exact cache µs",
               "cuDNN, exact cache µs", "exact / large"]
    return render.table(headers, body) + (
        "\n\nLlama-3.1-8B's heads (32/8, head dim 128), bf16, CUDA graphs in turns. The large cache is allocated for "
        "the capacity and the Decoder planned for it; the exact cache holds the 2,048 keys alone. These turns are "
        "their own, with their own inputs, so the exact cache's times differ by a few percent from the same shape's "
        "row in the models table; compare within this table.")


def headline(result: dict) -> str:
    """The real-model rows' targets in one small table, and the mixed batch against cuDNN padded to the longest."""
    grid = _rows(result, "grid")
    graphs = [_ratio(_fastest(r)[1], r["ours_us"]) for r in grid if _fastest(r)[1] is not None]
    planned = [_ratio(r.get("sdpa_cudnn_plain_us"), r["ours_plain_us"]) for r in grid
               if r.get("sdpa_cudnn_plain_us") is not None]
    shares = [share for share in (_copy_share(result, r, "ours") for r in grid if r["kv_bytes"] >= LARGE_BYTES)
              if share is not None]

    def count(values, bound):
        met = sum(value >= bound for value in values)
        return [f"{met} of {len(values)} rows", "met" if met == len(values) else "missed"]

    body = [["in graphs: level with the fastest SDPA backend, or ahead (within 2%)", *count(graphs, LEVEL)],
            [f"plain calls: a Decoder at least {TARGET:.1f}× cuDNN's plain call", *count(planned, TARGET)]]
    if shares:
        body.append([f"in graphs: at least {TARGET_LARGE:.0%} of the copy reference from {LARGE_BYTES // MiB} MiB",
                     *count(shares, TARGET_LARGE)])
    for r in _rows(result, "mixed"):
        if r.get("sdpa_cudnn_us"):
            body.append([f"a mixed batch ({r['batch']} sequences, one of {r['long']:,} keys): ours against cuDNN "
                         "padded to the longest", f"{r['sdpa_cudnn_us'] / r['ours_us']:.1f}× faster", "(no target)"])
    return render.table(["target", "this run (bf16)", ""], body)


def targets(result: dict) -> str:
    grid = _rows(result, "grid")
    graphs = [(r, _ratio(_fastest(r)[1], r["ours_us"])) for r in grid if _fastest(r)[1] is not None]
    plain = [(r, _ratio(r.get("sdpa_cudnn_plain_us"), r["ours_decode_plain_us"])) for r in grid
             if r.get("sdpa_cudnn_plain_us") is not None]
    planned = [(r, _ratio(r.get("sdpa_cudnn_plain_us"), r["ours_plain_us"])) for r in grid
               if r.get("sdpa_cudnn_plain_us") is not None]

    def summary(pairs, what, bound=TARGET):
        met = [r for r, ratio in pairs if ratio >= bound]
        missed = sorted(((ratio, r) for r, ratio in pairs if ratio < bound), key=lambda x: x[0])
        text = f"{what}: {len(met)} of {len(pairs)} rows at or above {bound:.2f}×"
        if missed:
            text += " (below: " + "; ".join(f"{r['model']} batch {r['batch']} {r['context']:,} keys {ratio:.4f}×"
                                            for ratio, r in missed) + ")"
        return text + "."

    large = [r for r in grid if r["kv_bytes"] >= LARGE_BYTES]
    shares = [(r, _copy_share(result, r, "ours")) for r in large]
    shares = [(r, share) for r, share in shares if share is not None]
    cudnn = [share for share in (_copy_share(result, r, "sdpa_cudnn") for r in large) if share is not None]
    ok = all(ratio >= LEVEL for _, ratio in graphs) and all(ratio >= TARGET for _, ratio in planned)
    large_line = ""
    if shares:
        ok = ok and all(share >= TARGET_LARGE for _, share in shares)
        below = sorted((share, r) for r, share in shares if share < TARGET_LARGE)
        listed = "; ".join(f"{r['model']} batch {r['batch']} {r['context']:,} keys {share:.1%}" for share, r in below)
        large_line = (f"\n    In graphs, where K and V take at least {LARGE_BYTES // MiB} MiB: ours at or above "
                      f"{TARGET_LARGE:.0%} of the copy reference in {len(shares) - len(below)} of {len(shares)} rows"
                      + (f" (below: {listed})" if below else "") + f"; cuDNN in "
                      f"{sum(share >= TARGET_LARGE for share in cudnn)} of {len(cudnn)}.")
    kind = "success" if ok else "warning"
    strict = sum(ratio >= TARGET for _, ratio in graphs)
    return (f'!!! {kind} "Targets: in graphs level with the fastest SDPA backend (at least {LEVEL:.2f}×: within '
            f'2%, the margin for level); a Decoder\'s plain call at least {TARGET:.1f}× cuDNN\'s plain call; '
            f'{TARGET_LARGE:.0%} of the copy reference from {LARGE_BYTES // MiB} MiB of K and V"\n'
            f"    {summary(graphs, 'In graphs, against the fastest SDPA backend', LEVEL)} At or above 1.00×: "
            f"{strict} of {len(graphs)}.\n"
            f"    {summary(planned, 'Plain calls of a Decoder (planned once), against cuDNN plain calls')}\n"
            f"    {summary(plain, 'Plain calls of decode() (the one-line convenience, not a target), against cuDNN')}"
            + large_line)


BENCHMARK = Benchmark(
    name="decode_models",
    chapter="ch12",
    title="Chapter 12: one decode step at real models' shapes, in graphs and as plain calls",
    sources=["kernels/flash_decoding.py", "book/bench/decode.py", "book/bench/decode_models.py"],
    run=run,
    views={"headline": headline,
           "graphs": graphs_table, "plain": plain_table, "host": host_table, "mixed": mixed_sentence,
           "short-in-long": short_in_long_table, "targets": targets, "first-try": first_try_table},
    awaiting_gpu="issue 52: the real-model decode benchmark's first GPU run",
)
