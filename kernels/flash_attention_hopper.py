"""Chapter 9: the forward pass in Gluon, with the warps given separate jobs.

Gluon is Triton's lower-level language (`triton.experimental.gluon`). A Triton kernel says what to compute
on a tile and leaves the schedule to the compiler; a Gluon kernel also says how: which warps load and which
compute, when a tensor-core product is started and when we wait for it, where each tile lives in memory.
This file uses that control for three things the Triton kernel could not get on Hopper:

- Separate roles (warp specialization). One warp only issues TMA copies of K and V into a ring of shared
  memory buffers. Two warpgroups (4 warps each) only compute, each on its own 64 query rows; at head dim
  64 on long sequences, three (WARPGROUPS). mbarriers say when a buffer is full (the copy landed) and when
  it is free again (every computing warpgroup is done with it).
- Overlap inside a warpgroup. The tensor cores run `wgmma` asynchronously. Each warpgroup starts the scores
  of tile j (S = Q K_j^T) and the product of tile j-1 (O += P_{j-1} V_{j-1}), then computes the softmax of
  tile j on the ordinary units while the second product is still running on the tensor cores.
- A persistent grid. One program per SM walks through its share of the (query block, batch x head) work
  items, so the copying warp fetches the next item's Q and first K/V tiles while the warpgroups finish
  the current one, and each output leaves through its own buffer while the next item starts. Which items
  a program takes is decided on the host (kernels/hopper_schedule.py) and read from a small table.

PINGPONG (tried in chapter 9, off by default) makes two warpgroups take turns to start their products.
EXP2_ON_FMA (tried, 0 by default) computes some of the exponentials with a polynomial on the FMA units.

The algorithm is chapter 5's (FlashAttention-2 loop order, online softmax in base 2). The inputs are the
fast path's: fp16 or bf16, head dim 64 or 128, contiguous (batch, heads, seq, head_dim) tensors, any query and
key lengths (a partial last tile of keys is masked; a partial last block of queries is stored without TMA, so
that no row of the next head is overwritten; with fewer queries than keys, both causal alignments), k and v with
fewer heads than q allowed.
`kernels.flash_attention_fast.attention` checks that and
calls `attention` here.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import hopper_schedule as schedules

# Triton renamed the TMA copies after 3.6 (async_copy_global_to_shared became async_load, and
# async_copy_shared_to_global became async_store); take whichever this Triton has.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

LOG2_E = 1.4426950408889634
ROWS_PER_WARPGROUP = gl.constexpr(64)  # one wgmma covers 64 rows: 4 warps x 16 rows


# --8<-- [start:items]
@gluon.jit
def _items_of_this_program(schedule):
    """Where this program's list starts in the schedule table, and how many items it holds."""
    first = gl.load(schedule + gl.program_id(0))
    return first, gl.load(schedule + gl.program_id(0) + 1) - first


@gluon.jit
def _item(schedule, first, k, dims, block_m: gl.constexpr, block_n: gl.constexpr, CAUSAL: gl.constexpr):
    """This program's k-th work item: its first Q row in the 2-D view of q and in its sequence, its first K/V row
    in the 2-D view of k and v, and its number of K/V tiles.

    dims = (queries, query heads, query heads per K/V head, keys, causal offset): query head h reads K/V head
    h // group, and with CAUSAL query i sees keys up to i + offset (0 top-left, keys - queries bottom-right).
    Which items a program takes, and in which order, is decided on the host (kernels/hopper_schedule.py).
    """
    seq_q, heads, group, seq_k, offset = dims
    blocks = gl.cdiv(seq_q, block_m)
    item = gl.load(schedule + first + k)
    head = item // blocks  # batch * heads + query head
    block = item % blocks
    kv_row0 = ((head // heads) * (heads // group) + (head % heads) // group) * seq_k
    if CAUSAL:  # keys up to the block's last query
        n_tiles = gl.minimum(gl.cdiv(gl.maximum((block + 1) * block_m + offset, 0), block_n), gl.cdiv(seq_k, block_n))
    else:
        n_tiles = gl.cdiv(seq_k, block_n)  # the last one partial when block_n does not divide the keys
    return head * seq_q + block * block_m, block * block_m, kv_row0, n_tiles
# --8<-- [end:items]


# --8<-- [start:load]
@gluon.jit
def _load_partition(descs, smem, bars, dims, schedule, qk_scale, lse_ptr, WARPGROUP: gl.constexpr,
                    CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr,
                    EXP2_ON_FMA: gl.constexpr, WHOLE: gl.constexpr):
    """One warp: per item, both Q halves once its Q buffer is free, then K_j and V_j into the ring."""
    q_desc, k_desc, v_desc, o_desc, o_ptr = descs
    q_smem, k_smem, v_smem, o_smem = smem
    q_ready, q_free, k_ready, k_free, v_ready, v_free, turn = bars
    stages: gl.constexpr = k_smem.shape[0]
    block_n: gl.constexpr = k_smem.shape[1]
    wgs: gl.constexpr = q_smem.shape[0]
    block_m: gl.constexpr = wgs * ROWS_PER_WARPGROUP
    tile = 0  # K/V tiles copied so far, over all items: it picks the ring slot and the barrier phase
    first, n_items = _items_of_this_program(schedule)
    for k in range(n_items):
        q_row, _, kv_row0, n_tiles = _item(schedule, first, k, dims, block_m, block_n, CAUSAL)
        # A barrier completes a phase each time all its arrivals are in. The first wait on a `free`
        # barrier asks for phase 1, which a fresh barrier counts as already complete.
        mbarrier.wait(q_free, (k & 1) ^ 1)
        mbarrier.expect(q_ready, wgs * q_desc.block_type.nbytes)
        for w in gl.static_range(wgs):
            _tma_load(q_desc, [q_row + w * ROWS_PER_WARPGROUP, 0], q_ready, q_smem.index(w))
        for j in range(n_tiles):
            slot = tile % stages
            free_phase = ((tile // stages) & 1) ^ 1
            mbarrier.wait(k_free.index(slot), free_phase)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            _tma_load(k_desc, [kv_row0 + j * block_n, 0], k_ready.index(slot), k_smem.index(slot))
            mbarrier.wait(v_free.index(slot), free_phase)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            _tma_load(v_desc, [kv_row0 + j * block_n, 0], v_ready.index(slot), v_smem.index(slot))
            tile += 1
# --8<-- [end:load]


def _exp2_asm(on_fma: int) -> str:
    """PTX for 2^x on 4 scores: 4 - on_fma on the special-function units, on_fma on the FMA units.

    On the FMA units, 2^x = 2^i * 2^f with i = floor(x) and f = x - i in [0, 1): a degree-3 polynomial
    gives 2^f in [1, 2) (relative error under 1e-4, below fp16's rounding of P), and adding i to the
    float's exponent bits multiplies by 2^i. x is clamped at -126 first, so masked scores (-inf) give a
    number too small to matter (2^-126) and the exponent field never wraps below zero.
    """
    lines = ["{", ".reg .f32 x<4>, lo<4>, fr<4>, p<4>;", ".reg .s32 e<4>, b<4>;"]
    for k in range(4):
        if k < 4 - on_fma:
            lines.append(f"ex2.approx.ftz.f32 ${k}, ${k + 4};")
            continue
        lines += [f"max.f32 x{k}, ${k + 4}, 0fC2FC0000;",  # -126.0: the smallest power of two with a normal exponent
                  f"cvt.rmi.f32.f32 lo{k}, x{k};", f"sub.f32 fr{k}, x{k}, lo{k};",
                  f"fma.rn.f32 p{k}, fr{k}, 0f3D9FCB51, 0f3E677E27;",  # 0.0780245 f + 0.2260672
                  f"fma.rn.f32 p{k}, p{k}, fr{k}, 0f3F322226;",  # ... f + 0.6958336
                  f"fma.rn.f32 p{k}, p{k}, fr{k}, 0f3F7FFB19;",  # ... f + 0.9999252
                  f"cvt.rzi.s32.f32 e{k}, lo{k};", f"shl.b32 e{k}, e{k}, 23;",
                  f"mov.b32 b{k}, p{k};", f"add.s32 b{k}, b{k}, e{k};", f"mov.b32 ${k}, b{k};"]
    return "\n".join(lines + ["}"])


_EXP2_ASM_1 = gl.constexpr(_exp2_asm(1))
_EXP2_ASM_2 = gl.constexpr(_exp2_asm(2))


@gluon.jit
def _exp2(x, ON_FMA: gl.constexpr):
    """2^x, with ON_FMA of every 4 exponentials computed on the FMA units instead of the special-function units."""
    if ON_FMA == 0:
        return gl.exp2(x)
    elif ON_FMA == 1:
        return gl.inline_asm_elementwise(_EXP2_ASM_1, "=r,=r,=r,=r,r,r,r,r", [x], dtype=gl.float32, is_pure=True,
                                         pack=4)
    else:
        return gl.inline_asm_elementwise(_EXP2_ASM_2, "=r,=r,=r,=r,r,r,r,r", [x], dtype=gl.float32, is_pure=True,
                                         pack=4)


# --8<-- [start:softmax]
@gluon.jit
def _softmax_tile(s, m_i, l_i, qk_scale, j, first_row, seq_k, offset, CAUSAL: gl.constexpr,
                  EXP2_ON_FMA: gl.constexpr, WHOLE: gl.constexpr):
    """Fold one tile of raw scores into the running max m_i and sum l_i (base 2); return p and alpha.

    Masked: keys past seq_k (a partial last tile, whose rows the copy read from the next head), and with CAUSAL
    keys after a row's query position plus offset. A row that has seen no key yet keeps the max -inf; its
    exponentials subtract 0 instead, so they are 0, not NaN. WHOLE: no key past the end, and every row sees key 0,
    so only the diagonal is masked and no row keeps the max -inf."""
    block_n: gl.constexpr = s.shape[1]
    on_diagonal = CAUSAL and (j + 1) * block_n > first_row + offset + 1  # a key of this tile follows a query
    if WHOLE:
        if on_diagonal:
            rows = first_row + offset + gl.arange(0, s.shape[0], gl.SliceLayout(1, s.type.layout))
            keys = j * block_n + gl.arange(0, block_n, gl.SliceLayout(0, s.type.layout))
            s = gl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        m_use = m_new
        p = _exp2(gl.fma(s, qk_scale, -m_use[:, None]), EXP2_ON_FMA)
    elif (j + 1) * block_n > seq_k or on_diagonal:
        rows = first_row + gl.arange(0, s.shape[0], gl.SliceLayout(1, s.type.layout))
        keys = j * block_n + gl.arange(0, block_n, gl.SliceLayout(0, s.type.layout))
        last_key = rows * 0 + (seq_k - 1)  # the last key a row may see
        if CAUSAL:
            last_key = gl.minimum(rows + offset, seq_k - 1)
        s = gl.where(keys[None, :] <= last_key[:, None], s, -float("inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        m_use = gl.where(m_new == -float("inf"), 0.0, m_new)
        # On the special-function units: the FMA polynomial clamps at 2^-126, and a masked score must give 0.
        p = gl.exp2(gl.fma(s, qk_scale, -m_use[:, None]))
    else:
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        m_use = m_new
        p = _exp2(gl.fma(s, qk_scale, -m_use[:, None]), EXP2_ON_FMA)
    alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i
# --8<-- [end:softmax]


# --8<-- [start:compute]
@gluon.jit
def _store_out(o_desc, o, out, q_row):
    """The output leaves through its own buffer by TMA, while the warpgroup moves on to the next item; only the
    buffer's previous store has to be finished first."""
    tma.store_wait(0)
    o.store(out.to(o.dtype))
    fence_async_shared()
    _tma_store(o_desc, [q_row, 0], o)


@gluon.jit
def _compute_partition(descs, smem, bars, dims, schedule, qk_scale, lse_ptr, WARPGROUP: gl.constexpr,
                       CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr,
                       EXP2_ON_FMA: gl.constexpr, WHOLE: gl.constexpr):
    """One warpgroup: per item, 64 query rows against its K/V tiles, the next scores overlapping this softmax."""
    q_desc, k_desc, v_desc, o_desc, o_ptr = descs
    q_smem, k_smem, v_smem, o_smem = smem
    q_ready, q_free, k_ready, k_free, v_ready, v_free, turn = bars
    stages: gl.constexpr = k_smem.shape[0]
    block_n: gl.constexpr = k_smem.shape[1]
    head_dim: gl.constexpr = k_smem.shape[2]
    dtype: gl.constexpr = k_smem.dtype
    # Register layouts of the wgmma results: 4 warps stacked along the rows, 16 rows each.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, block_n, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, head_dim, 16])
    # P feeds the second product straight from registers, in the layout wgmma wants for its A operand.
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.index(WARPGROUP)
    o = o_smem.index(WARPGROUP)
    block_m: gl.constexpr = q_smem.shape[0] * ROWS_PER_WARPGROUP
    tile = 0  # K/V tiles used so far, over all items, as in the copying warp
    first, n_items = _items_of_this_program(schedule)
    for k in range(n_items):
        q_row, first_row, kv_row0, n_tiles = _item(schedule, first, k, dims, block_m, block_n, CAUSAL)
        q_row += WARPGROUP * ROWS_PER_WARPGROUP
        first_row += WARPGROUP * ROWS_PER_WARPGROUP  # position of this warpgroup's first query in its sequence
        # The tiles this warpgroup needs: with causal attention, the block's later rows may need more; rows
        # past the end of a partial last block need none. It only frees the tiles it does not need.
        n_mine = n_tiles
        if CAUSAL:
            n_mine = gl.minimum(gl.cdiv(gl.maximum(first_row + ROWS_PER_WARPGROUP + dims[4], 0), block_n), n_tiles)
        if first_row >= dims[0]:
            n_mine = 0
        mbarrier.wait(q_ready, k & 1)
        if n_mine == 0:
            mbarrier.arrive(q_free, count=1)
            if not WHOLE:
                if first_row < dims[0]:  # rows that see no key (more queries than keys, bottom-right): 0, -inf
                    rows = gl.arange(0, ROWS_PER_WARPGROUP, o_rows)
                    cols = gl.arange(0, head_dim, gl.SliceLayout(0, o_layout))
                    ours = (first_row + rows)[:, None] + cols[None, :] * 0 < dims[0]
                    gl.store(o_ptr + (q_row + rows)[:, None] * head_dim + cols[None, :],
                             gl.zeros([ROWS_PER_WARPGROUP, head_dim], dtype, o_layout), mask=ours)
                    if STORE_LSE:
                        rows = gl.arange(0, ROWS_PER_WARPGROUP, gl.SliceLayout(1, s_layout))
                        gl.store(lse_ptr + q_row + rows, rows * 0.0 - float("inf"), mask=first_row + rows < dims[0])
        else:
            # --8<-- [start:overlap]
            # Tile 0 on its own: its scores, then its softmax (nothing to overlap with yet).
            mbarrier.wait(k_ready.index(tile % stages), (tile // stages) & 1)
            s = gl.zeros([ROWS_PER_WARPGROUP, block_n], gl.float32, s_layout)
            s = warpgroup_mma(q, k_smem.index(tile % stages).permute((1, 0)), s, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=[s])
            mbarrier.arrive(k_free.index(tile % stages), count=1)
            if n_mine == 1:  # Q is no longer needed: the copying warp may bring the next item's
                mbarrier.arrive(q_free, count=1)
            m_i = gl.full([ROWS_PER_WARPGROUP], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
            l_i = gl.zeros([ROWS_PER_WARPGROUP], gl.float32, gl.SliceLayout(1, s_layout))
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, 0, first_row, dims[3], dims[4], CAUSAL,
                                               EXP2_ON_FMA, WHOLE)
            p = gl.convert_layout(p.to(dtype), p_layout)
            acc = gl.zeros([ROWS_PER_WARPGROUP, head_dim], gl.float32, o_layout)

            for j in range(1, n_mine):
                slot = (tile + j) % stages
                prev = (tile + j - 1) % stages
                # Start S_j = Q K_j^T, then O += P_{j-1} V_{j-1}: both run on the tensor cores, in this order.
                mbarrier.wait(k_ready.index(slot), ((tile + j) // stages) & 1)
                if PINGPONG:  # take turns with the other warpgroup: its softmax runs while our products do
                    mbarrier.wait(turn.index(WARPGROUP), (tile - k + j - 1) & 1)
                s = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s, use_acc=False, is_async=True)
                mbarrier.wait(v_ready.index(prev), ((tile + j - 1) // stages) & 1)
                acc = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
                if PINGPONG:
                    mbarrier.arrive(turn.index(1 - WARPGROUP), count=1)
                # Wait for the scores only (one product may stay in flight), free K_j, and run the softmax of
                # tile j while O += P_{j-1} V_{j-1} is still on the tensor cores.
                s = warpgroup_mma_wait(1, deps=[s])
                mbarrier.arrive(k_free.index(slot), count=1)
                if j == n_mine - 1:
                    mbarrier.arrive(q_free, count=1)
                p_next, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, j, first_row, dims[3], dims[4], CAUSAL,
                                                        EXP2_ON_FMA, WHOLE)
                p_next = gl.convert_layout(p_next.to(dtype), p_layout)  # 16-bit: half the registers to carry
                # Now the product must be done: free V_{j-1}, then rescale O to the new running max.
                acc, p = warpgroup_mma_wait(0, deps=[acc, p])
                mbarrier.arrive(v_free.index(prev), count=1)
                acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
                p = p_next

            # The last tile's product, then normalize once.
            last = (tile + n_mine - 1) % stages
            mbarrier.wait(v_ready.index(last), ((tile + n_mine - 1) // stages) & 1)
            acc = warpgroup_mma(p, v_smem.index(last), acc, is_async=True)
            acc, p = warpgroup_mma_wait(0, deps=[acc, p])
            mbarrier.arrive(v_free.index(last), count=1)
            if WHOLE:
                l_safe = l_i
            else:
                l_safe = gl.where(l_i == 0.0, 1.0, l_i)  # a row that saw no key: output 0, logsumexp -inf
            out = acc / gl.convert_layout(l_safe, o_rows)[:, None]
            # --8<-- [end:overlap]

            if WHOLE:
                _store_out(o_desc, o, out, q_row)
            elif first_row + ROWS_PER_WARPGROUP <= dims[0]:
                _store_out(o_desc, o, out, q_row)
            else:  # rows past the end: a TMA store would write the next head's rows, so store only ours
                rows = gl.arange(0, ROWS_PER_WARPGROUP, o_rows)
                cols = gl.arange(0, head_dim, gl.SliceLayout(0, o_layout))
                ours = (first_row + rows)[:, None] + cols[None, :] * 0 < dims[0]
                gl.store(o_ptr + (q_row + rows)[:, None] * head_dim + cols[None, :], out.to(dtype), mask=ours)
            if STORE_LSE:  # natural-log logsumexp per row, for a backward pass
                rows = gl.arange(0, ROWS_PER_WARPGROUP, gl.SliceLayout(1, s_layout))
                if WHOLE:
                    gl.store(lse_ptr + q_row + rows, (m_i + gl.log2(l_i)) / 1.4426950408889634)
                else:
                    lse = gl.where(l_i == 0.0, -float("inf"), (m_i + gl.log2(l_safe)) / 1.4426950408889634)
                    gl.store(lse_ptr + q_row + rows, lse, mask=first_row + rows < dims[0])
        for j in range(n_mine, n_tiles):  # tiles the other warpgroups need: free them at once
            mbarrier.wait(k_ready.index((tile + j) % stages), ((tile + j) // stages) & 1)
            mbarrier.arrive(k_free.index((tile + j) % stages), count=1)
            mbarrier.wait(v_ready.index((tile + j) % stages), ((tile + j) // stages) & 1)
            mbarrier.arrive(v_free.index((tile + j) % stages), count=1)
        tile += n_tiles
    tma.store_wait(0)


@gluon.jit
def _second_warpgroup(descs, smem, bars, dims, schedule, qk_scale, lse_ptr, WARPGROUP: gl.constexpr,
                      CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr,
                      EXP2_ON_FMA: gl.constexpr, WHOLE: gl.constexpr):
    """Worker partitions share one signature; this one runs the compute role for the second 64 rows."""
    _compute_partition(descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 1, CAUSAL, STORE_LSE, PINGPONG,
                       EXP2_ON_FMA, WHOLE)


@gluon.jit
def _third_warpgroup(descs, smem, bars, dims, schedule, qk_scale, lse_ptr, WARPGROUP: gl.constexpr,
                     CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr,
                     EXP2_ON_FMA: gl.constexpr, WHOLE: gl.constexpr):
    _compute_partition(descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 2, CAUSAL, STORE_LSE, PINGPONG,
                       EXP2_ON_FMA, WHOLE)
# --8<-- [end:compute]


# --8<-- [start:kernel]
@gluon.jit
def _hopper_fwd_kernel(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, qk_scale, seq_q, seq_k, offset, heads, group,
                       schedule,
                       CAUSAL: gl.constexpr, WHOLE: gl.constexpr, STORE_LSE: gl.constexpr, STAGES: gl.constexpr,
                       PINGPONG: gl.constexpr, EXP2_ON_FMA: gl.constexpr,
                       WARPGROUPS: gl.constexpr, WORKER_REGS: gl.constexpr):
    # Shared memory: the two Q halves, the two output halves, and a ring of STAGES slots for K and for V.
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [WARPGROUPS] + q_desc.block_type.shape, q_desc.layout)
    o_smem = gl.allocate_shared_memory(o_desc.dtype, [WARPGROUPS] + o_desc.block_type.shape, o_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)  # the copy's byte count completes it
    mbarrier.init(q_free, count=WARPGROUPS)  # both computing warpgroups must be done with Q
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=WARPGROUPS)
        mbarrier.init(v_free.index(i), count=WARPGROUPS)
    # Whose turn it is to start tensor-core work (PINGPONG): the first warpgroup goes first.
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    if PINGPONG:
        mbarrier.arrive(turn.index(0), count=1)

    descs = (q_desc, k_desc, v_desc, o_desc, o_ptr)
    dims = (seq_q, heads, group, seq_k, offset)
    smem = (q_smem, k_smem, v_smem, o_smem)
    bars = (q_ready, q_free, k_ready, k_free, v_ready, v_free, turn)
    if WARPGROUPS == 2:
        gl.warp_specialize([
            # The kernel's own 4 warps compute query rows 0-63 of each item.
            (_compute_partition, (descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 0, CAUSAL, STORE_LSE,
                                  PINGPONG, EXP2_ON_FMA, WHOLE)),
            # 4 more warps compute rows 64-127.
            (_second_warpgroup, (descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 1, CAUSAL, STORE_LSE,
                                 PINGPONG, EXP2_ON_FMA, WHOLE)),
            # 1 warp issues the copies.
            (_load_partition, (descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 0, CAUSAL, STORE_LSE,
                               PINGPONG, EXP2_ON_FMA, WHOLE)),
        ], [4, 1], [WORKER_REGS, 24])
    else:  # the same, with a third computing warpgroup for rows 128-191
        gl.warp_specialize([
            (_compute_partition, (descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 0, CAUSAL, STORE_LSE,
                                  PINGPONG, EXP2_ON_FMA, WHOLE)),
            (_second_warpgroup, (descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 1, CAUSAL, STORE_LSE,
                                 PINGPONG, EXP2_ON_FMA, WHOLE)),
            (_third_warpgroup, (descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 2, CAUSAL, STORE_LSE,
                                PINGPONG, EXP2_ON_FMA, WHOLE)),
            (_load_partition, (descs, smem, bars, dims, schedule, qk_scale, lse_ptr, 0, CAUSAL, STORE_LSE,
                               PINGPONG, EXP2_ON_FMA, WHOLE)),
        ], [4, 4, 1], [WORKER_REGS, WORKER_REGS, 24])
# --8<-- [end:kernel]


# --8<-- [start:wrapper]
BLOCK_N = 128  # keys per tile; 64 was slower at both head dims on the H100
STAGES = 2  # K/V slots in the ring; a third gained nothing at head dim 64 in our probes (not tried at 128)
# Registers per thread (at launch, then per computing thread). 2 computing warpgroups + the copying warp run
# as 3 warpgroups (384 threads): 168 each fills the 64K register file, and the copying warp's 24 leave 240
# to each computing thread. With 3 computing warpgroups there are 4 warpgroups (512 threads): 128 each at
# launch, and 160 per computing thread, enough at head dim 64 (a 64 x 64 accumulator), not at 128.
REGISTERS = {2: (168, 240), 3: (128, 160)}
SCHEDULES = ("one_per_item", "in_pairs", "balanced")


def warpgroups_for(head_dim: int, seq: int, causal: bool) -> int:
    """How many computing warpgroups (64 query rows each) one program runs, as chapter 9 measured it.

    Three pay off at head dim 64 on long enough sequences. On short ones the 192-row blocks waste work:
    the last block of a head is partly past its end, and causal blocks straddle the diagonal unevenly.
    """
    if head_dim == 64 and seq >= (4096 if causal else 2048):
        return 3
    return 2


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, sm_scale: float,
              return_lse: bool, causal_alignment: str = "top-left", out: torch.Tensor | None = None,
              pingpong: bool = False, schedule: str = "balanced", exp2_on_fma: int = 0,
              warpgroups: int | None = None):
    """The Gluon kernel on inputs the fast path has already checked (see kernels.flash_attention_fast).

    q has Nq queries and k, v Nk keys; with causal, query i sees keys up to i (top-left) or i + Nk - Nq
    (bottom-right), and a row that sees no key gets 0 and logsumexp -inf.

    `out`, if given, must be a contiguous tensor like q; the tests pass one filled with NaN. `pingpong`
    turns on the turn-taking that chapter 9 tried and dropped; `schedule` says which items each program
    takes ("one_per_item", "in_pairs" or "balanced", see kernels/hopper_schedule.py), as the worklog's
    steps before and after the persistent grid did; `exp2_on_fma` (0, 1 or 2) moves that
    many of every 4 exponentials to the FMA units, a step chapter 9 tried and dropped. `warpgroups` (2 or 3)
    overrides the number of computing warpgroups that `warpgroups_for` picks.
    """
    if exp2_on_fma not in (0, 1, 2):  # the kernel would read 3 or 4 as 2
        raise ValueError(f"exp2_on_fma must be 0, 1 or 2 (of every 4 exponentials), got {exp2_on_fma!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
    batch, heads, seq, head_dim = q.shape
    keys = k.shape[2]
    offset = keys - seq if causal_alignment == "bottom-right" else 0
    if pingpong and (keys != seq or seq % BLOCK_N):
        raise ValueError(f"pingpong takes turns over whole tiles: it needs equal query and key lengths that are a "
                         f"multiple of {BLOCK_N}, got {seq} and {keys}")
    warpgroups = warpgroups_for(head_dim, seq, causal) if warpgroups is None else warpgroups
    if warpgroups not in REGISTERS or (warpgroups == 3 and (head_dim != 64 or pingpong)):
        raise ValueError(f"warpgroups must be 2, or 3 at head dim 64 without pingpong; got {warpgroups!r} at "
                         f"head dim {head_dim}")
    # WHOLE: every warpgroup's 64 rows and every K/V tile whole, and every query sees a key: the kernel compiles
    # without bounds masks or partial stores (the code of chapter 9's grid, equal lengths that are multiples of 128).
    whole = seq % ROWS_PER_WARPGROUP.value == 0 and keys % BLOCK_N == 0 and offset >= 0
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty((batch, heads, seq), device=q.device, dtype=torch.float32) if return_lse else out

    def descriptor(t, block_rows):
        rows = t.shape[0] * t.shape[1] * t.shape[2]
        return TensorDescriptor(t.view(rows, head_dim), [rows, head_dim], [head_dim, 1], [block_rows, head_dim],
                                _shared_layout(q.dtype, block_rows, head_dim))

    # Which items (query rows of one (batch, head) that a program's warpgroups take at once) each program takes.
    table, programs = schedules.table_on(q.device, schedule, batch * heads, seq, warpgroups, BLOCK_N,
                                         bool(causal), _sm_count(q.device), keys, offset)
    _hopper_fwd_kernel[(programs,)](
        descriptor(q, ROWS_PER_WARPGROUP.value), descriptor(k, BLOCK_N), descriptor(v, BLOCK_N),
        descriptor(out, ROWS_PER_WARPGROUP.value), out, lse, sm_scale * LOG2_E, seq, keys, offset, heads,
        heads // k.shape[1], table,
        CAUSAL=bool(causal), WHOLE=whole, STORE_LSE=return_lse, STAGES=STAGES, PINGPONG=pingpong,
        EXP2_ON_FMA=exp2_on_fma, WARPGROUPS=warpgroups, WORKER_REGS=REGISTERS[warpgroups][1],
        num_warps=4, maxnreg=REGISTERS[warpgroups][0],
    )
    return (out, lse) if return_lse else out


# The wrapper runs on the CPU before every launch. At N = 1024 the kernel takes under 200 microseconds, so
# the wrapper's own time matters: what does not change between calls is computed once.
@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.cache
def _shared_layout(dtype: torch.dtype, block_rows: int, head_dim: int) -> gl.NVMMASharedLayout:
    """How a tile sits in shared memory: swizzled so that TMA writes it and wgmma reads it without conflicts."""
    gl_dtype = gl.float16 if dtype == torch.float16 else gl.bfloat16
    return gl.NVMMASharedLayout.get_default_for([block_rows, head_dim], gl_dtype)
# --8<-- [end:wrapper]
