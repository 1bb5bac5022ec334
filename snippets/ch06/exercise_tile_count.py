# Exercise 1: count the tiles a causal kernel computes for N = 3000 with two block shapes.
from causal_tiles import computed_tiles, tile_kinds, visible

n = 3000
whole = n // 128 * 128  # rows 0 to 2943 fill whole Q blocks of both shapes; the rest is the last Q block
for block_m, block_n in [(128, 64), (64, 128)]:
    q_blocks, k_blocks = -(-n // block_m), -(-n // block_n)
    computed = computed_tiles(n, block_m, block_n)
    kinds = tile_kinds(visible(n, n), block_m, block_n)
    assert computed == int((kinds != ".").sum())  # the formula agrees with the mask
    print(f"BLOCK_M = {block_m:>3}, BLOCK_N = {block_n:>3}: {q_blocks} x {k_blocks} = {q_blocks * k_blocks} tiles, "
          f"computed {computed} (diagonal {int((kinds == 'D').sum())}), skipped {q_blocks * k_blocks - computed}, "
          f"share computed {computed / (q_blocks * k_blocks):.3f}")
    # Rows 0 to whole - 1 need the same tiles as a sequence of that length; the last Q block needs the rest.
    before = computed_tiles(whole, block_m, block_n)
    last_rows = n - (q_blocks - 1) * block_m
    print(f"    Q blocks before row {whole}: {before} tiles; last Q block ({last_rows} real rows of {block_m}): "
          f"{computed - before} tiles of {block_m} x {block_n}")
