"""Chapter 10: the FlashAttention backward pass, readable first.

The forward pass (chapter 5) keeps only O and the row logsumexp L. The backward rebuilds every tile of P
from Q, K and L instead of reading a stored N x N matrix: P_ij = exp(S_ij - L_i), S = Q Kᵀ · scale. With
dO given, the gradients are

    dV = Pᵀ dO          dP = dO Vᵀ          dS = P ∘ (dP − D),  D_i = Σ_d dO_id · O_id
    dQ = dS K · scale    dK = dSᵀ Q · scale

D comes from O and dO alone (a row of P times a row of dP sums to a row of dO times a row of O), so a small
first kernel computes it for every row. Then two kernels share the work (FlashAttention-2 has the first one's
loop order, but adds dQ with atomic adds instead of running the second):

- one program per block of BLOCK_N keys keeps its K and V on chip, streams the Q, dO, L and D blocks past
  them, and accumulates its dK and dV rows, which it writes once;
- one program per block of BLOCK_M queries keeps its Q, dO, L and D on chip, streams K and V past them, and
  accumulates its dQ rows, which it writes once.

Every program owns the rows it writes, so no two programs add into the same output: no atomics, and the
result does not depend on the order in which programs run. The price is computing each P tile twice.

Grouped-query attention (k and v with H_kv heads, GROUP = H / H_kv query heads per K/V head): a K/V head's dK
and dV sum over the GROUP query heads that read it. A dK/dV program owns a block of keys of one K/V head and
streams the Q blocks of every head of its group past them, so it still writes its rows once, without atomics;
there are GROUP times fewer such programs, each doing GROUP times the work.

Causal attention sorts the tiles as the forward pass does (chapter 6): tiles no row of the block sees are
skipped, tiles every row sees whole run without a mask, and only the tiles on the diagonal and those of a
partial last block of keys get the element-wise mask. Rows that see no key (bottom-right alignment with Nq > Nk)
have L = -inf: their P is 0 and their gradients are 0, never NaN.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import kernels
from kernels import flash_attention as forward
from kernels.validate import check_same_device, check_same_dtype, refuse_second_derivative, softmax_scale

LOG2_E = forward.LOG2_E


# --8<-- [start:delta]
@triton.jit
def _attn_bwd_delta(O, DO, Delta, stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom,
                    H, N_CTX_Q, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """D_i = Σ_d dO_id · O_id in fp32, for BLOCK_M rows of one (batch, head). Delta is (batch * heads, Nq)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch, head = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask = (offs_m[:, None] < N_CTX_Q) & (offs_d[None, :] < HEAD_DIM)
    o = tl.load(O + batch * stride_ob + head * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
                mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :],
                 mask=mask, other=0.0).to(tl.float32)
    tl.store(Delta + pid_bh * N_CTX_Q + offs_m, tl.sum(o * do, 1), mask=offs_m < N_CTX_Q)
# --8<-- [end:delta]


# --8<-- [start:probabilities]
@triton.jit
def _probabilities(q, k, lse2, offs_m, offs_n, qk_scale, causal_offset, N_CTX_Q, N_CTX_K,
                   CAUSAL: tl.constexpr, MASKED: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One tile of P rebuilt from Q, K and the forward's logsumexp: P = 2^(S · qk_scale − lse2), in fp32.

    Base-2 units, as in the forward: qk_scale = scale · log2(e) and lse2 = L · log2(e).
    MASKED=False: the caller knows that every row of the tile sees every key of it: no mask work at all.
    MASKED=True: scores of keys out of range, in a row's future (CAUSAL), or of rows that saw no key at all
    (lse2 = -inf) give P = 0.
    """
    p = tl.math.exp2(tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale - lse2[:, None])
    if MASKED:
        visible = (offs_m[:, None] < N_CTX_Q) & (offs_n[None, :] < N_CTX_K) & (lse2[:, None] > float("-inf"))
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + causal_offset)
        p = tl.where(visible, p, 0.0)
    return p
# --8<-- [end:probabilities]


# --8<-- [start:dkdv_tiles]
@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, stride_qm, stride_dom, offs_n, offs_d,
                lo, hi, qk_scale, causal_offset, N_CTX_Q, N_CTX_K,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                DOT_PRECISION: tl.constexpr):
    """Stream the Q blocks starting at lo, lo + BLOCK_M, ... (below hi) past this program's K and V, and add
    each block's share to dK and dV. Rows past Nq load as 0 (Q, dO, L and D): their dO and dS are 0."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_mask = (offs_m[:, None] < N_CTX_Q) & (offs_d[None, :] < HEAD_DIM)
        q = tl.load(q_ptrs + start_m * stride_qm, mask=q_mask, other=0.0)
        do = tl.load(do_ptrs + start_m * stride_dom, mask=q_mask, other=0.0)
        lse2 = tl.load(lse_ptrs + offs_m, mask=offs_m < N_CTX_Q, other=0.0) * 1.4426950408889634
        delta = tl.load(delta_ptrs + offs_m, mask=offs_m < N_CTX_Q, other=0.0)
        p = _probabilities(q, k, lse2, offs_m, offs_n, qk_scale, causal_offset, N_CTX_Q, N_CTX_K,
                           CAUSAL, MASKED, DOT_PRECISION)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv, input_precision=DOT_PRECISION)  # dV += Pᵀ dO
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # dP = dO Vᵀ
        ds = p * (dp - delta[:, None])  # dS = P ∘ (dP − D)
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk, input_precision=DOT_PRECISION)  # dK += dSᵀ Q
    return dk, dv
# --8<-- [end:dkdv_tiles]


# --8<-- [start:dkdv_kernel]
@triton.jit
def _attn_bwd_dkdv(Q, K, V, DO, DK, DV, Lse, Delta, sm_scale, qk_scale,
                   stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                   stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
                   stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh, stride_dvn,
                   H, GROUP, N_CTX_Q, N_CTX_K,
                   HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, CAUSAL: tl.constexpr,
                   BOTTOM_RIGHT: tl.constexpr, DOT_PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Grid: (K/V blocks, batch * K/V heads). This program owns keys [start_n, start_n + BLOCK_N) of one K/V head,
    # and sums the dK and dV rows of those keys over the GROUP query heads that read them.
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    kv_heads = H // GROUP
    batch, kv_head = pid_bh // kv_heads, pid_bh % kv_heads
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    kv_mask = (offs_n[:, None] < N_CTX_K) & (offs_d[None, :] < HEAD_DIM)
    k = tl.load(K + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :],
                mask=kv_mask, other=0.0)
    v = tl.load(V + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
                mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
    offs_m = tl.arange(0, BLOCK_M)

    # Query i sees key j when j <= i + causal_offset: offset 0 is top-left, Nk - Nq is bottom-right.
    causal_offset = 0
    if BOTTOM_RIGHT:
        causal_offset = N_CTX_K - N_CTX_Q
    lo = 0
    full_lo = 0
    if CAUSAL:
        # The first row that sees key start_n is start_n - causal_offset: Q blocks above it see none of
        # these keys, so skip them. From the first row that sees the block's last key on, every row sees
        # every key: no mask there.
        lo = tl.maximum(start_n - causal_offset, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - causal_offset, 0), BLOCK_M) * BLOCK_M
    # A partial last key block holds keys past Nk: every one of its tiles needs the mask.
    full_lo = tl.where(start_n + BLOCK_N > N_CTX_K, N_CTX_Q, tl.minimum(full_lo, N_CTX_Q))
    for head in range(kv_head * GROUP, kv_head * GROUP + GROUP):  # the query heads that read this K/V head
        # Pointers to the first Q block of this head's Q and dO; the loop adds start_m.
        q_ptrs = Q + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
        do_ptrs = DO + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :]
        rows = (batch * H + head) * N_CTX_Q  # where this head's L and D start
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_ptrs, do_ptrs, Lse + rows, Delta + rows,
                             stride_qm, stride_dom, offs_n, offs_d, lo, full_lo, qk_scale, causal_offset,
                             N_CTX_Q, N_CTX_K, HEAD_DIM, BLOCK_M, CAUSAL, MASKED=True, DOT_PRECISION=DOT_PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_ptrs, do_ptrs, Lse + rows, Delta + rows,
                             stride_qm, stride_dom, offs_n, offs_d, full_lo, N_CTX_Q, qk_scale, causal_offset,
                             N_CTX_Q, N_CTX_K, HEAD_DIM, BLOCK_M, CAUSAL, MASKED=False, DOT_PRECISION=DOT_PRECISION)
    dk = dk * sm_scale
    tl.store(DK + batch * stride_dkb + kv_head * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + batch * stride_dvb + kv_head * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=kv_mask)
# --8<-- [end:dkdv_kernel]


# --8<-- [start:dq_tiles]
@triton.jit
def _dq_tiles(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_d,
              lo, hi, qk_scale, causal_offset, N_CTX_Q, N_CTX_K,
              HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
              DOT_PRECISION: tl.constexpr):
    """Stream the K/V blocks starting at lo, lo + BLOCK_N, ... (below hi) past this program's Q block, and add
    each block's share to dQ."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n[:, None] < N_CTX_K) & (offs_d[None, :] < HEAD_DIM)
        k = tl.load(k_ptrs + start_n * stride_kn, mask=kv_mask, other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vn, mask=kv_mask, other=0.0)
        p = _probabilities(q, k, lse2, offs_m, offs_n, qk_scale, causal_offset, N_CTX_Q, N_CTX_K,
                           CAUSAL, MASKED, DOT_PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # dP = dO Vᵀ
        ds = p * (dp - delta[:, None])  # dS = P ∘ (dP − D)
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=DOT_PRECISION)  # dQ += dS K
    return dq
# --8<-- [end:dq_tiles]


# --8<-- [start:dq_kernel]
@triton.jit
def _attn_bwd_dq(Q, K, V, DO, DQ, Lse, Delta, sm_scale, qk_scale,
                 stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                 stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
                 stride_dqb, stride_dqh, stride_dqm,
                 H, GROUP, N_CTX_Q, N_CTX_K,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, CAUSAL: tl.constexpr,
                 BOTTOM_RIGHT: tl.constexpr, DOT_PRECISION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Grid: (Q blocks, batch * heads). This program owns query rows [start_m, start_m + BLOCK_M) of one head.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch, head = pid_bh // H, pid_bh % H
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    q_mask = (offs_m[:, None] < N_CTX_Q) & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(Q + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=q_mask, other=0.0)
    do = tl.load(DO + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :],
                 mask=q_mask, other=0.0)
    lse2 = tl.load(Lse + pid_bh * N_CTX_Q + offs_m, mask=offs_m < N_CTX_Q, other=0.0) * 1.4426950408889634
    delta = tl.load(Delta + pid_bh * N_CTX_Q + offs_m, mask=offs_m < N_CTX_Q, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    # Pointers to the first K/V block; the loop adds start_n.
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs = K + batch * stride_kb + (head // GROUP) * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + batch * stride_vb + (head // GROUP) * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]

    # The forward's loop bounds (chapter 6): whole K/V blocks that every row sees need no mask; the
    # diagonal and a partial last block do. Rows past Nq compute rows of dQ that are never stored.
    causal_offset = 0
    if BOTTOM_RIGHT:
        causal_offset = N_CTX_K - N_CTX_Q
    if CAUSAL:
        full_hi = tl.minimum(start_m + causal_offset + 1, N_CTX_K)  # keys the first row sees
        full_hi = tl.maximum(full_hi // BLOCK_N * BLOCK_N, 0)
        last_row = tl.minimum(start_m + BLOCK_M, N_CTX_Q) - 1
        hi = tl.maximum(tl.minimum(last_row + causal_offset + 1, N_CTX_K), full_hi)  # keys the last row sees
    else:
        full_hi = N_CTX_K // BLOCK_N * BLOCK_N
        hi = N_CTX_K
    dq = _dq_tiles(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_d, 0, full_hi,
                   qk_scale, causal_offset, N_CTX_Q, N_CTX_K, HEAD_DIM, BLOCK_N, CAUSAL, MASKED=False,
                   DOT_PRECISION=DOT_PRECISION)
    dq = _dq_tiles(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_d, full_hi, hi,
                   qk_scale, causal_offset, N_CTX_Q, N_CTX_K, HEAD_DIM, BLOCK_N, CAUSAL, MASKED=True,
                   DOT_PRECISION=DOT_PRECISION)
    dq = dq * sm_scale
    tl.store(DQ + batch * stride_dqb + head * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=q_mask)
# --8<-- [end:dq_kernel]


def _tiles(head_dim_pad: int, dtype: torch.dtype) -> dict:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for both kernels: small in the interpreter and for fp32
    (exact products on the FP32 units), 64 x 64 up to head dim 128, 32 x 32 above it (shared memory)."""
    if kernels.interpreting():
        return {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32 or head_dim_pad > 128:
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


# --8<-- [start:wrapper]
def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, *, causal: bool = False, causal_alignment: str = "top-left",
                       sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of softmax(q kᵀ · sm_scale) v, given dO and what chapter 5's forward returned: out and
    its row logsumexp lse (attention(..., return_lse=True)), with the same causal settings and scale."""
    forward.validate_inputs(q, k, v)
    if causal_alignment not in forward.ALIGNMENTS:
        raise ValueError(f"causal_alignment must be one of {forward.ALIGNMENTS}, got {causal_alignment!r}")
    batch, heads, n_q, head_dim = q.shape
    n_k = k.shape[2]
    for name, t in (("do", do), ("out", out)):
        if t.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {tuple(t.shape)}")
        if t.numel() and t.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride along head_dim; pass {name}.contiguous()")
    if lse.shape != (batch, heads, n_q) or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError(f"lse must be the forward's contiguous float32 logsumexp of shape {(batch, heads, n_q)}, "
                         f"got {lse.dtype} of shape {tuple(lse.shape)}")
    check_same_device(q=q, do=do, out=out, lse=lse)
    check_same_dtype(q=q, do=do, out=out)
    sm_scale = softmax_scale(sm_scale, head_dim)
    if q.dtype == torch.bfloat16 and kernels.interpreting():
        # Triton's CPU interpreter computes tl.dot on bf16 operands wrongly (chapter 5's wrapper says so too):
        # there, and only there, run the fp32 kernels on upcast copies and round the gradients to bf16.
        grads = attention_backward(do.float(), q.float(), k.float(), v.float(), out.float(), lse, causal=causal,
                                   causal_alignment=causal_alignment, sm_scale=sm_scale)
        return tuple(g.to(torch.bfloat16) for g in grads)
    dq, dk, dv = (torch.empty(t.shape, device=t.device, dtype=t.dtype) for t in (q, k, v))
    if q.numel() == 0:
        return dq, dk.zero_(), dv.zero_()

    head_dim_pad = max(triton.next_power_of_2(head_dim), 16)
    tiles = _tiles(head_dim_pad, q.dtype)
    shape = {"HEAD_DIM": head_dim, "HEAD_DIM_PAD": head_dim_pad}
    options = {"CAUSAL": bool(causal), "BOTTOM_RIGHT": causal_alignment == "bottom-right",
               "DOT_PRECISION": "ieee" if q.dtype == torch.float32 else "tf32", **tiles}
    delta = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    _attn_bwd_delta[(triton.cdiv(n_q, tiles["BLOCK_M"]), batch * heads)](
        out, do, delta, *out.stride()[:3], *do.stride()[:3], heads, n_q, BLOCK_M=tiles["BLOCK_M"], **shape)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3])
    group = heads // k.shape[1]  # query heads per K/V head
    _attn_bwd_dkdv[(triton.cdiv(n_k, tiles["BLOCK_N"]), batch * k.shape[1])](
        q, k, v, do, dk, dv, lse, delta, sm_scale, sm_scale * LOG2_E, *strides, *dk.stride()[:3],
        *dv.stride()[:3], heads, group, n_q, n_k, **shape, **options)
    _attn_bwd_dq[(triton.cdiv(n_q, tiles["BLOCK_M"]), batch * heads)](
        q, k, v, do, dq, lse, delta, sm_scale, sm_scale * LOG2_E, *strides, *dq.stride()[:3],
        heads, group, n_q, n_k, **shape, **options)
    return dq, dk, dv
# --8<-- [end:wrapper]


# --8<-- [start:autograd]
class FlashAttention(torch.autograd.Function):
    """Chapter 5's forward and this file's backward as one differentiable operation: the forward saves q, k, v,
    the output and its logsumexp (no N x N matrix), and the backward rebuilds P from them. Chapter 5's
    attention() calls it whenever q, k or v require grad."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, causal_alignment: str, sm_scale: float | None):
        out, lse = forward.attention(q, k, v, causal=causal, causal_alignment=causal_alignment,
                                     sm_scale=sm_scale, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = {"causal": causal, "causal_alignment": causal_alignment, "sm_scale": sm_scale}
        return out

    @staticmethod
    def backward(ctx, do):
        refuse_second_derivative("FlashAttention")  # its gradients carry no graph: fail, never drop a term
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(do.contiguous() if do.stride(-1) != 1 else do, q, k, v, out, lse,
                                        **ctx.settings)
        return dq, dk, dv, None, None, None
# --8<-- [end:autograd]
