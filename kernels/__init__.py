"""The book's Triton kernels.

Without a CUDA GPU, importing this package switches Triton to its interpreter (TRITON_INTERPRET=1),
so every kernel runs on the CPU, slowly, on CPU tensors. Import it before anything else imports triton.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def interpreting() -> bool:
    """True when Triton kernels run under the CPU interpreter instead of on a GPU."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _interpreter_tma_reduce_add() -> None:
    """Teach Triton's CPU interpreter a tensor descriptor's atomic_add (a TMA reduce on Hopper), which it lacks.

    Chapter 11's fast backward can add dQ through a descriptor. The interpreter runs one program at a time, so
    an element-wise atomic add over the tile's addresses gives the same sums the GPU's bulk reduce does.
    """
    from triton._C.libtriton import ir
    from triton.runtime.interpreter import InterpreterBuilder

    if hasattr(InterpreterBuilder, "create_descriptor_reduce"):
        return

    def create_descriptor_reduce(self, kind, desc, value, indices):
        if kind != ir.DESCRIPTOR_REDUCE_KIND.ADD:
            raise NotImplementedError(f"the book's interpreter patch reduces with add only, not {kind}")
        ptrs, mask = desc.materialize_pointers(indices)
        return self.create_atomic_rmw(ir.ATOMIC_OP.FADD, ptrs, value, mask, ir.MEM_SEMANTIC.RELAXED, None)

    InterpreterBuilder.create_descriptor_reduce = create_descriptor_reduce


if interpreting():
    _interpreter_tma_reduce_add()
