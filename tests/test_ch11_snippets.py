"""Chapter 11 snippets: each prints what its page shows, and what it prints is true."""

from book import snippets


def test_tile_costs_count_products_and_atomic_bytes():
    stored, fresh = snippets.check("snippets/ch11/tile_costs.py")
    assert fresh == stored
    assert "1,048,576 FLOPs per matrix product; 262,144 tiles" in fresh  # 2 * 64 * 64 * 128; 4 * 16 * 64 * 64
    assert "32 KiB added into dQ per tile, 8.0 GiB per backward" in fresh  # 64 * 128 * 4 B; times 262,144
    assert "26x the bytes of Q, K, V, O and dO together (320 MiB)" in fresh


def test_every_step_computes_the_same_gradients():
    stored, fresh = snippets.check("snippets/ch11/every_step.py")
    assert fresh == stored
    assert fresh.count("below 1e-3") == 6  # steps 1 and 2, then steps 3 to 7


def test_shared_traffic_counts_bytes_per_block_against_tensor_time():
    stored, fresh = snippets.check("snippets/ch11/shared_traffic.py")
    assert fresh == stored
    # Step 8 at head dim 64: per warpgroup Q, dO (twice each), K, V: 6 x 8 KiB; dQ: 2 x (16 + 8); dSᵀ 16; dQ's
    # share 2 x 16; Q and dO arriving 16. Five products of 2 x 128 x 64 x 64 FLOPs at 4096 per clock: 1,280.
    assert "head dim 64, step 8: 208 KiB, 1,664 clocks of shared memory against 1,280 of tensor cores (1.30x)" in fresh
    assert "head dim 64, step 9: 176 KiB" in fresh  # K and V no longer read: 2 x 2 x 8 KiB less
    assert "head dim 64, step 10: 160 KiB, 1,280 clocks" in fresh  # dQ: 16 + 16 instead of 2 x (16 + 8)
    assert "head dim 128, step 8: 368 KiB, 2,944 clocks of shared memory against 2,560" in fresh
