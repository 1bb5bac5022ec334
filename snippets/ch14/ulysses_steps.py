# Chapter 14: the all-to-all alternative (DeepSpeed-Ulysses) on four simulated GPUs in numpy, and the bytes each GPU
# sends per attention call in both schemes at a real model's shapes.
# Run: python snippets/ch14/ulysses_steps.py
import numpy as np

GPUS, HEADS, N, HEAD_DIM = 4, 8, 32, 8
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((HEADS, N, HEAD_DIM)) for _ in range(3))


def attention(qh, kh, vh):
    """Causal attention of every head at once: (heads, n, d) each."""
    s = qh @ kh.transpose(0, 2, 1) / np.sqrt(HEAD_DIM)
    s = np.where(np.tri(s.shape[1], dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return p / p.sum(axis=2, keepdims=True) @ vh


# Before: GPU g holds tokens g*N/GPUS .. (g+1)*N/GPUS - 1 of every head.
n = N // GPUS
held = [(q[:, g * n:(g + 1) * n], k[:, g * n:(g + 1) * n], v[:, g * n:(g + 1) * n]) for g in range(GPUS)]
# All-to-all: GPU g sends GPU t its tokens of t's heads, and gets back every token of its own heads.
h = HEADS // GPUS
mine = [tuple(np.concatenate([held[src][i][t * h:(t + 1) * h] for src in range(GPUS)], axis=1) for i in range(3))
        for t in range(GPUS)]
outs = [attention(*mine[t]) for t in range(GPUS)]  # whole sequences, HEADS / GPUS heads each: no ring at all
# All-to-all back: GPU g gets its tokens of every head.
back = [np.concatenate([outs[t][:, g * n:(g + 1) * n] for t in range(GPUS)], axis=0) for g in range(GPUS)]
error = np.abs(np.concatenate(back, axis=1) - attention(q, k, v)).max()
print(f"{GPUS} GPUs, {HEADS} heads: GPU t computes heads {h}t .. {h}t+{h - 1} over all {N} tokens; "
      f"max difference from one GPU {error:.1e}")


def ring_bytes(tokens, kv_heads, head_dim, gpus, element=2):
    """Each GPU passes on K and V of tokens/gpus rows, gpus - 1 times (forward)."""
    return (gpus - 1) * 2 * tokens // gpus * kv_heads * head_dim * element


def ulysses_bytes(tokens, heads, kv_heads, head_dim, gpus, element=2):
    """Each GPU keeps 1/gpus of what it holds and sends the rest: Q, K, V in, the output back."""
    held = tokens // gpus * (2 * heads + 2 * kv_heads) * head_dim * element
    return held * (gpus - 1) // gpus


tokens = 131072
print(f"bytes each GPU sends in one forward at {tokens:,} tokens, head dim 128, bf16:")
for heads, kv_heads in ((32, 8), (32, 32)):
    for gpus in (2, 4, 8):
        ring, ulysses = ring_bytes(tokens, kv_heads, 128, gpus), ulysses_bytes(tokens, heads, kv_heads, 128, gpus)
        print(f"  {heads}/{kv_heads} heads on {gpus} GPUs: ring {ring / 2**20:,.0f} MiB, "
              f"all-to-all {ulysses / 2**20:,.0f} MiB")
