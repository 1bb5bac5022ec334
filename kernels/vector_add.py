"""Chapter 2: vector add, the smallest useful Triton kernel.

One program adds one block of BLOCK_SIZE elements. The last block may run past the end of the
vectors, so every load and store carries a mask.
"""

import torch
import triton
import triton.language as tl

from kernels.validate import check_contiguous, check_device, check_dtype, check_same_device, check_same_dtype


# --8<-- [start:kernel]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # Which block is mine? Programs are numbered 0, 1, 2, ... along axis 0 of the grid.
    pid = tl.program_id(axis=0)
    # The element indices this program owns: a vector of BLOCK_SIZE consecutive offsets.
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # The last program may own indices past the end; the mask turns those loads and stores off.
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    # Add in fp32 and round once, on the store: exact for fp32 inputs, correctly rounded for fp16 and bf16.
    # (Triton's CPU interpreter emulates bf16 with numpy and needs this upcast to get bf16 right.)
    total = x.to(tl.float32) + y.to(tl.float32)
    tl.store(out_ptr + offsets, total.to(out_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:kernel]


# --8<-- [start:wrapper]
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def add(x: torch.Tensor, y: torch.Tensor, block_size: int = 1024) -> torch.Tensor:
    """x + y for two 1-D tensors of the same length, dtype and device, computed by add_kernel."""
    for name, t in (("x", x), ("y", y)):
        check_device(name, t)
        check_dtype(name, t, SUPPORTED_DTYPES)
        check_contiguous(name, t)
        if t.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    check_same_device(x=x, y=y)
    check_same_dtype(x=x, y=y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.numel()} and {y.numel()}")

    out = torch.empty_like(x)
    n = x.numel()
    # One program per block; cdiv rounds up so the tail gets a (masked) program too.
    grid = (triton.cdiv(n, block_size),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)
    return out
# --8<-- [end:wrapper]
