# Run the causal kernel in both alignments and check the promises of this chapter.
# Without a GPU, `import kernels` switches Triton to its CPU interpreter (slow, but the same answers).
import torch
import torch.nn.functional as F

import kernels  # noqa: F401  (import first: it picks the interpreter when there is no GPU)
from kernels.flash_attention import attention

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def rand(*shape):
    return torch.randn(*shape, device=device, dtype=torch.float16)


def reference(q, k, v, offset):
    """float64 attention where query i sees keys j <= i + offset; rows that see nothing give 0."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    i = torch.arange(q.shape[2], device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    p = torch.softmax(s.masked_fill(j > i + offset, float("-inf")), dim=-1)
    return p.nan_to_num(0.0) @ v


def close(out, ref):  # relative error within fp16 rounding
    return ((out.double() - ref).norm() / ref.norm()).item() < 3e-3


for n_q, n_k in [(100, 100), (40, 100), (100, 40)]:
    q, k, v = rand(1, 2, n_q, 64), rand(1, 2, n_k, 64), rand(1, 2, n_k, 64)
    top_left = attention(q, k, v, causal=True)
    sdpa = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    bottom_right = attention(q, k, v, causal=True, causal_alignment="bottom-right")
    print(f"Nq = {n_q:>3}, Nk = {n_k:>3}: top-left matches SDPA is_causal=True: {close(top_left, sdpa)}; "
          f"bottom-right matches its float64 reference: {close(bottom_right, reference(q, k, v, n_k - n_q))}")

# The future has no influence: change every key and value after position 59; rows 0..59 stay the same, bit for bit.
q, k, v = rand(1, 2, 100, 64), rand(1, 2, 100, 64), rand(1, 2, 100, 64)
before = attention(q, k, v, causal=True)
k[:, :, 60:], v[:, :, 60:] = rand(1, 2, 40, 64), rand(1, 2, 40, 64)
after = attention(q, k, v, causal=True)
print("rows 0..59 bitwise unchanged:", torch.equal(before[:, :, :60], after[:, :, :60]),
      "| rows 60..99 changed:", not torch.equal(before[:, :, 60:], after[:, :, 60:]))

# Bottom-right with more queries than keys: the first Nq - Nk = 60 queries see no key at all.
q, k, v = rand(1, 1, 100, 64), rand(1, 1, 40, 64), rand(1, 1, 40, 64)
out, lse = attention(q, k, v, causal=True, causal_alignment="bottom-right", return_lse=True)
print("rows that see no key: output all zero:", bool((out[0, 0, :60] == 0).all()),
      "| lse -inf:", bool(torch.isneginf(lse[0, 0, :60]).all()),
      "| any NaN:", bool(out.isnan().any() or lse.isnan().any()))
