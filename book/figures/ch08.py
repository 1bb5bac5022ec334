"""Chapter 8 figures, drawn at build time: waves of programs on 132 SMs, the register file split between
warpgroups, and the timeline of a two-slot ring. Plain arithmetic, no GPU involved."""

from __future__ import annotations

import math

from book import render  # noqa: F401  (render sets the matplotlib backend and style)

SMS = 132  # H100 SXM5, datasheet
REGISTERS_PER_SM = 65536


def waves():
    """Left: busy SMs over time for 300 equal programs. Right: the busy share for every grid size up to 800."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    programs = 300
    n_waves = math.ceil(programs / SMS)
    for wave in range(n_waves):
        busy = min(SMS, programs - wave * SMS)
        left.bar(wave + 0.5, busy, width=1.0, color="C0", edgecolor="white")
        if busy < SMS:
            left.bar(wave + 0.5, SMS - busy, bottom=busy, width=1.0, color="C3", alpha=0.25, edgecolor="white")
            left.text(wave + 0.5, busy + (SMS - busy) / 2, f"{SMS - busy} SMs idle", ha="center", va="center",
                      fontsize=8)
        left.text(wave + 0.5, busy / 2, f"{busy}", ha="center", va="center", color="white", fontsize=9)
    left.set_xlim(0, n_waves)
    left.set_ylim(0, SMS * 1.05)
    left.set_xticks([w + 0.5 for w in range(n_waves)], [f"wave {w + 1}" for w in range(n_waves)])
    left.set_ylabel("SMs running a program")
    left.set_title(f"{programs} equal programs on {SMS} SMs")

    sizes = range(1, 801)
    share = [n / (math.ceil(n / SMS) * SMS) for n in sizes]
    right.plot(list(sizes), [100 * s for s in share], color="C0", linewidth=1)
    for k in range(1, 7):
        right.axvline(k * SMS, color="grey", linewidth=0.5, linestyle=":")
    right.set_xlabel("programs in the grid (equal work each)")
    right.set_ylabel("SMs busy over the kernel (%)")
    right.set_ylim(0, 105)
    right.set_title("The tail effect shrinks with more waves")
    fig.tight_layout()
    return fig


def register_split():
    """The 65,536 registers of one SM: the same budget per warpgroup at launch, then after setmaxnreg."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.0, 2.8))
    rows = [
        ("at launch", [("warpgroup 0: 168", 168), ("warpgroup 1: 168", 168), ("warpgroup 2: 168", 168)]),
        ("after setmaxnreg", [("computing: 240", 240), ("computing: 240", 240), ("copying: 24", 24)]),
    ]
    colors = {"computing": "C0", "copying": "C1", "warpgroup": "C7"}
    for y, (_, parts) in enumerate(rows):
        left = 0
        for label, per_thread in parts:
            width = per_thread * 128
            color = colors[label.split()[0].rstrip(":")]
            ax.barh(y, width, left=left, color=color, edgecolor="white", height=0.6)
            if width > 8000:
                ax.text(left + width / 2, y, label, ha="center", va="center", color="white", fontsize=8)
            else:  # too thin for its label: write it above the bar
                ax.text(left + width / 2, y - 0.42, label, ha="center", va="bottom", fontsize=8)
            left += width
        if left < REGISTERS_PER_SM:
            ax.barh(y, REGISTERS_PER_SM - left, left=left, color="C7", alpha=0.25, height=0.6)
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, REGISTERS_PER_SM)
    ax.set_xlabel("registers of one SM (65,536 in all; each bar: registers per thread × 128 threads)")
    ax.set_title("Two computing warpgroups and a copying warp: registers move with setmaxnreg")
    fig.tight_layout()
    return fig
