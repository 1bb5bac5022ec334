"""Chapter 14: ring attention on two GPUs of one host (NCCL), against the same attention on one GPU and against
the all-to-all alternative (Ulysses).

One sequence of N tokens, batch 1, head dim 128, bf16, split over WORLD GPUs; heads 32/8 (Llama-3.1-8B) and 32/32.
Per row (N, heads, causal, layout): the ring's forward and its forward + backward, each with the sends overlapped
with the blocks (as kernels/ring_attention.py runs it) and without (each send waited for before the step's
blocks), the two timed in alternating turns; the same attention of the whole sequence on one GPU (chapter 9's
forward, chapter 11's backward), where it fits; the time of one ring step's sends of K and V alone; and, on the
contiguous layout (the only one it takes), the all-to-all attention of kernels/ulysses_attention.py, forward and
forward + backward. Every timing is the slowest rank's, the median of REPEATS calls after warm-up (LARGE_REPEATS
from LARGE tokens), each call started after a barrier (plain calls: NCCL's sends are not captured in CUDA graphs
here).

Before timing, at the smallest N, each rank's share of the ring's (and the all-to-all's) output is compared with
the one-GPU output.
The processes keep NVLink multicast off (NCCL_NVLS_ENABLE=0 and its companions), as shared machines require.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from book import render
from book.bench.registry import Benchmark, BenchmarkSkipped, Progress

WORLD = 2
# tokens in the whole sequence; at 8K the sends are a larger share of a step, so what overlapping hides shows
SIZES = [8192, 32768, 65536, 131072, 262144]
HEADS = [(32, 8), (32, 32)]
HEAD_DIM = 128
DTYPE = "bfloat16"
CASES = [(False, "contiguous"), (True, "contiguous"), (True, "zigzag")]  # (causal, layout)
WARMUP, REPEATS = 2, 7
LARGE, LARGE_REPEATS = 131072, 5  # tokens from which each timing is one warm-up and LARGE_REPEATS calls (minutes a row)
ONE_GPU_MAX = 262144  # tokens: longer ones not timed on one GPU (a causal 1M training step: about a minute by count)
LONG = 524288  # tokens: from here on only the training step with overlap is timed, LONG_REPEATS times after a warm-up
LONG_REPEATS = 3
# PyTorch's own context parallelism (torch.distributed.tensor.experimental.context_parallel) over these SDPA backends,
# in parts of its own (CONTEXT_PARALLEL = True): rows of kind "context_parallel" instead of "ring"
CONTEXT_PARALLEL = False
CONTEXT_PARALLEL_BACKENDS = {"cp_cudnn": "CUDNN_ATTENTION", "cp_flash": "FLASH_ATTENTION"}
RTOL = 2e-2  # bf16 against the one-GPU kernels' bf16 output
# Beyond one machine, on paper: one 400 Gb/s InfiniBand port per GPU (the NVIDIA DGX H200 datasheet: eight
# ConnectX-7 adapters of 400 Gb/s for eight GPUs), a datasheet peak, not a measurement.
INFINIBAND_BYTES_PER_S = 400e9 / 8
GPUS_PER_MACHINE = 8
PROJECTED_GPUS = (4, 8, 64)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def attention_flops(n: int, heads: int, causal: bool) -> float:
    return 4 * n * n * heads * HEAD_DIM * (0.5 if causal else 1.0)


# ---------------------------------------------------------------------------------------------------
# Measuring: one process per GPU


def run(progress: Progress) -> list[dict]:
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < WORLD:
        raise BenchmarkSkipped(f"needs {WORLD} GPUs of one host, found {torch.cuda.device_count()}")
    rows = measure({"backend": "nccl", "world": WORLD, "sizes": SIZES, "heads": HEADS, "cases": CASES, "dtype": DTYPE,
                    "use_kernels": True, "context_parallel": CONTEXT_PARALLEL, "long": LONG,
                    "one_gpu_max": ONE_GPU_MAX}, spawn=mp.spawn)
    for row in rows:
        progress(_line(row))
    return rows


def measure(config: dict, spawn) -> list[dict]:
    """Start config["world"] processes (WORLD if not given) that measure `config` (rank 0 writes the rows); the
    tests pass gloo and small sizes."""
    os.environ.update(MULTICAST_OFF)  # the processes inherit it
    with tempfile.TemporaryDirectory() as tmp:
        spawn(_rank_main, args=(tmp, json.dumps(config)), nprocs=config.get("world", WORLD), join=True)
        return json.loads((Path(tmp) / "rows.json").read_text())


def _rank_main(rank: int, tmp: str, config_json: str) -> None:
    import torch
    import torch.distributed as dist

    config = json.loads(config_json)
    on_gpu = config["backend"] == "nccl"
    device = torch.device("cuda", rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(config["backend"], init_method=f"file://{tmp}/init", rank=rank,
                            world_size=config.get("world", WORLD))
    try:
        started, rows = time.perf_counter(), []
        for n in config["sizes"]:
            for heads, kv_heads in config["heads"]:
                for causal, layout in config["cases"]:
                    if config.get("context_parallel"):
                        rows.append(_context_parallel_row(n, heads, kv_heads, causal, config, device))
                    else:
                        rows.append(_row(n, heads, kv_heads, causal, layout, config, device))
                    if rank == 0:  # as it goes: a call that runs out of time still shows how far it got
                        print(f"  ring: {_line(rows[-1])} ({time.perf_counter() - started:.0f} s)", flush=True)
        if rank == 0:
            (Path(tmp) / "rows.json").write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def _row(n, heads, kv_heads, causal, layout, config, device) -> dict:
    import torch
    import torch.distributed as dist

    from kernels import ring_attention as ring
    from kernels import ulysses_attention as ulysses

    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, config["dtype"])
    generator = torch.Generator(device=device).manual_seed(n + heads + kv_heads)  # the same tensors on every rank
    q, k, v, do = (torch.randn(1, h, n, HEAD_DIM, generator=generator, device=device, dtype=dtype)
                   for h in (heads, kv_heads, kv_heads, heads))
    mine = [ring.shard(t, rank, world, layout) for t in (q, k, v, do)]
    use_kernels = config["use_kernels"]
    row = {"kind": "ring", "N": n, "heads": heads, "kv_heads": kv_heads, "causal": causal, "layout": layout,
           "world": world, "dtype": config["dtype"]}

    def forward(overlap):
        with torch.no_grad():
            return ring.attention(*mine[:3], causal=causal, layout=layout, use_kernels=use_kernels, overlap=overlap)

    def training(overlap):
        leaves = [t.detach().requires_grad_() for t in mine[:3]]
        out = ring.attention(*leaves, causal=causal, layout=layout, use_kernels=use_kernels, overlap=overlap)
        return torch.autograd.grad(out, leaves, mine[3])

    def all_to_all_forward():
        with torch.no_grad():
            return ulysses.attention(*mine[:3], causal=causal, use_kernels=use_kernels)

    def all_to_all_training():
        leaves = [t.detach().requires_grad_() for t in mine[:3]]
        out = ulysses.attention(*leaves, causal=causal, use_kernels=use_kernels)
        return torch.autograd.grad(out, leaves, mine[3])

    # with and without overlap, timed in alternating turns: their difference per turn is what overlapping saves
    paired = {"forward": (lambda: forward(True), lambda: forward(False)),
              "training": (lambda: training(True), lambda: training(False))}
    timed = {"send_ms": lambda: ring._pass_on((mine[1], mine[2]), None, world, rank)()}
    if layout == "contiguous":
        timed |= {"ulysses_forward_ms": all_to_all_forward, "ulysses_training_ms": all_to_all_training}
    repeats = _repeats(n)
    long, one_gpu_max = config.get("long", LONG), config.get("one_gpu_max", ONE_GPU_MAX)  # the processes' own copies
    if n >= long:  # a long sequence: the training step alone, a few times
        paired, timed, repeats = {}, {"training_ms": lambda: training(True)}, LONG_REPEATS
    whole_forward, whole_training = _one_gpu(q, k, v, do, causal, use_kernels)
    if n == min(config["sizes"]) and n < long:
        expected = ring.shard(whole_forward(), rank, world, layout)
        for name, fn in (("error", lambda: forward(True)), ("ulysses_error", all_to_all_forward)):
            if name == "error" or layout == "contiguous":
                row[name] = ((fn().float() - expected.float()).norm() / expected.norm()).item()
                assert row[name] < RTOL, f"{name} {row[name]:.1e} at {row}"
    for what, (with_overlap, without_overlap) in paired.items():
        turns = _paired_turns_ms(with_overlap, without_overlap, device, repeats)
        row[f"{what}_ms"] = statistics.median(first for first, _ in turns)
        row[f"{what}_no_overlap_ms"] = statistics.median(second for _, second in turns)
        row[f"{what}_saved_turns_ms"] = [second - first for first, second in turns]
        if rank == 0:  # a long row shows where it is
            print(f"    {what} {row[f'{what}_ms']:.2f} ms, without overlap {row[f'{what}_no_overlap_ms']:.2f}",
                  flush=True)
    for name, fn in timed.items():
        row[name] = _slowest_rank_ms(fn, device, repeats)
        if rank == 0:
            print(f"    {name} {row[name]:.2f} ms", flush=True)
    if rank == 0 and n <= one_gpu_max:  # the whole sequence on one GPU, timed alone
        row["one_gpu_forward_ms"] = _ms(whole_forward, device, repeats)
        row["one_gpu_training_ms"] = _ms(whole_training, device, repeats)
    dist.barrier()
    return row


def _context_parallel_row(n, heads, kv_heads, causal, config, device) -> dict:
    """PyTorch's context parallelism on the same GPUs: the whole sequence's tensors on every rank, sharded along
    the sequence by context_parallel (which balances a causal mask its own way), then SDPA's forward and training
    step inside it, with each backend of CONTEXT_PARALLEL_BACKENDS. K and V are repeated to the query heads, as
    torchtitan does for grouped-query attention under context parallelism. A backend that refuses is recorded with
    its message."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = getattr(torch, config["dtype"])
    generator = torch.Generator(device=device).manual_seed(n + heads + kv_heads)
    q, k, v, do = (torch.randn(1, h, n, HEAD_DIM, generator=generator, device=device, dtype=dtype)
                   for h in (heads, kv_heads, kv_heads, heads))
    k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    row = {"kind": "context_parallel", "N": n, "heads": heads, "kv_heads": kv_heads, "causal": causal,
           "world": dist.get_world_size(), "dtype": config["dtype"]}
    balanced_before = _cp_options.enable_load_balance
    for key, backend in CONTEXT_PARALLEL_BACKENDS.items():
        buffers = None
        try:
            # its default balancing of the sequence (head and tail halves) is for causal masks only
            _cp_options.enable_load_balance = causal
            with sdpa_kernel(getattr(SDPBackend, backend)):
                expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                # the one-GPU output is sharded with the inputs, so each rank compares its own rows
                buffers = [t.clone() for t in (q, k, v, do)] + [expected]
                with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2] * 5, no_restore_buffers=set(buffers)):
                    local_q, local_k, local_v, _, expected = buffers  # each rank's shard, in place
                    with torch.no_grad():
                        out = torch.nn.functional.scaled_dot_product_attention(local_q, local_k, local_v,
                                                                                is_causal=causal)
                    error = ((out.float() - expected.float()).norm() / expected.norm()).reshape(1)
                    dist.all_reduce(error, op=dist.ReduceOp.MAX)
                    row[f"{key}_error"] = error.item()
                    if row[f"{key}_error"] >= RTOL:  # recorded, not timed
                        raise ValueError(f"wrong output: relative error {row[f'{key}_error']:.1e} against SDPA "
                                         "on one GPU")
                    times = _sdpa_steps_ms(*buffers[:4], causal, device, _repeats(n))
            row[f"{key}_forward_ms"], row[f"{key}_training_ms"] = times
        except (RuntimeError, NotImplementedError, ValueError) as error:
            row[f"{key}_refused"] = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
        finally:
            _cp_options.enable_load_balance = balanced_before
        del buffers
        if device.type == "cuda":
            torch.cuda.empty_cache()
    dist.barrier()
    return row


def _sdpa_steps_ms(q, k, v, do, causal: bool, device, repeats: int) -> tuple[float, float]:
    """The slowest rank's forward and training step of SDPA on these tensors (inside context_parallel: its shards)."""
    forward, training = _one_gpu(q, k, v, do, causal, use_kernels=False)
    return _slowest_rank_ms(forward, device, repeats), _slowest_rank_ms(training, device, repeats)


def _one_gpu(q, k, v, do, causal, use_kernels):
    """The whole sequence's forward and training step on one device: the book's fast kernels (or, on a CPU, SDPA)."""
    import torch

    if use_kernels:
        from kernels import flash_attention_backward_fast, flash_attention_fast

        def forward():
            with torch.no_grad():
                return flash_attention_fast.attention(q, k, v, causal=causal)

        def training():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            return torch.autograd.grad(flash_attention_backward_fast.attention(*leaves, causal=causal), leaves, do)
        return forward, training

    def sdpa(q_, k_, v_):
        return torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, is_causal=causal,
                                                                enable_gqa=q_.shape[1] != k_.shape[1])

    def forward():
        with torch.no_grad():
            return sdpa(q, k, v)

    def training():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(sdpa(*leaves), leaves, do)
    return forward, training


def _repeats(n: int) -> int:
    return LARGE_REPEATS if n >= LARGE else REPEATS


def _warmup(repeats: int) -> int:
    """One warm-up call for a few repeats, WARMUP otherwise."""
    return 1 if repeats < REPEATS else WARMUP


def _ms(fn, device, repeats: int = REPEATS) -> float:
    """Median milliseconds of fn on this device after warm-up (CUDA events on a GPU, the clock on a CPU)."""
    warmup = _warmup(repeats)
    times = [_ms_once(fn, device) for _ in range(warmup + repeats)]
    return statistics.median(times[warmup:])


def _slowest_rank_ms(fn, device, repeats: int = REPEATS) -> float:
    """Median over calls of the slowest rank's time."""
    warmup = _warmup(repeats)
    return statistics.median([_slowest_once_ms(fn, device) for _ in range(warmup + repeats)][warmup:])


def _paired_turns_ms(first, second, device, repeats: int) -> list[tuple[float, float]]:
    """The slowest rank's times of two functions, (first, second) per turn, after warm-up; which runs first
    alternates from turn to turn, so a drift of the clocks falls on both."""
    turns = []
    for i in range(_warmup(repeats) + repeats):
        if i % 2 == 0:
            a = _slowest_once_ms(first, device)
            turns.append((a, _slowest_once_ms(second, device)))
        else:
            b = _slowest_once_ms(second, device)
            turns.append((_slowest_once_ms(first, device), b))
    return turns[_warmup(repeats):]


def _slowest_once_ms(fn, device) -> float:
    """One call's time on the slowest rank: every rank times the call after a barrier, then the ranks keep the
    largest of their times."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    slowest = torch.tensor([_ms_once(fn, device)], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item()


def _ms_once(fn, device) -> float:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end)
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def _line(row: dict) -> str:
    shape = f"N={row['N']:,} {row['heads']}/{row['kv_heads']} causal={row['causal']}"
    if row["kind"] == "context_parallel":
        return f"{shape} context_parallel: " + ", ".join(
            f"{key} {_fmt(row.get(f'{key}_forward_ms'))} / {_fmt(row.get(f'{key}_training_ms'))} ms"
            if row.get(f"{key}_refused") is None else f"{key} refused ({row[f'{key}_refused']})"
            for key in CONTEXT_PARALLEL_BACKENDS)
    if "forward_ms" not in row:
        return f"{shape} {row['layout']}: training {row['training_ms']:.2f} ms"
    return (f"{shape} {row['layout']}: forward {row['forward_ms']:.2f} ms (no overlap "
            f"{row['forward_no_overlap_ms']:.2f}), training {row['training_ms']:.2f} ms, one GPU "
            f"{_fmt(row.get('one_gpu_forward_ms'))} / {_fmt(row.get('one_gpu_training_ms'))} ms")


def _fmt(value, digits: int = 2) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"


# ---------------------------------------------------------------------------------------------------
# Views

IDEAL_SHARE, IDEAL_FROM = 0.9, 262144  # the chapter's targets (issue 53): 90% of ideal scaling from 256K tokens
BEAT_FROM = 131072  # and at least PyTorch's context parallelism from 128K tokens
NVLINK_BYTES_PER_S = 450e9  # H200 SXM datasheet: 900 GB/s of NVLink, counting both directions


def _rows(result: dict) -> list[dict]:
    """The ring's rows timed in full (a long sequence's row times the training step alone)."""
    return [r for r in result["rows"] if r["kind"] == "ring" and "forward_ms" in r]


def _tflops_per_gpu(row: dict, key: str, passes: float = 1.0) -> float:
    return passes * attention_flops(row["N"], row["heads"], row["causal"]) / row["world"] / (row[key] * 1e-3) / 1e12


def _speedup(row: dict, one: str, ring: str) -> str | None:
    return None if row.get(one) is None else f"{row[one] / row[ring]:.2f}×"


def forward_table(result: dict) -> str:
    body = [[f"{r['N']:,}", f"{r['heads']}/{r['kv_heads']}", "yes" if r["causal"] else "no", r["layout"],
             _fmt(r["forward_ms"]), f"{_tflops_per_gpu(r, 'forward_ms'):.0f}", _fmt(r.get("one_gpu_forward_ms")),
             _speedup(r, "one_gpu_forward_ms", "forward_ms")] for r in _rows(result)]
    headers = ["N", "heads q/kv", "causal", "layout", "ring ms", "TFLOP/s per GPU", "one GPU ms", "one GPU / ring"]
    return render.table(headers, body) + (
        f"\n\nForward of one sequence, batch 1, head dim {HEAD_DIM}, bf16, on {WORLD} GPUs (the slowest rank's "
        "time, median of plain calls, sends overlapped); one GPU: the same attention of the whole sequence on one "
        f"GPU. A perfect split would make the ring {WORLD}× faster than one GPU.")


def training_table(result: dict) -> str:
    body = [[f"{r['N']:,}", f"{r['heads']}/{r['kv_heads']}", "yes" if r["causal"] else "no", r["layout"],
             _fmt(r["training_ms"]), f"{_tflops_per_gpu(r, 'training_ms', 3.5):.0f}",
             _fmt(r.get("one_gpu_training_ms")), _speedup(r, "one_gpu_training_ms", "training_ms")]
            for r in _rows(result)]
    headers = ["N", "heads q/kv", "causal", "layout", "ring ms", "TFLOP/s per GPU", "one GPU ms", "one GPU / ring"]
    return render.table(headers, body) + (
        "\n\nForward and backward (3.5 times the forward's FLOPs), as the forward table measures them.")


def scaling(result: dict):
    """One GPU's time over the ring's for the training step, against the length: one line per mask and layout,
    32/8 heads (the rows where one GPU ran)."""
    series = {}
    for causal, layout in ((False, "contiguous"), (True, "contiguous"), (True, "zigzag")):
        rows = sorted((r for r in _rows(result) if r["causal"] == causal and r["layout"] == layout
                       and (r["heads"], r["kv_heads"]) == (32, 8)), key=lambda r: r["N"])
        label = f"{'causal' if causal else 'no mask'}, {layout}"
        series[label] = ([r["N"] for r in rows], [None if r.get("one_gpu_training_ms") is None else
                                                  r["one_gpu_training_ms"] / r["training_ms"] for r in rows])
    return render.line_plot(series, xlabel="tokens in the sequence", ylabel="one GPU / ring (training step)",
                            title=f"The ring on {WORLD} GPUs against one GPU, 32/8 heads",
                            hlines={f"a perfect split ({WORLD}×)": float(WORLD), "one GPU's speed": 1.0})


def all_to_all_table(result: dict) -> str:
    """The all-to-all (timed on the contiguous rows, the only layout it takes) against the ring's layout for the
    mask: zigzag where causal (where it was timed), contiguous otherwise."""
    body = []
    for r in (r for r in _rows(result) if r.get("ulysses_forward_ms") is not None):
        ring = _ring_for(result, r) or r
        body.append([f"{r['N']:,}", f"{r['heads']}/{r['kv_heads']}", "yes" if r["causal"] else "no", ring["layout"],
                     _fmt(ring["forward_ms"]), _fmt(r["ulysses_forward_ms"]),
                     f"{ring['forward_ms'] / r['ulysses_forward_ms']:.2f}×", _fmt(ring["training_ms"]),
                     _fmt(r["ulysses_training_ms"]), f"{ring['training_ms'] / r['ulysses_training_ms']:.2f}×"])
    headers = ["N", "heads q/kv", "causal", "ring layout", "ring forward ms", "all-to-all forward ms",
               "ring / all-to-all", "ring training ms", "all-to-all training ms", "ring / all-to-all"]
    return render.table(headers, body) + (
        f"\n\nThe ring (sends overlapped; zigzag where causal) against the all-to-all (kernels/ulysses_attention.py, "
        f"which takes the contiguous layout) on the same {WORLD} GPUs, the slowest rank's time; above 1.0× the "
        "all-to-all is faster.")


def step_model(row: dict) -> dict:
    """One causal zigzag row's ring step, in milliseconds: the blocks' compute per step (forward, and forward plus
    backward) and the send of one K/V chunk, taken from the measured times without overlap minus their sends.

    Zigzag gives every rank the same work at every step, and with the tokens per GPU kept, the same blocks at any
    world size. Without overlap the forward waits for (world - 1) K/V sends; the training step for those, (world -
    1) more in the backward, and world sends of dK and dV in fp32 (twice K and V's bytes)."""
    world, send = row["world"], row["send_ms"]
    forward = (row["forward_no_overlap_ms"] - _sends_ms(row, "forward")) / world
    training = (row["training_no_overlap_ms"] - _sends_ms(row, "training")) / world
    chunk_bytes = 2 * (row["N"] // world) * row["kv_heads"] * HEAD_DIM * 2  # K and V, bf16
    return {"forward_ms": forward, "training_ms": training, "send_ms": send,
            "link_bytes_per_s": chunk_bytes / (send * 1e-3), "chunk_bytes": chunk_bytes}


def projected_share(model: dict, gpus: int) -> tuple[float, float, float]:
    """(the forward's and the training step's share of ideal scaling, the send of one chunk in ms) on `gpus` GPUs
    with the measured tokens per GPU. The ring's slowest hop sets every step: within one machine the measured
    link, across machines InfiniBand (its datasheet rate, or the measured link if slower). A step takes the
    longer of its compute and its sends (overlapped); the first step sends nothing before it computes, and the
    training step's last dK/dV send comes after. Ideal: the compute alone."""
    link = model["link_bytes_per_s"]
    if gpus > GPUS_PER_MACHINE:
        link = min(link, INFINIBAND_BYTES_PER_S)
    send = model["chunk_bytes"] / link * 1e3
    forward = model["forward_ms"] + (gpus - 1) * max(model["forward_ms"], send)
    training = model["training_ms"] + (gpus - 1) * max(model["training_ms"], 3 * send) + 2 * send
    return gpus * model["forward_ms"] / forward, gpus * model["training_ms"] / training, send


def projection(result: dict) -> str:
    rows = [r for r in _rows(result) if r["causal"] and r["layout"] == "zigzag"]
    if not rows:
        return "This run did not time the causal zigzag ring, which the projection starts from."
    body = []
    for r in rows:
        model = step_model(r)
        for gpus in (r["world"], *PROJECTED_GPUS):
            forward, training, send = projected_share(model, gpus)
            hop = "measured link" if gpus <= GPUS_PER_MACHINE else "InfiniBand (datasheet)"
            measured = (f"{gpus * model['training_ms'] / r['training_ms']:.0%}" if gpus == r["world"] else "")
            body.append([f"{r['heads']}/{r['kv_heads']}", f"{r['N'] // r['world']:,}", str(gpus),
                         f"{r['N'] // r['world'] * gpus:,}", hop, _fmt(model["training_ms"], 3), _fmt(send, 3),
                         f"{forward:.0%}", f"{training:.0%}", measured])
    headers = ["heads q/kv", "tokens per GPU", "GPUs", "tokens", "slowest hop", "compute per step ms (training)",
               "one K/V send ms", "forward: share of ideal", "training: share of ideal", "training: measured"]
    return render.table(headers, body) + (
        "\n\nA model, not a measurement: causal attention, zigzag layout, the tokens per GPU of each measured row "
        f"kept. Each step's compute and one send's time come from the {WORLD}-GPU run (the times without overlap "
        "less their sends, shared over the ring's steps); beyond one machine of "
        f"{GPUS_PER_MACHINE} GPUs the slowest hop is one {INFINIBAND_BYTES_PER_S * 8 / 1e9:.0f} Gb/s InfiniBand "
        "port per GPU (NVIDIA DGX H200 datasheet). Ideal: the steps' compute alone. The last column checks the model "
        "where it can: the measured training step's share at the measured size. Within one machine it assumes "
        "every GPU's link to the next is as fast as the measured pair's, as on NVLink switches.")


def _ring_for(result: dict, row: dict) -> dict | None:
    """The ring's fully timed row at a context-parallel row's shape: the zigzag layout where causal, else
    contiguous."""
    layout = "zigzag" if row["causal"] else "contiguous"
    return next((r for r in _rows(result) if (r["N"], r["heads"], r["kv_heads"], r["causal"], r["layout"])
                 == (row["N"], row["heads"], row["kv_heads"], row["causal"], layout)), None)


def context_parallel_table(result: dict) -> str:
    """The ring against PyTorch's context parallelism over each SDPA backend, forward and training step."""
    rows = [r for r in result["rows"] if r["kind"] == "context_parallel"]
    if not rows:
        return "This run did not time PyTorch's context parallelism."
    body = []
    for r in rows:
        ring = _ring_for(result, r)
        cells = []
        for what in ("forward", "training"):
            times = {key: r.get(f"{key}_{what}_ms") for key in CONTEXT_PARALLEL_BACKENDS}
            fastest = min((t for t in times.values() if t is not None), default=None)
            ours = None if ring is None else ring[f"{what}_ms"]
            cells += [_fmt(ours), *(_fmt(t) if t is not None else _why_not(r, key)
                                    for key, t in times.items()),
                      None if ours is None or fastest is None else f"{fastest / ours:.2f}×"]
        body.append([f"{r['N']:,}", f"{r['heads']}/{r['kv_heads']}", "yes" if r["causal"] else "no", *cells])
    names = {"cp_cudnn": "cuDNN", "cp_flash": "FlashAttention-2"}
    headers = ["N", "heads q/kv", "causal"] + [
        h for what in ("forward", "training") for h in (f"ring {what} ms", *(f"PyTorch CP, {names[k]}, {what} ms"
                                                                              for k in CONTEXT_PARALLEL_BACKENDS),
                                                        f"{what}: fastest CP / ring")]
    refusals = sorted({f"{names[k]}: {r[f'{k}_refused']}" for r in rows for k in CONTEXT_PARALLEL_BACKENDS
                       if f"{k}_refused" in r})
    return render.table(headers, body) + (
        f"\n\nOn the same {WORLD} GPUs, bf16, head dim {HEAD_DIM}, the slowest rank's time. PyTorch's context "
        "parallelism (torch.distributed.tensor.experimental.context_parallel) shards the whole sequence itself "
        "and, with its default rotate method (all-gather), gathers K and V and runs SDPA with the backend named on "
        "each chunk; K and V are repeated to the query heads, as torchtitan (PyTorch's training library) does "
        "for grouped-query attention. The ring: the zigzag layout where causal, contiguous otherwise. Above 1.0× "
        "the ring is faster." + (" Not timed: " + "; ".join(refusals) + "." if refusals else ""))


def targets(result: dict) -> str:
    """The chapter's two targets on two GPUs, read from the rows: the causal training step's share of ideal scaling
    from IDEAL_FROM tokens, and the ring against the fastest context-parallel backend from BEAT_FROM tokens."""
    scaled = [r for r in _rows(result) if r["causal"] and r["layout"] == "zigzag" and r["N"] >= IDEAL_FROM]
    shares = [f"{r['N']:,} tokens, {r['heads']}/{r['kv_heads']} heads: {_ideal_share(r):.1%}" for r in scaled]
    met = all(_ideal_share(r) >= IDEAL_SHARE for r in scaled)
    compared = []
    for r in result["rows"]:
        ring = _ring_for(result, r) if r["kind"] == "context_parallel" and r["N"] >= BEAT_FROM else None
        for what in ("forward", "training") if ring else ():
            fastest = min(r[f"{key}_{what}_ms"] for key in CONTEXT_PARALLEL_BACKENDS if f"{key}_{what}_ms" in r)
            compared.append((fastest / ring[f"{what}_ms"], fastest / ring[f"{what}_no_overlap_ms"], what, r))
    behind = [f"{r['N']:,} tokens, {r['heads']}/{r['kv_heads']} heads, {'causal' if r['causal'] else 'no mask'}, "
              f"{what}: {ratio:.3f}× ({unoverlapped:.3f}× without overlap)"
              for ratio, unoverlapped, what, r in compared if ratio < 1.0]
    if not scaled or not compared:
        return "This run did not time the rows the targets need."
    return (f"Target 1, at least {IDEAL_SHARE:.0%} of ideal scaling for the causal training step (zigzag) from "
            f"{IDEAL_FROM:,} tokens, one GPU's time over {WORLD} against the ring's: "
            f"{'met' if met else 'NOT met'} ({'; '.join(shares)}). Target 2, the ring at least as fast as PyTorch's "
            f"fastest context parallelism in every row from {BEAT_FROM:,} tokens, forward and training: "
            + (f"met in all {len(compared)}." if not behind else
               f"met in {len(compared) - len(behind)} of {len(compared)}; behind in {'; '.join(behind)}."))


def _ideal_share(row: dict) -> float:
    return row["one_gpu_training_ms"] / row["world"] / row["training_ms"]


def _why_not(row: dict, key: str) -> str:
    """A table cell for a backend not timed: its output was wrong, or it refused the call."""
    return "wrong" if row.get(f"{key}_refused", "").startswith("wrong output") else "refused"


def long_sentence(result: dict) -> str:
    """The longest sequences, whose training step alone was timed."""
    rows = [r for r in result["rows"] if r["kind"] == "ring" and "forward_ms" not in r]
    if not rows:
        return "This run did not time a sequence longer than the tables'."
    return " ".join(
        f"At {r['N']:,} tokens ({r['heads']}/{r['kv_heads']} heads, {'causal' if r['causal'] else 'non-causal'}, "
        f"{r['layout']}), the ring's training step takes {r['training_ms']:,.0f} ms on {r['world']} GPUs, "
        f"{_tflops_per_gpu(r, 'training_ms', 3.5):.0f} TFLOP/s per GPU (median of {LONG_REPEATS}); one GPU was not "
        f"timed at this length." for r in rows)


def hidden(result: dict) -> str:
    """How much of the sending the overlap hides: per turn, the time without overlap less the time with it, over
    the time the same sends take alone."""
    rows = [r for r in _rows(result) if "forward_saved_turns_ms" in r and (r["layout"] == "zigzag") == r["causal"]]
    if not rows:
        return "This run did not time the ring with and without overlap in turns."
    body = []
    for r in rows:
        cells = []
        for what in ("forward", "training"):
            sends, saved = _sends_ms(r, what), r[f"{what}_saved_turns_ms"]
            cells += [f"{sends / r[f'{what}_no_overlap_ms']:.1%}",
                      f"{statistics.median(saved):.2f} ({min(saved):.2f} to {max(saved):.2f})",
                      _hidden_share(saved, sends)]
        body.append([f"{r['N']:,}", f"{r['heads']}/{r['kv_heads']}", "yes" if r["causal"] else "no", *cells])
    headers = ["N", "heads q/kv", "causal"] + [
        h for what in ("forward", "training")
        for h in (f"{what}: sends alone / call", f"{what}: saved ms (turns' range)", f"{what}: hidden")]
    return render.table(headers, body) + (
        "\n\nThe ring with its sends overlapped and without (each send waited for before the step's blocks), timed "
        "in alternating turns (a turn: one call of each, with and then without); saved: the time without overlap "
        "less the time with it, median over turns. Sends alone: one K/V send timed by itself, times the sends of a "
        "call (the forward's one per ring step after the first; the training step's also those of the backward and "
        "the dK/dV sends in fp32), over the call's time without overlap. Hidden: saved over "
        "sends alone, shown only where the turns' range is narrower than the sends themselves; \"below the "
        "noise\" where it is not; \"none\" where the median saving is not above zero; \"slower\" where overlapping "
        "cost time in every turn. The zigzag layout where causal, contiguous otherwise.")


def _hidden_share(saved: list[float], sends: float) -> str:
    """The share of the sends that overlapping hid, or why there is none to show."""
    if max(saved) < 0:
        return f"slower in all {len(saved)} turns"
    if max(saved) - min(saved) > sends:
        return "below the noise"
    median = statistics.median(saved)
    return f"{median / sends:.0%}" if median > 0 else "none"


def link(result: dict) -> str:
    """The measured link against the datasheet's: one K/V chunk's send at the longest sequence of each head count."""
    longest = {}
    for r in _rows(result):
        if r["N"] >= longest.get(r["kv_heads"], {"N": 0})["N"]:
            longest[r["kv_heads"]] = r
    if not longest:
        return "This run did not time a send."
    parts = [f"{step['chunk_bytes'] / 2**20:,.0f} MiB ({r['kv_heads']} K/V heads, {r['N'] // r['world']:,} tokens) "
             f"in {step['send_ms']:.2f} ms, {step['link_bytes_per_s'] / 1e9:.0f} GB/s"
             for r in longest.values() for step in [step_model(r)]]
    return (f"One chunk of K and V sent to the next GPU while the previous one's arrives, timed alone: "
            f"{'; '.join(parts)} each way. The datasheet's NVLink figure is {NVLINK_BYTES_PER_S / 1e9:.0f} GB/s each "
            f"way (a peak, not a measurement).")


def clocks(result: dict) -> str:
    """Each part's telemetry: what it timed, and the GPUs' median SM clock and power while it ran."""
    readings = result["provenance"].get("part_telemetry")
    if not readings or len(readings) != len(BENCHMARK.parts):
        return "This run did not record each part's clocks."
    body = []
    for k, (part, reading) in enumerate(zip(BENCHMARK.parts, readings, strict=True), 1):
        what = ("PyTorch's context parallelism" if part.get("CONTEXT_PARALLEL") else "the ring and one GPU"
                ) + ", " + ", ".join(f"{n:,}" for n in part["SIZES"]) + " tokens" + (
            ", " + ", ".join(f"{q}/{kv}" for q, kv in part["HEADS"]) + " heads" if "HEADS" in part else "")
        body.append([k, what, None if reading is None else f"{reading['sm_mhz']['median']:,.0f}",
                     None if reading is None else f"{reading['power_w']['median']:.0f}"])
    return render.table(["part", "timed", "median SM clock MHz", "median power W"], body) + (
        "\n\nThe benchmark runs in parts of at most ten minutes each; nvidia-smi sampled the GPU's clock and "
        "power while each ran.")


def _sends_ms(row: dict, what: str) -> float:
    """The time the sends of one forward (or training step) take alone, in one-chunk sends of K and V: (world - 1)
    in the forward; in the training step as many again in the backward, and world sends of dK and dV in fp32
    (twice K and V's bytes each)."""
    world = row["world"]
    return (world - 1 if what == "forward" else 2 * (world - 1) + 2 * world) * row["send_ms"]


BENCHMARK = Benchmark(
    name="ring",
    chapter="ch14",
    title="Chapter 14: ring attention on two GPUs against one GPU and the all-to-all",
    sources=["kernels/ring_attention.py", "kernels/ulysses_attention.py", "kernels/flash_attention.py",
             "kernels/flash_attention_fast.py", "kernels/flash_attention_hopper.py", "kernels/hopper_schedule.py",
             "kernels/flash_attention_backward.py", "kernels/flash_attention_backward_fast.py",
             "kernels/flash_attention_backward_hopper.py", "book/bench/ring.py"],
    run=run,
    views={"scaling": scaling, "forward": forward_table, "training": training_table, "all-to-all": all_to_all_table,
           "hidden": hidden,
           "projection": projection, "context-parallel": context_parallel_table, "long": long_sentence,
           "targets": targets, "link": link, "clocks": clocks},
    awaiting_gpu="issue 53: needs two GPUs of one host (nvidia-h200-x2)",
    # Each part fits one ten-minute command. On two H200s on 2026-11-29, at 9 calls a timing at every size, the
    # parts took 81 s (the first, compiles included, 32K only), 74, 227, 442, (5 not run), 136, 388 and 138 s;
    # timings from LARGE tokens now take 6 calls.
    parts=[{"SIZES": [8192, 32768]}, {"SIZES": [65536]}, {"SIZES": [131072]}, {"SIZES": [262144], "HEADS": [(32, 8)]},
           {"SIZES": [262144], "HEADS": [(32, 32)]},
           # PyTorch's context parallelism at the same shapes (one row per causal mask), then the 1M-token step
           {"CONTEXT_PARALLEL": True, "SIZES": [32768, 131072], "CASES": [(False, "contiguous"), (True, "zigzag")]},
           {"CONTEXT_PARALLEL": True, "SIZES": [262144], "CASES": [(False, "contiguous"), (True, "zigzag")]},
           {"SIZES": [1048576], "HEADS": [(32, 8)], "CASES": [(True, "zigzag")]}],
)
