# Chapter 10: gradients through the book's kernels, against float64 autograd. On a machine without a GPU,
# `import kernels` runs the Triton kernels in Triton's interpreter. Run: python snippets/ch10/run_backward.py
import torch

import kernels  # noqa: F401  (picks the interpreter when there is no GPU)
from kernels.flash_attention import attention

device = "cuda" if torch.cuda.is_available() else "cpu"
generator = torch.Generator().manual_seed(0)
q, k, v, do = (torch.randn(1, 2, 40, 32, generator=generator).to(device) for _ in range(4))
q, k, v = (t.requires_grad_() for t in (q, k, v))

out = attention(q, k, v, causal=True)  # chapter 5's forward; inputs that need grad also save O and L
out.backward(do)  # this chapter's backward kernels

exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
s = exact[0] @ exact[1].transpose(-1, -2) / 32**0.5
s = s.masked_fill(torch.ones(40, 40, dtype=torch.bool, device=device).triu(1), float("-inf"))
(torch.softmax(s, dim=-1) @ exact[2]).backward(do.double())
for name, mine, ref in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), (t.grad for t in exact), strict=True):
    error = ((mine.double() - ref).norm() / ref.norm()).item()
    print(f"{name}: {'matches' if error < 1e-4 else 'DIFFERS FROM'} float64 autograd (relative error below 1e-4)")
