"""Chapter 11: what a length that is not a multiple of 128 costs the fast paths, and chunked prefill (fewer queries
than keys, the queries last) against every SDPA backend that takes it, in one run.

Shapes: Llama-3.1-8B's attention (32 query heads, 8 K/V heads, head dim 128), bf16, causal, about 64K tokens per
call as in the real-model benchmark (B = round(65,536 / N)).

- "length" rows: ours at N = 1,000, 3,000, 5,000, 8,191 and 12,345 against ours at the nearest multiple of 128
  (1,024, 2,944, 4,992, 8,192, 12,288) with the same batch, TFLOP/s against TFLOP/s, for the prefill (the forward
  under no_grad) and for a training step (forward and backward); the prefill rows also time every SDPA backend
  at N. Target: within 3% of the neighbour's TFLOP/s.
- "chunked" rows: a chunk of Nq = 1,000 or 2,048 new queries against a cache of Nk = 8,192 or 32,768 keys, the
  chunk's queries being the last Nq positions (bottom-right causal alignment: query i sees keys up to
  i + Nk - Nq), 16K queries per call (B = round(16,384 / Nq)). SDPA takes that alignment as an attn_mask of
  torch.nn.attention.bias.causal_lower_right; a backend that refuses it is recorded as None. FLOPs:
  4·B·H·D·(Nq·Nk − Nq²/2). Target: at least 1.0× the fastest backend that takes it.

Every implementation is checked against float64 on two slices before it is timed (real_models.reference,
generalised to the bottom-right alignment here); the implementations of a row are timed in the same turns,
replayed from CUDA graphs (chapter 7's timer).
"""

from __future__ import annotations

from collections.abc import Callable

from book import render
from book.bench.backward import BACKENDS, BACKWARD_FLOPS, GRAD_RTOL, _step
from book.bench.real_models import (
    CHECK_ELEMENTS,
    FORWARD_RTOL,
    MODELS,
    PEER_NAMES,
    _checked,
    _forward_error,
    _grad_error,
    _sdpa_attention,
    _slices,
    batch_size,
    forward_flops,
    reference,
)
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops

MODEL = MODELS[0]  # Llama-3.1-8B: 32 query heads, 8 K/V heads, head dim 128
DTYPE = "bfloat16"
LENGTHS = [1000, 3000, 5000, 8191, 12345]
CHUNKS = [1000, 2048]  # new queries per prefill chunk
CACHES = [8192, 32768]  # keys: the cache with the chunk at its end
CHUNK_TOKENS = 16384  # queries per chunked call: B = round(CHUNK_TOKENS / Nq)
BUDGET_MS = 1500
NEIGHBOUR_TARGET = 0.97  # ours at N / ours at the nearest multiple of 128
CHUNKED_TARGET = 1.0  # ours / the fastest SDPA backend that takes the chunk


def neighbour(n: int) -> int:
    """The multiple of 128 nearest n."""
    return max(128, round(n / 128) * 128)


def chunk_flops(batch: int, heads: int, n_q: int, n_k: int, d: int) -> float:
    """Bottom-right causal with n_q <= n_k: query i sees n_k - n_q + i + 1 keys."""
    return 4 * batch * heads * d * (n_q * n_k - n_q * n_q / 2)


def run(progress: Progress) -> list[dict]:
    rows = []
    for n in LENGTHS:
        for row in measure_length(n):
            rows.append(row)
            progress(f"N={n} ({row['neighbour']}) {row['mode']}: ours {row['ours']:.0f}, at the neighbour "
                     f"{row['at_neighbour']:.0f} TFLOP/s ({row['to_neighbour']:.3f})")
    for n_q in CHUNKS:
        for n_k in CACHES:
            rows.append(measure_chunk(n_q, n_k))
            r = rows[-1]
            peer = "no SDPA backend ran" if r["ratio"] is None else f"{r['ratio']:.2f}x {PEER_NAMES[r['best_peer']]}"
            progress(f"chunk Nq={n_q} Nk={n_k} B={r['batch']}: ours {r['ours']:.0f} TFLOP/s; {peer}")
    return rows


def _inputs(batch: int, n_q: int, n_k: int, device: str):
    import torch

    dtype = getattr(torch, DTYPE)
    q, do = (torch.randn(batch, MODEL.heads, n_q, MODEL.head_dim, device=device, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(batch, MODEL.kv_heads, n_k, MODEL.head_dim, device=device, dtype=dtype) for _ in range(2))
    return q, k, v, do


def _timer(timer):
    return timer or (lambda fns: gpu_ms_interleaved(fns, budget_ms=BUDGET_MS))


def measure_length(n: int, *, batch: int | None = None, device: str = "cuda",
                   timer: Callable[[dict], dict] | None = None) -> list[dict]:
    """The prefill row and the training row at length n and at its neighbour, with the same batch."""
    import torch

    from kernels import flash_attention_backward_fast as fast_backward
    from kernels import flash_attention_fast as fast

    batch = batch_size(n) if batch is None else batch
    timer = _timer(timer)
    near = neighbour(n)
    at_n, at_near = _inputs(batch, n, n, device), _inputs(batch, near, near, device)
    group = MODEL.group
    rows = []
    for mode in ("prefill", "training"):
        row = {"kind": "length", "mode": mode, "model": MODEL.name, "dtype": DTYPE, "N": n, "neighbour": near,
               "batch": batch}
        if mode == "prefill":
            def ours(q, k, v, causal):
                with torch.no_grad():
                    return fast.attention(q, k, v, causal=causal)
            fns = {"ours": _step(ours, *at_n, True, backward=False)}
            fns |= {name: _step(_sdpa_attention(backend, group > 1), *at_n, True, backward=False)
                    for name, backend in BACKENDS.items()}
            error, key, bound = _forward_error, "err", FORWARD_RTOL[DTYPE]
        else:
            def ours(q, k, v, causal):
                return fast_backward.attention(q, k, v, causal=causal)
            fns = {"ours": _step(ours, *at_n, True, backward=True)}
            error, key, bound = _grad_error, "grad_err", GRAD_RTOL[DTYPE]
        with_do = mode == "training"
        chosen = _checked_at(row, fns, at_n, error, key, bound, with_do)
        chosen |= _checked_at(row, {"neighbour": _step(ours, *at_near, True, backward=with_do)}, at_near, error, key,
                              bound, with_do)
        times = timer(chosen)
        scale = 1 + BACKWARD_FLOPS if with_do else 1
        flops = scale * forward_flops(batch, MODEL.heads, n, MODEL.head_dim)
        row["ours"] = tflops(flops, times.get("ours"))
        row["at_neighbour"] = tflops(scale * forward_flops(batch, MODEL.heads, near, MODEL.head_dim),
                                     times.get("neighbour"))
        row["to_neighbour"] = row["ours"] / row["at_neighbour"]
        _peers(row, [name for name in BACKENDS if name in fns], times, flops)
        rows.append(row)
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def _checked_at(row: dict, fns: dict, inputs, error, key: str, bound: float, with_do: bool) -> dict:
    """real_models._checked against float64 slices of these inputs (the output, or with_do the gradients)."""
    q, k, v, do = inputs
    expected = {(b, g): reference(q, k, v, b, g, do if with_do else None) for b, g in _slices(q, k)}
    return _checked(row, fns, lambda result: error(result, expected, MODEL.group), key, bound)


def _peers(row: dict, names: list[str], times: dict, flops: float) -> None:
    """TFLOP/s of each SDPA backend (None where it did not run), the fastest, and ours against it."""
    for name in names:
        row[name] = tflops(flops, times.get(name))
    peers = {name: row[name] for name in names if row[name] is not None}
    row["best_peer"] = max(peers, key=peers.get) if peers else None
    row["best_peer_tflops"] = peers.get(row["best_peer"])
    row["ratio"] = row["ours"] / row["best_peer_tflops"] if peers else None


def reference_bottom_right(q, k, v, b: int, g: int):
    """Bottom-right causal attention of sequence b's query heads that read K/V head g, in float64, a few query rows
    at a time: query i sees keys up to i + Nk - Nq. Shape (group, Nq, D)."""
    import torch

    heads, kv_heads, n_q, n_k = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    group = heads // kv_heads
    keys, values, scale = k[b, g].double(), v[b, g].double(), q.shape[3] ** -0.5
    out = torch.empty(group, n_q, q.shape[3], dtype=torch.float64, device=q.device)
    chunk = max(1, CHECK_ELEMENTS // (group * n_k))
    columns = torch.arange(n_k, device=q.device)
    for start in range(0, n_q, chunk):
        stop = min(start + chunk, n_q)
        s = (q[b, g * group:(g + 1) * group, start:stop].double() @ keys.T) * scale
        last = torch.arange(start, stop, device=q.device) + n_k - n_q
        s.masked_fill_(columns[None, :] > last[:, None], float("-inf"))
        out[:, start:stop] = torch.softmax(s, dim=-1) @ values
    return out


def _sdpa_chunk(backend: str, n_q: int, n_k: int):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(n_q, n_k)

    def fn(q, k, v):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return fn


def measure_chunk(n_q: int, n_k: int, *, batch: int | None = None, device: str = "cuda",
                  timer: Callable[[dict], dict] | None = None) -> dict:
    """One chunk of n_q queries at the end of n_k keys: ours and every SDPA backend that takes it."""
    import torch

    from kernels import flash_attention_fast as fast

    batch = max(1, round(CHUNK_TOKENS / n_q)) if batch is None else batch
    q, k, v, _ = _inputs(batch, n_q, n_k, device)
    row = {"kind": "chunked", "model": MODEL.name, "dtype": DTYPE, "Nq": n_q, "Nk": n_k, "batch": batch}

    def ours():
        with torch.no_grad():
            return fast.attention(q, k, v, causal=True, causal_alignment="bottom-right")

    fns = {"ours": ours}
    for name, backend in BACKENDS.items():
        attn = _sdpa_chunk(backend, n_q, n_k)
        fns[name] = lambda attn=attn: attn(q, k, v)
    expected = {(b, g): (reference_bottom_right(q, k, v, b, g), None) for b, g in _slices(q, k)}
    chosen = _checked(row, fns, lambda out: _forward_error(out, expected, MODEL.group), "err", FORWARD_RTOL[DTYPE])
    expected.clear()
    times = _timer(timer)(chosen)
    flops = chunk_flops(batch, MODEL.heads, n_q, n_k, MODEL.head_dim)
    row["ours"] = tflops(flops, times.get("ours"))
    _peers(row, list(BACKENDS), times, flops)
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


# ---------------------------------------------------------------------------------------------------
# Views


def _times(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}×"


def length_table(result: dict) -> str:
    """Ours at each length against ours at the nearest multiple of 128, prefill and training step."""
    body = [[r["mode"], f"{r['N']:,}", f"{r['neighbour']:,}", r["batch"], r["ours"], r["at_neighbour"],
             f"{r['to_neighbour']:.3f}", r.get("best_peer_tflops"), _times(r.get("ratio"))]
            for r in result["rows"] if r["kind"] == "length"]
    return render.table(["", "N", "nearest multiple of 128", "B", "ours at N", "ours at the multiple",
                         "N / multiple", "fastest SDPA at N", "ours / fastest"], body) + (
        f"\n\n{MODEL.name}'s attention ({MODEL.heads} query heads, {MODEL.kv_heads} K/V heads, head dim "
        f"{MODEL.head_dim}), {DTYPE}, causal, TFLOP/s counted at each length's own FLOPs. The training step is "
        "forward and backward; SDPA is timed for the prefill only.")


def chunked_table(result: dict) -> str:
    """Chunked prefill: ours and every SDPA backend, TFLOP/s, ours against the fastest that takes the chunk."""
    body = [[f"{r['Nq']:,}", f"{r['Nk']:,}", r["batch"], r["ours"], r["sdpa_cudnn"], r["sdpa_flash"],
             r["sdpa_efficient"], _times(r["ratio"])] for r in result["rows"] if r["kind"] == "chunked"]
    return render.table(["queries (chunk)", "keys (cache)", "B", "ours", "cuDNN", "FA2", "mem-eff.",
                         "ours / fastest"], body) + (
        "\n\nBottom-right causal (the chunk is the last queries of the sequence), TFLOP/s at 4·B·H·D·(Nq·Nk − "
        "Nq²/2) FLOPs; — means the backend refused the lower-right causal mask with grouped heads, or ran out of "
        "memory.")


def summary(result: dict) -> str:
    """Two sentences a reader sees with the notes closed: what a length off the multiples of 128 costs, and how a
    chunked prefill compares with SDPA."""
    lengths = [r for r in result["rows"] if r["kind"] == "length"]
    chunks = [r for r in result["rows"] if r["kind"] == "chunked" and r["ratio"] is not None]
    parts = []
    for mode in ("prefill", "training"):
        rows = [r for r in lengths if r["mode"] == mode]
        if rows:
            lowest = min(rows, key=lambda r: r["to_neighbour"])
            parts.append(f"{mode} {render.span([r['to_neighbour'] for r in rows], '.2f')} "
                         f"(lowest at N = {lowest['N']:,})")
    text = (f"At {MODEL.name}'s attention, {DTYPE}, causal: a length that is not a multiple of 128 runs at "
            f"{' and '.join(parts)} of the TFLOP/s at the nearest multiple, with the same batch.")
    if chunks:
        text += (f" A chunked prefill runs at {render.span([r['ratio'] for r in chunks], '.2f')}× the fastest SDPA "
                 "backend that takes its lower-right causal mask.")
    return text


def targets(result: dict) -> str:
    """Both targets, checked row by row."""
    lengths = [r for r in result["rows"] if r["kind"] == "length"]
    chunks = [r for r in result["rows"] if r["kind"] == "chunked" and r["ratio"] is not None]
    slow = [r for r in lengths if r["to_neighbour"] < NEIGHBOUR_TARGET]
    behind = [r for r in chunks if r["ratio"] < CHUNKED_TARGET]
    kind = "success" if lengths and chunks and not slow and not behind else "warning"
    lines = [f'!!! {kind} "Targets: any length within {1 - NEIGHBOUR_TARGET:.0%} of the nearest multiple of 128; '
             f'a chunk at least {CHUNKED_TARGET:.1f}× the fastest backend that takes it"',
             f"    Lengths: met in {len(lengths) - len(slow)} of {len(lengths)} rows"
             + ("" if not slow else " (below: " + "; ".join(
                 f"{r['mode']} N = {r['N']:,}: {r['to_neighbour']:.3f}" for r in slow) + ")")
             + f". Chunks: met in {len(chunks) - len(behind)} of {len(chunks)} rows with a backend to compare"
             + ("" if not behind else " (below: " + "; ".join(
                 f"Nq = {r['Nq']:,}, Nk = {r['Nk']:,}: {r['ratio']:.3f}× {PEER_NAMES[r['best_peer']]}"
                 for r in behind) + ")") + "."]
    return "\n".join(lines)


BENCHMARK = Benchmark(
    name="any_length",
    chapter="ch11",
    title="Any length and chunked prefill: the fast paths off the multiples of 128, and with fewer queries than keys",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_backward.py", "kernels/flash_attention_fast.py",
             "kernels/flash_attention_hopper.py", "kernels/hopper_schedule.py",
             "kernels/flash_attention_backward_fast.py", "kernels/flash_attention_backward_hopper.py",
             "book/bench/backward.py", "book/bench/real_models.py", "book/bench/any_length.py"],
    run=run,
    views={"summary": summary, "length-table": length_table, "chunked-table": chunked_table, "targets": targets},
    awaiting_gpu="issue 51: the first GPU run of any length and chunked prefill",
)
