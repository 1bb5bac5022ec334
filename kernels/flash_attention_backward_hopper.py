"""Chapter 11, steps 8-13: the backward in Gluon, with five matrix products per tile instead of seven.

Chapter 11's Triton backward computes dQ in a second kernel, which repeats two of the five products of each
tile. Adding dQ across programs instead (steps 5 and 7) lost in Triton, whose compiler gives the same warps every
job. This kernel writes the schedule by hand, as chapter 9 did for the forward:

- One program per 128 keys of one (batch, head). One warp only copies: K and V once, then the Q and dO blocks of
  BLOCK_M rows into a ring of shared-memory slots. Two warpgroups (4 warps each) only compute, each for 64 of the
  program's keys, and keep their dK and dV in registers.
- Per Q block, each warpgroup computes Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (keys as rows, chapter 11's step 3), then
  dV += Pᵀ dO and dK += dSᵀ Q, with Pᵀ and dSᵀ fed from registers.
- dQ's share of the block, dS K over all 128 keys, needs both warpgroups' dSᵀ: each writes its half to shared
  memory, and then each computes half of dQ's columns (K's columns are loaded a second time, in two halves, for
  this product). The copy engine adds each half into an fp32 buffer in one bulk reduce-add (TMA), while the
  warpgroup goes on to the next block.

Steps 9 and 10 cut the kernel's reads of shared memory, which at head dim 64 limit it more than the tensor cores
do. Both need room that only head dim 64 leaves:
- step 9 keeps K and V in registers as the first operand of Sᵀ and dPᵀ, read from shared memory once;
- step 10 gives dQ's whole share of a block, all columns, to one warpgroup, the two taking turns: dSᵀ and K are
  read once per block instead of once per half.
Step 11 changes only the order in which a causal backward's programs start: a program whose keys come first has
the longest loop (every later query sees its keys), so the grid starts the first key block of a few heads, then
their second, and so on, instead of every key block of one head before the next head.
Step 12, at head dim 128 only, starts the products Sᵀ and dPᵀ from the logsumexp and D of each query (as
accumulators) instead of from zero, so that those two rows need no registers while the block is computed.
Step 13 has the copy warp bring each Q block's logsumexp and D into shared memory with Q and dO, so that the
computing warps read them there instead of waiting for their own loads from global memory.

The inputs are the fast path's: fp16 or bf16, head dim 64 or 128, any query and key lengths (both causal
alignments), k and v with fewer heads than q, contiguous tensors, a Hopper GPU. Gluon does not run in Triton's
CPU interpreter. D = rowsum(dO ∘ O), the base-2 logsumexp, the zeroed fp32 buffer and the final scaling of dQ come
from the Triton backward's small kernels (kernels/flash_attention_backward_fast.py).
"""

from __future__ import annotations

import torch
import triton
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import flash_attention_backward_fast as triton_backward
from kernels.flash_attention_hopper import _tma_load, _tma_store  # the TMA copies under either Triton's names
from kernels.validate import softmax_scale

_thread_barrier = getattr(gl, "barrier", None) or gl.thread_barrier

KEYS_PER_WARPGROUP = gl.constexpr(64)  # one wgmma covers 64 rows; a program's 128 keys are two warpgroups' rows
# Step 13: a block's logsumexp or D, one row of floats in shared memory, as the copy engine writes it (unswizzled).
ROWS_LAYOUT = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1))


@builtin
def _tma_reduce_add_36(tensor_desc, coord, src, _semantic=None):
    """Triton 3.6's Gluon builds the TMA reduce-add but gives it no Python name; later Tritons call it
    tma.async_atomic_add."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


_tma_reduce_add = getattr(tma, "async_atomic_add", None) or _tma_reduce_add_36


# --8<-- [start:order]
@gluon.jit
def _program_tile(dims, HEADS_PER_GROUP: gl.constexpr):
    """This program's first key, the first row of its (batch, K/V head) in the 2-D views of k and v, and the
    first of the query heads that read that K/V head (in batch x query heads).

    dims = (queries, query heads, query heads per K/V head, keys, causal offset, floats per query head in the
    logsumexp and D buffers). HEADS_PER_GROUP = 0:
    grid (key blocks, K/V heads), every key block of a head before the next head. Otherwise (step 11) grid
    (HEADS_PER_GROUP, key blocks x groups of heads): the first key block of each head of a group, then the second,
    ..., so the longest causal loops start first, a few heads at a time."""
    seq_q, heads, group, seq_k, offset, row_pitch = dims
    if HEADS_PER_GROUP == 0:
        block = gl.program_id(0)
        kv_head = gl.program_id(1)
    else:
        blocks = gl.cdiv(seq_k, 2 * KEYS_PER_WARPGROUP)
        block = gl.program_id(1) % blocks
        kv_head = gl.program_id(1) // blocks * HEADS_PER_GROUP + gl.program_id(0)
    kv_heads = heads // group
    first_head = (kv_head // kv_heads) * heads + (kv_head % kv_heads) * group
    return block * 2 * KEYS_PER_WARPGROUP, kv_head * seq_k, first_head


@gluon.jit
def _query_blocks(start_n, dims, block_m: gl.constexpr, CAUSAL: gl.constexpr):
    """The first query of the Q blocks that see any of the keys from start_n, and how many blocks there are per
    query head: with CAUSAL, queries before start_n - offset see none of them."""
    seq_q, heads, group, seq_k, offset, row_pitch = dims
    lo = 0
    if CAUSAL:
        lo = gl.maximum(start_n - offset, 0) // block_m * block_m
    return lo, gl.cdiv(gl.maximum(seq_q - lo, 0), block_m)
# --8<-- [end:order]


# --8<-- [start:load]
@gluon.jit
def _load_partition(descs, smem, bars, dims, lse2_src, delta_src, qk_scale, sm_scale, WARPGROUP: gl.constexpr,
                    CAUSAL: gl.constexpr, KV_IN_REGISTERS: gl.constexpr, HEADS_PER_GROUP: gl.constexpr,
                    ROWS_IN_ACCUMULATORS: gl.constexpr, ROWS_IN_SHARED: gl.constexpr, WHOLE: gl.constexpr):
    """One warp: K and V once (and K again, for dQ, in column parts), then the Q and dO blocks into the ring (and,
    step 13, each block's logsumexp and D with them, under the same barriers)."""
    q_desc, k_desc, v_desc, do_desc, k_dq_desc, dq_desc, dk_desc, dv_desc, dk_ptr, dv_ptr = descs
    q_smem, do_smem, k_smem, v_smem, k_dq_smem, ds_smem, dq_smem, lse2_smem, delta_smem = smem
    kv_ready, q_ready, q_free, do_ready, do_free, ds_ready = bars
    stages: gl.constexpr = q_smem.shape[0]
    block_m: gl.constexpr = q_smem.shape[1]
    parts: gl.constexpr = k_dq_smem.shape[0]  # two column halves, or (step 10) one part with every column
    dq_cols: gl.constexpr = k_dq_smem.shape[2]
    start_n, kv_row0, first_head = _program_tile(dims, HEADS_PER_GROUP)
    seq_q, heads, group, seq_k, offset, row_pitch = dims
    mbarrier.expect(kv_ready, 2 * (k_desc.block_type.nbytes + v_desc.block_type.nbytes)
                    + parts * k_dq_desc.block_type.nbytes)
    for w in gl.static_range(2):
        _tma_load(k_desc, [kv_row0 + start_n + w * KEYS_PER_WARPGROUP, 0], kv_ready, k_smem.index(w))
        _tma_load(v_desc, [kv_row0 + start_n + w * KEYS_PER_WARPGROUP, 0], kv_ready, v_smem.index(w))
    for part in gl.static_range(parts):
        _tma_load(k_dq_desc, [kv_row0 + start_n, part * dq_cols], kv_ready, k_dq_smem.index(part))
    lo, blocks = _query_blocks(start_n, dims, block_m, CAUSAL)
    for h in range(group):  # every query head that reads this K/V head
        for b in range(blocks):  # every Q block of it that sees these keys
            i = h * blocks + b  # blocks so far: the ring slot and the barrier phase
            row = (first_head + h) * seq_q + lo + b * block_m
            row_of_rows = (first_head + h) * row_pitch + lo + b * block_m  # the same block in L₂ and D
            slot = i % stages
            free_phase = ((i // stages) & 1) ^ 1  # a fresh barrier counts phase 1 as complete: the first wait passes
            mbarrier.wait(q_free.index(slot), free_phase)
            if ROWS_IN_SHARED:
                mbarrier.expect(q_ready.index(slot), q_desc.block_type.nbytes + lse2_src.block_type.nbytes)
                _tma_load(lse2_src, [row_of_rows], q_ready.index(slot), lse2_smem.index(slot))
            else:
                mbarrier.expect(q_ready.index(slot), q_desc.block_type.nbytes)
            _tma_load(q_desc, [row, 0], q_ready.index(slot), q_smem.index(slot))
            mbarrier.wait(do_free.index(slot), free_phase)
            if ROWS_IN_SHARED:
                mbarrier.expect(do_ready.index(slot), do_desc.block_type.nbytes + delta_src.block_type.nbytes)
                _tma_load(delta_src, [row_of_rows], do_ready.index(slot), delta_smem.index(slot))
            else:
                mbarrier.expect(do_ready.index(slot), do_desc.block_type.nbytes)
            _tma_load(do_desc, [row, 0], do_ready.index(slot), do_smem.index(slot))
# --8<-- [end:load]


# --8<-- [start:compute]
@gluon.jit
def _add_to_dq(dq_desc, buffer, dq, row, col):
    """The copy engine adds a dQ share into the fp32 buffer; only the previous add must have left `buffer`."""
    tma.store_wait(0)
    buffer.store(dq)
    fence_async_shared()
    _tma_reduce_add(dq_desc, [row, col], buffer)


@gluon.jit
def _rows_of(src, row0, queries, seq_q, WHOLE: gl.constexpr):
    """One value per query (the logsumexp or D) from global memory; unless WHOLE, 0 past the last query."""
    if WHOLE:
        values = gl.load(src + row0 + queries)
    else:
        values = gl.load(src + row0 + queries, mask=queries < seq_q, other=0.0)
    return values


@gluon.jit
def _store_dk_dv(dk_desc, dv_desc, k, v, dk, dv, row):
    """dK and dV leave through the K and V buffers, which only this warpgroup reads."""
    k.store(dk.to(k.dtype))
    v.store(dv.to(v.dtype))
    fence_async_shared()
    _tma_store(dk_desc, [row, 0], k)
    _tma_store(dv_desc, [row, 0], v)


@gluon.jit
def _compute_partition(descs, smem, bars, dims, lse2_src, delta_src, qk_scale, sm_scale,
                       WARPGROUP: gl.constexpr, CAUSAL: gl.constexpr, KV_IN_REGISTERS: gl.constexpr,
                       HEADS_PER_GROUP: gl.constexpr, ROWS_IN_ACCUMULATORS: gl.constexpr, ROWS_IN_SHARED: gl.constexpr,
                       WHOLE: gl.constexpr):
    """One warpgroup: 64 keys' dK and dV over every Q block, and its part of each block's dQ share."""
    q_desc, k_desc, v_desc, do_desc, k_dq_desc, dq_desc, dk_desc, dv_desc, dk_ptr, dv_ptr = descs
    q_smem, do_smem, k_smem, v_smem, k_dq_smem, ds_smem, dq_smem, lse2_smem, delta_smem = smem
    kv_ready, q_ready, q_free, do_ready, do_free, ds_ready = bars
    stages: gl.constexpr = q_smem.shape[0]
    block_m: gl.constexpr = q_smem.shape[1]
    head_dim: gl.constexpr = q_smem.shape[2]
    dq_cols: gl.constexpr = k_dq_smem.shape[2]
    by_turns: gl.constexpr = k_dq_smem.shape[0] == 1  # step 10: each block's whole dQ share, by one warpgroup
    dtype: gl.constexpr = q_smem.dtype
    # Register layouts of the wgmma results (keys x queries, keys x head dim, queries x dQ's columns), and of
    # Pᵀ and dSᵀ as the first operand of a product.
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, block_m, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, head_dim, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, dq_cols, 16])
    operand_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(0, st_layout)  # one value per query, shared by the keys
    start_n, kv_row0, first_head = _program_tile(dims, HEADS_PER_GROUP)
    seq_q, heads, group, seq_k, offset, row_pitch = dims
    lo, blocks = _query_blocks(start_n, dims, block_m, CAUSAL)
    keys = start_n + WARPGROUP * KEYS_PER_WARPGROUP + gl.arange(0, KEYS_PER_WARPGROUP,
                                                                 gl.SliceLayout(1, st_layout))
    first_query = keys - offset  # with CAUSAL, the first query that sees each key
    k = k_smem.index(WARPGROUP)
    v = v_smem.index(WARPGROUP)
    dq_buffer = dq_smem.index(WARPGROUP)
    dk = gl.zeros([KEYS_PER_WARPGROUP, head_dim], gl.float32, kv_layout)
    dv = gl.zeros([KEYS_PER_WARPGROUP, head_dim], gl.float32, kv_layout)
    mbarrier.wait(kv_ready, 0)
    if KV_IN_REGISTERS:  # step 9: K and V, the first operands of Sᵀ and dPᵀ, read from shared memory once
        first_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=st_layout, k_width=2)
        k_first = k.load(first_operand)
        v_first = v.load(first_operand)
    else:
        k_first = k
        v_first = v
    for h in range(group):  # every query head that reads this K/V head: dK and dV sum over them
        row0 = (first_head + h) * seq_q  # first row of this query head
        rows0 = (first_head + h) * row_pitch  # its first logsumexp and D
        for b in range(blocks):
            i = h * blocks + b  # blocks so far: the ring slot, the barrier phase, the dS buffer
            start_m = lo + b * block_m
            slot = i % stages
            phase = (i // stages) & 1
            # Start Sᵀ = K Qᵀ and dPᵀ = V dOᵀ on the tensor cores; load this block's logsumexp and D meanwhile. Step 12
            # (head dim 128) starts the two products from -L₂/qk_scale and -D instead of zero, so that no row of the
            # logsumexp or D stays in registers; those loads must come first. Step 13 reads both rows from the ring slot
            # where the copy warp put them beside Q and dO, instead of loading them from global memory.
            queries = start_m + gl.arange(0, block_m, row_layout)
            s_start = gl.zeros([KEYS_PER_WARPGROUP, block_m], gl.float32, st_layout)
            dp_start = gl.zeros([KEYS_PER_WARPGROUP, block_m], gl.float32, st_layout)
            if ROWS_IN_ACCUMULATORS and not ROWS_IN_SHARED:
                s_start -= (_rows_of(lse2_src, rows0, queries, seq_q, WHOLE) / qk_scale)[None, :]
            mbarrier.wait(q_ready.index(slot), phase)
            if ROWS_IN_ACCUMULATORS and ROWS_IN_SHARED:
                s_start -= (lse2_smem.index(slot).load(row_layout) / qk_scale)[None, :]
            q = q_smem.index(slot)
            s_t = warpgroup_mma(k_first, q.permute((1, 0)), s_start, use_acc=ROWS_IN_ACCUMULATORS, is_async=True)
            if ROWS_IN_ACCUMULATORS and not ROWS_IN_SHARED:
                dp_start -= _rows_of(delta_src, rows0, queries, seq_q, WHOLE)[None, :]
            mbarrier.wait(do_ready.index(slot), phase)
            if ROWS_IN_ACCUMULATORS and ROWS_IN_SHARED:
                dp_start -= delta_smem.index(slot).load(row_layout)[None, :]
            do = do_smem.index(slot)
            dp_t = warpgroup_mma(v_first, do.permute((1, 0)), dp_start, use_acc=ROWS_IN_ACCUMULATORS, is_async=True)
            if not ROWS_IN_ACCUMULATORS and ROWS_IN_SHARED:
                lse2 = lse2_smem.index(slot).load(row_layout)
                delta = delta_smem.index(slot).load(row_layout)
            if not ROWS_IN_ACCUMULATORS and not ROWS_IN_SHARED:
                lse2 = _rows_of(lse2_src, rows0, queries, seq_q, WHOLE)
                delta = _rows_of(delta_src, rows0, queries, seq_q, WHOLE)
            # Pᵀ rebuilt from the logsumexp; dV += Pᵀ dO starts while dPᵀ may still be running.
            s_t = warpgroup_mma_wait(1, deps=[s_t])
            if ROWS_IN_ACCUMULATORS:
                p_t = gl.exp2(s_t * qk_scale)
            else:
                p_t = gl.exp2(s_t * qk_scale - lse2[None, :])
            # The mask: with CAUSAL a block on the diagonal, where keys after a query's position plus the offset get
            # P = 0; unless WHOLE, also a partial last block of queries or of keys (their rows are the next head's).
            on_diagonal = CAUSAL and start_m + offset < start_n + 2 * KEYS_PER_WARPGROUP
            if WHOLE:
                if on_diagonal:
                    p_t = gl.where(queries[None, :] >= first_query[:, None], p_t, 0.0)
            else:
                partial = (start_m + block_m > seq_q) or (start_n + 2 * KEYS_PER_WARPGROUP > seq_k)
                if partial or on_diagonal:
                    last_key = queries * 0 + (seq_k - 1)  # the last key each query sees
                    if CAUSAL:
                        last_key = gl.minimum(queries + offset, seq_k - 1)
                    last_key = gl.where(queries < seq_q, last_key, -1)  # a query past the end sees none
                    p_t = gl.where(keys[:, None] <= last_key[None, :], p_t, 0.0)
            p_operand = gl.convert_layout(p_t.to(dtype), operand_layout)
            dv = warpgroup_mma(p_operand, do, dv, is_async=True)
            dp_t = warpgroup_mma_wait(1, deps=[dp_t])
            if ROWS_IN_ACCUMULATORS:
                ds_t = (p_t * dp_t).to(dtype)
            else:
                ds_t = (p_t * (dp_t - delta[None, :])).to(dtype)
            # dSᵀ goes to shared memory for dQ (both warpgroups' halves are needed) and feeds dK += dSᵀ Q from
            # registers.
            buffer = i % 2
            ds_smem.index(buffer).slice(WARPGROUP * KEYS_PER_WARPGROUP, KEYS_PER_WARPGROUP).store(ds_t)
            fence_async_shared()
            _thread_barrier()  # every thread's share is written before the warpgroup says so
            mbarrier.arrive(ds_ready.index(buffer), count=1)
            ds_operand = gl.convert_layout(ds_t, operand_layout)
            dk = warpgroup_mma(ds_operand, q, dk, is_async=True)
            # dQ's share, dS K over the program's 128 keys.
            mbarrier.wait(ds_ready.index(buffer), (i // 2) & 1)
            if by_turns:  # step 10: every column, on every other block
                if i % 2 == WARPGROUP:
                    dq = warpgroup_mma(ds_smem.index(buffer).permute((1, 0)), k_dq_smem.index(0),
                                       gl.zeros([block_m, dq_cols], gl.float32, dq_layout), use_acc=False,
                                       is_async=True)
                    dq = warpgroup_mma_wait(0, deps=[dq])
                    _add_to_dq(dq_desc, dq_buffer, dq, row0 + start_m, 0)
                dv, dk, p_operand, ds_operand = warpgroup_mma_wait(0, deps=[dv, dk, p_operand, ds_operand])
                mbarrier.arrive(q_free.index(slot), count=1)
                mbarrier.arrive(do_free.index(slot), count=1)
            else:  # this warpgroup's half of the columns, on every block
                dq = warpgroup_mma(ds_smem.index(buffer).permute((1, 0)), k_dq_smem.index(WARPGROUP),
                                   gl.zeros([block_m, dq_cols], gl.float32, dq_layout), use_acc=False, is_async=True)
                dv, dk, dq, p_operand, ds_operand = warpgroup_mma_wait(0, deps=[dv, dk, dq, p_operand, ds_operand])
                mbarrier.arrive(q_free.index(slot), count=1)
                mbarrier.arrive(do_free.index(slot), count=1)
                _add_to_dq(dq_desc, dq_buffer, dq, row0 + start_m, WARPGROUP * dq_cols)
    first_key = start_n + WARPGROUP * KEYS_PER_WARPGROUP
    if WHOLE:
        _store_dk_dv(dk_desc, dv_desc, k, v, dk * sm_scale, dv, kv_row0 + first_key)
    elif first_key + KEYS_PER_WARPGROUP <= seq_k:
        _store_dk_dv(dk_desc, dv_desc, k, v, dk * sm_scale, dv, kv_row0 + first_key)
    else:  # a partial last block of keys: a TMA store would write the next head's rows, so store only ours
        rows = gl.arange(0, KEYS_PER_WARPGROUP, gl.SliceLayout(1, kv_layout))
        cols = gl.arange(0, head_dim, gl.SliceLayout(0, kv_layout))
        ours = (first_key + rows)[:, None] + cols[None, :] * 0 < seq_k
        where = (kv_row0 + first_key + rows)[:, None] * head_dim + cols[None, :]
        gl.store(dk_ptr + where, (dk * sm_scale).to(dtype), mask=ours)
        gl.store(dv_ptr + where, dv.to(dtype), mask=ours)
    tma.store_wait(0)


@gluon.jit
def _second_warpgroup(descs, smem, bars, dims, lse2_src, delta_src, qk_scale, sm_scale, WARPGROUP: gl.constexpr,
                      CAUSAL: gl.constexpr, KV_IN_REGISTERS: gl.constexpr, HEADS_PER_GROUP: gl.constexpr,
                      ROWS_IN_ACCUMULATORS: gl.constexpr, ROWS_IN_SHARED: gl.constexpr, WHOLE: gl.constexpr):
    """Worker partitions share one signature; this one runs the compute role for the program's second 64 keys."""
    _compute_partition(descs, smem, bars, dims, lse2_src, delta_src, qk_scale, sm_scale, 1, CAUSAL, KV_IN_REGISTERS,
                       HEADS_PER_GROUP, ROWS_IN_ACCUMULATORS, ROWS_IN_SHARED, WHOLE)
# --8<-- [end:compute]


# --8<-- [start:kernel]
@gluon.jit
def _hopper_bwd_kernel(q_desc, k_desc, v_desc, do_desc, k_dq_desc, dq_desc, dk_desc, dv_desc, dk_ptr, dv_ptr,
                       lse2_src, delta_src, qk_scale, sm_scale, seq_q, seq_k, offset, heads, group, row_pitch,
                       CAUSAL: gl.constexpr, WHOLE: gl.constexpr,
                       STAGES: gl.constexpr,
                       WORKER_REGS: gl.constexpr, KV_IN_REGISTERS: gl.constexpr, HEADS_PER_GROUP: gl.constexpr,
                       ROWS_IN_ACCUMULATORS: gl.constexpr, ROWS_IN_SHARED: gl.constexpr):
    # Shared memory: a ring of STAGES slots for Q and for dO; each warpgroup's K and V; K again for dQ (two column
    # halves, or one part with every column); two buffers for dSᵀ (128 keys x BLOCK_M), so one block's dQ can be
    # read while the next is written; one fp32 buffer per warpgroup for its dQ share on its way out; and (step 13)
    # a ring slot of BLOCK_M floats for each block's logsumexp and one for its D.
    block_m: gl.constexpr = q_desc.block_type.shape[0]
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, [STAGES] + do_desc.block_type.shape, do_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [2] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [2] + v_desc.block_type.shape, v_desc.layout)
    dq_parts: gl.constexpr = k_desc.block_type.shape[1] // k_dq_desc.block_type.shape[1]
    k_dq_smem = gl.allocate_shared_memory(k_dq_desc.dtype, [dq_parts] + k_dq_desc.block_type.shape, k_dq_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([2 * KEYS_PER_WARPGROUP, block_m], q_desc.dtype)
    ds_smem = gl.allocate_shared_memory(q_desc.dtype, [2, 2 * KEYS_PER_WARPGROUP, block_m], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2] + dq_desc.block_type.shape, dq_desc.layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    do_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)  # the copies' byte count completes it
    for i in gl.static_range(STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(q_free.index(i), count=2)  # both warpgroups must be done with a slot
        mbarrier.init(do_free.index(i), count=2)
    for i in gl.static_range(2):
        mbarrier.init(ds_ready.index(i), count=2)  # both halves of dSᵀ written
    descs = (q_desc, k_desc, v_desc, do_desc, k_dq_desc, dq_desc, dk_desc, dv_desc, dk_ptr, dv_ptr)
    dims = (seq_q, heads, group, seq_k, offset, row_pitch)
    lse2_smem = gl.allocate_shared_memory(gl.float32, [STAGES, block_m], ROWS_LAYOUT)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, block_m], ROWS_LAYOUT)
    smem = (q_smem, do_smem, k_smem, v_smem, k_dq_smem, ds_smem, dq_smem, lse2_smem, delta_smem)
    bars = (kv_ready, q_ready, q_free, do_ready, do_free, ds_ready)
    gl.warp_specialize([
        # The kernel's own 4 warps compute for the first 64 keys, 4 more for the second 64, 1 warp copies.
        (_compute_partition, (descs, smem, bars, dims, lse2_src, delta_src, qk_scale, sm_scale, 0, CAUSAL,
                              KV_IN_REGISTERS, HEADS_PER_GROUP, ROWS_IN_ACCUMULATORS, ROWS_IN_SHARED, WHOLE)),
        (_second_warpgroup, (descs, smem, bars, dims, lse2_src, delta_src, qk_scale, sm_scale, 1, CAUSAL,
                             KV_IN_REGISTERS, HEADS_PER_GROUP, ROWS_IN_ACCUMULATORS, ROWS_IN_SHARED, WHOLE)),
        (_load_partition, (descs, smem, bars, dims, lse2_src, delta_src, qk_scale, sm_scale, 0, CAUSAL,
                           KV_IN_REGISTERS, HEADS_PER_GROUP, ROWS_IN_ACCUMULATORS, ROWS_IN_SHARED, WHOLE)),
    ], [4, 1], [WORKER_REGS, 24])
# --8<-- [end:kernel]


# --8<-- [start:wrapper]
BLOCK_M = 64  # Q rows per step: the N of the Sᵀ product and the M of dQ's
# Ring slots for Q and dO: a third paid off at head dim 64 in our probe; at head dim 128 it does not fit in
# shared memory next to the rest (about 225 KiB of the 227 KiB a program may have with two).
STAGES = {64: 3, 128: 2}
REGISTERS = (168, 240)  # per thread at launch, then per computing thread (see kernels/flash_attention_hopper.py)
# Steps 9 and 10 need room that head dim 128 does not leave: there dK and dV take 128 of a computing thread's
# registers, K and V would take 64 more, and a whole dQ share 32 more registers and 32 KiB more shared memory.
ROOM_FOR_STEPS_9_AND_10 = {64: True, 128: False}
HEADS_AT_A_TIME = 4  # step 11: causal programs start longest first, this many heads at a time (in our probe 4 did as
# well as 8 or 16, or a little better, in most rows; 2 or 1 when batch x heads does not divide by 4)
# Step 12 pays where the kernel ran out of registers: at head dim 64 nothing spilled, and loading the two rows
# before the products start made it slower in our probe.
ROWS_IN_ACCUMULATORS_AT = {64: False, 128: True}


def shape_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why this kernel cannot take these inputs, or None if it can."""
    return triton_backward.gluon_reason(q) or triton_backward.fallback_reason(q, k, v)


def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, *, causal: bool = False, causal_alignment: str = "top-left",
                       sm_scale: float | None = None, kv_in_registers: bool = True, dq_by_turns: bool = True,
                       longest_first: bool = True, rows_in_accumulators: bool = True,
                       rows_in_shared: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) from the forward's output and natural-log logsumexp, like chapter 11's attention_backward: any
    query and key lengths, both causal alignments, k and v with fewer heads than q.

    kv_in_registers and dq_by_turns are steps 9 and 10; they apply at head dim 64 and are ignored at 128.
    longest_first is step 11; it applies to causal attention (without the mask every program's loop is as long).
    rows_in_accumulators is step 12; it applies at head dim 128 and is ignored at 64. rows_in_shared is step 13.
    """
    reason = shape_reason(q, k, v)
    if reason is not None:
        raise ValueError(f"the Gluon backward cannot take these inputs: {reason}")
    triton_backward.check_saved(do, q, out, lse)
    for name, t in (("do", do), ("out", out)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    if q.numel() == 0:  # no query: no gradient flows to any key
        return torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    batch, heads, seq, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    offset = n_k - seq if causal_alignment == "bottom-right" else 0
    sm_scale = softmax_scale(sm_scale, head_dim)

    rows = batch * heads * seq
    q2, o2, do2 = (t.view(rows, head_dim) for t in (q, out, do))
    k2, v2 = (t.view(batch * kv_heads * n_k, head_dim) for t in (k, v))
    dq, dk, dv = (torch.empty_like(t) for t in (q2, k2, v2))
    delta = torch.empty(rows, device=q.device, dtype=torch.float32)
    lse2 = torch.empty_like(delta)
    dq_acc = torch.empty((rows, head_dim), device=q.device, dtype=torch.float32)
    # D, the base-2 logsumexp, and zeros in the fp32 buffer dQ is added into: the Triton backward's first kernel.
    triton_backward._preprocess[(triton.cdiv(rows, triton_backward.PREPROCESS_ROWS),)](
        o2, do2, lse, delta, lse2, dq_acc, rows, HEAD_DIM=head_dim, BLOCK=triton_backward.PREPROCESS_ROWS,
        ZERO_DQ=True)

    def descriptor(t, block_rows, block_cols):
        gl_dtype = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[t.dtype]
        layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_cols], gl_dtype)
        return TensorDescriptor(t, list(t.shape), [head_dim, 1], [block_rows, block_cols], layout)

    keys = 2 * KEYS_PER_WARPGROUP.value
    room = ROOM_FOR_STEPS_9_AND_10[head_dim]
    dq_cols = head_dim if dq_by_turns and room else head_dim // 2
    at_a_time = (next(g for g in (HEADS_AT_A_TIME, 2, 1) if (batch * kv_heads) % g == 0)
                 if causal and longest_first else 0)
    key_blocks = triton.cdiv(n_k, keys)
    grid = ((at_a_time, batch * kv_heads // at_a_time * key_blocks) if at_a_time else (key_blocks, batch * kv_heads))
    # The copy engine reads a block of fp32 rows from a 16-byte aligned address only (an H200 run crashed at 129
    # queries): each query head's logsumexp and D start at a multiple of 4 floats, padded when seq is not one.
    row_pitch = triton.cdiv(seq, 4) * 4
    if row_pitch != seq:
        lse2, delta = (torch.nn.functional.pad(t.view(batch * heads, seq), (0, row_pitch - seq)).view(-1)
                       for t in (lse2, delta))
    row_sources = [lse2, delta]  # pointers, or (step 13) descriptors of BLOCK_M floats for the copy engine
    # WHOLE: every block of queries and of keys is whole and every query sees a key, so the kernel compiles without
    # the bounds masks and partial stores (the code of chapter 11's grid, equal lengths that are multiples of 128).
    whole = seq % BLOCK_M == 0 and n_k % keys == 0 and offset >= 0
    if rows_in_shared:
        row_sources = [TensorDescriptor(t, [t.numel()], [1], [BLOCK_M], ROWS_LAYOUT.value) for t in row_sources]
    _hopper_bwd_kernel[grid](
        descriptor(q2, BLOCK_M, head_dim), descriptor(k2, keys // 2, head_dim), descriptor(v2, keys // 2, head_dim),
        descriptor(do2, BLOCK_M, head_dim), descriptor(k2, keys, dq_cols),
        descriptor(dq_acc, BLOCK_M, dq_cols), descriptor(dk, keys // 2, head_dim),
        descriptor(dv, keys // 2, head_dim), dk, dv, *row_sources, sm_scale * triton_backward.LOG2_E, sm_scale, seq,
        n_k, offset, heads, heads // kv_heads, row_pitch,
        CAUSAL=bool(causal), WHOLE=whole, STAGES=STAGES[head_dim], WORKER_REGS=REGISTERS[1],
        KV_IN_REGISTERS=kv_in_registers and room, HEADS_PER_GROUP=at_a_time,
        ROWS_IN_ACCUMULATORS=rows_in_accumulators and ROWS_IN_ACCUMULATORS_AT[head_dim],
        ROWS_IN_SHARED=rows_in_shared, num_warps=4,
        maxnreg=REGISTERS[0])
    # dQ = scale · the fp32 sums, rounded to the inputs' dtype: the Triton backward's last kernel for atomic dQ.
    triton_backward._dq_from_buffer[(triton.cdiv(rows, triton_backward.PREPROCESS_ROWS),)](
        dq_acc, dq, sm_scale, rows, HEAD_DIM=head_dim, BLOCK=triton_backward.PREPROCESS_ROWS)
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)
# --8<-- [end:wrapper]
