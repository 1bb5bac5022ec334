# Run chapter 5's Triton kernel and check it against a float64 reference.
# Without a GPU, `import kernels` switches Triton to its CPU interpreter (slow, but the same answers).
import math

import torch

import kernels  # noqa: F401  (import before triton: picks the interpreter when there is no GPU)
from kernels.flash_attention import attention

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def reference(q, k, v, causal):
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:  # top-left: query i sees keys j <= i
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double(), torch.logsumexp(s, dim=-1)


cases = [  # (batch, heads, Nq, Nk, head dim, dtype, causal)
    (2, 4, 100, 100, 64, torch.float16, False),
    (1, 2, 77, 130, 80, torch.bfloat16, False),  # Nq != Nk, head dim 80 padded to 128 inside the kernel
    (1, 2, 129, 129, 40, torch.float32, True),
]
bounds = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}
for b, h, n_q, n_k, d, dtype, causal in cases:
    q = torch.randn(b, h, n_q, d, device=device).to(dtype)
    k = torch.randn(b, h, n_k, d, device=device).to(dtype)
    v = torch.randn(b, h, n_k, d, device=device).to(dtype)
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = reference(q, k, v, causal)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    lse_ok = torch.allclose(lse.double(), ref_lse, atol=1e-3)
    name = str(dtype).removeprefix("torch.")
    print(f"B={b} H={h} Nq={n_q:>3} Nk={n_k:>3} D={d:>3} {name:<8} causal={causal!s:<5} "
          f"out {tuple(out.shape)}: relative error below {bounds[dtype]:g}: {err < bounds[dtype]}, "
          f"logsumexp matches: {lse_ok}")
