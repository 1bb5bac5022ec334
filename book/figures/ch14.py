"""Chapter 14 figure: which GPU computes which block of the causal score matrix, at which step of the ring, for the
contiguous and the zigzag layouts. Drawn at build time from kernels/ring_attention.py's own layout functions."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch

from book import render
from kernels import ring_attention as ring

plt = render.plt

WORLD = 4
RANK_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
SKIPPED = "#eeeeee"


def ring_blocks(world: int, layout: str) -> dict[tuple[int, int], tuple[int, int, bool]]:
    """{(query piece, key piece): (rank, step, on the diagonal)} over the sequence cut into 2 x world pieces, for a
    causal ring: at step s rank r holds the K/V chunk that started on rank r - s. A contiguous rank's chunk is two
    of these pieces; a block the ring computes causal-within covers both."""
    per_chunk = 2 // len(ring.pieces(0, world, layout))  # pieces of the drawing per piece of the layout
    blocks = {}
    for rank in range(world):
        for step in range(world):
            source = (rank - step) % world
            mine, theirs = ring.pieces(rank, world, layout), ring.pieces(source, world, layout)
            for i, j, diagonal in ring.piece_pairs(rank, source, world, layout, causal=True):
                for a in range(mine[i] * per_chunk, (mine[i] + 1) * per_chunk):
                    for c in range(theirs[j] * per_chunk, (theirs[j] + 1) * per_chunk):
                        if c <= a:
                            blocks[a, c] = (rank, step, diagonal and c == a)
    return blocks


def work_per_rank(world: int, layout: str) -> list[float]:
    """Blocks each rank computes over the whole ring, a diagonal block counting half."""
    work = [0.0] * world
    for rank, _, diagonal in ring_blocks(world, layout).values():
        work[rank] += 0.5 if diagonal else 1.0
    return work


def ring_steps():
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 4.2))
    pieces = 2 * WORLD
    for ax, layout in zip(axes, ring.LAYOUTS, strict=True):
        blocks = ring_blocks(WORLD, layout)
        image = np.ones((pieces, pieces, 3))
        for a in range(pieces):
            for c in range(pieces):
                color = RANK_COLORS[blocks[a, c][0]] if (a, c) in blocks else SKIPPED
                image[a, c] = [int(color[k:k + 2], 16) / 255 for k in (1, 3, 5)]
        ax.imshow(image, interpolation="nearest")
        for (a, c), (_, step, diagonal) in blocks.items():
            ax.text(c, a, f"{step}{'◣' if diagonal else ''}", ha="center", va="center", fontsize=7, color="white")
        for x in np.arange(-0.5, pieces, 1.0):
            ax.axvline(x, color="white", linewidth=1)
            ax.axhline(x, color="white", linewidth=1)
        work = work_per_rank(WORLD, layout)
        ax.set_title(f"{layout}: blocks per GPU {', '.join(f'{w:g}' for w in work)}\n"
                     f"busiest / average {max(work) / (sum(work) / WORLD):.2f}", fontsize=9)
        ax.set_xticks(range(pieces))
        ax.set_yticks(range(pieces))
        ax.tick_params(length=0, labelsize=7)
        ax.set_xlabel("key piece")
        ax.set_ylabel("query piece")
        ax.grid(False)
    fig.legend(handles=[Patch(color=color, label=f"GPU {g}") for g, color in enumerate(RANK_COLORS)]
               + [Patch(color=SKIPPED, label="skipped: future keys")],
               loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=5, fontsize=7, frameon=False)
    fig.suptitle(f"Causal ring attention on {WORLD} GPUs, the sequence in {pieces} pieces; "
                 "the number is the ring step, ◣ a diagonal block", fontsize=9)
    fig.tight_layout(rect=(0, 0.09, 1, 0.95))
    return fig
