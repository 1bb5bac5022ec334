"""Chapter 1 snippets: each prints what its page shows, and its numbers are right."""

from book import snippets


def test_attention_matrix_memory():
    stored, fresh = snippets.check("snippets/ch01/attention_matrix_memory.py")
    assert fresh == stored
    assert "= 68.7 GB (10^9 bytes) = 64 GiB (2^30 bytes)" in fresh
    assert "fp16 halves it: 32 GiB for one head, which fits." in fresh
    assert "32 heads at once: 32 x 32 GiB = 1,024 GiB, which does not." in fresh


def test_arithmetic_intensity():
    stored, fresh = snippets.check("snippets/ch01/arithmetic_intensity.py")
    assert fresh == stored
    assert "ridge point: 295 FLOP/byte" in fresh
    assert "0.08 FLOP/byte  -> memory-bound" in fresh
