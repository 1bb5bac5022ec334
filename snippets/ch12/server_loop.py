# Chapter 12: a server's decode loop around a Decoder. Each step writes the new token's keys and values into the
# cache, grows the lengths, and calls the step planned once; on a GPU the same loop replays a DecodeGraph instead.
# Tiny shapes, on the CPU under Triton's interpreter. Run: python snippets/ch12/server_loop.py
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # the CPU, with or without a GPU: the same output everywhere
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from kernels.flash_decoding import Decoder  # noqa: E402

batch, q_heads, kv_heads, d, capacity = 2, 4, 2, 16, 32
torch.manual_seed(0)
# --8<-- [start:loop]
k_cache = torch.zeros(batch, kv_heads, capacity, d)  # allocated once for the longest sequence allowed
v_cache = torch.zeros(batch, kv_heads, capacity, d)
lens = torch.tensor([5, 9], dtype=torch.int32)  # what each sequence holds after its prompt
k_cache[0, :, :5], k_cache[1, :, :9] = torch.randn(kv_heads, 5, d), torch.randn(kv_heads, 9, d)
v_cache[0, :, :5], v_cache[1, :, :9] = torch.randn(kv_heads, 5, d), torch.randn(kv_heads, 9, d)
q = torch.randn(batch, q_heads, 1, d)  # the buffer each step's new queries are written into
step = Decoder(q, k_cache, v_cache, lens)  # checks and plans once, for these shapes
# On a GPU: step = DecodeGraph(q, k_cache, v_cache, lens), and step.replay() below instead of step(...).

for token in range(3):
    new_k, new_v = torch.randn(batch, kv_heads, d), torch.randn(batch, kv_heads, d)  # from the model's layer
    for b in range(batch):  # append at each sequence's own end
        k_cache[b, :, lens[b]], v_cache[b, :, lens[b]] = new_k[b], new_v[b]
    lens += 1  # in place: the step (and a captured graph) reads this very tensor
    q.copy_(torch.randn(batch, q_heads, 1, d))  # in place too
    out = step(q, k_cache, v_cache, lens)  # the same output buffer every step: use it before the next
# --8<-- [end:loop]
    errors = [(out[b] - F.scaled_dot_product_attention(q[b:b + 1], k_cache[b:b + 1, :, :lens[b]],
                                                       v_cache[b:b + 1, :, :lens[b]], enable_gqa=True)[0])
              .abs().max().item() for b in range(batch)]
    print(f"token {token + 1}: lengths {lens.tolist()}, equal to PyTorch within 1e-5: {max(errors) < 1e-5}")
