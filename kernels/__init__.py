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
