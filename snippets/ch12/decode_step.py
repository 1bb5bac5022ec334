# Chapter 12: one decode step, counted. How many programs each way of computing it launches, how many bytes it
# reads, and that splitting the keys and merging the partial states gives the exact answer.
# Run: python snippets/ch12/decode_step.py
import json

import numpy as np

from book import gpus, results
from kernels.flash_decoding import choose_splits

# A model with grouped-query attention: 32 query heads share 8 KV heads, head dim 128, fp16 cache.
batch, q_heads, kv_heads, d, context, fp16 = 1, 32, 8, 128, 8192, 2
# The H200's SM count as the decode benchmark's results file records it (the H200's datasheet gives none).
sm_count = json.loads(results.path_for("decode", gpus.REFERENCE_GPU).read_text())["provenance"]["sm_count"]
group = q_heads // kv_heads

kv_bytes = 2 * batch * kv_heads * context * d * fp16  # K and V, read once
flops = 4 * batch * q_heads * context * d  # Q Kᵀ and P V for one new token per sequence
print(f"K and V of the cache: {kv_bytes / 2**20:.0f} MiB; {flops / 1e6:.0f} MFLOP; "
      f"{flops / kv_bytes:.1f} FLOP per byte (the group size is {group})")
print(f"at the H200's 4.8 TB/s (datasheet), reading them takes at least {kv_bytes / 4.8e12 * 1e6:.1f} us")

naive_programs = batch * q_heads  # chapter 5's kernel: one program per (sequence, query head)
naive_bytes = 2 * batch * q_heads * context * d * fp16  # each program reads its KV head's cache alone
print(f"chapter 5's kernel: {naive_programs} programs for {sm_count} SMs; reads {naive_bytes / 2**20:.0f} MiB "
      f"({naive_bytes // kv_bytes}x the cache)")
splits = choose_splits(batch, kv_heads, context, sm_count)  # whole waves of programs, no split under a tile
split_programs = batch * kv_heads * splits
partial_bytes = batch * q_heads * splits * (d + 1) * 4  # each split writes an fp32 output row and a logsumexp
print(f"split-KV with groups: {splits} splits of {context // splits} keys x {batch * kv_heads} KV heads = "
      f"{split_programs} programs; "
      f"reads {kv_bytes / 2**20:.0f} MiB, plus {2 * partial_bytes / 2**20:.2f} MiB of partial states "
      "written and merged")

# The arithmetic, on a small example: split the keys, merge the partial states, compare with the direct answer.
rng = np.random.default_rng(0)
q = rng.standard_normal(16)
k, v = rng.standard_normal((100, 16)), rng.standard_normal((100, 16))
s = k @ q / 4.0
direct = np.exp(s - s.max()) @ v / np.exp(s - s.max()).sum()
parts = []
for lo in range(0, 100, 30):  # four splits: 30, 30, 30 and 10 keys
    block = s[lo:lo + 30]
    weights = np.exp(block - block.max())
    parts.append((weights @ v[lo:lo + 30] / weights.sum(), block.max() + np.log(weights.sum())))  # (o, lse)
top = max(lse for _, lse in parts)
shares = np.array([np.exp(lse - top) for _, lse in parts])
merged = sum(share * o for share, (o, _) in zip(shares, parts, strict=True)) / shares.sum()
print(f"4 splits merged equal the direct softmax: {np.allclose(merged, direct, rtol=1e-12, atol=0)}")
