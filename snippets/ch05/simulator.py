"""A numpy model of attention on a GPU that counts the bytes it moves between HBM and SRAM.

Two memories, both explicit:

- HBM holds the full Q, K, V and O (and, for standard attention, S and P). Every read from it and
  every write to it is counted in bytes.
- SRAM is the small on-chip memory of one streaming multiprocessor. Arithmetic only happens on
  arrays that were loaded into it. Its capacity (``sram_bytes``) is checked when you give one.

``standard_attention`` runs the three-kernel recipe S = QKᵀ, P = softmax(S), O = PV, writing S and P
to HBM in between. ``flash_attention`` runs FlashAttention-2's loop order: one Q block at a time,
streaming K and V blocks past it, keeping the running max m, sum l and un-normalized output acc on
chip. Both return (O, stats). Run this file to see a short demo; import it to use the functions.
"""

from __future__ import annotations

import math

import numpy as np


class HBM:
    """Off-chip memory: named arrays, with a count of every byte read from or written to them."""

    def __init__(self, **arrays: np.ndarray):
        self.arrays = dict(arrays)
        self.read_bytes = 0
        self.write_bytes = 0
        self.peak_bytes = sum(a.nbytes for a in self.arrays.values())

    def allocate(self, name: str, shape: tuple[int, ...], dtype) -> None:
        self.arrays[name] = np.zeros(shape, dtype=dtype)
        self.peak_bytes = max(self.peak_bytes, sum(a.nbytes for a in self.arrays.values()))

    def free(self, name: str) -> None:
        del self.arrays[name]

    def read(self, name: str, rows: slice = slice(None)) -> np.ndarray:
        block = self.arrays[name][rows].copy()
        self.read_bytes += block.nbytes
        return block

    def write(self, name: str, rows: slice, value: np.ndarray) -> None:
        target = self.arrays[name]
        target[rows] = value
        self.write_bytes += target[rows].nbytes


class SRAM:
    """On-chip memory of one program: tracks what is held, and refuses to hold more than its capacity."""

    def __init__(self, capacity_bytes: int | None):
        self.capacity = capacity_bytes
        self.held: dict[str, int] = {}
        self.peak_bytes = 0

    def hold(self, name: str, array: np.ndarray) -> np.ndarray:
        self.held[name] = array.nbytes
        used = sum(self.held.values())
        self.peak_bytes = max(self.peak_bytes, used)
        if self.capacity is not None and used > self.capacity:
            raise MemoryError(f"SRAM overflow: {used:,} bytes needed, {self.capacity:,} available "
                              f"(holding {', '.join(self.held)}); use smaller blocks")
        return array


def _stats(hbm: HBM, **extra) -> dict:
    return {"hbm_read_bytes": hbm.read_bytes, "hbm_write_bytes": hbm.write_bytes,
            "hbm_bytes": hbm.read_bytes + hbm.write_bytes, "hbm_peak_bytes": hbm.peak_bytes, **extra}


def standard_attention(Q, K, V, causal: bool = False, sm_scale: float | None = None):
    """softmax(Q Kᵀ · scale) V the standard way: three passes, with S and P stored in HBM between them.

    Each pass gets the best case: it reads each of its inputs once and writes its output once (a real
    matmul reads its inputs more than once when they do not fit on chip). Causal uses top-left alignment.
    """
    n, d = Q.shape
    n_k = K.shape[0]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    hbm = HBM(Q=Q, K=K, V=V)
    dtype = Q.dtype
    # Pass 1: S = Q Kᵀ · scale, written to HBM (N x N).
    hbm.allocate("S", (n, n_k), dtype)
    q, k = hbm.read("Q"), hbm.read("K")
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    if causal:
        s = np.where(np.tril(np.ones((n, n_k), dtype=bool)), s, -np.inf)
    hbm.write("S", slice(None), s.astype(dtype))
    # Pass 2: P = softmax(S), row by row, written to HBM (N x N).
    hbm.allocate("P", (n, n_k), dtype)
    s = hbm.read("S").astype(np.float64)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    hbm.write("P", slice(None), (p / p.sum(axis=1, keepdims=True)).astype(dtype))
    hbm.free("S")
    # Pass 3: O = P V, written to HBM (N x d).
    hbm.allocate("O", (n, d), dtype)
    p, v = hbm.read("P").astype(np.float64), hbm.read("V").astype(np.float64)
    hbm.write("O", slice(None), (p @ v).astype(dtype))
    return hbm.arrays["O"], _stats(hbm, flops=4 * n * n_k * d)


def tile_kind(q_block: int, k_block: int, block_m: int, block_n: int, n_q: int, n_k: int, causal: bool) -> str:
    """'full' (every key visible to every row), 'diagonal' (needs an element-wise mask) or 'skipped'."""
    if not causal:
        return "full"
    first_row = q_block * block_m
    last_row = min(first_row + block_m, n_q) - 1
    first_key = k_block * block_n
    last_key = min(first_key + block_n, n_k) - 1
    if first_key > last_row:
        return "skipped"  # every key is in the future of every row (top-left: row i sees keys j <= i)
    if last_key <= first_row:
        return "full"
    return "diagonal"


def flash_attention(Q, K, V, block_m: int, block_n: int, causal: bool = False, sram_bytes: int | None = None,
                    trace: bool = False, sm_scale: float | None = None):
    """Exact attention with FlashAttention-2's loop order; S and P never leave SRAM.

    Returns (O, stats). stats counts HBM bytes and tiles; with trace=True, stats["trace"] lists every
    visited (q_block, k_block) tile in order with m, l and acc after it, and stats["skipped"] lists the
    causal tiles never loaded. Causal uses top-left alignment (query i sees keys j <= i).
    """
    n, d = Q.shape
    n_k = K.shape[0]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    hbm = HBM(Q=Q, K=K, V=V)
    hbm.allocate("O", (n, d), Q.dtype)
    hbm.allocate("L", (n,), np.float32)  # the row logsumexp, kept for a backward pass
    sram = SRAM(sram_bytes)
    counts = {"full": 0, "diagonal": 0, "skipped": 0}
    steps, skipped = [], []

    for i in range(math.ceil(n / block_m)):  # outer loop: Q blocks (one GPU program each)
        rows = slice(i * block_m, min((i + 1) * block_m, n))
        q = sram.hold("Q_i", hbm.read("Q", rows)).astype(np.float64)
        m = np.full(q.shape[0], -np.inf)  # running row max of the scores
        l = np.zeros(q.shape[0])  # running row sum of exp(score - m)
        acc = sram.hold("acc", np.zeros((q.shape[0], d), dtype=Q.dtype)).astype(np.float64)
        sram.hold("m, l", np.zeros(2 * q.shape[0], dtype=Q.dtype))
        for j in range(math.ceil(n_k / block_n)):  # inner loop: K/V blocks streamed past Q_i
            kind = tile_kind(i, j, block_m, block_n, n, n_k, causal)
            counts[kind] += 1
            if kind == "skipped":
                skipped.append((i, j))
                continue
            cols = slice(j * block_n, min((j + 1) * block_n, n_k))
            k = sram.hold("K_j", hbm.read("K", cols)).astype(np.float64)
            v = sram.hold("V_j", hbm.read("V", cols)).astype(np.float64)
            s = q @ k.T * scale
            sram.hold("S_ij", s.astype(Q.dtype))
            if kind == "diagonal":
                row_ids = np.arange(rows.start, rows.stop)[:, None]
                key_ids = np.arange(cols.start, cols.stop)[None, :]
                s = np.where(key_ids <= row_ids, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            m_safe = np.where(np.isneginf(m_new), 0.0, m_new)  # a row with no visible key yet
            alpha = np.exp(m - m_safe)  # rescales what was summed under the old max
            p = np.exp(s - m_safe[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ v
            m = m_new
            if trace:
                steps.append({"q_block": i, "k_block": j, "kind": kind, "m": m.tolist(), "l": l.tolist(),
                              "acc": acc.tolist()})
        l_safe = np.where(l == 0, 1.0, l)
        hbm.write("O", rows, (acc / l_safe[:, None]).astype(Q.dtype))  # normalize once, write once
        with np.errstate(divide="ignore"):
            hbm.write("L", rows, (m + np.log(l)).astype(np.float32))

    stats = _stats(hbm, flops=4 * n * n_k * d, sram_peak_bytes=sram.peak_bytes,
                   tiles_computed=counts["full"] + counts["diagonal"], tiles_masked=counts["diagonal"],
                   tiles_skipped=counts["skipped"], lse=hbm.arrays["L"])
    if trace:
        stats["trace"] = steps
        stats["skipped"] = skipped
    return hbm.arrays["O"], stats


def working_set_bytes(block_m: int, block_n: int, d: int, element_bytes: int = 4) -> int:
    """SRAM needed by one program of flash_attention: Q_i, K_j, V_j, S_ij, acc, m and l (all held in Q's dtype)."""
    return element_bytes * (block_m * d + 2 * block_n * d + block_m * block_n + block_m * d + 2 * block_m)


def block_for_sram(sram_bytes: int, d: int, element_bytes: int = 4) -> int:
    """The largest square block size B (B_r = B_c = B) whose working set fits in sram_bytes."""
    b = 1
    while working_set_bytes(b + 1, b + 1, d, element_bytes) <= sram_bytes:
        b += 1
    if working_set_bytes(b, b, d, element_bytes) > sram_bytes:
        raise ValueError(f"{sram_bytes} bytes of SRAM cannot hold even one row of a d={d} problem")
    return b


def paper_blocks_for_sram(sram_bytes: int, d: int, element_bytes: int = 4) -> tuple[int, int]:
    """The FlashAttention paper's block shape, for this loop order: (B_r, B_c).

    The paper (Algorithm 1) makes the outer loop's block Theta(M/d) and caps the inner loop's block at
    d: B_c = ceil(M/4d) and B_r = min(ceil(M/4d), d), with its outer loop over K/V blocks. Here the outer
    loop runs over Q blocks, so the roles swap: B_c = min(ceil(M/4d), d) keys, and B_r as many query rows
    as fit in sram_bytes beside them. M is the SRAM size in elements.
    """
    m = sram_bytes // element_bytes
    block_n = min(math.ceil(m / (4 * d)), d)
    block_m = 0
    while working_set_bytes(block_m + 1, block_n, d, element_bytes) <= sram_bytes:
        block_m += 1
    if block_m == 0:
        raise ValueError(f"{sram_bytes} bytes of SRAM cannot hold one row beside {block_n} keys of a d={d} problem")
    return block_m, block_n


def reference(Q, K, V, causal: bool = False, sm_scale: float | None = None) -> np.ndarray:
    """Direct float64 attention, to check the simulators against."""
    n, d = Q.shape
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    s = Q.astype(np.float64) @ K.astype(np.float64).T * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ V.astype(np.float64)


def main() -> None:
    rng = np.random.default_rng(0)
    n, d = 1024, 64
    Q, K, V = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
    expected = reference(Q, K, V)
    o_std, std = standard_attention(Q, K, V)
    sram = 192 * 1024  # about what one H100 SM can give a program (228 KB shared memory, datasheet)
    block = block_for_sram(sram, d)
    o_fa, fa = flash_attention(Q, K, V, block_m=block, block_n=block, sram_bytes=sram)
    print(f"one head, N = {n}, d = {d}, fp32 (4 bytes per element)")
    print(f"standard attention: matches reference: {np.allclose(o_std, expected, atol=1e-5)}")
    print(f"  HBM read {std['hbm_read_bytes']:>9,} B, written {std['hbm_write_bytes']:>9,} B, "
          f"total {std['hbm_bytes']:>9,} B")
    print(f"flash attention, SRAM {sram // 1024} KiB -> blocks of {block} rows: "
          f"matches reference: {np.allclose(o_fa, expected, atol=1e-5)}")
    print(f"  HBM read {fa['hbm_read_bytes']:>9,} B, written {fa['hbm_write_bytes']:>9,} B, "
          f"total {fa['hbm_bytes']:>9,} B")
    print(f"  SRAM used at most {fa['sram_peak_bytes']:,} B; tiles computed {fa['tiles_computed']}")
    print(f"flash moves {std['hbm_bytes'] / fa['hbm_bytes']:.1f}x fewer bytes; both do {fa['flops']:,} FLOPs")
    o_causal, causal = flash_attention(Q, K, V, block_m=256, block_n=256, causal=True, trace=True)
    print(f"causal, 256 x 256 tiles: matches reference: {np.allclose(o_causal, reference(Q, K, V, True), atol=1e-5)}")
    print(f"  tiles computed {causal['tiles_computed']} (masked {causal['tiles_masked']}), "
          f"skipped {causal['tiles_skipped']}: {causal['skipped']}")


if __name__ == "__main__":
    main()
