"""A Triton kernel launched again and again on one grid with the same compile-time arguments, at less CPU cost.

Calling `kernel[grid](*args, **meta)` makes Triton's JIT work out, on every call, which compiled kernel the
arguments select: it inspects each argument (its type, a pointer's 16-byte alignment, an integer's divisibility
by 16), builds a key and looks it up. That costs the CPU several microseconds per launch (chapter 12 measures it).
A decode step launches the same kernel with the same shapes every step, so the answer never changes. `Launch`
asks the JIT once, keeps the compiled kernel it returns, and from then on hands the arguments straight to that
kernel's launcher through Triton's handle for a compiled kernel (`compiled[grid](*args)`).

The handle is only valid for arguments the JIT would have sent to the same compiled kernel. The caller promises
that every integer and float argument stays the same from call to call (a Decoder checks the shapes and strides
they come from); `Launch` checks the rest itself on every call: the same current device, and each tensor's
alignment unchanged. Anything else, and under Triton's interpreter always, goes through the JIT as usual.
"""

from __future__ import annotations

import torch

ALIGNMENT = 16  # bytes: Triton compiles a kernel for pointers known to be 16-byte aligned, or for any pointer


class Launch:
    """kernel[grid](*args, **meta), for a fixed grid and fixed meta, through the compiled kernel's handle after the
    first call (see the module's docstring for when that is valid)."""

    def __init__(self, kernel, grid: tuple[int, ...], **meta):
        self.kernel, self.meta = kernel, meta
        self.grid = (*grid, *(1,) * (3 - len(grid)))  # the handle takes three sizes; the JIT fills in the missing ones
        self.handle = None  # the compiled kernel's launcher for this grid, after the first call
        self.device = None  # the current CUDA device it was compiled and loaded for
        self.aligned = None  # which tensor arguments were 16-byte aligned then
        self.constants = ()  # the compile-time arguments' values, in the kernel's order, after the others

    def __call__(self, *args) -> None:
        if self.handle is not None and self._same_specialization(args):
            self.handle(*args, *self.constants)
            return
        compiled = self.kernel[self.grid](*args, **self.meta)
        self._keep(compiled, args)

    def _alignment(self, args) -> tuple[bool, ...]:
        return tuple(a.data_ptr() % ALIGNMENT == 0 for a in args if isinstance(a, torch.Tensor))

    def _same_specialization(self, args) -> bool:
        return torch.cuda.current_device() == self.device and self._alignment(args) == self.aligned

    def _keep(self, compiled, args) -> None:
        """Keep the compiled kernel's handle where this Triton returns one from a launch (not under the interpreter,
        and only for arguments on a CUDA device)."""
        names = getattr(self.kernel, "arg_names", None)
        if compiled is None or not hasattr(compiled, "__getitem__") or names is None:
            return
        if not all(a.is_cuda for a in args if isinstance(a, torch.Tensor)):
            return
        self.constants = tuple(self.meta[name] for name in names[len(args):])
        self.device = torch.cuda.current_device()
        self.aligned = self._alignment(args)
        self.handle = compiled[self.grid]
