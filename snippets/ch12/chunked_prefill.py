# Chapter 12: a prompt processed in chunks against a growing cache gives the same output as one causal pass.
# Chapter 6's bottom-right alignment is what makes each chunk see the cache before it and its own past.
# Run: python snippets/ch12/chunked_prefill.py
import torch

import kernels  # noqa: F401  (picks the interpreter when there is no GPU)
from kernels.flash_attention import attention

device = "cuda" if torch.cuda.is_available() else "cpu"
generator = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, 96, 32, generator=generator).to(device) for _ in range(3))  # a 96-token prompt

whole = attention(q, k, v, causal=True)  # the prompt in one pass: query i sees keys 0..i
chunks = []
for start in range(0, 96, 32):  # three chunks of 32 queries; the cache holds every key up to the chunk's end
    stop = start + 32
    chunks.append(attention(q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], causal=True,
                            causal_alignment="bottom-right"))
    print(f"chunk {start:>2}-{stop - 1}: {stop - start} queries against a cache of {stop} keys")
print("chunks equal the single pass:", torch.allclose(torch.cat(chunks, dim=2), whole, atol=1e-5))
top_left = attention(q[:, :, 32:64], k[:, :, :64], v[:, :, :64], causal=True, causal_alignment="top-left")
print("with top-left alignment instead:", torch.allclose(top_left, whole[:, :, 32:64], atol=1e-5))
