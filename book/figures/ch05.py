"""Chapter 5 figures, drawn at build time from the numpy simulator in snippets/ch05/simulator.py."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from book import ROOT, render  # noqa: F401  (render sets the matplotlib backend and style)

SIZES = [128, 256, 512, 1024]
HEAD_DIM = 64
SRAM_SIZES = [64 * 1024, 128 * 1024, 256 * 1024]


def simulator():
    """snippets/ch05/simulator.py as a module (snippets are programs, not a package)."""
    name = "ch05_simulator"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "snippets" / "ch05" / "simulator.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def hbm_counts() -> dict:
    """Simulator byte counts for each N in SIZES (fp32): {"standard": [...], ("square" or "paper", sram): [...]}.

    "square" uses the largest square blocks that fit (block_for_sram), "paper" the FlashAttention paper's
    blocking (paper_blocks_for_sram): the outer loop's block grows with the SRAM, the inner one stays at d.
    """
    sim = simulator()
    rng = np.random.default_rng(0)
    counts: dict = {"standard": []}
    for n in SIZES:
        Q, K, V = (rng.standard_normal((n, HEAD_DIM)).astype(np.float32) for _ in range(3))
        counts["standard"].append(sim.standard_attention(Q, K, V)[1]["hbm_bytes"])
        for sram in SRAM_SIZES:
            block = sim.block_for_sram(sram, HEAD_DIM)
            blocks = {"square": (block, block), "paper": sim.paper_blocks_for_sram(sram, HEAD_DIM)}
            for shape, (block_m, block_n) in blocks.items():
                stats = sim.flash_attention(Q, K, V, block_m, block_n, sram_bytes=sram)[1]
                counts.setdefault((shape, sram), []).append(stats["hbm_bytes"])
    return counts


def hbm_bytes():
    """HBM bytes vs N: standard attention, and FlashAttention with two block shapes for three SRAM sizes."""
    import matplotlib.pyplot as plt

    counts = hbm_counts()
    e, d = 4, HEAD_DIM
    ns = np.array(SIZES, dtype=float)
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    ax.plot(ns, counts["standard"], "o", color="C3", label="standard attention (simulated)")
    ax.plot(ns, e * (4 * ns * d + 4 * ns**2), "--", color="C3", linewidth=1, label="4·(4Nd + 4N²) bytes")
    # Theorem 2: Θ(N²d²/M) for K and V, plus reading Q and writing O once (2Nd), which matters only at
    # small N. One constant c, fitted to the paper's blocking at the largest N and the middle SRAM size,
    # serves every curve.
    def formula(c, m):
        return e * (c * ns**2 * d**2 / m + 2 * ns * d)

    m_mid = SRAM_SIZES[1] / e
    c = (counts[("paper", SRAM_SIZES[1])][-1] / e - 2 * ns[-1] * d) / (ns[-1] ** 2 * d**2 / m_mid)
    for i, sram in enumerate(SRAM_SIZES):
        m = sram / e  # SRAM size in elements
        ax.plot(ns, counts[("paper", sram)], "s", color=f"C{i}",
                label=f"FlashAttention, SRAM {sram // 1024} KiB, paper's blocks (simulated)")
        ax.plot(ns, counts[("square", sram)], "o", color=f"C{i}", markerfacecolor="none",
                label=f"FlashAttention, SRAM {sram // 1024} KiB, square blocks (simulated)")
        ax.plot(ns, formula(c, m), ":", color=f"C{i}", linewidth=1)
    ax.plot([], [], ":", color="grey", label=f"4·({c:.1f}·N²d²/M + 2Nd) bytes, M in elements")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("Sequence length N (one head, d = 64, fp32)")
    ax.set_ylabel("HBM bytes read + written")
    ax.set_title("HBM traffic: standard attention vs FlashAttention (numpy simulator)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
