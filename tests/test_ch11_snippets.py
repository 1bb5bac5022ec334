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
    assert fresh.count("below 1e-3") == 5
