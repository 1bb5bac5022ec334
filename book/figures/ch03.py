"""Chapter 3 figures: the tiling of the 4 x 4 walkthrough, and the order in which programs take their tiles."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

STEP_COLORS = ("#4C72B0", "#DD8452")  # k-step 0, k-step 1


def walkthrough_matrices() -> tuple[np.ndarray, np.ndarray]:
    """The A and B of snippets/ch03/tiled_walkthrough.py (same seed, same draws)."""
    rng = np.random.default_rng(3)
    return rng.integers(-2, 4, size=(4, 4)), rng.integers(-2, 4, size=(4, 4))


def _matrix(ax, values: np.ndarray, title: str, tile: int, shade: dict[tuple[int, int], str]) -> None:
    """Draw a matrix with its numbers, a thick line around each tile, and some tiles shaded."""
    n = values.shape[0]
    for (ti, tj), color in shade.items():
        ax.add_patch(Rectangle((tj * tile, ti * tile), tile, tile, facecolor=color, alpha=0.35, linewidth=0))
    for i in range(n):
        for j in range(n):
            ax.text(j + 0.5, i + 0.5, str(values[i, j]), ha="center", va="center", fontsize=10)
    for x in range(n + 1):
        width = 2.0 if x % tile == 0 else 0.5
        ax.plot([x, x], [0, n], color="black", linewidth=width)
        ax.plot([0, n], [x, x], color="black", linewidth=width)
    ax.set_xlim(-0.1, n + 0.1)
    ax.set_ylim(n + 0.1, -0.1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def tiling():
    """C tile (0, 1) of the walkthrough: two k-steps, each one A tile times one B tile."""
    a, b = walkthrough_matrices()
    c = a @ b
    fig, axes = plt.subplots(1, 3, figsize=(8.0, 3.2))
    _matrix(axes[0], a, "A (4 × 4): tile-row 0", 2, {(0, 0): STEP_COLORS[0], (0, 1): STEP_COLORS[1]})
    _matrix(axes[1], b, "B (4 × 4): tile-column 1", 2, {(0, 1): STEP_COLORS[0], (1, 1): STEP_COLORS[1]})
    _matrix(axes[2], c, "C = A @ B: tile (0, 1)", 2, {(0, 1): "#55A868"})
    handles = [Rectangle((0, 0), 1, 1, facecolor=color, alpha=0.35) for color in STEP_COLORS]
    fig.legend(handles, ["k-step 0: A tile (0, 0) @ B tile (0, 1)", "k-step 1: A tile (0, 1) @ B tile (1, 1)"],
               loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle("2 × 2 tiles: C tile (0, 1) = A(0, 0) @ B(0, 1) + A(0, 1) @ B(1, 1)", fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return fig


def grouped(pid: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """The tile of program `pid` under grouped ordering: grouped_tile of kernels/matmul.py, in plain Python."""
    tiles_per_group = group_m * tiles_n
    first_m = (pid // tiles_per_group) * group_m
    rows_in_group = min(tiles_m - first_m, group_m)
    pid_in_group = pid % tiles_per_group
    return first_m + pid_in_group % rows_in_group, pid_in_group // rows_in_group


def _order(ax, tile_of, tiles: int, in_flight: int, title: str) -> None:
    reads_a, reads_b = set(), set()
    for pid in range(tiles * tiles):
        i, j = tile_of(pid)
        running = pid < in_flight
        if running:
            reads_a.add(i)
            reads_b.add(j)
        ax.add_patch(Rectangle((j, i), 1, 1, facecolor="#4C72B0" if running else "white", alpha=0.45,
                               edgecolor="black", linewidth=0.8))
        ax.text(j + 0.5, i + 0.5, str(pid), ha="center", va="center", fontsize=9)
    # The A panels (tile-rows) and B panels (tile-columns) the running programs read, marked on the edges.
    for i in reads_a:
        ax.add_patch(Rectangle((-0.6, i + 0.1), 0.4, 0.8, facecolor="#DD8452", clip_on=False))
    for j in reads_b:
        ax.add_patch(Rectangle((j + 0.1, -0.6), 0.8, 0.4, facecolor="#55A868", clip_on=False))
    ax.set_xlim(-0.7, tiles + 0.05)
    ax.set_ylim(tiles + 0.05, -0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{title}\nprograms 0–{in_flight - 1} read {len(reads_a)} A panels + {len(reads_b)} B panels "
                 f"= {len(reads_a) + len(reads_b)}", fontsize=10)


def grouped_order():
    """Program ids on a 6 x 6 grid of C tiles, row-major and grouped (GROUP_M = 3); the first 9 shaded."""
    tiles, group_m, in_flight = 6, 3, 9
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 4.8))
    _order(axes[0], lambda pid: divmod(pid, tiles), tiles, in_flight, "Row-major order")
    _order(axes[1], lambda pid: grouped(pid, tiles, tiles, group_m), tiles, in_flight,
           f"Grouped order, GROUP_M = {group_m}")
    handles = [Rectangle((0, 0), 1, 1, facecolor=color, alpha=alpha) for color, alpha in
               (("#4C72B0", 0.45), ("#DD8452", 1.0), ("#55A868", 1.0))]
    fig.legend(handles, [f"running at once (first {in_flight} programs)", "A panel (a tile-row of A) read",
                         "B panel (a tile-column of B) read"], loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.02, right=0.98, top=0.86, bottom=0.08, wspace=0.08)
    return fig
