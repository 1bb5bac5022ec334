# The causal mask and the tiles it touches, in numpy. Run it to see a small case; the other chapter 6
# snippets import its functions.
import numpy as np


def visible(n_q, n_k, alignment="top-left"):
    """(n_q, n_k) booleans: True where query i may look at key j.

    top-left:     key j is visible to query i when j <= i (torch's is_causal=True).
    bottom-right: key j is visible to query i when j <= i + n_k - n_q (the last query sees every key,
                  as when new queries are appended after a cache of n_k - n_q earlier keys).
    """
    offset = {"top-left": 0, "bottom-right": n_k - n_q}[alignment]
    i = np.arange(n_q)[:, None]
    j = np.arange(n_k)[None, :]
    return j <= i + offset


def tile_kinds(mask, block_m, block_n):
    """Sort the tiles of a mask into 'F' (every entry visible), 'D' (some visible: needs the
    element-wise mask) and '.' (nothing visible: skip it). Tiles at the edges may be smaller."""
    n_q, n_k = mask.shape
    rows, cols = -(-n_q // block_m), -(-n_k // block_n)
    kinds = np.full((rows, cols), ".")
    for i in range(rows):
        for j in range(cols):
            tile = mask[i * block_m:(i + 1) * block_m, j * block_n:(j + 1) * block_n]
            if tile.all():
                kinds[i, j] = "F"
            elif tile.any():
                kinds[i, j] = "D"
    return kinds


def computed_tiles(n_q, block_m, block_n, n_k=None, alignment="top-left"):
    """Tiles a causal kernel computes (full + diagonal), without looking at any mask.

    Q block i holds rows i*block_m .. end_i - 1 with end_i = min((i+1)*block_m, n_q). Its last row sees
    the keys before end_i + offset, so the block needs ceil((end_i + offset) / block_n) K blocks, at least
    0 and at most all of them. With n_q = n_k = N (offset 0) that is ceil(min((i+1)*block_m, N) / block_n).
    """
    n_k = n_q if n_k is None else n_k
    offset = {"top-left": 0, "bottom-right": n_k - n_q}[alignment]
    q_blocks, k_blocks = -(-n_q // block_m), -(-n_k // block_n)
    total = 0
    for i in range(q_blocks):
        end = min((i + 1) * block_m, n_q)
        total += min(k_blocks, max(0, -(-(end + offset) // block_n)))
    return total


def show_mask(mask):
    print("       key j: " + " ".join(str(j % 10) for j in range(mask.shape[1])))
    for i, row in enumerate(mask):
        print(f"  query i={i:<2}  " + " ".join("#" if v else "." for v in row))


def show_tiles(kinds):
    print("           K block: " + " ".join(str(j % 10) for j in range(kinds.shape[1])))
    for i, row in enumerate(kinds):
        print(f"  Q block {i:<2}        " + " ".join(row))
    counts = {k: int((kinds == k).sum()) for k in "FD."}
    print(f"  full F: {counts['F']}, diagonal D: {counts['D']}, skipped .: {counts['.']}"
          f" (computed {counts['F'] + counts['D']} of {kinds.size})")


if __name__ == "__main__":
    n = 8
    print(f"Causal mask for N = {n} (# = visible, . = hidden):")
    show_mask(visible(n, n))
    mask = visible(n, n)
    print(f"\nVisible entries: {int(mask.sum())} of {mask.size} = n(n+1)/2 = {n * (n + 1) // 2}")

    print("\nTiles of the same mask, BLOCK_M = BLOCK_N = 2:")
    show_tiles(tile_kinds(mask, 2, 2))

    n, block_m, block_n = 10, 4, 2
    print(f"\nN = {n}, BLOCK_M = {block_m}, BLOCK_N = {block_n} (not equal, and N is not a multiple of 4):")
    show_tiles(tile_kinds(visible(n, n), block_m, block_n))
