# Chapter 11: every step of the worklog computes the same gradients. On a machine without a GPU,
# `import kernels` runs the Triton kernels in Triton's interpreter. Run: python snippets/ch11/every_step.py
import torch

import kernels  # noqa: F401  (picks the interpreter when there is no GPU)
from kernels import flash_attention_backward_fast as fast
from kernels.flash_attention import attention

device = "cuda" if torch.cuda.is_available() else "cpu"
generator = torch.Generator().manual_seed(0)
q, k, v, do = (torch.randn(1, 2, 256, 64, generator=generator).to(device, torch.float16) for _ in range(4))
out, lse = attention(q, k, v, causal=True, return_lse=True)  # what a forward pass saves

exact = [t.double().requires_grad_() for t in (q, k, v)]
s = exact[0] @ exact[1].transpose(-1, -2) / 64**0.5
s = s.masked_fill(torch.ones(256, 256, dtype=torch.bool, device=device).triu(1), float("-inf"))
(torch.softmax(s, dim=-1) @ exact[2]).backward(do.double())

steps = {"steps 1 and 2": {"SPLIT_DIAGONAL": True},  # the worklog's steps, in its order
         "keys as rows": {"TRANSPOSED": True, "SPLIT_DIAGONAL": True},
         "no split (ablation)": {"TRANSPOSED": True},
         "atomic dQ (tried)": {"TRANSPOSED": True, "SPLIT_DIAGONAL": True, "ATOMIC_DQ": True},
         "TMA": {"TRANSPOSED": True, "SPLIT_DIAGONAL": True, "USE_TMA": True},
         "atomic dQ, TMA (tried)": {"TRANSPOSED": True, "SPLIT_DIAGONAL": True, "ATOMIC_DQ": True, "USE_TMA": True}}
off = {name: False for name in fast.BEST_FEATURES}
tiles = {"dkdv_config": fast.config(64, 128, 4, 2), "dq_config": fast.config(128, 64, 4, 2)}  # one shape each
for label, switches in steps.items():
    grads = fast.attention_backward(do, q, k, v, out, lse, causal=True, **tiles, **{**off, **switches})
    worst = max(((g.double() - e.grad).norm() / e.grad.norm()).item() for g, e in zip(grads, exact, strict=True))
    print(f"{label:<22} largest relative error of dq, dk, dv: {'below 1e-3' if worst < 1e-3 else f'{worst:.1e}'}")
