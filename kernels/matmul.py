"""Chapter 3: tiled matrix multiplication, C = A @ B.

Each program computes one BLOCK_M x BLOCK_N tile of C. It walks along K in steps of BLOCK_K: it loads a
BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B, multiplies them on the tensor cores, and adds
the product into an fp32 accumulator that stays in registers. Only the finished tile goes back to memory,
rounded once to the inputs' dtype. Programs are numbered so that those running at the same time share tiles
of A and B in the L2 cache (grouped ordering), and the block sizes are chosen by measurement (autotuning).

The chapter's last step, matmul_tma, is the same loop with the tiles moved by Hopper's copy engine (TMA)
through tensor descriptors; inputs it cannot take go to matmul.
"""

from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels import interpreting
from kernels.validate import check_device, check_dtype, check_same_device, check_same_dtype


# --8<-- [start:configs]
def _config(block_m: int, block_n: int, block_k: int, stages: int, warps: int, group_m: int = 8) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group_m},
                         num_stages=stages, num_warps=warps)


GPU_CONFIGS = [
    # Large tiles for large matrices: the most FLOPs per byte loaded. 128 x 256 with 8 warps (two
    # warp groups of 4) is the classic Hopper shape; 3 or 4 stages keep loads in flight during the dots.
    _config(128, 256, 64, stages=3, warps=8),
    _config(256, 128, 64, stages=3, warps=8),
    _config(128, 256, 64, stages=4, warps=8),
    # Square 128 x 128 tiles: less reuse, but twice as many programs to spread over the SMs.
    _config(128, 128, 64, stages=4, warps=8),
    _config(128, 128, 64, stages=4, warps=4),
    # Smaller tiles for matrices too small to give every SM a large tile.
    _config(64, 256, 32, stages=4, warps=4),
    _config(64, 128, 64, stages=4, warps=4),
    _config(64, 64, 64, stages=4, warps=4),
]
# The CPU interpreter runs the programs one after another with numpy. Timing configurations there would only
# measure numpy, so it gets one small tile and no tuning.
CONFIGS = [_config(16, 16, 16, stages=1, warps=1)] if interpreting() else GPU_CONFIGS
# --8<-- [end:configs]


# --8<-- [start:grouped]
@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The (row, column) of the C tile that program `pid` computes, numbering tiles GROUP_M rows at a time."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n  # a group is GROUP_M tile-rows, all tile-columns wide
    group = pid // tiles_per_group
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)  # the last group may have fewer rows
    pid_in_group = pid % tiles_per_group
    pid_m = first_m + pid_in_group % rows_in_group  # go down the group's rows first...
    pid_n = pid_in_group // rows_in_group  # ...then move one tile-column to the right
    return pid_m, pid_n
# --8<-- [end:grouped]


# --8<-- [start:kernel]
@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INTERPRETER: tl.constexpr = False,
):
    # Which tile of C is mine?
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    # My rows of A and C, my columns of B and C, and the k offsets of one step along K.
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # The last tile-row may run past M. Wrapping those rows (and columns past N) back into the matrix keeps
    # every load in bounds without a mask; the rows of C they produce are junk and the store drops them.
    a_rows = rows % M
    b_cols = cols % N
    # Pointers to the first A tile (BLOCK_M x BLOCK_K) and the first B tile (BLOCK_K x BLOCK_N).
    # Strides, not shapes, say where element (i, j) lives, so transposed views work too.
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + b_cols[None, :] * stride_bn

    # The running sum of my C tile, in fp32 registers for the whole loop.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # k past K cannot wrap: it must add nothing, so those loads give 0.0.
        a = tl.load(a_ptrs, mask=ks[None, :] < K - k0, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < K - k0, other=0.0)
        if INTERPRETER:
            # Triton's CPU interpreter multiplies bf16 tiles wrongly; it gets fp32 copies instead. The products
            # of two fp16 or bf16 numbers are exact in fp32, so the result is the same. On a GPU this is False
            # and compiles away.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        # Tensor cores: fp16 or bf16 products, summed into the fp32 accumulator.
        acc = tl.dot(a, b, acc)
        # Slide both tiles one step along K.
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # Round once, on the way out, and write only the part of the tile that lies inside C.
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))
# --8<-- [end:kernel]


# --8<-- [start:wrapper]
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)


def matmul(a: torch.Tensor, b: torch.Tensor, config: triton.Config | None = None) -> torch.Tensor:
    """a @ b for an (M, K) and a (K, N) matrix of one dtype (float16 or bfloat16) on one device.

    Returns an (M, N) matrix of the same dtype, summed in fp32. The block sizes are autotuned for each
    (M, N, K); `config` pins one configuration instead (the benchmark uses it to measure one change at a time).
    """
    M, N, K = check_operands(a, b)

    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return c
    if K == 0:  # a sum of no products
        return c.zero_()
    for name, t in (("a", a), ("b", b), ("the output", c)):
        _check_int32_offsets(name, t)

    # One program per tile of C.
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if config is None:
        matmul_kernel[grid](*args, INTERPRETER=interpreting())
    else:  # matmul_kernel.fn is the kernel under the autotuner
        matmul_kernel.fn[grid](*args, **config.kwargs, INTERPRETER=interpreting(),
                               num_warps=config.num_warps, num_stages=config.num_stages)
    return c
# --8<-- [end:wrapper]


# --8<-- [start:checks]
def check_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    """The checks matmul() and matmul_tma() share; returns (M, N, K) of a valid (M, K) @ (K, N) product."""
    for name, t in (("a", a), ("b", b)):
        _check_matrix(name, t)
        check_device(name, t)
        check_dtype(name, t, SUPPORTED_DTYPES)
    check_same_device(a=a, b=b)
    check_same_dtype(a=a, b=b)
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b:
        raise ValueError(f"inner dimensions differ: a is {M} x {K} and b is {K_b} x {N}; "
                         f"a.shape[1] ({K}) must equal b.shape[0] ({K_b})")
    return M, N, K


def _check_matrix(name: str, t: object) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.ndim != 2:
        hint = {1: f"; for a vector use {name}[None, :] or {name}[:, None]",
                3: "; for a batch of matrices, call matmul on each one or use torch.bmm"}.get(t.ndim, "")
        raise ValueError(f"{name} must be 2-D, got {t.ndim}-D with shape {tuple(t.shape)}{hint}")
# --8<-- [end:checks]


def _check_int32_offsets(name: str, t: torch.Tensor) -> None:
    # The kernel computes element offsets such as rows * stride_am in 32-bit integers.
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    if last >= 2**31:
        raise ValueError(f"{name} spans {last + 1:,} elements, more than this kernel's 32-bit offsets reach "
                         f"(2^31 = {2**31:,}); split the product into smaller blocks")


def describe(config: triton.Config) -> str:
    """'128x256x64, 3 stages, 8 warps': a configuration as the book's tables print it."""
    kw = config.kwargs
    return (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}, {config.num_stages} stages, "
            f"{config.num_warps} warps")


# One more step on Hopper: tensor descriptors (TMA).
#
# The kernel above computes an address for every element it loads and masks the ones past the edge. Hopper GPUs
# (compute capability 9.0) have a copy engine, the Tensor Memory Accelerator (TMA), that moves a whole tile
# between global and shared memory from one instruction. It needs a tensor descriptor: the matrix's base
# address, shape and strides, and the tile shape. The engine fills loads past the edge with zeros and drops
# stores past it, so the kernel below has no offsets, no wrapping and no masks.

# --8<-- [start:tma-configs]
def _set_block_shapes(nargs: dict) -> None:
    """A descriptor carries its tile shape; before each launch, set it to the configuration's block sizes."""
    nargs["a_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["b_desc"].block_shape = [nargs["BLOCK_K"], nargs["BLOCK_N"]]
    nargs["c_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]


def _tma_config(block_m: int, block_n: int, block_k: int, stages: int, warps: int,
                group_m: int = 8) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group_m},
                         num_stages=stages, num_warps=warps, pre_hook=_set_block_shapes)


# The large-matrix shapes of GPU_CONFIGS, both orientations, 3 or 4 stages.
TMA_GPU_CONFIGS = [
    _tma_config(128, 256, 64, stages=3, warps=8),
    _tma_config(128, 256, 64, stages=4, warps=8),
    _tma_config(256, 128, 64, stages=3, warps=8),
    _tma_config(256, 128, 64, stages=4, warps=8),
]
TMA_CONFIGS = [_tma_config(16, 16, 16, stages=1, warps=1)] if interpreting() else TMA_GPU_CONFIGS
# --8<-- [end:tma-configs]


# --8<-- [start:tma-kernel]
@triton.autotune(configs=TMA_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_tma_kernel(
    a_desc, b_desc, c_desc, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INTERPRETER: tl.constexpr = False,
):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # Each load names the tile by the coordinates of its top-left element. The copy engine fetches it;
        # rows past M, columns past N and k past K arrive as 0.0, which add nothing to the sum.
        a = a_desc.load([pid_m * BLOCK_M, k0])
        b = b_desc.load([k0, pid_n * BLOCK_N])
        if INTERPRETER:  # the CPU interpreter's bf16 dot, as in matmul_kernel
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)

    # The copy engine writes only the part of the tile that lies inside C.
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))
# --8<-- [end:tma-kernel]


class TMAFallbackWarning(UserWarning):
    """matmul_tma could not use tensor descriptors for these inputs and ran matmul instead."""


# --8<-- [start:tma-rules]
def tma_fallback_reason(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Why (valid) a and b cannot go through tensor descriptors on this machine, or None if they can.

    The copy engine needs a 16-byte aligned base address, rows that are contiguous (last stride 1), and row
    strides that are multiples of 16 bytes: for fp16 and bf16, a multiple of 8 elements. The output C is a
    fresh contiguous (M, N) matrix, so N must be a multiple of 8 too.
    """
    if not interpreting() and torch.cuda.get_device_capability(a.device)[0] < 9:
        return "a GPU older than Hopper (tensor descriptors need compute capability 9.0)"
    elements_per_16_bytes = 16 // a.element_size()
    for name, t in (("a", a), ("b", b)):
        if t.stride(1) != 1:
            return f"{name} has column stride {t.stride(1)}; its rows must be contiguous (stride 1)"
        if t.stride(0) % elements_per_16_bytes:
            return (f"{name} has row stride {t.stride(0)} elements ({t.stride(0) * t.element_size()} bytes), not "
                    f"a multiple of 16 bytes ({elements_per_16_bytes} elements)")
        if t.data_ptr() % 16:
            return f"{name} starts at an address that is not a multiple of 16 bytes"
    if b.shape[1] % elements_per_16_bytes:
        return (f"the output's rows of {b.shape[1]} elements ({b.shape[1] * b.element_size()} bytes) are not a "
                f"multiple of 16 bytes ({elements_per_16_bytes} elements)")
    return None
# --8<-- [end:tma-rules]


# --8<-- [start:tma-wrapper]
def matmul_tma(a: torch.Tensor, b: torch.Tensor, config: triton.Config | None = None) -> torch.Tensor:
    """a @ b like matmul(), with tiles moved by Hopper's copy engine (TMA) through tensor descriptors.

    Same inputs, checks and result as matmul(). Inputs the copy engine cannot take (see tma_fallback_reason),
    or a GPU older than Hopper, go to matmul() instead, with a TMAFallbackWarning that says why.
    `config` pins one configuration, as in matmul().
    """
    M, N, K = check_operands(a, b)
    if M == 0 or N == 0 or K == 0:  # nothing to copy: matmul() handles empty matrices
        return matmul(a, b)
    reason = tma_fallback_reason(a, b)
    if reason is not None:
        warnings.warn(f"matmul_tma: falling back to matmul (pointer loads): {reason}", TMAFallbackWarning,
                      stacklevel=2)
        return matmul(a, b)

    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    # Shapes and strides for the copy engine. The block shapes are placeholders: the configuration's
    # pre_hook (_set_block_shapes) puts in the real ones before each launch.
    a_desc = TensorDescriptor(a, [M, K], [a.stride(0), 1], [16, 16])
    b_desc = TensorDescriptor(b, [K, N], [b.stride(0), 1], [16, 16])
    c_desc = TensorDescriptor(c, [M, N], [N, 1], [16, 16])
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    args = (a_desc, b_desc, c_desc, M, N, K)
    if config is None:
        matmul_tma_kernel[grid](*args, INTERPRETER=interpreting())
    else:  # without the autotuner, set the block shapes here
        _set_block_shapes({"a_desc": a_desc, "b_desc": b_desc, "c_desc": c_desc, **config.kwargs})
        matmul_tma_kernel.fn[grid](*args, **config.kwargs, INTERPRETER=interpreting(),
                                   num_warps=config.num_warps, num_stages=config.num_stages)
    return c
# --8<-- [end:tma-wrapper]
