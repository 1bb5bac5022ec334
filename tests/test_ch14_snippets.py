"""Chapter 14 snippets: each prints what its page shows, and what it prints is true."""

from book import snippets


def test_ring_steps_equal_one_gpu_and_zigzag_balances_the_causal_work():
    stored, fresh = snippets.check("snippets/ch14/ring_steps.py")
    assert fresh == stored
    assert "step 1: GPU 0 has GPU 3's, GPU 1 has GPU 0's" in fresh  # K and V move one GPU on per step
    assert fresh.count("equal to one GPU within 1e-12: True") == 4  # float64: the last bits vary between CPUs
    assert "causal=True  contiguous: equal" in fresh and "[36, 100, 164, 228], busiest / average 1.73" in fresh
    assert "causal=True  zigzag    :" in fresh and "[132, 132, 132, 132], busiest / average 1.00" in fresh


def test_ulysses_equals_one_gpu_and_counts_the_bytes_of_both_schemes():
    stored, fresh = snippets.check("snippets/ch14/ulysses_steps.py")
    assert fresh == stored
    assert "max difference from one GPU 0.0e+00" in fresh
    # ring: (P - 1) x K and V of N/P tokens; all-to-all: (P - 1)/P of Q, K, V and O of N/P tokens
    assert "32/8 heads on 2 GPUs: ring 256 MiB, all-to-all 640 MiB" in fresh
    assert "32/32 heads on 8 GPUs: ring 1,792 MiB, all-to-all 448 MiB" in fresh


def test_two_gloo_ranks_equal_one_process_in_output_and_every_gradient():
    stored, fresh = snippets.check("snippets/ch14/ring_two_ranks.py")
    assert fresh == stored
    assert "rank 0 holds positions [0, 1, 2, 9, 10, 11]" in fresh  # zigzag: one early and one late chunk
    assert fresh.count("output True, dQ True, dK True, dV True") == 2


def test_the_small_model_trained_over_two_ranks_follows_one_process():
    stored, fresh = snippets.check("snippets/ch14/train_two_ranks.py")
    assert fresh == stored
    assert "split over 2 ranks (zigzag)" in fresh
    assert "same losses as one process to 0.0001: True" in fresh  # float32 on a CPU: about 1e-6 apart
    assert "the loss went down: True" in fresh


def test_the_ring_figure_draws_every_visible_block_once_and_zigzag_balances_it():
    import pytest

    figure = pytest.importorskip("matplotlib.figure")
    from book.figures import ch14

    for layout in ("contiguous", "zigzag"):
        blocks = ch14.ring_blocks(4, layout)
        assert set(blocks) == {(a, c) for a in range(8) for c in range(a + 1)}  # the causal blocks, each once
        assert all(diagonal == (a == c) for (a, c), (_, _, diagonal) in blocks.items())
    assert ch14.work_per_rank(4, "contiguous") == [2, 6, 10, 14]  # the busiest does 1.75 times the average
    assert ch14.work_per_rank(4, "zigzag") == [8, 8, 8, 8]
    assert ch14.ring_blocks(4, "zigzag")[7, 0] == (0, 0, False)  # GPU 0's late piece meets its early one at step 0
    assert isinstance(ch14.ring_steps(), figure.Figure)
