# How many tiles does a causal kernel compute? A formula, checked two ways: against the tiles of the
# mask itself, and against the tiles that chapter 5's simulator actually computes.
import sys
from pathlib import Path

import numpy as np
from causal_tiles import computed_tiles, tile_kinds, visible

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ch05"))
from simulator import flash_attention, reference  # noqa: E402  (chapter 5's numpy simulator)

rng = np.random.default_rng(0)
d = 4  # the head dim does not change which tiles are computed; keep the simulation quick
cases = [(8, 2, 2), (16, 4, 4), (10, 4, 2), (18, 8, 4), (100, 16, 32), (1000, 64, 32), (1000, 128, 64),
         (4096, 128, 64)]
print("    N  BLOCK_M  BLOCK_N  all tiles  formula  from mask  simulator  diagonal  skipped  output ok")
for n, block_m, block_n in cases:
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    o, stats = flash_attention(q, k, v, block_m, block_n, causal=True)
    kinds = tile_kinds(visible(n, n), block_m, block_n)
    from_mask = int((kinds != ".").sum())
    assert from_mask == computed_tiles(n, block_m, block_n) == stats["tiles_computed"]
    assert stats["tiles_masked"] == int((kinds == "D").sum())
    ok = np.allclose(o, reference(q, k, v, causal=True), atol=1e-10)
    print(f"{n:>5} {block_m:>8} {block_n:>8} {kinds.size:>10} {computed_tiles(n, block_m, block_n):>8} "
          f"{from_mask:>10} {stats['tiles_computed']:>10} {stats['tiles_masked']:>9} "
          f"{stats['tiles_skipped']:>8}  {ok}")

print("\nShare of the tiles a causal kernel computes, BLOCK_M = 128, BLOCK_N = 64:")
print("     N  computed / all  best possible speed-up")
for n in [1024, 2048, 4096, 8192, 16384]:
    everything = -(-n // 128) * -(-n // 64)
    share = computed_tiles(n, 128, 64) / everything
    print(f"{n:>6}  {share:>14.3f}  {1 / share:>21.2f}x")
