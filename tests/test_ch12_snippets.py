"""Chapter 12 snippets: each prints what its page shows, and what it prints is true."""

from book import snippets


def test_decode_step_counts_programs_bytes_and_merges_exactly():
    stored, fresh = snippets.check("snippets/ch12/decode_step.py")
    assert fresh == stored
    assert "K and V of the cache: 32 MiB; 134 MFLOP; 4.0 FLOP per byte (the group size is 4)" in fresh
    assert "chapter 5's kernel: 32 programs for 132 SMs; reads 128 MiB (4x the cache)" in fresh
    assert "16 splits of 512 keys x 8 KV heads = 128 programs" in fresh  # the fewest splits that fill one wave
    assert "plus 0.50 MiB of partial states" in fresh  # 32 heads x 16 splits x 129 fp32 numbers, written and read
    assert "4 splits merged equal the direct softmax: True" in fresh


def test_chunked_prefill_equals_one_causal_pass_only_bottom_right():
    stored, fresh = snippets.check("snippets/ch12/chunked_prefill.py")
    assert fresh == stored
    assert "chunk 64-95: 32 queries against a cache of 96 keys" in fresh
    assert "chunks equal the single pass: True" in fresh
    assert "with top-left alignment instead: False" in fresh  # query 32 would see only key 0 .. 32 - 32


def test_a_server_loop_appends_keys_grows_lengths_and_reuses_one_planned_step():
    stored, fresh = snippets.check("snippets/ch12/server_loop.py")
    assert fresh == stored
    assert "token 3: lengths [8, 12]" in fresh  # each sequence grew by one token per step, from its own length
    assert fresh.count("equal to PyTorch within 1e-5: True") == 3
