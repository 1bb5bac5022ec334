"""Chapter 4: a fused softmax over the last dimension, for rows of any length.

Rows of up to MAX_SINGLE_BLOCK values fit in one block: a program loads its rows once, takes each row's max,
exponentiates, sums, divides and stores. Each value crosses HBM twice (one read, one write), like a copy.
Short rows are packed several to a program, so that every program moves at least MIN_VALUES values.

Longer rows do not fit in registers. They use the online softmax: pass 1 reads the row block by block and
keeps a running max m and a running sum l; pass 2 reads it again, normalizes and stores. That kernel is
persistent: a few programs per SM, each looping over rows. Few rows in flight per SM was meant to let pass 2
find part of its row still in L2; measured on an H100 (chapter 4), the path runs at the limit of its traffic
without any cache help (two reads and a write, against a copy's read and write: 2/3 of the copy's speed).

Everything is computed in fp32; the result is rounded to the input's dtype once, on the store.
A row whose entries are all -inf has no softmax (0 / 0): both kernels return NaN for it, as torch.softmax does.
"""

import torch
import triton
import triton.language as tl

from kernels.validate import check_contiguous, check_device, check_dtype


# --8<-- [start:single_block_kernel]
@triton.jit
def softmax_single_block_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # This program's tile: BLOCK_ROWS whole rows, each padded to BLOCK_SIZE >= n_cols columns.
    rows = tl.program_id(axis=0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_SIZE)
    # int64, so rows * n_cols cannot overflow on tensors of more than 2^31 elements.
    offsets = tl.cast(rows, tl.int64)[:, None] * n_cols + cols[None, :]
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # Padding lanes read -inf: they never win the max, and exp(-inf - m) = 0 adds nothing to the sum.
    x = tl.load(x_ptr + offsets, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=1)  # the safe softmax's max, one per row: every exponent below is <= 0
    p = tl.exp(x - m[:, None])
    l = tl.sum(p, axis=1)  # l >= 1 (the max contributes exp(0)), unless the row is all -inf: NaN
    tl.store(out_ptr + offsets, (p * (1.0 / l)[:, None]).to(out_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:single_block_kernel]


# --8<-- [start:online_kernel]
@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    n_programs = tl.num_programs(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    n_blocks = tl.cdiv(n_cols, BLOCK_SIZE)
    for row in tl.range(pid, n_rows, n_programs):
        start = tl.cast(row, tl.int64) * n_cols
        # Pass 1: one read of the row, block by block, for the max m and the sum l together.
        m = tl.full([], -float("inf"), tl.float32)
        l = tl.zeros([], tl.float32)
        for b in range(0, n_blocks):
            offs = b * BLOCK_SIZE + cols
            x = tl.load(x_ptr + start + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            # While every value seen is -inf, m_new is -inf and x - m_new would be -inf - (-inf) = NaN.
            # Subtracting 0 instead gives exp(-inf) = 0: such a block adds nothing, as it should.
            m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
            # The rescale: the old sum was taken relative to m; exp(m - m_ref) moves it to the new max.
            l = l * tl.exp(m - m_ref) + tl.sum(tl.exp(x - m_ref), axis=0)
            m = m_new
        # Pass 2: read the row again, normalize, store. l is exact now: it saw every block.
        m_ref = tl.where(m == -float("inf"), 0.0, m)
        inv_l = 1.0 / l  # all -inf row: l = 0, inv_l = inf, and 0 * inf = NaN, like torch.softmax
        for i in range(0, n_blocks):
            # Last block first: the end of the row was read most recently, so it is the likeliest to be
            # still in L2. (Chapter 4's measurements show no L2 help for this pass as a whole.)
            offs = (n_blocks - 1 - i) * BLOCK_SIZE + cols
            mask = offs < n_cols
            x = tl.load(x_ptr + start + offs, mask=mask, other=-float("inf")).to(tl.float32)
            p = tl.exp(x - m_ref) * inv_l
            tl.store(out_ptr + start + offs, p.to(out_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:online_kernel]


# --8<-- [start:config]
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_SINGLE_BLOCK = 32768  # longest row (in values) that one program holds in registers at once
MIN_VALUES = 1024  # short rows are packed into a program until it holds at least this many values
ONLINE_BLOCK = 4096  # block size of the two-pass online kernel
ONLINE_PROGRAMS_PER_SM = 4  # a few rows in flight per SM (meant to let pass 2 hit in L2; measured: no help)


def num_warps_for(values: int) -> int:
    """Warps per program: about 16 values per thread (four 16-byte loads in fp32), from 4 to 32 warps."""
    return max(4, min(32, values // (32 * 16)))


def launch_config(n_cols: int, max_block: int = MAX_SINGLE_BLOCK) -> dict:
    """Which kernel a row of n_cols values gets, with its block size, rows per program and warps."""
    if n_cols <= max_block:
        block = max(16, triton.next_power_of_2(n_cols))
        rows = max(1, MIN_VALUES // block)
        return {"path": "single block", "block_size": block, "rows_per_program": rows,
                "num_warps": num_warps_for(rows * block)}
    block = min(ONLINE_BLOCK, max_block)
    return {"path": "online", "block_size": block, "rows_per_program": None, "num_warps": num_warps_for(block)}


def _online_programs(device: torch.device, n_rows: int) -> int:
    """Size of the online kernel's persistent grid: a few programs on every SM, never more than rows."""
    if device.type != "cuda":
        return min(n_rows, 4)  # the CPU interpreter runs programs one after the other anyway
    return min(n_rows, torch.cuda.get_device_properties(device).multi_processor_count * ONLINE_PROGRAMS_PER_SM)
# --8<-- [end:config]


# --8<-- [start:wrapper]
def softmax(x: torch.Tensor, max_block: int = MAX_SINGLE_BLOCK) -> torch.Tensor:
    """Softmax over the last dimension of x (fp32, fp16 or bf16; computed in fp32).

    Rows of at most max_block values take the single-block kernel, longer rows the online kernel
    (tests lower max_block to reach the online kernel with small inputs). A row of all -inf gives NaN.
    """
    check_device("x", x)
    check_dtype("x", x, SUPPORTED_DTYPES)
    check_contiguous("x", x)
    if x.ndim == 0:
        raise ValueError("x must have at least 1 dimension, got a 0-D tensor (a scalar)")
    if max_block < 16 or max_block & (max_block - 1):
        raise ValueError(f"max_block must be a power of two >= 16, got {max_block}")
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    config = launch_config(n_cols, max_block)
    if config["path"] == "single block":  # one program per BLOCK_ROWS rows
        grid = (triton.cdiv(n_rows, config["rows_per_program"]),)
        softmax_single_block_kernel[grid](x, out, n_rows, n_cols, BLOCK_ROWS=config["rows_per_program"],
                                          BLOCK_SIZE=config["block_size"], num_warps=config["num_warps"])
    else:
        grid = (_online_programs(x.device, n_rows),)
        softmax_online_kernel[grid](x, out, n_rows, n_cols, BLOCK_SIZE=config["block_size"],
                                    num_warps=config["num_warps"])
    return out
# --8<-- [end:wrapper]
