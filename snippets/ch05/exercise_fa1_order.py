# Exercise solution: FlashAttention-1's loop order (outer loop over K/V blocks, inner over Q blocks)
# in the simulator's terms, and its HBM traffic next to FlashAttention-2's order.
import math

import numpy as np
from simulator import HBM, flash_attention, reference


def flash_attention_v1(Q, K, V, block_m, block_n):
    n, d = Q.shape
    hbm = HBM(Q=Q, K=K, V=V)
    hbm.allocate("O", (n, d), np.float64)  # un-normalized output, kept in HBM between K/V blocks
    hbm.allocate("m", (n,), np.float64)
    hbm.allocate("l", (n,), np.float64)
    hbm.write("m", slice(None), np.full(n, -np.inf))
    hbm.write("l", slice(None), np.zeros(n))
    for j in range(math.ceil(n / block_n)):  # outer: K/V blocks, loaded once each
        cols = slice(j * block_n, (j + 1) * block_n)
        k, v = hbm.read("K", cols), hbm.read("V", cols)
        for i in range(math.ceil(n / block_m)):  # inner: every Q block, with its O, m, l from HBM
            rows = slice(i * block_m, (i + 1) * block_m)
            q, acc, m, l = hbm.read("Q", rows), hbm.read("O", rows), hbm.read("m", rows), hbm.read("l", rows)
            s = q @ k.T / math.sqrt(d)
            m_new = np.maximum(m, s.max(axis=1))
            p = np.exp(s - m_new[:, None])
            alpha = np.exp(m - m_new)
            hbm.write("O", rows, alpha[:, None] * acc + p @ v)
            hbm.write("l", rows, alpha * l + p.sum(axis=1))
            hbm.write("m", rows, m_new)
    o = hbm.read("O") / hbm.read("l")[:, None]
    hbm.write("O", slice(None), o)
    return o, hbm.read_bytes + hbm.write_bytes


rng = np.random.default_rng(1)
n, d, block = 512, 64, 64
Q, K, V = (rng.standard_normal((n, d)) for _ in range(3))  # float64: 8 bytes per element
o1, bytes_v1 = flash_attention_v1(Q, K, V, block, block)
o2, stats = flash_attention(Q, K, V, block, block)
print(f"N = {n}, d = {d}, blocks of {block}, float64")
print(f"FA1 order matches reference: {np.allclose(o1, reference(Q, K, V))}, HBM bytes {bytes_v1:>10,}")
print(f"FA2 order matches reference: {np.allclose(o2, reference(Q, K, V))}, HBM bytes {stats['hbm_bytes']:>10,}")
print(f"FA1 order moves {bytes_v1 / stats['hbm_bytes']:.2f}x the bytes: it re-reads Q and re-reads and re-writes "
      "O, m and l for every K/V block")
