# Exercise 1: count the tiles a causal kernel computes for N = 3000 with two block shapes.
from causal_tiles import computed_tiles, tile_kinds, visible

n = 3000
for block_m, block_n in [(128, 64), (64, 128)]:
    q_blocks, k_blocks = -(-n // block_m), -(-n // block_n)
    computed = computed_tiles(n, block_m, block_n)
    kinds = tile_kinds(visible(n, n), block_m, block_n)
    assert computed == int((kinds != ".").sum())  # the formula agrees with the mask
    print(f"BLOCK_M = {block_m:>3}, BLOCK_N = {block_n:>3}: {q_blocks} x {k_blocks} = {q_blocks * k_blocks} tiles, "
          f"computed {computed} (diagonal {int((kinds == 'D').sum())}), skipped {q_blocks * k_blocks - computed}, "
          f"share computed {computed / (q_blocks * k_blocks):.3f}")
