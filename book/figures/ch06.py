"""Chapter 6 figures: the causal mask, the tiles it touches, and the two ways to align it when the query
and key lengths differ. Drawn at build time from snippets/ch06/causal_tiles.py, the code the page prints."""

from __future__ import annotations

import importlib.util

import numpy as np
from matplotlib.patches import Patch, Rectangle

from book import ROOT, render  # noqa: F401  (render sets the matplotlib backend and style)

plt = render.plt

VISIBLE = "#4c72b0"
HIDDEN = "#ffffff"
FULL = "#4c72b0"
DIAGONAL_VISIBLE = "#dd8452"
DIAGONAL_HIDDEN = "#f6d9c4"
SKIPPED = "#e6e6e6"
EMPTY_ROW = "#f0b8b9"


def _tiles_module():
    path = ROOT / "snippets" / "ch06" / "causal_tiles.py"
    spec = importlib.util.spec_from_file_location("ch06_causal_tiles", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rgb(color: str) -> tuple[float, float, float]:
    color = color.lstrip("#")
    return tuple(int(color[k:k + 2], 16) / 255 for k in (0, 2, 4))


def _axes_for_grid(ax, n_q: int, n_k: int, title: str, step: int = 1) -> None:
    ax.set_xlim(-0.5, n_k - 0.5)
    ax.set_ylim(n_q - 0.5, -0.5)
    ax.set_xticks(range(0, n_k, step))
    ax.set_yticks(range(0, n_q, step))
    ax.tick_params(length=0, labelsize=7)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=9)
    ax.grid(False)
    ax.set_aspect("equal")
    for x in np.arange(-0.5, n_k, 1.0):
        ax.axvline(x, color="white", linewidth=0.5)
    for y in np.arange(-0.5, n_q, 1.0):
        ax.axhline(y, color="white", linewidth=0.5)


def causal_mask():
    """The causal mask for N = 8: query i sees keys 0..i."""
    tiles = _tiles_module()
    mask = tiles.visible(8, 8)
    image = np.array([[_rgb(VISIBLE if v else HIDDEN) for v in row] for row in mask])
    fig, ax = plt.subplots(figsize=(3.6, 3.6))
    ax.imshow(image, interpolation="nearest")
    _axes_for_grid(ax, 8, 8, "Causal mask, N = 8")
    ax.add_patch(Rectangle((-0.5, -0.5), 8, 8, fill=False, edgecolor="black", linewidth=1))
    for x in np.arange(-0.5, 8, 1.0):
        ax.plot([x, x], [-0.5, 7.5], color="#bbbbbb", linewidth=0.5)
    for y in np.arange(-0.5, 8, 1.0):
        ax.plot([-0.5, 7.5], [y, y], color="#bbbbbb", linewidth=0.5)
    ax.legend(handles=[Patch(color=VISIBLE, label="visible: j ≤ i"),
                       Patch(facecolor=HIDDEN, edgecolor="#999999", label="hidden: a future key")],
              loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def _tile_panel(ax, tiles, n_q: int, n_k: int, block_m: int, block_n: int, alignment: str, title: str) -> None:
    mask = tiles.visible(n_q, n_k, alignment)
    kinds = tiles.tile_kinds(mask, block_m, block_n)
    image = np.zeros((n_q, n_k, 3))
    empty_rows = ~mask.any(axis=1)
    for i in range(n_q):
        for j in range(n_k):
            kind = kinds[i // block_m, j // block_n]
            if kind == "F":
                color = FULL
            elif kind == "D":
                color = DIAGONAL_VISIBLE if mask[i, j] else DIAGONAL_HIDDEN
            else:
                color = EMPTY_ROW if empty_rows[i] else SKIPPED
            image[i, j] = _rgb(color)
    ax.imshow(image, interpolation="nearest")
    _axes_for_grid(ax, n_q, n_k, title, step=2 if max(n_q, n_k) > 10 else 1)
    for i in range(kinds.shape[0]):
        for j in range(kinds.shape[1]):
            height = min(block_m, n_q - i * block_m)
            width = min(block_n, n_k - j * block_n)
            ax.add_patch(Rectangle((j * block_n - 0.5, i * block_m - 0.5), width, height,
                                   fill=False, edgecolor="black", linewidth=1.2))


def _tile_legend(fig, extra: list | None = None) -> None:
    handles = [Patch(color=FULL, label="full tile: no mask needed"),
               Patch(color=DIAGONAL_VISIBLE, label="diagonal tile: visible entry"),
               Patch(color=DIAGONAL_HIDDEN, label="diagonal tile: masked entry"),
               Patch(color=SKIPPED, label="skipped tile: never loaded")]
    fig.legend(handles=handles + (extra or []), loc="lower center", ncol=3, fontsize=7, frameon=False)


def tile_grid():
    """Tiles of the causal mask: full, diagonal (masked element by element) and skipped."""
    tiles = _tiles_module()
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 4.6))
    _tile_panel(axes[0], tiles, 16, 16, 4, 4, "top-left", "N = 16, BLOCK_M = BLOCK_N = 4")
    _tile_panel(axes[1], tiles, 18, 18, 8, 4, "top-left", "N = 18, BLOCK_M = 8, BLOCK_N = 4")
    _tile_legend(fig)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def alignments():
    """Top-left and bottom-right alignment of the causal mask when query and key lengths differ."""
    tiles = _tiles_module()
    fig, axes = plt.subplots(2, 2, figsize=(7.6, 7.0), gridspec_kw={"height_ratios": [1, 1.6]})
    cases = [(4, 8), (8, 4)]
    for row, (n_q, n_k) in enumerate(cases):
        for col, alignment in enumerate(["top-left", "bottom-right"]):
            _tile_panel(axes[row, col], tiles, n_q, n_k, 2, 2, alignment,
                        f"{alignment}, Nq = {n_q}, Nk = {n_k}")
    _tile_legend(fig, [Patch(color=EMPTY_ROW, label="row that sees no key: output 0")])
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig
