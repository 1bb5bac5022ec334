"""Chapter 10: the backward pass in chapter 5's numpy simulator, with every HBM byte counted.

``standard_backward`` is the plain recipe: the forward stored P (N x N) in HBM, and the backward reads it,
writes dP and dS (N x N each) and reads them back. ``flash_backward`` is this chapter's loop order: D from O
and dO first, then one program per K/V block accumulating dK and dV while the Q blocks stream past, P rebuilt
from Q, K and the logsumexp L in every tile. dQ comes from a second pass over the tiles
(``dq="second_pass"``, this chapter's kernels) or from atomic adds into an fp32 buffer (``dq="atomic"``);
the simulator counts each atomic add as a read and a write of the buffer's rows (on a GPU they happen in the
L2 cache, and only part of that traffic reaches HBM). Run this file for a short demo.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ch05"))  # chapter 5's simulator
from simulator import HBM, SRAM, flash_attention, tile_kind  # noqa: E402


def reference_gradients(Q, K, V, dO, causal: bool = False):
    """dQ, dK, dV in float64, straight from the five formulas."""
    scale = 1.0 / math.sqrt(Q.shape[1])
    Q, K, V, dO = (t.astype(np.float64) for t in (Q, K, V, dO))
    s = Q @ K.T * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dp = dO @ V.T
    ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
    return ds @ K * scale, ds.T @ Q * scale, p.T @ dO


def standard_backward(Q, K, V, dO, causal: bool = False):
    """The backward of the three-kernel forward, which left P (N x N) in HBM. Each pass reads its inputs once
    and writes its output once (the best case, as in chapter 5's standard_attention)."""
    n, d = Q.shape
    scale = 1.0 / math.sqrt(d)
    s = Q.astype(np.float64) @ K.astype(np.float64).T * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    hbm = HBM(Q=Q, K=K, V=V, dO=dO, P=(p / p.sum(axis=1, keepdims=True)).astype(Q.dtype))
    for name, shape in (("dV", (n, d)), ("dP", (n, n)), ("dS", (n, n)), ("dQ", (n, d)), ("dK", (n, d))):
        hbm.allocate(name, shape, Q.dtype)
    p, do = hbm.read("P").astype(np.float64), hbm.read("dO").astype(np.float64)
    hbm.write("dV", slice(None), (p.T @ do).astype(Q.dtype))  # dV = Pᵀ dO
    do, v = hbm.read("dO").astype(np.float64), hbm.read("V").astype(np.float64)
    hbm.write("dP", slice(None), (do @ v.T).astype(Q.dtype))  # dP = dO Vᵀ
    p, dp = hbm.read("P").astype(np.float64), hbm.read("dP").astype(np.float64)
    hbm.write("dS", slice(None), (p * (dp - (p * dp).sum(axis=1, keepdims=True))).astype(Q.dtype))
    ds, k = hbm.read("dS").astype(np.float64), hbm.read("K").astype(np.float64)
    hbm.write("dQ", slice(None), (ds @ k * scale).astype(Q.dtype))  # dQ = dS K · scale
    ds, q = hbm.read("dS").astype(np.float64), hbm.read("Q").astype(np.float64)
    hbm.write("dK", slice(None), (ds.T @ q * scale).astype(Q.dtype))  # dK = dSᵀ Q · scale
    grads = tuple(hbm.arrays[name] for name in ("dQ", "dK", "dV"))
    return grads, {"hbm_bytes": hbm.read_bytes + hbm.write_bytes, "hbm_peak_bytes": hbm.peak_bytes}


# --8<-- [start:flash]
def flash_backward(Q, K, V, O, L, dO, block_m: int, block_n: int, causal: bool = False, dq: str = "second_pass",
                   sram_bytes: int | None = None):
    """dQ, dK, dV with FlashAttention-2's backward loop order, from the forward's O and logsumexp L alone."""
    if dq not in ("second_pass", "atomic"):
        raise ValueError(f"dq must be 'second_pass' or 'atomic', got {dq!r}")
    n, d = Q.shape
    scale = 1.0 / math.sqrt(d)
    hbm = HBM(Q=Q, K=K, V=V, O=O, L=L, dO=dO)
    for name, shape, dtype in (("D", (n,), np.float32), ("dK", (n, d), Q.dtype), ("dV", (n, d), Q.dtype),
                               ("dQ", (n, d), np.float32 if dq == "atomic" else Q.dtype)):
        hbm.allocate(name, shape, dtype)
    q_blocks, k_blocks = math.ceil(n / block_m), math.ceil(n / block_n)
    products = 0

    def rows(i, size):
        return slice(i * size, min((i + 1) * size, n))

    def probabilities(i, j, q, k):
        """One tile of P rebuilt from Q, K and L: exp(S - L), with the causal mask on diagonal tiles."""
        s = q @ k.T * scale
        if tile_kind(i, j, block_m, block_n, n, n, causal) == "diagonal":
            s = np.where(np.arange(rows(j, block_n).start, rows(j, block_n).stop)[None, :]
                         <= np.arange(rows(i, block_m).start, rows(i, block_m).stop)[:, None], s, -np.inf)
        return np.exp(s - hbm.read("L", rows(i, block_m)).astype(np.float64)[:, None])

    for i in range(q_blocks):  # D = rowsum(dO ∘ O), one Q block at a time
        r = rows(i, block_m)
        hbm.write("D", r, (hbm.read("O", r).astype(np.float64) * hbm.read("dO", r)).sum(axis=1).astype(np.float32))

    for j in range(k_blocks):  # one program per K/V block: dK and dV stay on chip
        sram = SRAM(sram_bytes)
        c = rows(j, block_n)
        k = sram.hold("K_j", hbm.read("K", c)).astype(np.float64)
        v = sram.hold("V_j", hbm.read("V", c)).astype(np.float64)
        dk = sram.hold("dK_j", np.zeros((k.shape[0], d), np.float32)).astype(np.float64)
        dv = sram.hold("dV_j", np.zeros((k.shape[0], d), np.float32)).astype(np.float64)
        for i in range(q_blocks):
            if tile_kind(i, j, block_m, block_n, n, n, causal) == "skipped":
                continue
            r = rows(i, block_m)
            q = sram.hold("Q_i", hbm.read("Q", r)).astype(np.float64)
            do = sram.hold("dO_i", hbm.read("dO", r)).astype(np.float64)
            p = probabilities(i, j, q, k)
            sram.hold("P_ij", p.astype(np.float32))
            dv += p.T @ do
            dp = sram.hold("dP_ij", (do @ v.T).astype(np.float32)).astype(np.float64)
            ds = p * (dp - hbm.read("D", r).astype(np.float64)[:, None])
            dk += ds.T @ q * scale
            products += 4
            if dq == "atomic":  # this tile's share of dQ, added into the fp32 buffer in HBM
                hbm.write("dQ", r, hbm.read("dQ", r) + (ds @ k * scale).astype(np.float32))
                products += 1
        hbm.write("dK", c, dk.astype(Q.dtype))
        hbm.write("dV", c, dv.astype(Q.dtype))

    if dq == "second_pass":  # one program per Q block: dQ stays on chip
        for i in range(q_blocks):
            sram = SRAM(sram_bytes)
            r = rows(i, block_m)
            q = sram.hold("Q_i", hbm.read("Q", r)).astype(np.float64)
            do = sram.hold("dO_i", hbm.read("dO", r)).astype(np.float64)
            dq_i = sram.hold("dQ_i", np.zeros((q.shape[0], d), np.float32)).astype(np.float64)
            for j in range(k_blocks):
                if tile_kind(i, j, block_m, block_n, n, n, causal) == "skipped":
                    continue
                c = rows(j, block_n)
                k = sram.hold("K_j", hbm.read("K", c)).astype(np.float64)
                v = sram.hold("V_j", hbm.read("V", c)).astype(np.float64)
                p = probabilities(i, j, q, k)
                ds = p * (do @ v.T - hbm.read("D", r).astype(np.float64)[:, None])
                dq_i += ds @ k * scale
                products += 3
            hbm.write("dQ", r, dq_i.astype(Q.dtype))
    grads = tuple(hbm.arrays[name] for name in ("dQ", "dK", "dV"))
    return grads, {"hbm_bytes": hbm.read_bytes + hbm.write_bytes, "hbm_peak_bytes": hbm.peak_bytes,
                   "matrix_products": products}
# --8<-- [end:flash]


def main() -> None:
    rng = np.random.default_rng(0)
    n, d, block = 1024, 64, 128
    Q, K, V, dO = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(4))
    O, forward = flash_attention(Q, K, V, block, block)
    expected = reference_gradients(Q, K, V, dO)
    print(f"one head, N = {n}, d = {d}, fp32, {block} x {block} tiles")
    plain, plain_stats = standard_backward(Q, K, V, dO)
    print(f"standard backward (reads the stored P): matches float64: "
          f"{all(np.allclose(g, e, atol=1e-4) for g, e in zip(plain, expected, strict=True))}")
    print(f"  HBM {plain_stats['hbm_bytes']:>10,} B moved, {plain_stats['hbm_peak_bytes']:>10,} B held at most")
    for dq in ("second_pass", "atomic"):
        grads, stats = flash_backward(Q, K, V, O, forward["lse"], dO, block, block, dq=dq)
        print(f"flash backward, dQ by {dq.replace('_', ' ')}: matches float64: "
              f"{all(np.allclose(g, e, atol=1e-4) for g, e in zip(grads, expected, strict=True))}")
        print(f"  HBM {stats['hbm_bytes']:>10,} B moved, {stats['hbm_peak_bytes']:>10,} B held at most; "
              f"{stats['matrix_products']} tile products")
    O, forward = flash_attention(Q, K, V, block, block, causal=True)
    grads, stats = flash_backward(Q, K, V, O, forward["lse"], dO, block, block, causal=True)
    matches = all(np.allclose(g, e, atol=1e-4)
                  for g, e in zip(grads, reference_gradients(Q, K, V, dO, causal=True), strict=True))
    print(f"causal, dQ by second pass: matches float64: {matches}")
    print(f"  HBM {stats['hbm_bytes']:>10,} B moved; {stats['matrix_products']} tile products")

if __name__ == "__main__":
    main()
