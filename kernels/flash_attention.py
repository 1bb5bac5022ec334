"""Chapter 5: the FlashAttention forward pass, readable first.

One program owns one block of BLOCK_M query rows of one (batch, head). It loads its Q block once,
streams the K and V blocks past it, and keeps the running row max m, the running row sum l and the
un-normalized output acc on chip (FlashAttention-2's loop order). At the end it divides acc by l,
writes its rows of O once, and optionally the row logsumexp (for a backward pass).

The softmax runs in base 2: exp(x) = 2^(x * log2 e), and the GPU's special function unit computes 2^x.
We fold log2(e) into the softmax scale once, so the loop only calls exp2.

Grouped-query attention (GQA): k and v may have fewer heads than q, H_kv dividing H. The GROUP = H / H_kv
query heads h with the same h // GROUP read one K/V head; K and V are never repeated in memory.

Causal attention (chapter 6) splits the K/V range of each Q block in two: the tiles every row of the
block can see, which need no mask at all, and the few tiles on the diagonal, which need an element-wise
mask. Two alignments are supported:

- "top-left" (torch SDPA's is_causal=True): query i sees keys j <= i.
- "bottom-right" (decoding with a KV cache): query i sees keys j <= i + Nk - Nq. When Nq > Nk the first
  Nq - Nk queries see no key at all: their output is 0 and their logsumexp is -inf.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import kernels
from kernels.validate import (
    check_device,
    check_dtype,
    check_int32_offsets,
    check_ndim,
    check_same_device,
    check_same_dtype,
    query_heads_per_kv_head,
    softmax_scale,
)

LOG2_E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2_E)
LN_2 = 0.6931471805599453  # ln(2): turns a base-2 logsumexp into a natural-log one
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
ALIGNMENTS = ("top-left", "bottom-right")


# --8<-- [start:inner-loop]
@triton.jit
def _attn_inner(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, offs_d,
                lo, hi, qk_scale, causal_offset, N_CTX_K,
                HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                DOT_PRECISION: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold the K/V tiles starting at lo, lo + BLOCK_N, ... (below hi) into m_i, l_i and acc.

    MASKED=False: every key of every tile is in range and visible to every row: no mask work at all.
    MASKED=True: keys past the end and (if CAUSAL) keys in a row's future get a score of -inf.
    Scores are in base-2 units: qk_scale = sm_scale * log2(e).
    """
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        # Load the K and V tiles (BLOCK_N x HEAD_DIM_PAD). Padded head-dim columns read as 0.
        if MASKED:
            kv_mask = cols[:, None] < N_CTX_K
            if HEAD_DIM != HEAD_DIM_PAD:
                kv_mask = kv_mask & (offs_d[None, :] < HEAD_DIM)
            k = tl.load(k_ptrs + start_n * stride_kn, mask=kv_mask, other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=kv_mask, other=0.0)
        elif HEAD_DIM != HEAD_DIM_PAD:
            d_mask = offs_d[None, :] < HEAD_DIM
            k = tl.load(k_ptrs + start_n * stride_kn, mask=d_mask, other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=d_mask, other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * stride_kn)
            v = tl.load(v_ptrs + start_n * stride_vn)
        # S_ij = Q_i K_j^T on the tensor cores, accumulated in fp32.
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        # --8<-- [start:masked-scores]
        if MASKED:
            visible = cols[None, :] < N_CTX_K
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + causal_offset)
            qk = tl.where(visible, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # A row that has seen no visible key yet has m_new = -inf; subtract 0 instead, so that
            # exp2(-inf - 0) = 0 rather than exp2(-inf + inf) = NaN.
            m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_new[:, None])
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        # --8<-- [end:masked-scores]
        # Online softmax: rescale what was summed under the old max, then add this tile.
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, m_i, l_i
# --8<-- [end:inner-loop]


# --8<-- [start:kernel]
# --8<-- [start:kernel-head]
# Triton compiles a new kernel when an integer argument changes from a multiple of 16 to not (or to 1); here it
# must not, so one compiled kernel serves every length and head count. Q_BUCKET and K_BUCKET are for the
# autotuner's key only.
@triton.jit(do_not_specialize=["H", "GROUP", "N_CTX_Q", "N_CTX_K", "Q_BUCKET", "K_BUCKET"])
def _attn_fwd(Q, K, V, Out, Lse, qk_scale,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_ob, stride_oh, stride_om, stride_od,
              H, GROUP, N_CTX_Q, N_CTX_K, Q_BUCKET, K_BUCKET,
              HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, CAUSAL: tl.constexpr,
              BOTTOM_RIGHT: tl.constexpr, STORE_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Grid: (Q blocks, batch * heads). This program owns rows [start_m, start_m + BLOCK_M) of one head.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // H
    head = pid_bh % H
    kv_head = head // GROUP  # grouped-query attention: GROUP query heads share one K/V head
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)  # tl.arange needs a power of two: pad 80 to 128, mask the rest

    # Load this program's Q block once; it stays on chip for the whole loop.
    q_ptrs = (Q + batch * stride_qb + head * stride_qh
              + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    q_mask = (offs_m[:, None] < N_CTX_Q) & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(q_ptrs, mask=q_mask, other=0.0)
    # Pointers to the first K and V tiles; the loop adds start_n * stride.
    k_ptrs = K + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = V + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max, base-2 units
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(score - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)  # un-normalized output rows
    # --8<-- [end:kernel-head]

    # --8<-- [start:loop-bounds]
    # Query i sees keys j <= i + causal_offset: offset 0 is top-left, Nk - Nq is bottom-right.
    causal_offset = 0
    if BOTTOM_RIGHT:
        causal_offset = N_CTX_K - N_CTX_Q
    if CAUSAL:
        # Unmasked part: tiles every row of this block sees, i.e. whose last key is <= start_m + offset
        # (the first row's limit), rounded down to whole tiles inside the key range.
        full_hi = tl.minimum(start_m + causal_offset + 1, N_CTX_K)
        full_hi = tl.maximum(full_hi // BLOCK_N * BLOCK_N, 0)
        # Diagonal part: up to the last key the block's last real row sees.
        last_row = tl.minimum(start_m + BLOCK_M, N_CTX_Q) - 1
        diag_hi = tl.maximum(tl.minimum(last_row + causal_offset + 1, N_CTX_K), full_hi)
    else:
        # Non-causal: every whole tile is unmasked; a partial last tile is masked for the key range.
        full_hi = N_CTX_K // BLOCK_N * BLOCK_N
        diag_hi = N_CTX_K
    # --8<-- [end:loop-bounds]

    # --8<-- [start:kernel-tail]
    acc, m_i, l_i = _attn_inner(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, offs_d,
                                0, full_hi, qk_scale, causal_offset, N_CTX_K,
                                HEAD_DIM, HEAD_DIM_PAD, BLOCK_N, DOT_PRECISION, MASKED=False, CAUSAL=CAUSAL)
    acc, m_i, l_i = _attn_inner(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, offs_d,
                                full_hi, diag_hi, qk_scale, causal_offset, N_CTX_K,
                                HEAD_DIM, HEAD_DIM_PAD, BLOCK_N, DOT_PRECISION, MASKED=True, CAUSAL=CAUSAL)

    # Normalize once. A row that saw no key (l = 0) gets output 0 and logsumexp -inf.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    o_ptrs = (Out + batch * stride_ob + head * stride_oh
              + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=q_mask)
    if STORE_LSE:
        # logsumexp in natural-log units: (m + log2 l) * ln 2. Lse is contiguous (batch * heads, Nq).
        lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
        tl.store(Lse + pid_bh * N_CTX_Q + offs_m, lse, mask=offs_m < N_CTX_Q)
    # --8<-- [end:kernel-tail]
# --8<-- [end:kernel]


def _configs() -> list[triton.Config]:
    """Candidate tile shapes. The interpreter gets one small config; a GPU gets a small search space."""
    if kernels.interpreting():
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    # Half precision, head dims up to 128: 128 query rows per program, 64 or 128 keys per tile.
    configs = [triton.Config({"BLOCK_M": 128, "BLOCK_N": bn}, num_warps=w, num_stages=s)
               for bn in (64, 128) for w in (4, 8) for s in (2, 3, 4)]
    # Head dim 256: a 128 x 256 Q tile alone is 64 KB in fp16, so smaller tiles and fewer stages.
    configs += [triton.Config({"BLOCK_M": 64, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                for bn in (32, 64) for w in (4, 8) for s in (2, 3)]
    # ... and single-stage ones that still fit in shared memory at head dim 256.
    configs += [triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=1),
                triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=1)]
    return configs


# fp32 takes exact ("ieee") products, which run on the ordinary FP32 units rather than the tensor cores.
# The compiler unrolls them into BLOCK_M * BLOCK_N * head_dim / threads multiply-adds per tile, so big tiles
# take minutes to compile and gain nothing: fp32 tries three small tiles at every head dim.
FP32_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": 32}, num_warps=4, num_stages=s)
                for bm, s in ((64, 2), (32, 2), (32, 1))]


# Shared memory one program may use on compute capability 9.0 (H100, H200): 227 KiB (CUDA programming guide).
SHARED_MEMORY_BYTES = 227 * 1024


def shared_memory_bytes(config: triton.Config, head_dim_pad: int, element_bytes: int) -> int:
    """What a tile shape keeps in shared memory: the Q block, and a K and a V tile for each pipeline stage."""
    block_m, block_n = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
    return (block_m + 2 * config.num_stages * block_n) * head_dim_pad * element_bytes


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Keep the configs meant for this dtype and head dim (see _configs and FP32_CONFIGS) that fit in shared
    memory. One that does not fit would fail to compile: the autotuner skips it, but only after compiling it."""
    meta = {**named_args, **kwargs}
    if kernels.interpreting():
        return configs
    if meta.get("DOT_PRECISION") == "ieee":
        return FP32_CONFIGS
    head_dim = meta.get("HEAD_DIM_PAD", 64)
    element_bytes = meta["Q"].element_size() if "Q" in meta else 2
    kept = [c for c in configs if (c.kwargs["BLOCK_M"] < 128) == (head_dim > 128)
            and shared_memory_bytes(c, head_dim, element_bytes) <= SHARED_MEMORY_BYTES]
    return kept or configs[:1]


# --8<-- [start:tuning]
def length_bucket(n: int) -> int:
    """The power of two at or above n. Lengths in one bucket share one tuning: 1,000 and 1,024 tune once."""
    return triton.next_power_of_2(n)


# The autotuner times every candidate the first time it meets a new key, and keeps the fastest. The key holds
# the length buckets (Q_BUCKET, K_BUCKET), not the lengths, so a new length in a tuned bucket costs no tuning;
# cache_results=True saves each choice in Triton's cache directory (TRITON_CACHE_DIR, by default
# ~/.triton/cache), so a new process reuses it. The tensors' dtypes join the key by themselves.
_attn_fwd_tuned = triton.autotune(
    configs=_configs(),
    key=["Q_BUCKET", "K_BUCKET", "HEAD_DIM", "HEAD_DIM_PAD", "CAUSAL", "BOTTOM_RIGHT"],
    prune_configs_by={"early_config_prune": _prune},
    cache_results=True,
)(_attn_fwd)
# --8<-- [end:tuning]


# --8<-- [start:wrapper]
def validate_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a clear error for anything the kernel cannot take; see attention()."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        check_device(name, t)
        check_dtype(name, t, SUPPORTED_DTYPES)
        check_ndim(name, t, 4)
    check_same_device(q=q, k=k, v=v)
    check_same_dtype(q=q, k=k, v=v)
    (b, h, _, d), (bk, hk, n_k, dk) = q.shape, k.shape
    if (bk, dk) != (b, d):
        raise ValueError(f"k must have q's batch and head_dim (B, H_kv, *, D) = ({b}, H_kv, *, {d}), "
                         f"got shape {tuple(k.shape)}")
    query_heads_per_kv_head(h, hk)
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if not MIN_HEAD_DIM <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be between {MIN_HEAD_DIM} and {MAX_HEAD_DIM}, got {d}")
    if b * h > 65535:
        raise ValueError(f"batch * heads must be at most 65535 (one grid axis), got {b} * {h} = {b * h}")
    if n_k == 0:
        raise ValueError("k and v have no keys (sequence length 0): attention over nothing is undefined")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_int32_offsets(name, t)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.numel() and t.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride along head_dim (strides {tuple(t.stride())}); "
                             f"pass {name}.contiguous()")
        if any(s < 0 for s in t.stride()):
            raise ValueError(f"{name} has a negative stride {tuple(t.stride())}")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              causal_alignment: str = "top-left", sm_scale: float | None = None, return_lse: bool = False,
              out: torch.Tensor | None = None, block_m: int | None = None, block_n: int | None = None):
    """softmax(q kᵀ · sm_scale) v for q of shape (B, H, Nq, D) and k, v of shape (B, H_kv, Nk, D).

    H_kv must divide H: query head h attends with K/V head h // (H / H_kv) (grouped-query attention; H_kv = H is
    multi-head attention, H_kv = 1 multi-query attention).

    sm_scale defaults to 1/sqrt(D). causal_alignment is "top-left" (query i sees keys j <= i, like
    SDPA's is_causal=True) or "bottom-right" (query i sees keys j <= i + Nk - Nq). Returns o, or
    (o, lse) with lse the fp32 natural-log logsumexp of each row's scaled scores, shape (B, H, Nq).
    Rows that see no key (bottom-right with Nq > Nk) get o = 0 and lse = -inf. Inputs may be
    non-contiguous as long as head_dim has unit stride. `out`, if given, receives the result.
    block_m and block_n (powers of two, both or neither) pin the tile shape instead of autotuning.
    """
    validate_inputs(q, k, v)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return _differentiable(q, k, v, causal, causal_alignment, sm_scale, return_lse, out, block_m, block_n)
    if causal_alignment not in ALIGNMENTS:
        raise ValueError(f"causal_alignment must be one of {ALIGNMENTS}, got {causal_alignment!r}")
    batch, heads, n_q, head_dim = q.shape
    n_k = k.shape[2]
    sm_scale = softmax_scale(sm_scale, head_dim)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or out.stride(-1) != 1:
        raise ValueError(f"out must have q's shape {tuple(q.shape)}, dtype and device, and unit stride along "
                         f"head_dim; got {tuple(out.shape)} {out.dtype} on {out.device}")
    else:
        check_int32_offsets("out", out)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32) if return_lse else out
    if q.numel() == 0:
        return (out, lse) if return_lse else out
    if q.dtype == torch.bfloat16 and kernels.interpreting():
        # Triton's CPU interpreter computes tl.dot on bf16 operands wrongly; there (only), run the fp32
        # kernel on upcast copies and round the result to bf16. On a GPU bf16 goes straight to the kernel.
        o32 = attention(q.float(), k.float(), v.float(), causal=causal, causal_alignment=causal_alignment,
                        sm_scale=sm_scale, return_lse=return_lse, block_m=block_m, block_n=block_n)
        out.copy_(o32[0] if return_lse else o32)
        return (out, o32[1]) if return_lse else out

    def grid(meta):
        return (triton.cdiv(n_q, meta["BLOCK_M"]), batch * heads)

    kernel, tiles = _attn_fwd_tuned, {}
    if block_m is not None or block_n is not None:
        if not all(isinstance(b, int) and b >= 16 and b & (b - 1) == 0 for b in (block_m, block_n)):
            raise ValueError(f"block_m and block_n must both be powers of two >= 16, got {block_m}, {block_n}")
        kernel, tiles = _attn_fwd, {"BLOCK_M": block_m, "BLOCK_N": block_n}
    kernel[grid](
        q, k, v, out, lse, sm_scale * LOG2_E,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, heads // k.shape[1], n_q, n_k, length_bucket(n_q), length_bucket(n_k),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=max(triton.next_power_of_2(head_dim), 16), CAUSAL=bool(causal),
        BOTTOM_RIGHT=causal_alignment == "bottom-right", STORE_LSE=return_lse,
        # fp32 inputs: exact fp32 products ("ieee"), not TF32, so fp32 results match an fp32 reference.
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", **tiles,
    )
    return (out, lse) if return_lse else out

# --8<-- [end:wrapper]


def _differentiable(q, k, v, causal, causal_alignment, sm_scale, return_lse, out, block_m, block_n):
    """attention() for inputs that need gradients: chapter 10's autograd function, whose backward rebuilds P
    from the saved logsumexp. It returns o alone, into a fresh tensor, with autotuned tiles."""
    if return_lse or out is not None or block_m is not None or block_n is not None:
        raise ValueError("with inputs that require grad, attention() returns o alone, into a new tensor, with "
                         "autotuned tiles: drop return_lse, out, block_m and block_n, or call it under "
                         "torch.no_grad()")
    from kernels.flash_attention_backward import FlashAttention

    return FlashAttention.apply(q, k, v, causal, causal_alignment, sm_scale)

