"""Chapters 7 and 9: the book's fast FlashAttention forward for Hopper GPUs.

The same algorithm as chapter 5's readable kernel (FlashAttention-2 loop order, online softmax in base 2),
with the changes chapter 7 measured one at a time. Each change is a compile-time switch, so the benchmark
can time every step of the worklog from one source:

- SPLIT_DIAGONAL: causal attention runs the fully visible K/V tiles without any mask and only the tiles
  on the diagonal with one (chapter 6).
- USE_TMA: tiles of Q, K, V and O move through tensor descriptors, which Hopper's copy engine (TMA) serves.
- LONGEST_FIRST: causal programs with the most tiles start first, so the last wave of the grid is short.
- FUSED_SCALE: the softmax scale and the max subtraction become one fused multiply-add per score.
- LAZY_RESCALE: the accumulator is rescaled only when a row's running max grows by more than 8 in log2
  units (a factor of 2^8 in the exponentials); masked tiles always rescale.
- OVERLAP: the unmasked loop starts the next tile's scores before the current tile's softmax.
- WARP_SPECIALIZE: Triton splits the loop into producer (loads) and consumer (math) warps.
Chapter 7's worklog table says which of them paid off; BEST_FEATURES turns those on.

The worklog's Gluon steps (chapter 9) leave Triton's scheduler behind: kernels/flash_attention_hopper.py writes the same
forward pass in Gluon, with one warp copying tiles and two warpgroups computing (three at head dim 64 on
long sequences). On Hopper GPUs `attention` runs that kernel; `gluon=False` (or any feature switch or
pinned config) runs this file's.

The fast path needs fp16 or bf16, head dim 64 or 128, and contiguous (batch, heads, seq, head_dim) tensors;
anything else goes to chapter 5's kernel, and `attention` says so with a FallbackWarning. It takes any lengths,
query and key lengths that differ (with both causal alignments), and k and v with fewer heads than q
(grouped-query attention), on both kernels.
"""

from __future__ import annotations

import functools
import warnings

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import kernels
from kernels import flash_attention as readable
from kernels import flash_attention_hopper as hopper
from kernels.validate import softmax_scale

LOG2_E = 1.4426950408889634
FAST_DTYPES = (torch.float16, torch.bfloat16)
FAST_HEAD_DIMS = (64, 128)
LAZY_THRESHOLD = 8.0  # in log2 units: skip the rescale while the max grew by less than 8 (a factor of 2^8)


class FallbackWarning(UserWarning):
    """The inputs are outside the fast path; chapter 5's readable kernel computed the result instead."""


# --8<-- [start:inner]
@triton.jit
def _load_tile(src, row, row_end, stride_row, offs_rows, offs_d, USE_TMA: tl.constexpr):
    """One (rows, head_dim) tile starting at `row`: through the tensor descriptor, or with plain pointers.

    Rows at or past row_end (the end of this head's sequence) are not this head's: a pointer load reads them as
    0, a TMA load reads the next head's rows (or zeros past the tensor's end). Either way the caller masks them.
    """
    if USE_TMA:
        tile = src.load([row, 0])
    else:
        rows = row + offs_rows
        tile = tl.load(src + rows[:, None] * stride_row + offs_d[None, :], mask=rows[:, None] < row_end, other=0.0)
    return tile


@triton.jit
def _softmax_step(acc, m_i, l_i, s, qk_scale, FUSED_SCALE: tl.constexpr, LAZY_RESCALE: tl.constexpr,
                  MASKED: tl.constexpr = False):
    """Fold one tile of raw scores s into the running max m_i, sum l_i and accumulator acc (base 2).

    Returns the new acc (rescaled, not yet added to), m_i, l_i and the probabilities p of this tile.
    MASKED: s holds -inf scores, and a row may have seen no key yet (its max is -inf): subtract 0 there instead,
    so that its exponentials are 0, not NaN.
    """
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    if MASKED:  # masked tiles always rescale, LAZY_RESCALE or not: a row may have seen no key yet
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_safe)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
        m_i = m_new
        if FUSED_SCALE:
            p = tl.math.exp2(tl.math.fma(s, qk_scale, -m_safe[:, None]))
        else:
            p = tl.math.exp2(s * qk_scale - m_safe[:, None])
        l_i += tl.sum(p, 1)
        return acc, m_i, l_i, p
    if LAZY_RESCALE:
        # Keep the old max unless some row grew by more than 8 (log2 units): p stays below 2^8 = 256, which fp32
        # sums and fp16/bf16 tiles hold easily, and most tiles skip the rescale of acc and l.
        if tl.max(m_new - m_i) > 8.0:
            alpha = tl.math.exp2(m_i - m_new)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
    else:
        alpha = tl.math.exp2(m_i - m_new)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
        m_i = m_new
    if FUSED_SCALE:
        p = tl.math.exp2(tl.math.fma(s, qk_scale, -m_i[:, None]))  # one fused multiply-add per score
    else:
        p = tl.math.exp2(s * qk_scale - m_i[:, None])
    l_i += tl.sum(p, 1)
    return acc, m_i, l_i, p


@triton.jit
def _kv_loop(acc, m_i, l_i, q, k_src, v_src, kv_row0, stride_kv, offs_m, offs_n, offs_d, lo, hi, qk_scale,
             causal_offset, N_K, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
             USE_TMA: tl.constexpr, FUSED_SCALE: tl.constexpr, LAZY_RESCALE: tl.constexpr,
             WARP_SPECIALIZE: tl.constexpr):
    """Fold the K/V tiles [lo, hi) into one Q tile's running max m_i, sum l_i and accumulator acc.

    MASKED: the diagonal tiles and a partial last tile: keys past N_K, and (CAUSAL) keys after a query's
    position plus causal_offset, get a score of -inf."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = _load_tile(k_src, kv_row0 + start_n, kv_row0 + N_K, stride_kv, offs_n, offs_d, USE_TMA)
        s = tl.dot(q, tl.trans(k))
        if MASKED:
            cols = start_n + offs_n
            visible = cols[None, :] < N_K
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + causal_offset)
            s = tl.where(visible, s, -float("inf"))
        acc, m_i, l_i, p = _softmax_step(acc, m_i, l_i, s, qk_scale, FUSED_SCALE, LAZY_RESCALE, MASKED)
        v = _load_tile(v_src, kv_row0 + start_n, kv_row0 + N_K, stride_kv, offs_n, offs_d, USE_TMA)
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_i, l_i
# --8<-- [end:inner]


# --8<-- [start:overlap]
@triton.jit
def _kv_loop_overlapped(acc, m_i, l_i, q, k_src, v_src, kv_row0, stride_kv, offs_n, offs_d, lo, hi, qk_scale,
                        BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr, FUSED_SCALE: tl.constexpr):
    """The unmasked loop, software-pipelined by hand: the scores of the next tile are started on the tensor
    cores before the softmax of the current tile runs, so the two can overlap. Needs hi - lo >= BLOCK_N."""
    k = _load_tile(k_src, kv_row0 + lo, kv_row0 + hi, stride_kv, offs_n, offs_d, USE_TMA)
    s = tl.dot(q, tl.trans(k))
    for start_n in range(lo, hi, BLOCK_N):
        # The last iteration recomputes its own tile instead of reading past hi: one wasted dot per loop.
        next_n = tl.minimum(start_n + BLOCK_N, hi - BLOCK_N)
        k = _load_tile(k_src, kv_row0 + next_n, kv_row0 + hi, stride_kv, offs_n, offs_d, USE_TMA)
        s_next = tl.dot(q, tl.trans(k))
        acc, m_i, l_i, p = _softmax_step(acc, m_i, l_i, s, qk_scale, FUSED_SCALE, False)
        v = _load_tile(v_src, kv_row0 + start_n, kv_row0 + hi, stride_kv, offs_n, offs_d, USE_TMA)
        acc = tl.dot(p.to(v.dtype), v, acc)
        s = s_next
    return acc, m_i, l_i
# --8<-- [end:overlap]


# --8<-- [start:kernel]
@triton.jit
def _unmasked(acc, m_i, l_i, q, k_src, v_src, row0, stride_row, offs_m, offs_n, offs_d, lo, hi, qk_scale,
              BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr, FUSED_SCALE: tl.constexpr,
              LAZY_RESCALE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, OVERLAP: tl.constexpr):
    """The K/V tiles that every query of the tile sees in full: no mask work at all."""
    if OVERLAP:
        if hi > lo:  # the overlapped loop needs at least one tile
            acc, m_i, l_i = _kv_loop_overlapped(acc, m_i, l_i, q, k_src, v_src, row0, stride_row, offs_n, offs_d,
                                                lo, hi, qk_scale, BLOCK_N, USE_TMA, FUSED_SCALE)
    else:
        acc, m_i, l_i = _kv_loop(acc, m_i, l_i, q, k_src, v_src, row0, stride_row, offs_m, offs_n, offs_d, lo, hi,
                                 qk_scale, 0, hi, BLOCK_N, False, False, USE_TMA, FUSED_SCALE, LAZY_RESCALE,
                                 WARP_SPECIALIZE)
    return acc, m_i, l_i


# Lengths and head counts are specialized as Triton does by default (a multiple of 16 or not, 1 or not): unlike
# chapter 5's kernel, this one keeps the aligned loads and the folded GROUP = 1 that a specialization gives, at the
# cost of at most a few compiled variants per tile shape. The autotuner's choice is per bucket of lengths.
@triton.jit
def _fast_fwd_kernel(q_src, k_src, v_src, o_src, o_ptr, lse_ptr, qk_scale, N_Q, N_K, Q_BUCKET, K_BUCKET, H, GROUP,
                     stride_row,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr, SPLIT_DIAGONAL: tl.constexpr,
                     USE_TMA: tl.constexpr, LONGEST_FIRST: tl.constexpr, FUSED_SCALE: tl.constexpr,
                     LAZY_RESCALE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, OVERLAP: tl.constexpr,
                     STORE_LSE: tl.constexpr):
    # One program per (Q tile, batch*head). The tensors are seen as 2-D (batch*heads*seq, head_dim); k and v have
    # H // GROUP heads, and query head h reads K/V head h // GROUP (grouped-query attention).
    pid_m = tl.program_id(0)
    if CAUSAL and LONGEST_FIRST:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the last Q tiles see the most keys: start them first
    pid_bh = tl.program_id(1)
    q_row0 = pid_bh * N_Q  # first row of this head in the 2-D view of q
    kv_row0 = ((pid_bh // H) * (H // GROUP) + (pid_bh % H) // GROUP) * N_K  # ... and of its K/V head
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    q = _load_tile(q_src, q_row0 + start_m, q_row0 + N_Q, stride_row, tl.arange(0, BLOCK_M), offs_d, USE_TMA)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    # Chapter 5's loop bounds: whole tiles every row sees run unmasked, the rest (the diagonal, a partial last
    # tile) masked. Query i sees keys j <= i + causal_offset: 0 is top-left, N_K - N_Q bottom-right.
    causal_offset = 0
    if BOTTOM_RIGHT:
        causal_offset = N_K - N_Q
    if CAUSAL:
        full_hi = tl.maximum(tl.minimum(start_m + causal_offset + 1, N_K) // BLOCK_N * BLOCK_N, 0)
        last_row = tl.minimum(start_m + BLOCK_M, N_Q) - 1
        masked_hi = tl.maximum(tl.minimum(last_row + causal_offset + 1, N_K), full_hi)
    else:
        full_hi = N_K // BLOCK_N * BLOCK_N
        masked_hi = N_K
    if CAUSAL and not SPLIT_DIAGONAL:
        full_hi = 0  # every tile up to the diagonal pays for the mask
    acc, m_i, l_i = _unmasked(acc, m_i, l_i, q, k_src, v_src, kv_row0, stride_row, offs_m, offs_n, offs_d,
                              0, full_hi, qk_scale, BLOCK_N, USE_TMA, FUSED_SCALE, LAZY_RESCALE, WARP_SPECIALIZE,
                              OVERLAP)
    acc, m_i, l_i = _kv_loop(acc, m_i, l_i, q, k_src, v_src, kv_row0, stride_row, offs_m, offs_n, offs_d,
                             full_hi, masked_hi, qk_scale, causal_offset, N_K, BLOCK_N, True, CAUSAL, USE_TMA,
                             FUSED_SCALE, LAZY_RESCALE, WARP_SPECIALIZE)

    # A row that saw no key (bottom-right with N_Q > N_K) gets output 0 and logsumexp -inf.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = (acc / l_safe[:, None]).to(q.dtype)
    if USE_TMA and start_m + BLOCK_M <= N_Q:
        o_src.store([q_row0 + start_m, 0], out)
    else:  # plain stores, and never past this head's last row (a TMA store would write the next head's rows)
        tl.store(o_ptr + (q_row0 + offs_m)[:, None] * stride_row + offs_d[None, :], out,
                 mask=offs_m[:, None] < N_Q)
    if STORE_LSE:  # natural-log logsumexp per row, for a backward pass: (m + log2 l) / log2(e)
        lse = tl.where(empty, -float("inf"), (m_i + tl.math.log2(l_safe)) / 1.4426950408889634)
        tl.store(lse_ptr + q_row0 + offs_m, lse, mask=offs_m < N_Q)
# --8<-- [end:kernel]


# The switches of the final Triton kernel: the worklog's steps as chapter 7 adds them. SPLIT_DIAGONAL and USE_TMA
# paid off; LONGEST_FIRST and FUSED_SCALE did not (each lost a little, chapter 7 says where) and are still on.
BEST_FEATURES = {"SPLIT_DIAGONAL": True, "USE_TMA": True, "LONGEST_FIRST": True, "FUSED_SCALE": True,
                 "LAZY_RESCALE": False, "WARP_SPECIALIZE": False, "OVERLAP": False}


# --8<-- [start:configs]
def _set_block_shapes(nargs):
    """Tensor descriptors carry their block shape; set it to the configuration being tried."""
    if isinstance(nargs["q_src"], TensorDescriptor):
        nargs["q_src"].block_shape = [nargs["BLOCK_M"], nargs["HEAD_DIM"]]
        nargs["o_src"].block_shape = [nargs["BLOCK_M"], nargs["HEAD_DIM"]]
        nargs["k_src"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]
        nargs["v_src"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]


def config(block_m: int, block_n: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages,
                         pre_hook=_set_block_shapes)


# The shapes that won somewhere in the H100 probes: 128 or 64 query rows, 64 or 128 keys, mostly 4 warps
# (one warp group), two or three tiles in flight. At head dim 128, 128 x 128 score tiles next to the
# 128 x 128 accumulator need more registers than 4 warps have, so _prune drops that pair.
CONFIGS = [config(128, 64, 4, 2), config(128, 64, 4, 3), config(128, 128, 4, 3), config(64, 64, 4, 3),
           config(128, 128, 8, 3)]


def _prune(configs, named_args, **kwargs):
    meta = {**named_args, **kwargs}
    if meta["HEAD_DIM"] == 128:  # 128 x 128 score tiles next to a 128 x 128 accumulator spill with 4 warps
        configs = [c for c in configs if not (c.kwargs["BLOCK_N"] == 128 and c.num_warps == 4)]
    if meta["CAUSAL"]:  # the causal split steps by BLOCK_N up to a multiple of BLOCK_M
        configs = [c for c in configs if c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0]
    return configs


# Tuned once per power-of-two bucket of lengths and kept on disk, as chapter 5's kernel is.
_fast_fwd = triton.autotune(
    configs=CONFIGS, key=["Q_BUCKET", "K_BUCKET", "HEAD_DIM", "CAUSAL", "BOTTOM_RIGHT", *BEST_FEATURES],
    prune_configs_by={"early_config_prune": _prune}, cache_results=True,
)(_fast_fwd_kernel)
# --8<-- [end:configs]


# --8<-- [start:rules]
def shape_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why these (valid) inputs' dtype, shapes or layout keep them off the fast path, or None."""
    if q.dtype not in FAST_DTYPES:
        return f"dtype {str(q.dtype).removeprefix('torch.')} (the fast path takes float16 and bfloat16)"
    if q.shape[-1] not in FAST_HEAD_DIMS:
        return f"head dim {q.shape[-1]} (the fast path takes {' and '.join(map(str, FAST_HEAD_DIMS))})"
    if not all(t.is_contiguous() for t in (q, k, v)):
        return "non-contiguous inputs"
    return None


@functools.cache  # asked on every call; the answer never changes
def capability(device: torch.device) -> tuple[int, int]:
    """The GPU's compute capability, (9, 0) on an H100."""
    return torch.cuda.get_device_capability(device)


def fallback_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why these (valid) inputs cannot take the fast path on this machine, or None if they can."""
    if kernels.interpreting():
        return "the CPU interpreter (the fast path is compiled for Hopper GPUs)"
    if capability(q.device)[0] < 9:
        return "a GPU older than Hopper (tensor descriptors need compute capability 9.0)"
    return shape_reason(q, k, v)
# --8<-- [end:rules]


# --8<-- [start:wrapper]
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              causal_alignment: str = "top-left", sm_scale: float | None = None, return_lse: bool = False,
              gluon: bool | None = None, config: triton.Config | None = None, **features: bool):
    """softmax(q kᵀ · sm_scale) v, like chapter 5's attention(), on the fast path when it can.

    Inputs the fast path does not cover go to chapter 5's kernel, with a FallbackWarning that says why.
    On a Hopper GPU (compute capability 9.0) the fast path is the Gluon kernel; `gluon=False` asks for
    this file's Triton kernel, where `features` overrides BEST_FEATURES and `config` pins one tile shape
    (the worklog benchmark times each step this way).
    """
    readable.validate_inputs(q, k, v)  # the same checks, and the same messages, as chapter 5
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("the fast path has no backward pass: for gradients call kernels.flash_attention.attention "
                         "(chapter 10), or run this one under torch.no_grad()")
    unknown = set(features) - set(BEST_FEATURES)
    if unknown:
        raise TypeError(f"unknown feature switches {sorted(unknown)}; known: {sorted(BEST_FEATURES)}")
    if gluon and (features or config is not None):
        raise TypeError("feature switches and config pick the Triton kernel; they cannot go with gluon=True")
    sm_scale = softmax_scale(sm_scale, q.shape[-1])  # a bad scale is an error on every path
    reason = fallback_reason(q, k, v)
    if reason is not None:
        warnings.warn(f"fast attention: falling back to chapter 5's kernel: {reason}", FallbackWarning,
                      stacklevel=2)
        return readable.attention(q, k, v, causal=causal, causal_alignment=causal_alignment, sm_scale=sm_scale,
                                  return_lse=return_lse)
    if causal_alignment not in readable.ALIGNMENTS:
        raise ValueError(f"causal_alignment must be one of {readable.ALIGNMENTS}, got {causal_alignment!r}")
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    # The Gluon kernel is built from Hopper's own instructions (wgmma): compute capability 9.0 only.
    major, minor = capability(q.device)
    if gluon is None:
        gluon = not features and config is None and major == 9
    elif gluon and major != 9:
        raise ValueError(f"gluon=True needs a Hopper GPU (compute capability 9.0); {q.device} has {major}.{minor}")
    if q.numel() == 0:  # no query: nothing to compute on either kernel
        out = torch.empty_like(q)
        return (out, torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)) if return_lse else out
    if gluon:
        return hopper.attention(q, k, v, causal=causal, causal_alignment=causal_alignment, sm_scale=sm_scale,
                                return_lse=return_lse)
    switches = {**BEST_FEATURES, **features}
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32) if return_lse else out

    q2, o2 = (t.view(batch * heads * n_q, head_dim) for t in (q, out))
    k2, v2 = (t.view(batch * kv_heads * n_k, head_dim) for t in (k, v))
    if switches["USE_TMA"]:
        # Placeholder block shapes; _set_block_shapes puts in the real ones before each launch.
        sources = [TensorDescriptor(t, list(t.shape), [head_dim, 1], [64, head_dim]) for t in (q2, k2, v2, o2)]
    else:
        sources = [q2, k2, v2, o2]

    def grid(meta):
        return (triton.cdiv(n_q, meta["BLOCK_M"]), batch * heads)

    args = (*sources, o2, lse, sm_scale * LOG2_E, n_q, n_k, readable.length_bucket(n_q),
            readable.length_bucket(n_k), heads, heads // kv_heads, head_dim)
    meta = dict(HEAD_DIM=head_dim, CAUSAL=bool(causal), BOTTOM_RIGHT=causal_alignment == "bottom-right",
                STORE_LSE=return_lse, **switches)
    if config is None:
        _fast_fwd[grid](*args, **meta)
    else:  # one fixed configuration, without the autotuner
        if causal and config.kwargs["BLOCK_M"] % config.kwargs["BLOCK_N"]:
            raise ValueError(f"causal attention needs BLOCK_M to be a multiple of BLOCK_N, got {describe(config)}")
        nargs = dict(zip(_fast_fwd_kernel.arg_names, args, strict=False)) | meta | config.kwargs
        _set_block_shapes(nargs)
        _fast_fwd_kernel[grid(config.kwargs)](*args, **meta, **config.kwargs, num_warps=config.num_warps,
                                              num_stages=config.num_stages)
    return (out, lse) if return_lse else out
# --8<-- [end:wrapper]


def describe(cfg: triton.Config) -> str:
    """'128x64, 4 warps, 2 stages': a configuration as the worklog table prints it."""
    return f"{cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']}, {cfg.num_warps} warps, {cfg.num_stages} stages"
