"""The any-length benchmark: its views on made-up rows, the bottom-right float64 reference against the causal
reference it generalises, and rows measured on the CPU with a stand-in timer (the GPU run writes the real rows)."""

import warnings

import pytest
import torch

from book.bench import any_length as bench
from book.bench import by_name, real_models


def _length(mode, n, ours, at_neighbour, best=None):
    row = {"kind": "length", "mode": mode, "N": n, "neighbour": bench.neighbour(n), "batch": 8, "ours": ours,
           "at_neighbour": at_neighbour, "to_neighbour": ours / at_neighbour}
    if mode == "prefill":
        row.update(best_peer="sdpa_cudnn", best_peer_tflops=best, ratio=ours / best)
    return row


def _chunk(n_q, n_k, ours, cudnn, flash, efficient):
    row = {"kind": "chunked", "Nq": n_q, "Nk": n_k, "batch": 16, "ours": ours}
    bench._peers(row, list(bench.BACKENDS), {n: 1.0 / t for n, t in (("sdpa_cudnn", cudnn), ("sdpa_flash", flash),
                                                                        ("sdpa_efficient", efficient)) if t}, 1e12)
    row["ratio"] = None if row["best_peer_tflops"] is None else ours / row["best_peer_tflops"]
    return row


ROWS = [_length("prefill", 3000, 500, 510, 520), _length("training", 3000, 400, 430),  # 0.98 met, 0.93 missed
        _chunk(1000, 8192, 500, None, 0.4, 0.2), _chunk(2048, 32768, 300, None, None, None)]


def test_registered_under_chapter_11_with_every_kernel_it_calls():
    benchmark = by_name("any_length")
    assert benchmark.chapter == "ch11" and benchmark.awaiting_gpu
    assert "kernels/flash_attention_backward_hopper.py" in benchmark.sources
    assert "book/bench/real_models.py" in benchmark.sources  # it measures through the real-model helpers


def test_neighbours_and_flops():
    assert [bench.neighbour(n) for n in bench.LENGTHS] == [1024, 2944, 4992, 8192, 12288]
    assert bench.chunk_flops(1, 1, 4, 4, 1) == 4 * (16 - 8)  # Nq = Nk: the causal count, 4·N²/2
    assert bench.chunk_flops(2, 3, 2, 10, 5) == 4 * 2 * 3 * 5 * (20 - 2)


def test_views_show_every_row_and_the_misses():
    table = bench.length_table({"rows": ROWS})
    assert "| prefill | 3,000 | 2,944 |" in table and "| training | 3,000 |" in table
    chunked = bench.chunked_table({"rows": ROWS})
    assert "1,000" in chunked and "32,768" in chunked and "1.25×" in chunked  # 500 against FA2's 400
    text = bench.targets({"rows": ROWS})
    assert text.startswith('!!! warning') and "training N = 3,000: 0.930" in text
    assert "Chunks: met in 1 of 1 rows" in text  # the chunk no backend took is not counted
    summary = bench.summary({"rows": ROWS})  # the lines a reader sees with the notes closed
    assert "runs at prefill 0.98 (lowest at N = 3,000) and training 0.93 (lowest at N = 3,000)" in summary
    assert summary.endswith("A chunked prefill runs at 1.25× the fastest SDPA backend that takes its lower-right "
                            "causal mask.")  # the chunk no backend took is left out


def test_bottom_right_reference_is_the_causal_one_when_lengths_are_equal_and_sees_the_cache_otherwise():
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    torch.testing.assert_close(bench.reference_bottom_right(q, k, v, 1, 1), real_models.reference(q, k, v, 1, 1)[0])
    keys = torch.randn(2, 2, 9, 8)
    values = torch.randn(2, 2, 9, 8)
    chunk = bench.reference_bottom_right(q[:, :, :2], keys, values, 0, 0)  # 2 queries, the last of 9 positions
    full = bench.reference_bottom_right(torch.cat([torch.randn(2, 4, 7, 8), q[:, :, :2]], 2), keys, values, 0, 0)
    torch.testing.assert_close(chunk, full[:, 7:])


def test_rows_measured_on_the_cpu(monkeypatch):
    """The measuring path on the CPU (kernels under Triton's interpreter), with a stand-in timer and a small
    grouped model: every implementation that ran is checked, then timed; cuDNN is None with a reason."""
    monkeypatch.setattr(bench, "MODEL", real_models.Model("tiny grouped", 4, 2, 64))
    monkeypatch.setattr(bench, "DTYPE", "float16")
    timed = []

    def timer(fns):
        timed.append(sorted(fns))
        return {name: 2.0 if name == "ours" else 1.0 for name in fns}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prefill, training = bench.measure_length(100, batch=1, device="cpu", timer=timer)
        chunk = bench.measure_chunk(20, 100, batch=1, device="cpu", timer=timer)
    assert prefill["neighbour"] == 128 and prefill["to_neighbour"] == pytest.approx(0.5 * 100**2 / 128**2)
    assert prefill["ours_err"] < bench.FORWARD_RTOL["float16"] and prefill["neighbour_err"] is not None
    assert training["ours_grad_err"] < bench.GRAD_RTOL["float16"] and "ratio" in training
    assert prefill["sdpa_cudnn"] is None and prefill["sdpa_cudnn_skipped"]
    assert chunk["ours_err"] < bench.FORWARD_RTOL["float16"]
    assert chunk["ours"] == pytest.approx(bench.chunk_flops(1, 4, 20, 100, 64) / 2e-3 / 1e12)
    assert "ours" in timed[0] and "neighbour" in timed[0] and timed[1] == ["neighbour", "ours"]
