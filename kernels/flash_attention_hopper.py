"""Chapter 7, last step: the forward pass in Gluon, with the warps given separate jobs.

Gluon is Triton's lower-level language (`triton.experimental.gluon`). A Triton kernel says what to compute
on a tile and leaves the schedule to the compiler; a Gluon kernel also says how: which warps load and which
compute, when a tensor-core product is started and when we wait for it, where each tile lives in memory.
This file uses that control for the two things the Triton kernel could not get on Hopper:

- Separate roles (warp specialization). One warp only issues TMA copies of K and V into a ring of shared
  memory buffers. Two warpgroups (4 warps each) only compute, each on its own 64 query rows. mbarriers
  say when a buffer is full (the copy landed) and when it is free again (both warpgroups are done with it).
- Overlap inside a warpgroup. The tensor cores run `wgmma` asynchronously. Each warpgroup starts the scores
  of tile j (S = Q K_j^T) and the product of tile j-1 (O += P_{j-1} V_{j-1}), then computes the softmax of
  tile j on the ordinary units while the second product is still running on the tensor cores.

PINGPONG (tried in chapter 7, off by default) makes the two warpgroups take turns to start their products.

The algorithm is chapter 5's (FlashAttention-2 loop order, online softmax in base 2). The inputs are the
fast path's: fp16 or bf16, head dim 64 or 128, equal query and key lengths that are a multiple of 128,
contiguous (batch, heads, seq, head_dim) tensors. `kernels.flash_attention_fast.attention` checks that and
calls `attention` here.
"""

from __future__ import annotations

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

# Triton renamed the TMA copies after 3.6 (async_copy_global_to_shared became async_load, and
# async_copy_shared_to_global became async_store); take whichever this Triton has.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

LOG2_E = 1.4426950408889634
ROWS_PER_WARPGROUP = gl.constexpr(64)  # one wgmma covers 64 rows: 4 warps x 16 rows
BLOCK_M = 2 * ROWS_PER_WARPGROUP.value  # two computing warpgroups share each K/V tile


# --8<-- [start:load]
@gluon.jit
def _load_partition(descs, smem, bars, q_row, kv_row0, n_tiles, qk_scale, lse_ptr, WARPGROUP: gl.constexpr,
                    CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr):
    """One warp: copy both Q halves once, then K_j and V_j into the ring, each as soon as its slot is free."""
    q_desc, k_desc, v_desc, o_desc = descs
    q_smem, k_smem, v_smem = smem
    q_ready, k_ready, k_free, v_ready, v_free, turn = bars
    stages: gl.constexpr = k_smem.shape[0]
    block_n: gl.constexpr = k_smem.shape[1]
    mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes)
    _tma_load(q_desc, [q_row, 0], q_ready, q_smem.index(0))
    _tma_load(q_desc, [q_row + ROWS_PER_WARPGROUP, 0], q_ready, q_smem.index(1))
    for j in range(n_tiles):
        slot = j % stages
        # A slot's `free` barrier completes a phase each time both warpgroups release it. The first pass
        # through the ring waits on phase 1, which a fresh barrier counts as already complete.
        free_phase = ((j // stages) & 1) ^ 1
        mbarrier.wait(k_free.index(slot), free_phase)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        _tma_load(k_desc, [kv_row0 + j * block_n, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_free.index(slot), free_phase)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        _tma_load(v_desc, [kv_row0 + j * block_n, 0], v_ready.index(slot), v_smem.index(slot))
# --8<-- [end:load]


# --8<-- [start:softmax]
@gluon.jit
def _softmax_tile(s, m_i, l_i, qk_scale, j, first_row, CAUSAL: gl.constexpr):
    """Fold one tile of raw scores into the running max m_i and sum l_i (base 2); return p and alpha."""
    if CAUSAL:
        block_n: gl.constexpr = s.shape[1]
        if (j + 1) * block_n > first_row + 1:  # some key of this tile comes after some query: mask
            rows = first_row + gl.arange(0, s.shape[0], gl.SliceLayout(1, s.type.layout))
            keys = j * block_n + gl.arange(0, block_n, gl.SliceLayout(0, s.type.layout))
            s = gl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(gl.fma(s, qk_scale, -m_new[:, None]))
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i
# --8<-- [end:softmax]


# --8<-- [start:compute]
@gluon.jit
def _compute_partition(descs, smem, bars, q_row, kv_row0, n_tiles, qk_scale, lse_ptr, WARPGROUP: gl.constexpr,
                       CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr):
    """One warpgroup: 64 query rows against every K/V tile, with the next scores overlapping this softmax."""
    q_desc, k_desc, v_desc, o_desc = descs
    q_smem, k_smem, v_smem = smem
    q_ready, k_ready, k_free, v_ready, v_free, turn = bars
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
    first_row = q_row + WARPGROUP * ROWS_PER_WARPGROUP - kv_row0  # position of this warpgroup's first query
    q = q_smem.index(WARPGROUP)

    mbarrier.wait(q_ready, 0)
    # Tile 0 on its own: its scores, then its softmax (nothing to overlap with yet).
    mbarrier.wait(k_ready.index(0), 0)
    s = gl.zeros([ROWS_PER_WARPGROUP, block_n], gl.float32, s_layout)
    s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=[s])
    mbarrier.arrive(k_free.index(0), count=1)
    m_i = gl.full([ROWS_PER_WARPGROUP], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([ROWS_PER_WARPGROUP], gl.float32, gl.SliceLayout(1, s_layout))
    p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, 0, first_row, CAUSAL)
    acc = gl.zeros([ROWS_PER_WARPGROUP, head_dim], gl.float32, o_layout)

    for j in range(1, n_tiles):
        slot = j % stages
        prev = (j - 1) % stages
        # Start S_j = Q K_j^T, then O += P_{j-1} V_{j-1}: both run on the tensor cores, in this order.
        mbarrier.wait(k_ready.index(slot), (j // stages) & 1)
        if PINGPONG:  # take turns with the other warpgroup: its softmax runs while our products do
            mbarrier.wait(turn.index(WARPGROUP), (j - 1) & 1)
        s = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s, use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(prev), ((j - 1) // stages) & 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - WARPGROUP), count=1)
        # Wait for the scores only (one product may stay in flight), free K_j, and run the softmax of
        # tile j while O += P_{j-1} V_{j-1} is still on the tensor cores.
        s = warpgroup_mma_wait(1, deps=[s])
        mbarrier.arrive(k_free.index(slot), count=1)
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, qk_scale, j, first_row, CAUSAL)
        # Now the product must be done: free V_{j-1}, then rescale O to the new running max.
        acc, p_op = warpgroup_mma_wait(0, deps=[acc, p_op])
        mbarrier.arrive(v_free.index(prev), count=1)
        acc = acc * gl.convert_layout(alpha, o_rows)[:, None]

    # The last tile's product, then normalize once.
    last = (n_tiles - 1) % stages
    mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // stages) & 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    acc = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
    acc, p_op = warpgroup_mma_wait(0, deps=[acc, p_op])
    mbarrier.arrive(v_free.index(last), count=1)
    out = acc / gl.convert_layout(l_i, o_rows)[:, None]

    # Q is no longer needed: its buffer stages the output for one TMA store.
    q.store(out.to(dtype))
    fence_async_shared()
    _tma_store(o_desc, [q_row + WARPGROUP * ROWS_PER_WARPGROUP, 0], q)
    if STORE_LSE:  # natural-log logsumexp per row, for a backward pass
        rows = gl.arange(0, ROWS_PER_WARPGROUP, gl.SliceLayout(1, s_layout))
        lse = (m_i + gl.log2(l_i)) / 1.4426950408889634
        gl.store(lse_ptr + q_row + WARPGROUP * ROWS_PER_WARPGROUP + rows, lse)
    tma.store_wait(0)


@gluon.jit
def _second_warpgroup(descs, smem, bars, q_row, kv_row0, n_tiles, qk_scale, lse_ptr, WARPGROUP: gl.constexpr,
                      CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr):
    """Worker partitions share one signature; this one runs the compute role for the second 64 rows."""
    _compute_partition(descs, smem, bars, q_row, kv_row0, n_tiles, qk_scale, lse_ptr, 1, CAUSAL, STORE_LSE,
                       PINGPONG)
# --8<-- [end:compute]


# --8<-- [start:kernel]
@gluon.jit
def _hopper_fwd_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, seq_len,
                       CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, STAGES: gl.constexpr,
                       PINGPONG: gl.constexpr):
    block_n: gl.constexpr = k_desc.block_type.shape[0]
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m  # the longest rows first, so the last wave is short
    kv_row0 = gl.program_id(1) * seq_len  # first row of this (batch, head) in the 2-D view
    q_row = kv_row0 + pid_m * (2 * ROWS_PER_WARPGROUP)
    if CAUSAL:  # keys up to the block's last query
        n_tiles = gl.cdiv((pid_m + 1) * (2 * ROWS_PER_WARPGROUP), block_n)
    else:
        n_tiles = seq_len // block_n

    # Shared memory: the two Q halves, and a ring of STAGES slots for K and for V.
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2] + q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)  # the copy's byte count completes it
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=2)  # both computing warpgroups must release a slot
        mbarrier.init(v_free.index(i), count=2)
    # Whose turn it is to start tensor-core work (PINGPONG): the first warpgroup goes first.
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    if PINGPONG:
        mbarrier.arrive(turn.index(0), count=1)

    descs = (q_desc, k_desc, v_desc, o_desc)
    smem = (q_smem, k_smem, v_smem)
    bars = (q_ready, k_ready, k_free, v_ready, v_free, turn)
    gl.warp_specialize([
        # The kernel's own 4 warps compute query rows 0-63 of the block.
        (_compute_partition, (descs, smem, bars, q_row, kv_row0, n_tiles, qk_scale, lse_ptr, 0, CAUSAL, STORE_LSE,
                              PINGPONG)),
        # 4 more warps compute rows 64-127.
        (_second_warpgroup, (descs, smem, bars, q_row, kv_row0, n_tiles, qk_scale, lse_ptr, 1, CAUSAL, STORE_LSE,
                             PINGPONG)),
        # 1 warp issues the copies.
        (_load_partition, (descs, smem, bars, q_row, kv_row0, n_tiles, qk_scale, lse_ptr, 0, CAUSAL, STORE_LSE,
                           PINGPONG)),
    ], [4, 1], [240, 24])
# --8<-- [end:kernel]


# --8<-- [start:wrapper]
BLOCK_N = 128  # keys per tile; 64 was slower at both head dims on the H100
STAGES = 2  # K/V slots in the ring; a third gained nothing at head dim 64 in our probes (not tried at 128)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, sm_scale: float,
              return_lse: bool, out: torch.Tensor | None = None, pingpong: bool = False):
    """The Gluon kernel on inputs the fast path has already checked (see kernels.flash_attention_fast).

    `out`, if given, must be a contiguous tensor like q; the tests pass one filled with NaN. `pingpong`
    turns on the schedule that chapter 7 tried and dropped.
    """
    batch, heads, seq, head_dim = q.shape
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty((batch, heads, seq), device=q.device, dtype=torch.float32) if return_lse else out
    rows = batch * heads * seq
    gl_dtype = gl.float16 if q.dtype == torch.float16 else gl.bfloat16

    def descriptor(t, block_rows):
        layout = gl.NVMMASharedLayout.get_default_for([block_rows, head_dim], gl_dtype)
        return TensorDescriptor(t.view(rows, head_dim), [rows, head_dim], [head_dim, 1], [block_rows, head_dim],
                                layout)

    grid = (seq // BLOCK_M, batch * heads)
    _hopper_fwd_kernel[grid](
        descriptor(q, ROWS_PER_WARPGROUP.value), descriptor(k, BLOCK_N), descriptor(v, BLOCK_N),
        descriptor(out, ROWS_PER_WARPGROUP.value), lse, sm_scale * LOG2_E, seq,
        CAUSAL=bool(causal), STORE_LSE=return_lse, STAGES=STAGES, PINGPONG=pingpong,
        # 4 + 4 + 1 warps run as 3 warpgroups (384 threads); 168 registers each on average fill the
        # register file, and the copying warp's 24 leave 240 to each computing warpgroup.
        num_warps=4, maxnreg=168,
    )
    return (out, lse) if return_lse else out
# --8<-- [end:wrapper]
