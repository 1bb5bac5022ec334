"""Chapter 12: decoding against a KV cache with split-KV (Flash-Decoding) and grouped-query attention.

At decode time each sequence brings a few new queries (1 to 16: one token, or a few with speculative
decoding) and attends to a cache of thousands of keys. Chapter 5's kernel gives each program a block of
queries, so it would launch batch x heads programs with one query each: far too few to fill the GPU, and
each program reads its head's whole cache alone.

Two changes fix that:

- Split-KV: the keys of each sequence are cut into `num_splits` ranges, one program each. Every program
  runs chapter 4's online softmax over its range and writes a partial state: its output, normalized by its
  own sum, and its row logsumexp. A second, small kernel merges the partial states exactly with chapter 4's
  rule (weights 2^(lse_s - max lse)).
- Grouped-query attention (GQA; multi-query attention, MQA, is one KV head): all the query heads that share
  a KV head sit in one program, as rows of one tile, so K and V are read once per group instead of once per
  query head.

The cache is allocated once, with room for `capacity` positions; sequence b uses the first cache_lens[b], which
include the new tokens (their keys and values join the cache before attention). Queries are aligned
bottom-right (chapter 6): with Nq new queries and length L, query t sits at position L - Nq + t and sees keys
0 .. L - Nq + t. A length of 0 gives output 0 and logsumexp -inf.
"""

from __future__ import annotations

import collections
import math

import torch
import triton
import triton.language as tl

import kernels
from kernels.launch import Launch
from kernels.validate import check_device, check_dtype, check_ndim, check_same_device, check_same_dtype, softmax_scale

LOG2_E = 1.4426950408889634
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_QUERIES = 16  # new queries per sequence: one token, or a few with speculative decoding
MAX_ROWS = 128  # query heads per KV head x new queries: the rows of one program's tile
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
# (keys per tile, pipeline stages), the most bytes of K and V in flight per program first (chapter 12's tiles table)
TILES = ((128, 3), (64, 3), (64, 2))
# Smaller tiles, only for shapes where none of TILES fits in a program's shared memory (head dim 256 with many rows)
SMALL_TILES = ((32, 2), (16, 1))
NUM_WARPS = 4  # one warpgroup
SHORT_SPLIT = 2048  # keys per split up to which a grid in fewer waves beats more bytes in flight (chapter 12's tiles)
MAX_SPLITS = 128
REGISTERS_PER_SM = 65536  # 32-bit registers per SM on every GPU from compute capability 5.0 to 9.0
THREADS_PER_SM = 2048  # resident threads per SM on the same GPUs


# --8<-- [start:split]
@triton.jit
def _decode_split(Q, K, V, Lens, BlockTable, OPart, LsePart, Out, Lse, qk_scale,
                  stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                  stride_vb, stride_vh, stride_vn, stride_table, N_Q, KV_HEADS, CAPACITY,
                  GROUP: tl.constexpr, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                  NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr,
                  DOT_PRECISION: tl.constexpr, PDL: tl.constexpr):
    # Grid: (splits, batch * KV heads). One program: one of the NUM_SPLITS ranges of the keys of one KV head, against
    # every query of the GROUP query heads that share it (GROUP * N_Q rows of one tile). The ranges follow the
    # sequence's length, not the cache's capacity: 2K keys in a cache for 128K are shared by all the splits.
    # PAGE_SIZE = 0: K and V are (batch, KV heads, capacity, D). Otherwise they are pools of pages,
    # (pages, KV heads, PAGE_SIZE, D), and row b of BlockTable lists the pages of sequence b in order.
    if PDL:  # launched early (programmatic dependent launch): wait until the kernel before it has finished
        tl.extra.cuda.gdc_wait()
    split = tl.program_id(0)
    batch = (tl.program_id(1) // KV_HEADS).to(tl.int64)  # 64-bit: batch x stride passes 2^31 on long caches
    kv_head = (tl.program_id(1) % KV_HEADS).to(tl.int64)
    length = tl.load(Lens + batch)

    rows = tl.arange(0, ROWS)
    head = kv_head * GROUP + rows // N_Q  # the query head of each row
    t = rows % N_Q  # which of the new queries
    row_ok = rows < GROUP * N_Q
    position = length - N_Q + t  # bottom-right: query t sees keys 0 .. position
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    d_ok = offs_d < HEAD_DIM
    q = tl.load(Q + batch * stride_qb + head[:, None] * stride_qh + t[:, None] * stride_qm + offs_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    m = tl.full([ROWS], float("-inf"), tl.float32)
    l = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM_PAD], tl.float32)
    split_keys = tl.cdiv(tl.cdiv(length, NUM_SPLITS), BLOCK_N) * BLOCK_N  # whole tiles, so no tile straddles pages
    lo = split * split_keys
    hi = tl.minimum(tl.minimum(lo + split_keys, length), CAPACITY)  # nothing past the length or the cache
    k_base = K + batch * stride_kb + kv_head * stride_kh
    v_base = V + batch * stride_vb + kv_head * stride_vh
    for start in range(lo, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        kv_ok = (cols[:, None] < hi) & d_ok[None, :]
        if PAGE_SIZE > 0:  # a tile never straddles two pages: BLOCK_N divides PAGE_SIZE
            page = tl.load(BlockTable + batch * stride_table + start // PAGE_SIZE).to(tl.int64)
            rows_in_page = start % PAGE_SIZE + tl.arange(0, BLOCK_N)
            k_ptrs = K + page * stride_kb + kv_head * stride_kh + rows_in_page[:, None] * stride_kn
            v_ptrs = V + page * stride_vb + kv_head * stride_vh + rows_in_page[:, None] * stride_vn
        else:
            k_ptrs = k_base + cols[:, None] * stride_kn
            v_ptrs = v_base + cols[:, None] * stride_vn
        k = tl.load(k_ptrs + offs_d[None, :], mask=kv_ok, other=0.0)
        v = tl.load(v_ptrs + offs_d[None, :], mask=kv_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        s = tl.where((cols[None, :] <= position[:, None]) & (cols[None, :] < hi), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        alpha = tl.math.exp2(m - m_safe)
        p = tl.math.exp2(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m = m_new

    # The partial state of this split: its output normalized by its own sum, and its base-2 logsumexp.
    seen = l > 0
    out = acc / tl.where(seen, l, 1.0)[:, None]
    lse = tl.where(seen, m + tl.math.log2(tl.where(seen, l, 1.0)), float("-inf"))
    part = (batch * KV_HEADS * GROUP + head) * N_Q + t  # row index of (batch, head, t) in (B * Hq * Nq)
    if NUM_SPLITS == 1:  # the only split's state is the answer: write it, and the wrapper launches no merge
        tl.store(Out + part[:, None] * HEAD_DIM + offs_d[None, :], out.to(Out.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])
        tl.store(Lse + part, lse * 0.6931471805599453, mask=row_ok)  # natural log
    else:
        tl.store(OPart + (part[:, None] * NUM_SPLITS + split) * HEAD_DIM_PAD + offs_d[None, :], out,
                 mask=row_ok[:, None])
        tl.store(LsePart + part * NUM_SPLITS + split, lse, mask=row_ok)
    if PDL:  # this program's work is done: the next kernel may launch
        tl.extra.cuda.gdc_launch_dependents()
# --8<-- [end:split]


# --8<-- [start:merge]
@triton.jit
def _decode_merge(OPart, LsePart, Out, Lse, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                  NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, PDL: tl.constexpr):
    # Grid: (batch * query heads * new queries,). One program merges one row's partial states (chapter 4).
    if PDL:
        tl.extra.cuda.gdc_wait()  # the split kernel's partial states are all written
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may launch now; its gdc_wait waits for this one
    row = tl.program_id(0).to(tl.int64)
    splits = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    lse = tl.load(LsePart + row * NUM_SPLITS + splits, mask=splits < NUM_SPLITS, other=float("-inf"))
    o = tl.load(OPart + (row * NUM_SPLITS + splits[:, None]) * HEAD_DIM_PAD + offs_d[None, :],
                mask=splits[:, None] < NUM_SPLITS, other=0.0)
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # every split empty: the row saw no key
    w = tl.math.exp2(lse - m_safe)  # each split's share, up to the common factor 2^m
    total = tl.sum(w, 0)
    out = tl.sum(w[:, None] * o, 0) / tl.where(total > 0, total, 1.0)
    tl.store(Out + row * HEAD_DIM + offs_d, out.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM)
    lse_out = (m_safe + tl.math.log2(tl.where(total > 0, total, 1.0))) * 0.6931471805599453  # natural log
    tl.store(Lse + row, tl.where(total > 0, lse_out, float("-inf")))
# --8<-- [end:merge]


# --8<-- [start:splits]
def choose_splits(batch: float, kv_heads: int, capacity: int, sm_count: int, block_n: int = TILES[0][0],
                  programs_per_sm: int = 1) -> int:
    """How many splits: the fewest whose programs fill the GPU's waves (chapter 8) within 5% of the best that any
    count reaches, with no split shorter than one tile. batch counts sequences of `capacity` keys; for a batch whose
    lengths the host knows, the keys of all its sequences over the longest one's (a fraction)."""
    programs, slots = batch * kv_heads, sm_count * programs_per_sm
    most = max(1, min(capacity // block_n, MAX_SPLITS))

    def fill(splits: int) -> float:  # the share of the SMs' slots that are busy, averaged over the waves
        waves = programs * splits / slots
        return waves / math.ceil(waves)

    best = max(fill(s) for s in range(1, most + 1))
    return next(s for s in range(1, most + 1) if fill(s) >= 0.95 * best)
# --8<-- [end:splits]


# --8<-- [start:tiles]
def shared_bytes(block_n: int, num_stages: int, rows: int, head_dim_pad: int, element_size: int) -> int:
    """The shared memory one split program uses (an estimate): Triton's pipeline keeps num_stages - 1 tiles of K and
    of V there, loaded while the current tile is used, and the compiler keeps the query tile and the probability
    tile there for the two dots."""
    pipeline = max(num_stages - 1, 1) * 2 * block_n * head_dim_pad
    return (pipeline + rows * (head_dim_pad + block_n)) * element_size


def programs_per_sm(block_n: int, num_stages: int, rows: int, head_dim_pad: int, element_size: int,
                    shared_per_sm: int) -> int:
    """How many split programs fit on one SM at once by shared memory (an estimate, before compiling; registers may
    allow fewer); the GPU reserves 1 KiB per program."""
    return max(1, shared_per_sm // (shared_bytes(block_n, num_stages, rows, head_dim_pad, element_size) + 1024))


def resident_programs(shared_used: int, registers: int, shared_per_sm: int, registers_per_sm: int = REGISTERS_PER_SM,
                      num_warps: int = NUM_WARPS) -> int:
    """How many programs of a compiled kernel fit on one SM at once: by its shared memory (plus the 1 KiB the GPU
    reserves per program), by its registers (given to each warp in steps of 256: 8 per thread) and by threads."""
    by_shared = shared_per_sm // (shared_used + 1024)
    by_registers = registers_per_sm // (math.ceil(registers / 8) * 8 * 32 * num_warps)
    return max(1, min(by_shared, by_registers, THREADS_PER_SM // (32 * num_warps)))


def choose_tile(programs: int, sm_count: int, per_sm: list[int], keys_per_split: int) -> int:
    """Which tile (an index into per_sm, the programs per SM of each). For splits of at most SHORT_SPLIT keys, the one
    that runs the grid in the fewest waves, on a tie the first; for longer splits the first, the one with the most
    bytes of K and V in flight per program."""
    if keys_per_split > SHORT_SPLIT:
        return 0
    waves = [math.ceil(programs / (sm_count * n)) for n in per_sm]
    return waves.index(min(waves))


def _rows(group_rows: int) -> int:
    """The rows of one program's tile: the group's query heads x new queries, padded for tl.dot."""
    return max(triton.next_power_of_2(group_rows), 16)


def plan(q: torch.Tensor, kv_heads: int, capacity: int, page_size: int = 0, num_splits: int | None = None,
         block_n: int | None = None, num_stages: int | None = None,
         host_lengths: list[int] | None = None) -> tuple[int, int, int]:
    """The split count, keys per tile and pipeline stages for these shapes: the splits by choose_splits with the first
    tile of TILES, then the tile by choose_tile; an argument that is given is kept. A page caps the tile. Tiles that
    would not fit in a program's shared memory are not candidates (SMALL_TILES stand in if none of TILES fits). On a
    GPU, the programs per SM come from the compiled kernel's shared memory and registers; under the interpreter,
    from the shared-memory estimate. With host_lengths (each sequence's length, as the host knows it), the splits
    follow the keys the batch holds instead of a full cache per sequence."""
    compiled = q.is_cuda and not kernels.interpreting()
    if q.is_cuda:
        props = torch.cuda.get_device_properties(q.device)
        sm_count, shared = props.multi_processor_count, props.shared_memory_per_multiprocessor
        per_program = props.shared_memory_per_block_optin
        registers = getattr(props, "regs_per_multiprocessor", REGISTERS_PER_SM)
    else:
        sm_count, shared, per_program = 2, 0, None  # the CPU interpreter: a stand-in GPU of two SMs, one program each
    batch, q_heads, n_q, head_dim = q.shape
    rows, head_dim_pad = _rows(q_heads // kv_heads * n_q), max(triton.next_power_of_2(head_dim), 16)

    def fits(tile):
        return per_program is None or shared_bytes(*tile, rows, head_dim_pad, q.element_size()) <= per_program

    def candidates(table):  # a tile stays in one page
        return [(min(block_n or n, page_size or 256), num_stages or s) for n, s in table]

    def per_sm(tile):
        """Programs of this tile per SM; None where the compiled kernel does not fit a program (the count above
        is an estimate, and the compiler can need more: at head dim 256 with 128 rows, (64, 3) does)."""
        if not compiled:
            return programs_per_sm(*tile, rows, head_dim_pad, q.element_size(), shared)
        meta = split_meta(q, kv_heads, 2, *tile, page_size, programmatic_launch(q.device))
        try:
            return resident_programs(*compiled_resources(meta, q, kv_heads), shared, registers)
        except triton.runtime.errors.OutOfResources:
            return None

    tiles = [t for t in candidates(TILES) if fits(t)]
    if not tiles and (block_n is not None or num_stages is not None):
        n, s = candidates(TILES)[0]
        raise ValueError(f"block_n={n} with num_stages={s} needs about "
                         f"{shared_bytes(n, s, rows, head_dim_pad, q.element_size()) // 1024} KiB of shared memory "
                         f"per program at these shapes; this GPU gives a program {per_program // 1024} KiB")
    small = [t for t in candidates(SMALL_TILES) if fits(t)] or candidates(SMALL_TILES)[-1:]
    # The first tile, in order, that the compiled kernel fits; SMALL_TILES only where none of TILES does.
    counted = {}
    for tile in tiles + small:
        counted[tile] = per_sm(tile)
        if counted[tile] is not None:
            break
    else:
        raise ValueError(f"no tile of the split kernel fits a program's shared memory at these shapes "
                         f"(rows {rows}, head dim {head_dim}, {q.dtype}); tried {list(counted)}")
    tiles = [t for t in (tiles if tile in tiles else small) if counted.get(t, 0) is not None]  # tile comes first
    work, longest = batch, capacity  # the batch in sequences of `longest` keys
    if host_lengths is not None and max(host_lengths, default=0) > 0:
        longest = min(max(host_lengths), capacity)
        work = sum(min(n, capacity) for n in host_lengths) / longest
    first = counted[tiles[0]]
    if num_splits is None:
        num_splits = choose_splits(work, kv_heads, longest, sm_count, tiles[0][0], first)
    keys_per_split = math.ceil(longest / num_splits)
    if keys_per_split > SHORT_SPLIT:  # choose_tile keeps the first: no need to compile the others
        return num_splits, *tiles[0]
    counts = [first] + [counted[t] if t in counted else per_sm(t) for t in tiles[1:]]
    tiles, counts = zip(*[(t, c) for t, c in zip(tiles, counts, strict=True) if c is not None], strict=True)
    block_n, num_stages = tiles[choose_tile(batch * kv_heads * num_splits, sm_count, list(counts), keys_per_split)]
    return num_splits, block_n, num_stages


def split_meta(q: torch.Tensor, kv_heads: int, num_splits: int, block_n: int, num_stages: int, page_size: int,
               pdl: bool) -> dict:
    """The split kernel's compile-time arguments and launch options for these shapes and this plan."""
    q_heads, n_q, head_dim = q.shape[1:]
    return dict(GROUP=q_heads // kv_heads, ROWS=_rows(q_heads // kv_heads * n_q), HEAD_DIM=head_dim,
                HEAD_DIM_PAD=max(triton.next_power_of_2(head_dim), 16), NUM_SPLITS=num_splits, BLOCK_N=block_n,
                PAGE_SIZE=page_size, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", PDL=pdl,
                num_warps=NUM_WARPS, num_stages=num_stages, launch_pdl=pdl)


def compiled_resources(meta: dict, q: torch.Tensor, kv_heads: int) -> tuple[int, int]:
    """(shared memory in bytes, registers per thread) of the split kernel compiled for q's device with these
    compile-time arguments (compiled now, or taken from Triton's caches). Stand-ins replace the tensors, and 16 the
    strides and the capacity: the resources follow the compile-time arguments, not those values."""
    f32, i32, dtype = torch.float32, torch.int32, q.dtype
    with torch.cuda.device(q.device):
        kernel = _decode_split.warmup(dtype, dtype, dtype, i32, i32, f32, f32, dtype, f32, 1.0, *[16] * 10,
                                      q.shape[2], kv_heads, 16, grid=(1,), **meta)
        kernel._init_handles()  # loads it: Triton reads the registers from the loaded kernel
    return kernel.metadata.shared, kernel.n_regs
# --8<-- [end:tiles]


def validate_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_lens: torch.Tensor,
                    block_table: torch.Tensor | None = None) -> None:
    """Clear errors for inputs the decode kernels cannot take; each names the argument and the problem."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        check_device(name, t)
        check_ndim(name, t, 4)
        check_dtype(name, t, SUPPORTED_DTYPES)
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride along head_dim; pass {name}.contiguous()")
    check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, cache_lens=cache_lens)
    check_same_dtype(q=q, k_cache=k_cache, v_cache=v_cache)
    batch, q_heads, n_q, head_dim = q.shape
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    if block_table is None and (k_cache.shape[0] != batch or k_cache.shape[3] != head_dim):
        raise ValueError(f"k_cache must be (batch={batch}, kv_heads, cache_len, head_dim={head_dim}), got "
                         f"{tuple(k_cache.shape)}")
    if block_table is not None:
        check_same_device(q=q, block_table=block_table)
        page_size = k_cache.shape[2]
        if k_cache.shape[3] != head_dim or page_size < 16 or page_size & (page_size - 1):
            raise ValueError(f"with a block_table, k_cache must be a pool of pages (pages, kv_heads, page_size, "
                             f"head_dim={head_dim}) with a power-of-two page_size of at least 16, got "
                             f"{tuple(k_cache.shape)}")
        if block_table.ndim != 2 or block_table.shape[0] != batch or block_table.dtype not in (torch.int32,
                                                                                                torch.int64):
            raise ValueError(f"block_table must be an integer tensor (batch={batch}, pages per sequence), got "
                             f"{block_table.dtype} of shape {tuple(block_table.shape)}")
    kv_heads = k_cache.shape[1]
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"the query heads ({q_heads}) must be a multiple of the KV heads ({kv_heads}): each KV "
                         f"head serves a group of query heads")
    if not 1 <= n_q <= MAX_QUERIES:
        raise ValueError(f"decoding takes 1 to {MAX_QUERIES} new queries per sequence, got {n_q}; for a longer "
                         f"chunk use kernels.flash_attention.attention with causal_alignment='bottom-right'")
    if q_heads // kv_heads * n_q > MAX_ROWS:
        raise ValueError(f"{q_heads // kv_heads} query heads per KV head x {n_q} new queries = "
                         f"{q_heads // kv_heads * n_q} rows in one program; at most {MAX_ROWS}: pass fewer queries")
    if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be between {MIN_HEAD_DIM} and {MAX_HEAD_DIM}, got {head_dim}")
    if cache_lens.shape != (batch,) or cache_lens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cache_lens must be an integer tensor of shape ({batch},), one length per sequence; got "
                         f"{cache_lens.dtype} of shape {tuple(cache_lens.shape)}")


def programmatic_launch(device: torch.device) -> bool:
    """Whether to launch the kernels with programmatic dependent launch: on a GPU of compute capability 9.0 or newer
    (Hopper), never under Triton's interpreter, which cannot run gdc_wait, even with CUDA tensors."""
    return device.type == "cuda" and not kernels.interpreting() and torch.cuda.get_device_capability(device)[0] >= 9


# --8<-- [start:planned]
class Decoder:
    """One decode step, planned once for a batch's shapes and called every step.

    Everything that depends only on the shapes happens here, once: the checks of every argument, the plan
    (splits, tile, stages), the buffers for the output and the partial states, and every launch argument that
    does not change from step to step. A call then checks that the tensors still have the planned shapes, dtype
    and device (comparisons of tuples, no GPU work) and launches the two kernels, after the first call through
    their compiled handles (kernels/launch.py). Each call writes into the same output buffer, which it returns:
    use it (or copy it) before the next call. cache_lens should be int32: the kernel reads int32, and another
    dtype costs a conversion every step.

    host_lengths: the sequences' lengths as the host knows them when planning (a server's scheduler does). The
    plan then splits for the keys the batch holds (one long sequence among short ones gets enough programs)
    instead of a full cache per sequence. The kernels still read cache_lens on every call: a plan made for other
    lengths is slower, never wrong. pdl: launch with programmatic dependent launch (chapter 13); by default where
    the GPU has it.
    """

    def __init__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_lens: torch.Tensor, *,
                 block_table: torch.Tensor | None = None, sm_scale: float | None = None,
                 num_splits: int | None = None, block_n: int | None = None, num_stages: int | None = None,
                 return_lse: bool = False, host_lengths: list[int] | None = None, pdl: bool | None = None):
        validate_inputs(q, k_cache, v_cache, cache_lens, block_table)
        if block_table is not None and block_table.stride(1) != 1:
            raise ValueError("block_table must have unit stride along its pages; pass block_table.contiguous()")
        power_of_two = isinstance(block_n, int) and 16 <= block_n <= 256 and block_n & (block_n - 1) == 0
        if block_n is not None and not power_of_two:
            raise ValueError(f"block_n must be a power of two from 16 to 256, got {block_n!r}")
        if num_stages is not None and not (isinstance(num_stages, int) and num_stages >= 1):
            raise ValueError(f"num_stages must be a positive integer, got {num_stages!r}")
        if num_splits is not None and not (isinstance(num_splits, int) and num_splits >= 1):
            raise ValueError(f"num_splits must be a positive integer, got {num_splits!r}")
        batch, q_heads, n_q, head_dim = q.shape
        kv_heads = k_cache.shape[1]
        page_size = 0 if block_table is None else k_cache.shape[2]
        self.capacity = k_cache.shape[2] if block_table is None else block_table.shape[1] * page_size
        if host_lengths is not None:
            host_lengths = [int(n) for n in host_lengths]
            if len(host_lengths) != batch or not all(0 <= n <= self.capacity for n in host_lengths):
                raise ValueError(f"host_lengths must give {batch} lengths between 0 and the capacity {self.capacity}, "
                                 f"got {host_lengths[:8]}{' ...' if len(host_lengths) > 8 else ''}")
        self.num_splits, block_n, num_stages = plan(q, kv_heads, self.capacity, page_size, num_splits, block_n,
                                                    num_stages, host_lengths)
        self.planned = self._signature(q, k_cache, v_cache, cache_lens, block_table)
        self.return_lse = return_lse
        head_dim_pad = max(triton.next_power_of_2(head_dim), 16)
        self.rows = batch * q_heads * n_q
        self.shapes = (q.shape, (batch, q_heads, n_q), (self.rows, self.num_splits, head_dim_pad),
                       (self.rows, self.num_splits))
        self.out, self.lse, self.o_part, self.lse_part = self.new_buffers(q.device, q.dtype)
        self.interpreted_bf16 = kernels.interpreting() and q.dtype == torch.bfloat16
        if pdl and not programmatic_launch(q.device):
            raise ValueError("pdl=True needs a GPU of compute capability 9.0 or newer and compiled kernels")
        pdl = programmatic_launch(q.device) if pdl is None else pdl
        self.split_scalars = (softmax_scale(sm_scale, head_dim) * LOG2_E, *q.stride()[:3], *k_cache.stride()[:3],
                              *v_cache.stride()[:3])
        self.split_tail = (n_q, kv_heads, self.capacity)
        self.split_meta = split_meta(q, kv_heads, self.num_splits, block_n, num_stages, page_size, pdl)
        self.merge_meta = dict(HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, NUM_SPLITS=self.num_splits,
                               SPLITS_PAD=triton.next_power_of_2(self.num_splits), PDL=pdl, launch_pdl=pdl)
        self.split_launch = Launch(_decode_split, (self.num_splits, batch * kv_heads), **self.split_meta)
        self.merge_launch = Launch(_decode_merge, (self.rows,), **self.merge_meta)
        self.sm_scale = sm_scale

    def new_buffers(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """The output, its logsumexp and (with more than one split) the partial states, uninitialized."""
        out_shape, lse_shape, o_part_shape, lse_part_shape = self.shapes
        out = torch.empty(out_shape, device=device, dtype=dtype)
        lse = torch.empty(lse_shape, device=device, dtype=torch.float32)
        if self.num_splits == 1:  # no partial states: the split kernel writes out and lse itself
            return out, lse, out, lse
        return (out, lse, torch.empty(o_part_shape, device=device, dtype=torch.float32),
                torch.empty(lse_part_shape, device=device, dtype=torch.float32))

    @staticmethod
    def _signature(*tensors):
        return tuple(None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in tensors)

    def check(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_lens: torch.Tensor,
              block_table: torch.Tensor | None = None) -> None:
        """Raise unless these tensors have the planned shapes, strides, dtypes and devices (no GPU work)."""
        if self._signature(q, k_cache, v_cache, cache_lens, block_table) != self.planned:
            raise ValueError("these tensors' shapes, strides, dtypes or devices differ from the planned ones; make a "
                             "new Decoder for them")

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_lens: torch.Tensor,
                 block_table: torch.Tensor | None = None):
        self.check(q, k_cache, v_cache, cache_lens, block_table)
        return self.launch(q, k_cache, v_cache, cache_lens, block_table, self.out, self.lse, self.o_part,
                           self.lse_part)

    def launch(self, q, k_cache, v_cache, cache_lens, block_table, out, lse, o_part, lse_part):
        """The two launches into the given buffers (new_buffers' four), for tensors already checked."""
        if self.rows == 0:
            return (out, lse) if self.return_lse else out
        if self.interpreted_bf16:  # Triton's CPU interpreter computes tl.dot on bf16 wrongly (chapter 5): upcast
            out32, lse32 = decode(q.float(), k_cache.float(), v_cache.float(), cache_lens, block_table=block_table,
                                  sm_scale=self.sm_scale, num_splits=self.num_splits, return_lse=True,
                                  check_lengths=False)
            out.copy_(out32)
            lse.copy_(lse32)
            return (out, lse) if self.return_lse else out
        lens = cache_lens if cache_lens.dtype == torch.int32 else cache_lens.to(torch.int32)
        table = lens if block_table is None else block_table  # without pages: a pointer the kernel never reads
        self.split_launch(q, k_cache, v_cache, lens, table, o_part, lse_part, out, lse, *self.split_scalars,
                          table.stride(0), *self.split_tail)
        if self.num_splits > 1:
            self.merge_launch(o_part, lse_part, out, lse)
        return (out, lse) if self.return_lse else out
# --8<-- [end:planned]


# --8<-- [start:graph]
class DecodeGraph:
    """A decode step captured once in a CUDA graph and replayed every step, as a server runs it.

    The graph keeps the tensors it was captured with. Before each replay, write the step's inputs into them in
    place: the new queries into q, the lengths into cache_lens, the pages into block_table (`copy_`); the new keys
    and values go into the cache as they always do. Replaying costs the CPU one launch, whatever the kernels do,
    and the split ranges follow the lengths the kernel reads, so a graph captured for a cache's full capacity
    reads only what each sequence holds.
    """

    def __init__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_lens: torch.Tensor, *,
                 block_table: torch.Tensor | None = None, **options):
        if not q.is_cuda or kernels.interpreting():
            raise ValueError("DecodeGraph needs a CUDA GPU and compiled kernels (not Triton's interpreter)")
        if cache_lens.dtype != torch.int32:
            raise ValueError(f"cache_lens must be int32 for a captured step (the graph cannot convert it in place), "
                             f"got {cache_lens.dtype}")
        self.decoder = Decoder(q, k_cache, v_cache, cache_lens, block_table=block_table, **options)
        self.inputs = (q, k_cache, v_cache, cache_lens, block_table)
        side = torch.cuda.Stream(q.device)  # compile and warm up off the default stream, as torch.cuda.graphs asks
        side.wait_stream(torch.cuda.current_stream(q.device))
        with torch.cuda.stream(side):
            self.decoder(*self.inputs)
        torch.cuda.current_stream(q.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.result = self.decoder(*self.inputs)

    def replay(self):
        """Run the captured step on whatever the captured tensors now hold; returns the decoder's output."""
        self.graph.replay()
        return self.result
# --8<-- [end:graph]


# --8<-- [start:wrapper]
def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_lens: torch.Tensor, *,
           block_table: torch.Tensor | None = None, sm_scale: float | None = None, num_splits: int | None = None,
           block_n: int | None = None, num_stages: int | None = None, return_lse: bool = False,
           check_lengths: bool = True):
    """softmax(q kᵀ · sm_scale) v for the new queries q (batch, query heads, 1..16, head_dim) against a KV cache
    (batch, KV heads, capacity, head_dim), of which sequence b uses the first cache_lens[b] positions.

    The new tokens' keys and values are already in the cache, and cache_lens counts them: query t of sequence b
    sits at position cache_lens[b] - Nq + t and sees keys 0 .. that position (bottom-right alignment). Returns
    the output (like q), and with return_lse its natural-log logsumexp (batch, query heads, Nq) in fp32; rows
    that see no key give 0 and -inf. block_n (keys per tile, a power of two from 16 to 256), num_stages (tiles of K
    and V in the pipeline) and num_splits are chosen for the shapes (plan) unless given.

    Paged cache: with a block_table (batch, pages per sequence), k_cache and v_cache are pools of pages
    (pages, KV heads, page_size, head_dim), and sequence b's keys i live in page block_table[b, i // page_size]
    at row i % page_size. Entries past a sequence's length are never read.

    check_lengths=False skips the checks that every length is between 0 and the capacity and that every page a
    sequence uses is in the pool, which make the host wait for the GPU; the kernel then reads at most the capacity.
    This is the one-line convenience over a Decoder: it keeps the plans of the last PLANS_KEPT shapes (the checks of
    the shapes included, which depend on nothing else) and returns new tensors on every call. A loop that calls it
    with the same shapes every step saves a little more with a Decoder of its own (or a DecodeGraph).
    """
    block_table = None if block_table is None else block_table.contiguous()
    step = _planned(q, k_cache, v_cache, cache_lens, block_table, sm_scale=sm_scale, num_splits=num_splits,
                    block_n=block_n, num_stages=num_stages, return_lse=return_lse)
    if check_lengths and cache_lens.numel():
        low, high = int(cache_lens.min()), int(cache_lens.max())
        if low < 0 or high > step.capacity:
            raise ValueError(f"cache_lens must be between 0 and the cache's capacity {step.capacity}, got "
                             f"{low} to {high}")
        if block_table is not None:
            page_size = k_cache.shape[2]
            pages_used = torch.arange(block_table.shape[1], device=q.device) * page_size < cache_lens[:, None]
            used = block_table[pages_used]
            if used.numel() and (int(used.min()) < 0 or int(used.max()) >= k_cache.shape[0]):
                raise ValueError(f"block_table must give every page a sequence uses as an index into the pool of "
                                 f"{k_cache.shape[0]} pages, got {int(used.min())} to {int(used.max())}")
    return step.launch(q, k_cache, v_cache, cache_lens, block_table, *step.new_buffers(q.device, q.dtype))


PLANS_KEPT = 64
_plans: collections.OrderedDict = collections.OrderedDict()


def _planned(q, k_cache, v_cache, cache_lens, block_table, **options) -> Decoder:
    """The Decoder planned for these tensors' shapes, strides, dtypes and devices and these options: from the last
    PLANS_KEPT, or made now (which checks the inputs) and kept."""
    key = (Decoder._signature(q, k_cache, v_cache, cache_lens, block_table), tuple(sorted(options.items())))
    step = _plans.get(key)
    if step is None:
        step = Decoder(q, k_cache, v_cache, cache_lens, block_table=block_table, **options)
        step.out = step.lse = step.o_part = step.lse_part = None  # decode() gives each call new buffers
        _plans[key] = step
        if len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)
    else:
        _plans.move_to_end(key)
    return step
# --8<-- [end:wrapper]
