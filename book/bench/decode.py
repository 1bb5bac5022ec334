"""Chapter 12: one decode step (one new query per sequence) against a KV cache, in one run: the book's split-KV kernel
(kernels/flash_decoding.py), every SDPA backend that takes the shapes (with enable_gqa), and chapter 5's kernel
used naively (K and V repeated to every query head beforehand), each against the bandwidth limit. Rows of kind
"decode": fp16 and bf16, head dim 128, batch {1, 8, 64} x context {1K ... 128K} x (query heads, KV heads) {(32,
32), (32, 8), (64, 8)}, leaving out shapes whose K and V exceed 40 GiB (chapter 5's kernel only up to 8 GiB of
repeated K and V: its offsets are 32-bit). Every implementation's output for the first sequence is checked against
the math backend in float32, then all are timed from CUDA graphs in turns (chapter 7's timer, clearing the L2 cache
by reading: CLEAR_L2); the book's kernel is also timed with plain calls (do_bench: CPU launch cost included, and
the L2 cleared by writing). It runs with check_lengths=False: its host-side check of
the lengths cannot be captured in a graph. The limit: bytes of K and V over the copy bandwidth measured in the same
run (a copy's read and write bytes over its time; the fastest of three ways).
Rows of kind "splits": the book's kernel at batch 1 with every split count from 1 to 64, at three cache lengths, with
the first tile of TILES.
Rows of kind "tiles": the book's kernel with each tile of TILES (keys per tile, pipeline stages) at a few shapes and the
wrapper's split count, timed in turns; rows of kind "tile_memory": the shared memory and registers each tile's
compiled split kernel uses, beside the wrapper's estimate of shared memory.
Rows of kind "paged": the book's kernel on a contiguous cache and on the same cache in shuffled pages of each size
in PAGE_SIZES, timed in turns.
"""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms, gpu_ms_interleaved

DTYPES = ["float16", "bfloat16"]
HEAD_DIM = 128
BATCHES = [1, 8, 64]
CONTEXTS = [1024, 8192, 32768, 131072]
HEADS = [(32, 32), (32, 8), (64, 8)]
MAX_KV_BYTES = 40 * 2**30  # K and V together: larger shapes are left out (64 sequences of 128K with 32 KV heads)
# Chapter 5's kernel needs K and V repeated for every query head, and it computes offsets in 32 bits: only up to
# 2^31 elements per tensor (4 GiB of fp16 each).
MAX_NAIVE_BYTES = 2 * 2 * 2**31
SPLIT_COUNTS = [1, 2, 4, 8, 16, 32, 64]
SPLIT_CONTEXTS = [1024, 8192, 131072]  # a 1K cache has 8 tiles of 128 keys: its splits past 8 hold no key
# Grids of 128, 256, 512 and 2,048 split programs on the H200's 132 SMs, with short and long caches
TILE_SHAPES = [(1, 131072, (32, 32)), (8, 1024, (32, 32)), (8, 131072, (32, 32)), (64, 1024, (32, 8)),
               (64, 2048, (32, 8)), (64, 4096, (32, 8)), (64, 32768, (32, 8)), (64, 8192, (32, 32))]
PAGE_SIZES = [16, 64, 128]  # keys per page; a tile never straddles two pages, so pages of 16 mean tiles of 16
# The timer clears the L2 cache before each call by reading 256 MiB, not by writing it as do_bench does: a decode step
# only reads, and the written lines would go back to memory inside the timed step (chapter 12 measures how much).
CLEAR_L2 = "read"
PAGED_SHAPES = [(1, 131072, (32, 8)), (8, 32768, (32, 8)), (64, 8192, (32, 8))]
COPY_BYTES = 2 * 2**30
REGISTERS_PER_SM = 65536  # compute capability 9.0 (chapter 8's table, from the CUDA C++ Programming Guide)
MiB = 2**20
TARGET_PEER = 1.0  # the book's kernel / the fastest SDPA backend, every row
TARGET_LARGE = 0.85  # share of the bandwidth limit where K and V are at least LARGE_BYTES
LARGE_BYTES = 256 * MiB
TARGET_SMALL = 0.60  # share of the limit at batch 1 with an 8K context
SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION",
                 "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_math": "MATH"}
NAMES = {"ours": "chapter 12's split-KV", "naive": "chapter 5's kernel, K and V repeated",
         "sdpa_flash": "FlashAttention-2", "sdpa_efficient": "memory-efficient", "sdpa_cudnn": "cuDNN",
         "sdpa_math": "math"}


def _copy_bandwidths() -> dict[str, float]:
    """Bytes per second of three ways to copy 2 GiB on the device, counting the bytes read and the bytes written.

    A graph's copy node may go through the DMA copy engines rather than the SMs, so the copy is also done by an
    elementwise kernel (negation into a second tensor: the same bytes) and timed without a graph."""
    import torch

    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    ways = {"copy_graph": lambda: dst.copy_(src), "kernel_graph": lambda: torch.neg(src, out=dst)}
    for fn in ways.values():
        fn()
    times = gpu_ms_interleaved(ways, clear_l2=CLEAR_L2) | {"copy_plain": gpu_ms(ways["copy_graph"])}
    return {name: 2 * COPY_BYTES / (ms * 1e-3) for name, ms in times.items()}


def _implementations(q, k, v, group: int, naive: bool) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import flash_attention, flash_decoding

    lens = torch.full((q.shape[0],), k.shape[2], device=q.device, dtype=torch.int32)

    def sdpa(backend):
        def fn():
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=group > 1)
        return fn

    # check_lengths=False: the check reads the lengths on the host, which a CUDA graph cannot capture.
    fns = {"ours": lambda: flash_decoding.decode(q, k, v, lens, check_lengths=False)}
    if naive:
        k_all, v_all = (k, v) if group == 1 else (t.repeat_interleave(group, dim=1) for t in (k, v))  # untimed
        fns["naive"] = lambda: flash_attention.attention(q, k_all, v_all)
    return fns | {name: sdpa(backend) for name, backend in SDPA_BACKENDS.items()}


def _plan(q, kv_heads: int, capacity: int, page_size: int = 0) -> dict:
    """The split count, keys per tile and pipeline stages the wrapper picks for these shapes (kernels/flash_decoding.py:
    plan), with a contiguous cache (page_size 0) or pages of page_size keys, which cap the tile."""
    from kernels import flash_decoding

    splits, block_n, stages = flash_decoding.plan(q, kv_heads, capacity, page_size)
    return {"splits": splits, "block_n": block_n, "stages": stages}


def compiled_resources(fn) -> dict | None:
    """Shared memory (bytes) and registers per thread of the split kernel that fn compiles, read from Triton's cache
    of compiled kernels (emptied first); None where this Triton keeps that cache differently."""
    from kernels import flash_decoding

    kernel = flash_decoding._decode_split
    try:
        kernel.device_caches.clear()
        fn()
        compiled = [k for cache in kernel.device_caches.values() for k in cache[0].values()]
        return {"shared_bytes": max(k.metadata.shared for k in compiled), "registers": max(k.n_regs for k in compiled)}
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _decode_row(dtype_name: str, batch: int, context: int, heads: tuple[int, int], bandwidth: float,
                progress: Progress, device: str = "cuda") -> dict | None:
    import torch

    q_heads, kv_heads = heads
    kv_bytes = 2 * batch * kv_heads * context * HEAD_DIM * 2
    if kv_bytes > MAX_KV_BYTES:
        return None
    dtype = getattr(torch, dtype_name)
    q = torch.randn(batch, q_heads, 1, HEAD_DIM, device=device, dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, context, HEAD_DIM, device=device, dtype=dtype) for _ in range(2))
    expected = torch.nn.functional.scaled_dot_product_attention(q[:1].float(), k[:1].float(), v[:1].float(),
                                                                enable_gqa=kv_heads < q_heads)  # sequence 0
    fns = {}
    row = {"kind": "decode", "dtype": dtype_name, "batch": batch, "context": context, "q_heads": q_heads,
           "kv_heads": kv_heads, "kv_bytes": kv_bytes, "limit_us": kv_bytes / bandwidth * 1e6,
           **{f"ours_{key}": value for key, value in _plan(q, kv_heads, context).items()}}
    naive = kv_bytes * q_heads // kv_heads <= MAX_NAIVE_BYTES
    for name, fn in _implementations(q, k, v, q_heads // kv_heads, naive).items():
        try:
            err = ((fn()[:1].float() - expected).norm() / expected.norm()).item()
        except RuntimeError as error:  # a pinned backend that refuses the shapes, or runs out of memory
            torch.cuda.empty_cache()
            row[f"{name}_error"] = str(error).splitlines()[0][:100]
            continue
        assert err < 2e-2, f"{name}: wrong decode output at {row}: relative error {err:.2e}"
        fns[name] = fn
    if q.is_cuda:
        torch.cuda.synchronize()
    times = gpu_ms_interleaved(fns, budget_ms=1500, clear_l2=CLEAR_L2)
    for name in NAMES:
        us = times.get(name)
        row[f"{name}_us"] = None if us is None else us * 1e3
        row[f"{name}_share"] = None if us is None else row["limit_us"] / row[f"{name}_us"]
    row["ours_plain_us"] = gpu_ms(fns["ours"]) * 1e3  # plain calls: what a Python loop without graphs sees
    progress(f"{dtype_name} B={batch} L={context} H={q_heads}/{kv_heads}: ours {row['ours_us']:.1f} us "
             f"({row['ours_share']:.0%} of the limit)")
    return row


def _splits_rows(bandwidth: float, progress: Progress) -> list[dict]:
    import torch

    from kernels import flash_decoding

    rows = []
    for context in SPLIT_CONTEXTS:
        q = torch.randn(1, 32, 1, HEAD_DIM, device="cuda", dtype=torch.float16)
        k, v = (torch.randn(1, 8, context, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(2))
        lens = torch.full((1,), context, device="cuda", dtype=torch.int32)
        block_n, stages = flash_decoding.TILES[0]
        fns = {s: (lambda s=s, q=q, k=k, v=v, lens=lens, n=block_n, stages=stages: flash_decoding.decode(
            q, k, v, lens, num_splits=s, block_n=n, num_stages=stages, check_lengths=False)) for s in SPLIT_COUNTS}
        for fn in fns.values():
            fn()
        times = gpu_ms_interleaved({str(s): fn for s, fn in fns.items()}, clear_l2=CLEAR_L2)
        kv_bytes = 2 * 8 * context * HEAD_DIM * 2
        for s in SPLIT_COUNTS:
            us = times[str(s)] * 1e3
            rows.append({"kind": "splits", "context": context, "splits": s, "us": us,
                         "share": kv_bytes / bandwidth * 1e6 / us})
        progress(f"splits at L={context}: "
                 + ", ".join(f"{r['splits']}: {r['us']:.1f} us" for r in rows[-len(SPLIT_COUNTS):]))
    return rows


def _tiles_rows(bandwidth: float, progress: Progress) -> list[dict]:
    import torch

    from kernels import flash_decoding

    rows = []
    for batch, context, (q_heads, kv_heads) in TILE_SHAPES:
        q = torch.randn(batch, q_heads, 1, HEAD_DIM, device="cuda", dtype=torch.float16)
        k, v = (torch.randn(batch, kv_heads, context, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(2))
        lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
        chosen = _plan(q, kv_heads, context)
        splits = chosen["splits"]
        fns = {f"{n}/{s}": (lambda n=n, s=s, q=q, k=k, v=v, lens=lens, splits=splits: flash_decoding.decode(
            q, k, v, lens, num_splits=splits, block_n=n, num_stages=s, check_lengths=False))
            for n, s in flash_decoding.TILES}
        for fn in fns.values():
            fn()
        times = gpu_ms_interleaved(fns, budget_ms=1500, clear_l2=CLEAR_L2)
        limit_us = 2 * batch * kv_heads * context * HEAD_DIM * 2 / bandwidth * 1e6
        rows += [{"kind": "tiles", "batch": batch, "context": context, "q_heads": q_heads, "kv_heads": kv_heads,
                  "block_n": n, "stages": s, "splits": splits, "programs": batch * kv_heads * splits,
                  "chosen": (n, s) == (chosen["block_n"], chosen["stages"]), "us": times[f"{n}/{s}"] * 1e3,
                  "share": limit_us / (times[f"{n}/{s}"] * 1e3)} for n, s in flash_decoding.TILES]
        progress(f"tiles B={batch} L={context} H={q_heads}/{kv_heads}: "
                 + ", ".join(f"{name} {ms * 1e3:.1f} us" for name, ms in times.items()))
        del q, k, v, fns
        torch.cuda.empty_cache()
    return rows + _tile_memory_rows()


def _tile_memory_rows() -> list[dict]:
    """Each tile's compiled shared memory per program and registers per thread at head dim 128 in fp16, one query per
    sequence on groups of 4 (16 rows), the programs that fit on one SM by each (registers in steps of 8 per thread,
    chapter 8), beside the wrapper's estimate, which counts shared memory only."""
    import torch

    from kernels import flash_decoding

    q = torch.randn(1, 32, 1, HEAD_DIM, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(1, 8, 1024, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(2))
    lens = torch.full((1,), 1024, device="cuda", dtype=torch.int32)
    per_sm_shared = torch.cuda.get_device_properties(q.device).shared_memory_per_multiprocessor
    rows = []
    for n, s in flash_decoding.TILES:
        used = compiled_resources(lambda n=n, s=s: flash_decoding.decode(q, k, v, lens, num_splits=2, block_n=n,
                                                                         num_stages=s, check_lengths=False))
        row = {"kind": "tile_memory", "block_n": n, "stages": s, "warps": flash_decoding.NUM_WARPS,
               "shared_per_sm": per_sm_shared,
               "estimate": flash_decoding.programs_per_sm(n, s, 16, HEAD_DIM, 2, per_sm_shared)}
        if used is not None:
            per_program = -(-used["registers"] // 8) * 8 * 32 * flash_decoding.NUM_WARPS
            row |= used | {"programs_per_sm": per_sm_shared // (used["shared_bytes"] + 1024),
                           "programs_per_sm_registers": REGISTERS_PER_SM // per_program}
        rows.append(row)
    return rows


def _paged_rows(bandwidth: float, progress: Progress, shapes=PAGED_SHAPES, device: str = "cuda") -> list[dict]:
    import torch

    from kernels import flash_decoding

    rows = []
    for batch, context, (q_heads, kv_heads) in shapes:
        q = torch.randn(batch, q_heads, 1, HEAD_DIM, device=device, dtype=torch.float16)
        k, v = (torch.randn(batch, kv_heads, context, HEAD_DIM, device=device, dtype=torch.float16) for _ in range(2))
        lens = torch.full((batch,), context, device=device, dtype=torch.int32)
        fns = {"contiguous": lambda q=q, k=k, v=v, lens=lens: flash_decoding.decode(q, k, v, lens, check_lengths=False)}
        expected = fns["contiguous"]()
        for size in PAGE_SIZES:
            pages = context // size
            order = torch.randperm(batch * pages, device=device)  # page i of sequence b lives at order[b * pages + i]
            k_pool, v_pool = (torch.empty((batch * pages, kv_heads, size, HEAD_DIM), device=device,
                                          dtype=torch.float16) for _ in range(2))
            for pool, cache in ((k_pool, k), (v_pool, v)):
                pool[order] = cache.view(batch, kv_heads, pages, size, HEAD_DIM).transpose(1, 2).reshape(
                    batch * pages, kv_heads, size, HEAD_DIM)
            table = order.view(batch, pages).to(torch.int32)
            fns[str(size)] = (lambda q=q, k_pool=k_pool, v_pool=v_pool, lens=lens, table=table: flash_decoding.decode(
                q, k_pool, v_pool, lens, block_table=table, check_lengths=False))
            err = ((fns[str(size)]().float() - expected.float()).norm() / expected.float().norm()).item()
            assert err < 1e-3, f"paged cache of {size}-key pages: relative error {err:.2e} against the contiguous one"
        times = gpu_ms_interleaved(fns, budget_ms=1500, clear_l2=CLEAR_L2)
        limit_us = 2 * batch * kv_heads * context * HEAD_DIM * 2 / bandwidth * 1e6
        rows += [{"kind": "paged", "batch": batch, "context": context, "q_heads": q_heads, "kv_heads": kv_heads,
                  "pages": name, "us": ms * 1e3, "share": limit_us / (ms * 1e3),
                  **_plan(q, kv_heads, context, 0 if name == "contiguous" else int(name))}
                 for name, ms in times.items()]
        progress(f"paged B={batch} L={context} H={q_heads}/{kv_heads}: "
                 + ", ".join(f"{name} {ms * 1e3:.1f} us" for name, ms in times.items()))
        del q, k, v, fns
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def run(progress: Progress) -> list[dict]:
    ways = _copy_bandwidths()
    bandwidth = max(ways.values())  # the limit: the fastest copy measured
    progress("copy bandwidth " + ", ".join(f"{name} {b / 1e9:.0f} GB/s" for name, b in ways.items()))
    rows = [{"kind": "copy", "bytes_per_s": bandwidth, "ways": ways}]
    for dtype in DTYPES:
        for heads in HEADS:
            for batch in BATCHES:
                for context in CONTEXTS:
                    row = _decode_row(dtype, batch, context, heads, bandwidth, progress)
                    if row is not None:
                        rows.append(row)
    return (rows + _splits_rows(bandwidth, progress) + _tiles_rows(bandwidth, progress)
            + _paged_rows(bandwidth, progress))


# ---------------------------------------------------------------------------------------------------
# Views

# One rule of "level" for both of chapter 12's grids; imported here, in the views section, left out of the hash.
from book.bench.decode_models import LEVEL  # noqa: E402


def _rows(result: dict, kind: str) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == kind]


def _cell(row: dict) -> str:
    return f"{row['us']:.1f} ({row['share']:.0%})"


def _best_peer(row: dict) -> float | None:
    peers = [row.get(f"{name}_us") for name in SDPA_BACKENDS]
    return min((t for t in peers if t is not None), default=None)


def table(result: dict) -> str:
    """Latency and share of the copy reference per row, fp16: the book's kernel, chapter 5's, every backend."""
    return _dtype_table(result, "float16")


def table_bf16(result: dict) -> str:
    """The same for the bf16 rows."""
    return _dtype_table(result, "bfloat16")


def _dtype_table(result: dict, dtype: str) -> str:
    short, other = {"float16": ("fp16", "bf16"), "bfloat16": ("bf16", "fp16")}[dtype]
    body = []
    for r in _rows(result, "decode"):
        if r["dtype"] != dtype:
            continue
        best = _best_peer(r)
        heads = f"{r['q_heads']}/{r['kv_heads']}"
        body.append([r["batch"], f"{r['context']:,}", heads, f"{r['kv_bytes'] / MiB:,.0f}",
                     f"{r['limit_us']:.1f}", f"{r['ours_us']:.1f} ({r['ours_share']:.0%})",
                     f"{r['kv_bytes'] / r['ours_us'] / 1e3:,.0f}", f"{r['ours_plain_us']:.1f}",
                     *(None if r.get(f"{n}_us") is None else f"{r[f'{n}_us']:.1f}" for n in ("naive", *SDPA_BACKENDS)),
                     None if best is None else f"{best / r['ours_us']:.3f}×"])
    headers = ["batch", "context", "heads q/kv", "K+V MiB", "copy reference µs", "ours µs (share of it)", "ours GB/s",
               "ours, plain calls", "ch. 5", "FA2", "mem-eff.", "cuDNN", "math", "best SDPA time / ours"]
    return render.table(headers, body) + (
        f"\n\nMicroseconds per decode step, {short}, head dim 128, from CUDA graphs taken in turns, the L2 cache "
        "cleared by reading before each call; plain calls are timed by do_bench, which clears it by writing. The copy "
        "reference is the bytes of K and V over the copy bandwidth measured in the same run (bytes read plus "
        "written per second). — means the backend refused, or for ch. 5, not run: its repeated K or V would pass "
        "2³¹ elements. ch. 5: chapter 5's kernel; FA2, mem-eff., cuDNN and math: SDPA's FlashAttention-2, "
        "memory-efficient, cuDNN and math backends. The last column is above 1 where the book's kernel is faster. "
        f"The {other} rows are in a table of their own; the targets count both dtypes.")


def targets(result: dict) -> str:
    """Where the book's kernel meets its three targets, and where not; then the gaps sentence."""
    rows = _rows(result, "decode")
    peer = [r for r in rows if _best_peer(r)]
    beat = sum(_best_peer(r) / r["ours_us"] >= TARGET_PEER for r in peer)
    level = sum(_best_peer(r) / r["ours_us"] >= LEVEL for r in peer)
    large = [r for r in rows if r["kv_bytes"] >= LARGE_BYTES]
    small = [r for r in rows if r["batch"] == 1 and r["context"] == 8192]
    large_met = sum(r["ours_share"] >= TARGET_LARGE for r in large)
    small_shares = ", ".join(f"{r['dtype']} {r['q_heads']}/{r['kv_heads']} heads {r['ours_share']:.0%}" for r in small)
    return (f"Level with the fastest SDPA backend or ahead, that is within {1 - LEVEL:.0%} of it (the margin for "
            f"level), in {level} of {len(peer)} rows (target: all); strictly at or above it in {beat} of "
            f"{len(peer)}. At least "
            f"{TARGET_LARGE:.0%} of the copy reference in {large_met} of the {len(large)} rows with at least "
            f"{LARGE_BYTES // MiB} MiB of K and V (target: all). At batch 1 with an 8K context: {small_shares} of the "
            f"copy reference (target: {TARGET_SMALL:.0%}).\n\n" + gaps(result))


def headline(result: dict) -> str:
    """The three targets of the chapter's grid in one small table: what each asks, what this run measured."""
    rows = _rows(result, "decode")
    peer = [r for r in rows if _best_peer(r)]
    level = sum(_best_peer(r) / r["ours_us"] >= LEVEL for r in peer)
    large = [r for r in rows if r["kv_bytes"] >= LARGE_BYTES]
    large_met = sum(r["ours_share"] >= TARGET_LARGE for r in large)
    small = [r for r in rows if r["batch"] == 1 and r["context"] == 8192]
    small_met = [r for r in small if r["ours_share"] >= TARGET_SMALL]
    by_heads: dict[tuple[int, int], list[float]] = {}
    for r in sorted(small, key=lambda r: (-r["kv_heads"], r["q_heads"])):
        by_heads.setdefault((r["q_heads"], r["kv_heads"]), []).append(r["ours_share"])
    shares = [f"{q}/{kv} heads {min(v) * 100:.0f}" + ("" if round(min(v) * 100) == round(max(v) * 100)
                                                       else f"–{max(v) * 100:.0f}") + "%"
              for (q, kv), v in by_heads.items()]
    body = [
        ["level with the fastest SDPA backend, or ahead (within 2%)", f"{level} of {len(peer)} rows",
         "met" if level == len(peer) else "missed"],
        [f"at least {TARGET_LARGE:.0%} of the copy reference from {LARGE_BYTES // MiB} MiB of K and V",
         f"{large_met} of {len(large)} rows", "met" if large_met == len(large) else "missed"],
        [f"at least {TARGET_SMALL:.0%} of the copy reference at batch 1, 8K keys", "; ".join(shares),
         "met" if len(small_met) == len(small) else f"met in {len(small_met)} of {len(small)} rows"],
    ]
    return render.table(["target", "this run (fp16 and bf16)", ""], body)


def gaps(result: dict) -> str:
    """How many rows fall below the fastest SDPA backend at each cache length, and by how much at most."""
    ratios = [(_best_peer(r) / r["ours_us"], r) for r in _rows(result, "decode") if _best_peer(r)]
    parts = []
    for context in CONTEXTS:
        here = [(ratio, r) for ratio, r in ratios if r["context"] == context]
        if not here:
            continue
        below = [(ratio, r) for ratio, r in here if ratio < TARGET_PEER]
        if not below:
            parts.append(f"{context:,} keys: none of {len(here)}")
            continue
        ratio, r = min(below, key=lambda x: x[0])
        parts.append(f"{context:,} keys: {len(below)} of {len(here)}, the lowest {ratio:.3f} ({1 - ratio:.1%} behind; "
                     f"batch {r['batch']}, {r['q_heads']}/{r['kv_heads']} heads, {r['dtype']})")
    return ("Rows below the fastest SDPA backend (its time over ours, under 1), by cache length: " + "; ".join(parts)
            + ".")


def splits_table(result: dict) -> str:
    """The book's kernel at batch 1 with every split count."""
    rows = _rows(result, "splits")
    contexts = sorted({r["context"] for r in rows})
    by = {(r["context"], r["splits"]): r for r in rows}
    body = [[s, *(_cell(by[(c, s)]) for c in contexts)] for s in SPLIT_COUNTS]
    return render.table(["splits", *(f"context {c:,}: µs (share of the copy reference)" for c in contexts)], body) + (
        "\n\nBatch 1, 32 query heads on 8 KV heads, head dim 128, fp16, tiles of 128 keys and 3 stages.")


def tiles_table(result: dict) -> str:
    """The book's kernel with each tile of TILES at the wrapper's split count, timed in turns; the chosen tile bold."""
    from kernels.flash_decoding import TILES

    rows = _rows(result, "tiles")
    shapes = list(dict.fromkeys((r["batch"], r["context"], r["q_heads"], r["kv_heads"]) for r in rows))
    by = {(r["batch"], r["context"], r["q_heads"], r["kv_heads"], r["block_n"], r["stages"]): r for r in rows}
    body = []
    for b, c, hq, hk in shapes:
        cells = [by[(b, c, hq, hk, n, s)] for n, s in TILES]
        body.append([b, f"{c:,}", f"{hq}/{hk}", cells[0]["splits"], f"{cells[0]['programs']:,}",
                     *(f"**{_cell(r)}**" if r["chosen"] else _cell(r) for r in cells)])
    return render.table(["batch", "context", "heads q/kv", "splits", "programs",
                         *(f"{n} keys, {s} stages: µs (share of the copy reference)" for n, s in TILES)], body) + (
        "\n\nfp16, head dim 128, one query per sequence, the wrapper's split count, from CUDA graphs taken in turns. "
        "Bold: the tile the wrapper chooses. " + _tiles_misses(rows, shapes))


def _tiles_misses(rows: list[dict], shapes: list[tuple]) -> str:
    """At how many shapes the chosen tile is the fastest, and how far behind the fastest it is at the others."""
    misses = []
    for shape in shapes:
        here = [r for r in rows if (r["batch"], r["context"], r["q_heads"], r["kv_heads"]) == shape]
        fastest, chosen = min(here, key=lambda r: r["us"]), next(r for r in here if r["chosen"])
        if fastest is not chosen:
            misses.append(f"batch {shape[0]}, {shape[1]:,} keys, {shape[2]}/{shape[3]} heads, "
                          f"{chosen['us'] / fastest['us'] - 1:.1%} behind {fastest['block_n']} keys and "
                          f"{fastest['stages']} stages")
    return (f"The chosen tile is the fastest of the three at {len(shapes) - len(misses)} of {len(shapes)} shapes"
            + (": elsewhere " + "; ".join(misses) + "." if misses else "."))


def tile_memory_sentence(result: dict) -> str:
    """Each tile's compiled shared memory per program and the programs that fit on one SM, beside the estimate."""
    rows = _rows(result, "tile_memory")
    parts = [f"{r['block_n']} keys and {r['stages']} stages "
             + ("not read" if "shared_bytes" not in r else
                f"{r['shared_bytes'] / 1024:,.0f} KiB and {r['registers']} registers per thread: "
                f"{r['programs_per_sm']} per SM by shared memory, {r['programs_per_sm_registers']} by registers")
             + f" (estimate: {r['estimate']})" for r in rows]
    return (f"Per split program of {rows[0]['warps']} warps, read from the compiled kernel (head dim 128, "
            f"fp16, 16 rows), against the "
            f"{rows[0]['shared_per_sm'] / 1024:,.0f} KiB of shared memory and {REGISTERS_PER_SM:,} registers of one "
            f"SM: " + "; ".join(parts) + ". The estimate counts shared memory only.")


def paged_table(result: dict) -> str:
    """The book's kernel on a contiguous cache and on the same cache in pages of each size, timed in turns."""
    rows = _rows(result, "paged")
    shapes = list(dict.fromkeys((r["batch"], r["context"], r["q_heads"], r["kv_heads"]) for r in rows))
    by = {(r["batch"], r["context"], r["q_heads"], r["kv_heads"], r["pages"]): r for r in rows}
    columns = ["contiguous", *(str(n) for n in PAGE_SIZES)]
    body = [[b, f"{c:,}", f"{hq}/{hk}", *(_paged_cell(by[(b, c, hq, hk, name)]) for name in columns)]
            for b, c, hq, hk in shapes]
    return render.table(["batch", "context", "heads q/kv", "contiguous: µs (share of the copy reference), splits",
                         *(f"pages of {n}" for n in PAGE_SIZES)], body) + (
        "\n\nfp16, head dim 128, one query per sequence, pages in a shuffled order, from CUDA graphs taken in turns. "
        "After each time: the split count and the tile (keys/stages) the wrapper chose. A tile never straddles two "
        "pages, so smaller pages mean smaller tiles, and more programs fit on an SM.")


def _paged_cell(row: dict) -> str:
    splits = f"{row['splits']} split" + ("s" if row["splits"] != 1 else "")
    return f"{_cell(row)}, {splits}, {row['block_n']}/{row['stages']}"


def copy_sentence(result: dict) -> str:
    """The three copies the copy reference comes from."""
    ways = _rows(result, "copy")[0]["ways"]
    names = {"copy_graph": "a copy captured in a CUDA graph", "kernel_graph": "an element-wise kernel in a graph",
             "copy_plain": "a copy called from Python"}
    return ("Copying 2 GiB, counting bytes read and written: " + "; ".join(
        f"{names[n]} {b / 1e9:,.0f} GB/s" for n, b in ways.items()) + ". The copy reference is the fastest.")


def plot(result: dict):
    """Share of the copy reference against context, fp16, 32 query heads on 8 KV heads, one line per batch."""
    series = {}
    for batch in BATCHES:
        for name in ("ours", "sdpa_flash", "sdpa_cudnn"):
            chosen = sorted((r for r in _rows(result, "decode") if r["dtype"] == "float16" and r["batch"] == batch
                             and (r["q_heads"], r["kv_heads"]) == (32, 8)), key=lambda r: r["context"])
            series[f"{NAMES[name]}, batch {batch}"] = ([r["context"] for r in chosen],
                                                       [r.get(f"{name}_share") for r in chosen])
    return render.line_plot(series, xlabel="context (keys per sequence)",
                            ylabel="share of the copy reference (can pass 1)",
                            title="One decode step, fp16, 32 query heads on 8 KV heads, head dim 128")


BENCHMARK = Benchmark(
    name="decode",
    chapter="ch12",
    title="Chapter 12: one decode step against the bandwidth limit and every SDPA backend",
    sources=["kernels/flash_decoding.py", "kernels/flash_attention.py", "book/bench/decode.py"],
    run=run,
    views={"headline": headline,
           "table": table, "table-bf16": table_bf16, "targets": targets, "splits": splits_table, "tiles": tiles_table,
           "tile_memory": tile_memory_sentence,
           "paged": paged_table, "copy": copy_sentence, "plot": plot},
    awaiting_gpu="issue 21: the decode benchmark's first GPU run",
)
