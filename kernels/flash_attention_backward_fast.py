"""Chapter 11: the book's fast FlashAttention backward for Hopper GPUs, built one change at a time.

The same math as chapter 10's readable backward (kernels/flash_attention_backward.py): D = rowsum(dO ∘ O) first,
then P rebuilt tile by tile from Q, K and the forward's logsumexp. Each change chapter 11 measured is a
compile-time switch, so the benchmark times every step of the worklog from this one source:

- TRANSPOSED: the dK/dV kernel computes Sᵀ = K Qᵀ, with keys as rows. Pᵀ and dSᵀ, the first operands of the
  dV and dK products, then come out of the tensor cores in the layout those products take, and no tile is
  transposed in registers.
- SPLIT_DIAGONAL: causal attention masks only the tiles on the diagonal (chapter 10's split); the worklog turns it
  off once, in step 4, to measure what it is worth.
- ATOMIC_DQ: the dK/dV kernel also computes each tile's share of dQ and adds it into an fp32 buffer with
  atomic adds, so the second kernel, and the two products per tile it repeats, go away.
- USE_TMA: tiles of Q, K, V, dO, dK and dV move through tensor descriptors (Hopper's copy engine).
- GLUON: on a Hopper GPU, the whole backward runs as step 8's Gluon kernel instead
  (kernels/flash_attention_backward_hopper.py): five products per tile, with dQ added by the copy engine, on a
  schedule written by hand. The other switches and the tile shapes are the Triton kernels' and do not apply.
  Under the CPU interpreter, or on another GPU, the Triton kernels run.
- KV_IN_REGISTERS, DQ_BY_TURNS: steps 9 and 10, two changes to the Gluon kernel that read less shared memory
  (K and V held in registers; each block's dQ share computed whole by one warpgroup, the two taking turns).
  They apply only with GLUON, and only at head dim 64: at 128 the kernel has no room for them.
- LONGEST_FIRST: step 11, the Gluon kernel's programs start in another order under causal attention: the first
  key block of a few heads, then their second, ..., so the longest loops start first. Only with GLUON.
- ROWS_IN_ACCUMULATORS: step 12, the Gluon kernel starts Sᵀ and dPᵀ from the logsumexp and D instead of from
  zero, which frees the registers that held those rows. Only with GLUON, and only at head dim 128.
- ROWS_IN_SHARED: step 13, the Gluon kernel's copy warp brings each Q block's logsumexp and D into shared memory
  with Q and dO, instead of the computing warps loading them from global memory. Only with GLUON.
Chapter 11's worklog table says which of them paid off; BEST_FEATURES turns those on.

The fast path takes what the fast forward takes: fp16 or bf16, head dim 64 or 128, contiguous tensors, any
lengths (query and key lengths may differ, with both causal alignments), k and v with fewer heads than q. Anything
else goes to chapter 10's readable backward, with a FallbackWarning that says why; on Hopper GPUs the Gluon kernel
takes them all. `attention` is the
differentiable fast path: chapter 9's forward, this backward
(the Gluon kernel of steps 8-13 on a Hopper GPU).
"""

from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import kernels
from kernels import flash_attention as readable_forward
from kernels import flash_attention_backward as readable
from kernels import flash_attention_fast as fast_forward
from kernels.flash_attention_fast import FallbackWarning
from kernels.validate import check_same_device, check_same_dtype, refuse_second_derivative, softmax_scale

LOG2_E = 1.4426950408889634


# --8<-- [start:preprocess]
@triton.jit
def _preprocess(O, DO, Lse, Delta, Lse2, DQ_ACC, ROWS, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                ZERO_DQ: tl.constexpr):
    """For BLOCK rows of the 2-D (rows, head_dim) view: D = rowsum(dO ∘ O) in fp32, the logsumexp in base 2,
    and (ATOMIC_DQ) zeros in the fp32 buffer that the dK/dV kernel adds dQ into."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    ours = rows < ROWS
    o = tl.load(O + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=ours[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=ours[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + rows, tl.sum(o * do, 1), mask=ours)
    # A row that saw no key (logsumexp -inf) gets +inf instead: then every P = 2^(s - lse2) of it is 0, unmasked.
    lse = tl.load(Lse + rows, mask=ours, other=0.0)
    tl.store(Lse2 + rows, tl.where(lse == -float("inf"), float("inf"), lse * 1.4426950408889634), mask=ours)
    if ZERO_DQ:
        tl.store(DQ_ACC + rows[:, None] * HEAD_DIM + offs_d[None, :], tl.zeros([BLOCK, HEAD_DIM], tl.float32),
                 mask=ours[:, None])
# --8<-- [end:preprocess]


@triton.jit
def _load_tile(src, row, row_end, offs_rows, offs_d, HEAD_DIM: tl.constexpr, USE_TMA: tl.constexpr,
               WHOLE: tl.constexpr):
    """One (rows, head_dim) tile starting at 2-D row `row`: through the tensor descriptor, or with pointers.
    Rows from row_end on (past this head's sequence) are not ours: pointers read them as 0, TMA reads the next
    head's rows; either way the caller gives them P = 0. WHOLE: every tile whole, no mask."""
    if USE_TMA:
        tile = src.load([row, 0])
    elif WHOLE:
        tile = tl.load(src + (row + offs_rows)[:, None] * HEAD_DIM + offs_d[None, :])
    else:
        rows = row + offs_rows
        tile = tl.load(src + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=rows[:, None] < row_end, other=0.0)
    return tile


@triton.jit
def _store_tile(dst, dst_ptr, row, row_end, tile, offs_rows, offs_d, HEAD_DIM: tl.constexpr,
                USE_TMA: tl.constexpr, WHOLE: tl.constexpr):
    """Store a tile's rows below row_end. A TMA store writes whole tiles, so a partial one (it would overwrite the
    next head's first rows) goes through plain masked stores. WHOLE: every tile whole, no mask."""
    if WHOLE:
        if USE_TMA:
            dst.store([row, 0], tile)
        else:
            tl.store(dst_ptr + (row + offs_rows)[:, None] * HEAD_DIM + offs_d[None, :], tile)
    elif USE_TMA and row + tile.shape[0] <= row_end:
        dst.store([row, 0], tile)
    else:
        rows = row + offs_rows
        tl.store(dst_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], tile, mask=rows[:, None] < row_end)


@triton.jit
def _visible(rows, cols, causal_offset, N_K, CAUSAL: tl.constexpr, WHOLE: tl.constexpr):
    """Which keys (cols) each query (rows) sees: those before N_K (all of them when WHOLE) and, with CAUSAL, those
    up to the query's position plus causal_offset (0 top-left, N_K - N_Q bottom-right)."""
    if CAUSAL:
        visible = rows + causal_offset >= cols
        if not WHOLE:
            visible = visible & (cols < N_K)
    else:
        visible = cols < N_K
    return visible


# --8<-- [start:dkdv-step]
@triton.jit
def _dkdv_step(dk, dv, k, v, q_src, do_src, dq_acc, lse2_ptr, delta_ptr, row0, start_m, offs_n, offs_d,
               qk_scale, causal_offset, N_Q, N_K, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
               MASKED: tl.constexpr, CAUSAL: tl.constexpr, TRANSPOSED: tl.constexpr, ATOMIC_DQ: tl.constexpr,
               USE_TMA: tl.constexpr, WHOLE: tl.constexpr):
    """Fold one Q block (rows start_m ... start_m + BLOCK_M) into this program's dK and dV accumulators.

    MASKED: keys past N_K, and (CAUSAL) keys after a query's position plus causal_offset, get P = 0. offs_n are
    the program's keys. Rows past N_Q read lse2 = +inf, so their P is 0 with or without the mask.
    """
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = _load_tile(q_src, row0 + start_m, row0 + N_Q, tl.arange(0, BLOCK_M), offs_d, HEAD_DIM, USE_TMA, WHOLE)
    do = _load_tile(do_src, row0 + start_m, row0 + N_Q, tl.arange(0, BLOCK_M), offs_d, HEAD_DIM, USE_TMA, WHOLE)
    if WHOLE:
        lse2 = tl.load(lse2_ptr + row0 + offs_m)
        delta = tl.load(delta_ptr + row0 + offs_m)
    else:
        lse2 = tl.load(lse2_ptr + row0 + offs_m, mask=offs_m < N_Q, other=float("inf"))
        delta = tl.load(delta_ptr + row0 + offs_m, mask=offs_m < N_Q, other=0.0)
    if TRANSPOSED:  # tiles are (keys, queries): Pᵀ and dSᵀ are born as the first operands of dV and dK
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse2[None, :])
        if MASKED:
            p_t = tl.where(_visible(offs_m[None, :], offs_n[:, None], causal_offset, N_K, CAUSAL, WHOLE), p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)  # dV += Pᵀ dO
        ds_t = (p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])).to(q.dtype)  # dSᵀ = Pᵀ ∘ (dPᵀ − D)
        dk = tl.dot(ds_t, q, dk)  # dK += dSᵀ Q
        ds = tl.trans(ds_t)
    else:  # tiles are (queries, keys), as in chapter 10
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse2[:, None])
        if MASKED:
            p = tl.where(_visible(offs_m[:, None], offs_n[None, :], causal_offset, N_K, CAUSAL, WHOLE), p, 0.0)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv)
        ds = (p * (tl.dot(do, tl.trans(v)) - delta[:, None])).to(q.dtype)
        dk = tl.dot(tl.trans(ds), q, dk)
    if ATOMIC_DQ:  # this tile's share of dQ = dS K, added into the fp32 buffer (scaled once, at the end)
        dq = tl.dot(ds, k)
        if USE_TMA:  # the whole tile in one bulk reduce-add, done by the copy engine from shared memory
            dq_acc.atomic_add([row0 + start_m, 0], dq)
        else:  # one atomic add per element, issued by the threads
            tl.atomic_add(dq_acc + (row0 + offs_m)[:, None] * HEAD_DIM + offs_d[None, :], dq,
                          mask=(offs_m < N_Q)[:, None], sem="relaxed")
    return dk, dv
# --8<-- [end:dkdv-step]


# --8<-- [start:dkdv]
@triton.jit
def _dkdv_kernel(q_src, k_src, v_src, do_src, dk_dst, dv_dst, dk_ptr, dv_ptr, dq_acc, lse2_ptr, delta_ptr,
                 sm_scale, qk_scale, N_Q, N_K, N_BUCKET, H, GROUP, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
                 SPLIT_DIAGONAL: tl.constexpr, TRANSPOSED: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                 USE_TMA: tl.constexpr, WHOLE: tl.constexpr):
    # One program per (K/V block, batch*K/V head); the tensors are seen as 2-D (batch*heads*seq, head_dim). With
    # grouped-query attention a K/V head serves GROUP query heads: the program sums their shares of dK and dV.
    # WHOLE: both lengths are multiples of the blocks, so no tile is partial and nothing needs a bounds mask.
    start_n = tl.program_id(0) * BLOCK_N
    kv_row0 = tl.program_id(1) * N_K  # first row of this K/V head
    kv_heads = H // GROUP
    first_head = (tl.program_id(1) // kv_heads) * H + (tl.program_id(1) % kv_heads) * GROUP  # in batch*heads
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k = _load_tile(k_src, kv_row0 + start_n, kv_row0 + N_K, tl.arange(0, BLOCK_N), offs_d, HEAD_DIM, USE_TMA, WHOLE)
    v = _load_tile(v_src, kv_row0 + start_n, kv_row0 + N_K, tl.arange(0, BLOCK_N), offs_d, HEAD_DIM, USE_TMA, WHOLE)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    # Chapter 10's bounds. Query i sees key j when j <= i + causal_offset (0 top-left, N_K - N_Q bottom-right):
    # Q blocks before lo see none of these keys; from full_lo on, every row sees every one of them (no mask).
    causal_offset = 0
    if BOTTOM_RIGHT:
        causal_offset = N_K - N_Q
    q_end = tl.cdiv(N_Q, BLOCK_M) * BLOCK_M
    lo = 0
    full_lo = 0
    if CAUSAL:
        lo = tl.maximum(start_n - causal_offset, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - causal_offset, 0), BLOCK_M) * BLOCK_M
        if not SPLIT_DIAGONAL:
            full_lo = q_end  # every block pays for the mask
    full_lo = tl.minimum(full_lo, q_end)
    if not WHOLE:  # a partial last key block holds keys past N_K: every one of its Q blocks takes the mask
        full_lo = tl.where(start_n + BLOCK_N > N_K, q_end, full_lo)
    for head in range(first_head, first_head + GROUP):
        row0 = head * N_Q  # first row of this query head
        if CAUSAL or not WHOLE:  # whole tiles without a causal mask have no masked block
            for start_m in range(lo, full_lo, BLOCK_M):
                dk, dv = _dkdv_step(dk, dv, k, v, q_src, do_src, dq_acc, lse2_ptr, delta_ptr, row0, start_m,
                                    offs_n, offs_d, qk_scale, causal_offset, N_Q, N_K, HEAD_DIM, BLOCK_M, True,
                                    CAUSAL, TRANSPOSED, ATOMIC_DQ, USE_TMA, WHOLE)
        for start_m in range(full_lo, q_end, BLOCK_M):  # blocks that see every key of this program: no mask
            dk, dv = _dkdv_step(dk, dv, k, v, q_src, do_src, dq_acc, lse2_ptr, delta_ptr, row0, start_m, offs_n,
                                offs_d, qk_scale, causal_offset, N_Q, N_K, HEAD_DIM, BLOCK_M, False, CAUSAL,
                                TRANSPOSED, ATOMIC_DQ, USE_TMA, WHOLE)
    _store_tile(dk_dst, dk_ptr, kv_row0 + start_n, kv_row0 + N_K, (dk * sm_scale).to(k.dtype),
                tl.arange(0, BLOCK_N), offs_d, HEAD_DIM, USE_TMA, WHOLE)
    _store_tile(dv_dst, dv_ptr, kv_row0 + start_n, kv_row0 + N_K, dv.to(v.dtype), tl.arange(0, BLOCK_N), offs_d,
                HEAD_DIM, USE_TMA, WHOLE)
# --8<-- [end:dkdv]


# --8<-- [start:dq]
@triton.jit
def _dq_loop(dq, q, do, lse2, delta, k_src, v_src, kv_row0, offs_m, offs_d, lo, hi, qk_scale, causal_offset, N_K,
             HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
             USE_TMA: tl.constexpr, WHOLE: tl.constexpr):
    """Fold the K/V blocks [lo, hi) into one Q block's dQ accumulator (chapter 10's second pass).
    MASKED: keys past N_K and (CAUSAL) keys after a query's position plus causal_offset get P = 0."""
    for start_n in range(lo, hi, BLOCK_N):
        k = _load_tile(k_src, kv_row0 + start_n, kv_row0 + N_K, tl.arange(0, BLOCK_N), offs_d, HEAD_DIM, USE_TMA,
                       WHOLE)
        v = _load_tile(v_src, kv_row0 + start_n, kv_row0 + N_K, tl.arange(0, BLOCK_N), offs_d, HEAD_DIM, USE_TMA,
                       WHOLE)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse2[:, None])
        if MASKED:
            cols = start_n + tl.arange(0, BLOCK_N)
            p = tl.where(_visible(offs_m[:, None], cols[None, :], causal_offset, N_K, CAUSAL, WHOLE), p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def _dq_kernel(q_src, k_src, v_src, do_src, dq_dst, dq_ptr, lse2_ptr, delta_ptr, sm_scale, qk_scale, N_Q, N_K,
               N_BUCKET, H, GROUP, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr, SPLIT_DIAGONAL: tl.constexpr,
               USE_TMA: tl.constexpr, WHOLE: tl.constexpr):
    # One program per (Q block, batch*head); query head h reads K/V head h // GROUP.
    start_m = tl.program_id(0) * BLOCK_M
    row0 = tl.program_id(1) * N_Q
    kv_row0 = ((tl.program_id(1) // H) * (H // GROUP) + (tl.program_id(1) % H) // GROUP) * N_K
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = _load_tile(q_src, row0 + start_m, row0 + N_Q, tl.arange(0, BLOCK_M), offs_d, HEAD_DIM, USE_TMA, WHOLE)
    do = _load_tile(do_src, row0 + start_m, row0 + N_Q, tl.arange(0, BLOCK_M), offs_d, HEAD_DIM, USE_TMA, WHOLE)
    if WHOLE:
        lse2 = tl.load(lse2_ptr + row0 + offs_m)
        delta = tl.load(delta_ptr + row0 + offs_m)
    else:
        lse2 = tl.load(lse2_ptr + row0 + offs_m, mask=offs_m < N_Q, other=float("inf"))
        delta = tl.load(delta_ptr + row0 + offs_m, mask=offs_m < N_Q, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # The forward's bounds: whole K/V blocks every row sees run unmasked; the diagonal and a partial last block
    # take the mask.
    causal_offset = 0
    if BOTTOM_RIGHT:
        causal_offset = N_K - N_Q
    if CAUSAL:
        full_hi = tl.maximum(tl.minimum(start_m + causal_offset + 1, N_K) // BLOCK_N * BLOCK_N, 0)
        last_row = tl.minimum(start_m + BLOCK_M, N_Q) - 1
        hi = tl.maximum(tl.minimum(last_row + causal_offset + 1, N_K), full_hi)
        if not SPLIT_DIAGONAL:
            full_hi = 0  # every block pays for the mask
    else:
        full_hi = N_K // BLOCK_N * BLOCK_N
        hi = N_K
    dq = _dq_loop(dq, q, do, lse2, delta, k_src, v_src, kv_row0, offs_m, offs_d, 0, full_hi, qk_scale,
                  causal_offset, N_K, HEAD_DIM, BLOCK_N, False, CAUSAL, USE_TMA, WHOLE)
    if CAUSAL or not WHOLE:  # whole tiles without a causal mask have no masked block
        dq = _dq_loop(dq, q, do, lse2, delta, k_src, v_src, kv_row0, offs_m, offs_d, full_hi, hi, qk_scale,
                      causal_offset, N_K, HEAD_DIM, BLOCK_N, True, CAUSAL, USE_TMA, WHOLE)
    _store_tile(dq_dst, dq_ptr, row0 + start_m, row0 + N_Q, (dq * sm_scale).to(q.dtype), tl.arange(0, BLOCK_M),
                offs_d, HEAD_DIM, USE_TMA, WHOLE)
# --8<-- [end:dq]


@triton.jit
def _dq_from_buffer(DQ_ACC, DQ, sm_scale, ROWS, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """ATOMIC_DQ: dQ = scale · (the fp32 sums of dS K), rounded to the inputs' dtype."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs = rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    ours = rows[:, None] < ROWS
    tl.store(DQ + offs, (tl.load(DQ_ACC + offs, mask=ours, other=0.0) * sm_scale).to(DQ.dtype.element_ty), mask=ours)


# The switches of the final kernel: every step of chapter 11's worklog that paid off. With GLUON on, the Triton
# switches still say what runs where the Gluon kernel cannot (the interpreter, GPUs other than Hopper).
BEST_FEATURES = {"TRANSPOSED": True, "SPLIT_DIAGONAL": True, "ATOMIC_DQ": False, "USE_TMA": True, "GLUON": True,
                 "KV_IN_REGISTERS": True, "DQ_BY_TURNS": True, "LONGEST_FIRST": True, "ROWS_IN_ACCUMULATORS": True,
                 "ROWS_IN_SHARED": True}
# The Gluon kernel's switches; the rest are the Triton kernels'.
GLUON_SWITCHES = ("GLUON", "KV_IN_REGISTERS", "DQ_BY_TURNS", "LONGEST_FIRST", "ROWS_IN_ACCUMULATORS",
                  "ROWS_IN_SHARED")
PREPROCESS_ROWS = 128


# --8<-- [start:configs]
def _set_block_shapes(nargs):
    """Tensor descriptors carry their block shape; set it to the configuration being tried."""
    if isinstance(nargs["q_src"], TensorDescriptor):
        rows = {"q_src": "BLOCK_M", "do_src": "BLOCK_M", "k_src": "BLOCK_N", "v_src": "BLOCK_N",
                "dk_dst": "BLOCK_N", "dv_dst": "BLOCK_N", "dq_dst": "BLOCK_M", "dq_acc": "BLOCK_M"}
        for name, block in rows.items():
            if isinstance(nargs.get(name), TensorDescriptor):
                nargs[name].block_shape = [nargs[block], nargs["HEAD_DIM"]]


def config(block_m: int, block_n: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages,
                         pre_hook=_set_block_shapes)


# dK/dV: a program keeps BLOCK_N keys (their K, V, dK and dV) and streams Q blocks of BLOCK_M rows past them.
# dQ: a program keeps BLOCK_M queries (their Q, dO and dQ) and streams K/V blocks of BLOCK_N keys past them.
# The shapes that won somewhere in the H200 probes. In the first full run dK/dV chose 64 x 64 with 4 warps
# most often, and dQ chose 128 x 64 with 8 warps.
DKDV_CONFIGS = [config(64, 64, 4, 2), config(64, 64, 4, 3), config(64, 128, 4, 2), config(64, 128, 8, 3)]
DQ_CONFIGS = [config(64, 64, 4, 2), config(128, 64, 8, 3), config(64, 32, 4, 3), config(128, 32, 4, 3)]


def _prune_dkdv(configs, named_args, **kwargs):
    meta = {**named_args, **kwargs}
    if meta["HEAD_DIM"] == 128:  # 128 keys' dK and dV accumulators (2 x 128 x 128 fp32) need 8 warps' registers
        configs = [c for c in configs if c.kwargs["BLOCK_N"] == 64 or c.num_warps == 8]
    if meta["CAUSAL"]:  # the diagonal of a K/V block is a whole number of Q blocks
        configs = [c for c in configs if c.kwargs["BLOCK_N"] % c.kwargs["BLOCK_M"] == 0]
    return configs


def _prune_dq(configs, named_args, **kwargs):
    meta = {**named_args, **kwargs}
    if meta["CAUSAL"]:  # the diagonal of a Q block is a whole number of K/V blocks
        configs = [c for c in configs if c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0]
    return configs


def _zero_dq_acc(nargs, reset_only=False):
    """Before each timed try of the autotuner: ATOMIC_DQ adds into dq_acc, so every try starts from zeros."""
    del reset_only
    buffer = nargs["dq_acc"]
    (buffer.base if isinstance(buffer, TensorDescriptor) else buffer).zero_()


# Tuned once per head dim, causal setting, switches and power-of-two bucket of N, not per exact length.
_dkdv_tuned = triton.autotune(configs=DKDV_CONFIGS, key=["N_BUCKET", "HEAD_DIM", "CAUSAL", "TRANSPOSED",
                                                       "SPLIT_DIAGONAL", "ATOMIC_DQ", "USE_TMA", "WHOLE"],
                              prune_configs_by={"early_config_prune": _prune_dkdv},
                              pre_hook=_zero_dq_acc)(_dkdv_kernel)
_dq_tuned = triton.autotune(configs=DQ_CONFIGS, key=["N_BUCKET", "HEAD_DIM", "CAUSAL", "SPLIT_DIAGONAL", "USE_TMA",
                                                   "WHOLE"],
                            prune_configs_by={"early_config_prune": _prune_dq})(_dq_kernel)
# --8<-- [end:configs]


def fallback_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why these (valid) inputs cannot take the fast backward on this machine, or None if they can. The CPU
    interpreter runs it (slowly, fp16 only), so that tests without a GPU cover it too."""
    if not kernels.interpreting() and fast_forward.capability(q.device)[0] < 9:
        return "a GPU older than Hopper (the fast backward is tuned for compute capability 9.0)"
    if kernels.interpreting() and q.dtype == torch.bfloat16:
        return "bfloat16 under the CPU interpreter (its tl.dot on bf16 is wrong; chapter 10's kernels upcast)"
    return fast_forward.shape_reason(q, k, v)


def gluon_reason(q: torch.Tensor) -> str | None:
    """Why step 8's Gluon kernel cannot run here (None if it can): it needs a Hopper GPU, not the interpreter."""
    if kernels.interpreting():
        return "Triton's CPU interpreter (Gluon kernels run only on a GPU)"
    major, minor = fast_forward.capability(q.device)
    if major != 9:
        return f"a GPU of compute capability {major}.{minor} (the Gluon kernel uses Hopper's wgmma: 9.x only)"
    return None


def check_saved(do: torch.Tensor, q: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """The backward's inputs besides q, k and v: dO and the forward's O with q's shape, dtype and device, and the
    forward's logsumexp, contiguous float32 of shape (batch, heads, N)."""
    batch, heads, seq = q.shape[:3]
    for name, t in (("do", do), ("out", out)):
        if t.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {tuple(t.shape)}")
    if lse.shape != (batch, heads, seq) or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError(f"lse must be the forward's contiguous float32 logsumexp of shape {(batch, heads, seq)}, "
                         f"got {lse.dtype} of shape {tuple(lse.shape)}")
    check_same_device(q=q, do=do, out=out, lse=lse)
    check_same_dtype(q=q, do=do, out=out)


def describe(cfg: triton.Config) -> str:
    """'64x64, 4 warps, 2 stages': a configuration as the worklog prints it."""
    return f"{cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']}, {cfg.num_warps} warps, {cfg.num_stages} stages"


def tuned_configs(atomic_dq: bool) -> dict[str, str | None]:
    """The tile shapes the autotuners picked for the last call: dK/dV, and dQ unless dQ came from atomic adds."""
    return {"dkdv": describe(_dkdv_tuned.best_config),
            "dq": None if atomic_dq else describe(_dq_tuned.best_config)}


def _check_causal_tiles(dkdv_config: triton.Config | None, dq_config: triton.Config | None) -> None:
    """Causal tiles split at the diagonal: a K/V block's diagonal must be whole Q blocks, and the other way round."""
    if dkdv_config is not None and dkdv_config.kwargs["BLOCK_N"] % dkdv_config.kwargs["BLOCK_M"]:
        raise ValueError(f"causal attention needs the dK/dV kernel's BLOCK_N to be a multiple of its BLOCK_M, got "
                         f"{describe(dkdv_config)}")
    if dq_config is not None and dq_config.kwargs["BLOCK_M"] % dq_config.kwargs["BLOCK_N"]:
        raise ValueError(f"causal attention needs the dQ kernel's BLOCK_M to be a multiple of its BLOCK_N, got "
                         f"{describe(dq_config)}")


def _launch(kernel, tuned, config, grid, args, meta):
    """Run a kernel autotuned, or with one pinned configuration (the worklog's fixed-tile steps)."""
    if config is None:
        tuned[grid](*args, **meta)
        return
    nargs = dict(zip(kernel.arg_names, args, strict=False)) | meta | config.kwargs
    _set_block_shapes(nargs)
    kernel[grid(config.kwargs)](*args, **meta, **config.kwargs, num_warps=config.num_warps,
                                num_stages=config.num_stages)


# --8<-- [start:wrapper]
def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, *, causal: bool = False, causal_alignment: str = "top-left",
                       sm_scale: float | None = None, dkdv_config: triton.Config | None = None,
                       dq_config: triton.Config | None = None,
                       **features: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), like chapter 10's attention_backward, on the fast path when the inputs allow it.

    `features` overrides BEST_FEATURES and the two configs pin the Triton kernels' tile shapes (the worklog
    times each step so). Inputs off the fast path go to chapter 10's kernels with a FallbackWarning.
    """
    readable_forward.validate_inputs(q, k, v)
    unknown = set(features) - set(BEST_FEATURES)
    if unknown:
        raise TypeError(f"unknown feature switches {sorted(unknown)}; known: {sorted(BEST_FEATURES)}")
    sm_scale = softmax_scale(sm_scale, q.shape[-1])
    if causal_alignment not in readable_forward.ALIGNMENTS:
        raise ValueError(f"causal_alignment must be one of {readable_forward.ALIGNMENTS}, got {causal_alignment!r}")
    reason = fallback_reason(q, k, v) or next(
        (f"{name} is not contiguous" for name, t in (("do", do), ("out", out)) if not t.is_contiguous()), None)
    if reason is not None:
        warnings.warn(f"fast backward: falling back to chapter 10's kernels: {reason}", FallbackWarning,
                      stacklevel=2)
        return readable.attention_backward(do, q, k, v, out, lse, causal=causal, causal_alignment=causal_alignment,
                                           sm_scale=sm_scale)
    check_saved(do, q, out, lse)
    if q.numel() == 0:  # no query: no gradient flows to any key
        return torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    switches = {**BEST_FEATURES, **features}
    if switches["GLUON"] and gluon_reason(q) is None:
        if dkdv_config is not None or dq_config is not None:
            raise ValueError("dkdv_config and dq_config pin the Triton kernels' tiles; the Gluon kernel has its "
                             "own, so pass GLUON=False with them")
        from kernels import flash_attention_backward_hopper  # imported here: that module imports this one

        return flash_attention_backward_hopper.attention_backward(
            do, q, k, v, out, lse, causal=causal, causal_alignment=causal_alignment, sm_scale=sm_scale,
            kv_in_registers=switches["KV_IN_REGISTERS"],
            dq_by_turns=switches["DQ_BY_TURNS"], longest_first=switches["LONGEST_FIRST"],
            rows_in_accumulators=switches["ROWS_IN_ACCUMULATORS"], rows_in_shared=switches["ROWS_IN_SHARED"])
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    if causal:
        _check_causal_tiles(dkdv_config, dq_config)
    if kernels.interpreting():  # no timing on the CPU: one small tile shape each instead of the autotuner
        dkdv_config = dkdv_config or config(64, 128, 4, 1)
        dq_config = dq_config or config(128, 64, 4, 1)

    rows = batch * heads * n_q
    q2, o2, do2 = (t.view(rows, head_dim) for t in (q, out, do))
    k2, v2 = (t.view(batch * kv_heads * n_k, head_dim) for t in (k, v))
    dq, dk, dv = (torch.empty_like(t) for t in (q2, k2, v2))
    delta = torch.empty(rows, device=q.device, dtype=torch.float32)
    lse2 = torch.empty_like(delta)
    # ATOMIC_DQ: the fp32 buffer dQ is summed into; otherwise a one-element stand-in that nothing reads.
    dq_acc = torch.empty((rows, head_dim) if switches["ATOMIC_DQ"] else 1, device=q.device, dtype=torch.float32)
    _preprocess[(triton.cdiv(rows, PREPROCESS_ROWS),)](o2, do2, lse, delta, lse2, dq_acc, rows, HEAD_DIM=head_dim,
                                                       BLOCK=PREPROCESS_ROWS, ZERO_DQ=switches["ATOMIC_DQ"])

    def source(t):  # placeholder block shapes; _set_block_shapes puts in the real ones before each launch
        return TensorDescriptor(t, list(t.shape), [head_dim, 1], [64, head_dim]) if switches["USE_TMA"] else t

    # SPLIT_DIAGONAL means nothing without the mask: leave it off there, so both settings share one compiled kernel.
    # WHOLE: both lengths are multiples of every block (the autotuned ones are 32 to 128 rows), no tile partial.
    block = max([128] + [c.kwargs[b] for c in (dkdv_config, dq_config) if c for b in ("BLOCK_M", "BLOCK_N")])
    common = dict(HEAD_DIM=head_dim, CAUSAL=bool(causal), BOTTOM_RIGHT=causal_alignment == "bottom-right",
                  SPLIT_DIAGONAL=switches["SPLIT_DIAGONAL"] and bool(causal), USE_TMA=switches["USE_TMA"],
                  WHOLE=n_q % block == 0 and n_k % block == 0)
    lengths = (n_q, n_k, min(triton.next_power_of_2(max(n_q, n_k)), 16384), heads, heads // kv_heads)
    args = (source(q2), source(k2), source(v2), source(do2), source(dk), source(dv), dk, dv,
            source(dq_acc) if switches["ATOMIC_DQ"] else dq_acc, lse2, delta, sm_scale, sm_scale * LOG2_E, *lengths)
    _launch(_dkdv_kernel, _dkdv_tuned, dkdv_config,
            lambda meta: (triton.cdiv(n_k, meta["BLOCK_N"]), batch * kv_heads), args,
            dict(common, TRANSPOSED=switches["TRANSPOSED"], ATOMIC_DQ=switches["ATOMIC_DQ"]))
    if switches["ATOMIC_DQ"]:
        _dq_from_buffer[(triton.cdiv(rows, PREPROCESS_ROWS),)](dq_acc, dq, sm_scale, rows, HEAD_DIM=head_dim,
                                                               BLOCK=PREPROCESS_ROWS)
    else:
        args = (source(q2), source(k2), source(v2), source(do2), source(dq), dq, lse2, delta, sm_scale,
                sm_scale * LOG2_E, *lengths)
        _launch(_dq_kernel, _dq_tuned, dq_config, lambda meta: (triton.cdiv(n_q, meta["BLOCK_M"]), batch * heads),
                args, common)
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)
# --8<-- [end:wrapper]


# --8<-- [start:autograd]
class FastFlashAttention(torch.autograd.Function):
    """Chapter 9's fast forward and this file's backward as one differentiable operation."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, causal_alignment: str, sm_scale: float | None):
        out, lse = fast_forward.attention(q, k, v, causal=causal, causal_alignment=causal_alignment,
                                          sm_scale=sm_scale, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = {"causal": causal, "causal_alignment": causal_alignment, "sm_scale": sm_scale}
        return out

    @staticmethod
    def backward(ctx, do):
        refuse_second_derivative("FastFlashAttention")  # its gradients carry no graph: fail, never drop a term
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(do.contiguous(), q, k, v, out, lse, **ctx.settings)
        return dq, dk, dv, None, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              causal_alignment: str = "top-left", sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q kᵀ · sm_scale) v on the fast paths, differentiable: the drop-in attention of a training step."""
    return FastFlashAttention.apply(q, k, v, causal, causal_alignment, sm_scale)
# --8<-- [end:autograd]
