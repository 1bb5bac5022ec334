"""The real-model decode benchmark: its grid, its views and verdict on made-up rows, its correctness gate, and (on a
GPU) one small row of each kind measured for real."""

import pytest
import torch

from book.bench import by_name
from book.bench import decode_models as bench


def _grid(model, batch, context, ours, cudnn, flash, efficient, *, plain=(90.0, 30.0, 25.0)):
    name, heads, kv_heads, head_dim = next(m for m in bench.MODELS if m[0] == model)
    decode_plain, decoder_plain, cudnn_plain = plain
    return {"kind": "grid", "model": name, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "batch": batch, "context": context, "kv_bytes": 2 * batch * kv_heads * context * head_dim * 2,
            "splits": 8, "block_n": 128, "stages": 3, "ours_us": ours, "ours_decode_us": None,
            "sdpa_cudnn_us": cudnn, "sdpa_flash_us": flash, "sdpa_efficient_us": efficient,
            "ours_plain_us": decoder_plain, "ours_decode_plain_us": decode_plain,
            "sdpa_cudnn_plain_us": None if cudnn is None else cudnn_plain, "sdpa_flash_plain_us": flash,
            "sdpa_efficient_plain_us": efficient, "ours_host_us": 20.0, "ours_decode_host_us": 80.0,
            "sdpa_cudnn_host_us": None if cudnn is None else 22.0, "sdpa_flash_host_us": 15.0,
            "sdpa_efficient_host_us": 15.0}


ROWS = [
    _grid("Llama-3.1-8B", 1, 20000, 10.0, 12.0, 20.0, 30.0),  # ahead in graphs; plain decode() behind
    _grid("Qwen2.5-7B", 4, 2048, 10.0, 9.0, 11.0, 40.0, plain=(20.0, 18.0, 25.0)),  # behind in graphs, ahead plain
    _grid("Gemma 7B", 1, 2048, 10.0, None, 12.0, 14.0),  # cuDNN refused: no plain-call comparison
    {"kind": "mixed", "model": "Llama-3.1-8B", "heads": 32, "kv_heads": 8, "head_dim": 128, "batch": 16,
     "long": 100000, "short": 2048, "splits": 4, "kv_bytes_read": 500 * 2**20, "kv_bytes_padded": 6000 * 2**20,
     "ours_us": 150.0, "sdpa_cudnn_us": 1200.0, "sdpa_flash_us": 1500.0, "sdpa_efficient_us": None,
     "splits_by_shapes": 1, "ours_by_shapes_us": 600.0},
    {"kind": "short_in_long", "model": "Llama-3.1-8B", "heads": 32, "kv_heads": 8, "head_dim": 128, "batch": 1,
     "keys": 2048, "capacity": 131072, "splits_capacity": 16, "splits_exact": 16, "ours_capacity_us": 8.0,
     "ours_exact_us": 7.6, "sdpa_cudnn_us": 9.0},
    {"kind": "host", "model": "Llama-3.1-8B", "batch": 1, "context": 20000, "splits": 16, "triton": "3.6.0",
     **{f"{key}_us": value for key, value in (("decode_checked", 120.0), ("decode", 70.0), ("plan", 50.0),
                                                ("call", 18.0), ("call_one_launch", 10.0), ("check", 1.0),
                                                ("empty_triton_launch", 6.0), ("torch_add", 3.0),
                                                ("sdpa_cudnn", 22.0))}},
]
RESULT = {"rows": ROWS}


def test_the_grid_names_the_models_of_the_issue():
    heads = {name: (q, kv, d) for name, q, kv, d in bench.MODELS}
    assert heads["Llama-3.1-8B"] == (32, 8, 128) and heads["Qwen2.5-7B"] == (28, 4, 128)
    assert heads["Llama-3.1-70B, 1/8 shard"] == (8, 1, 128) and heads["Gemma 7B"] == (16, 16, 256)
    assert {q // kv for _, q, kv, _ in bench.MODELS} == {1, 4, 7, 8}
    assert bench.BATCHES == [1, 4, 16, 64] and bench.CONTEXTS == [2048, 20000, 100000]


def test_graphs_table_gives_the_fastest_backend_over_ours():
    text = bench.graphs_table(RESULT)
    assert "| Llama-3.1-8B | 32/8 | 128 | 1 | 20,000 | 10.0 | 12.0 | 20.0 | 30.0 | 1.2000× |" in text
    assert "| Qwen2.5-7B | 28/4 | 128 | 4 | 2,048 | 10.0 | 9.0 | 11.0 | 40.0 | 0.9000× |" in text
    assert "| Gemma 7B | 16/16 | 256 | 1 | 2,048 | 10.0 | — | 12.0 | 14.0 | 1.2000× |" in text


def test_plain_table_compares_both_of_our_calls_with_cudnns_plain_call():
    text = bench.plain_table(RESULT)
    assert "| Llama-3.1-8B | 1 | 20,000 | 90.0 | 30.0 | 25.0 | 0.278× | 0.833× | 80.0 | 20.0 | 22.0 |" in text
    assert "| Qwen2.5-7B | 4 | 2,048 | 20.0 | 18.0 | 25.0 | 1.250× | 1.389× |" in text


def test_headline_counts_the_targets_and_gives_the_mixed_batch():
    text = bench.headline(RESULT)
    assert "| in graphs: level with the fastest SDPA backend, or ahead (within 2%) | 2 of 3 rows | missed |" in text
    assert "| plain calls: a Decoder at least 1.0× cuDNN's plain call | 1 of 2 rows | missed |" in text
    assert "copy reference" not in text  # no row of 256 MiB here: no line rather than "0 of 0"
    assert "| 8.0× faster | (no target) |" in text  # cuDNN 1,200 us on the padded cache, ours 150 us


def test_targets_count_each_comparison_and_name_the_misses():
    text = bench.targets(RESULT)
    assert text.startswith('!!! warning "Targets')
    assert "In graphs, against the fastest SDPA backend: 2 of 3 rows at or above 0.98× (below: Qwen2.5-7B batch 4 " \
           "2,048 keys 0.9000×). At or above 1.00×: 2 of 3." in text
    assert "Plain calls of a Decoder (planned once), against cuDNN plain calls: 1 of 2 rows" in text  # Gemma: refused
    assert "(below: Llama-3.1-8B batch 1 20,000 keys 0.8333×)" in text  # 25 / 30
    assert "Plain calls of decode() (the one-line convenience, not a target), against cuDNN: 1 of 2" in text
    assert "Llama-3.1-8B batch 1 20,000 keys 0.2778×" in text
    level = {"rows": [_grid("Qwen2.5-7B", 4, 2048, 10.0, 9.9, 11.0, 40.0, plain=(20.0, 18.0, 25.0))]}
    text = bench.targets(level)  # 0.990x in graphs: level, not ahead; the Decoder's plain call ahead
    assert text.startswith('!!! success "Targets')
    assert "1 of 1 rows at or above 0.98×. At or above 1.00×: 0 of 1" in text


def test_the_other_views_read_their_rows():
    assert "reads 500 MiB of K and V in 150.0 µs" in bench.mixed_sentence(RESULT)
    assert "cuDNN, padded to the longest, reads 6,000 MiB in 1,200.0 µs: 8.000× ours" in bench.mixed_sentence(RESULT)
    assert "(4 splits); planned from the shapes alone it takes 1 split and 600.0 µs (874 GB/s)" in \
        bench.mixed_sentence(RESULT)
    assert "| 1 | 2,048 | 131,072 | 16 | 8.0 | 16 | 7.6 | 9.0 | 0.950× |" in bench.short_in_long_table(RESULT)
    host = bench.host_table(RESULT)
    assert "| a Decoder's call: shape check and two launches | 18.0 |" in host and "Triton 3.6.0" in host
    empty = {"rows": []}
    assert bench.host_table(empty).startswith("This run did not")
    assert bench.mixed_sentence(empty).startswith("This run did not")


def test_a_wrong_answer_of_ours_stops_the_run_and_a_wrong_backend_is_not_timed():
    expected = {0: torch.ones(1, 2, 1, 4)}
    row = {}
    kept = bench._checked(row, {"sdpa_flash": lambda: torch.zeros(1, 2, 1, 4),
                                "sdpa_cudnn": lambda: (_ for _ in ()).throw(RuntimeError("no kernel\nmore")),
                                "sdpa_efficient": lambda: torch.ones(1, 2, 1, 4)}, expected)
    assert list(kept) == ["sdpa_efficient"] and row["sdpa_efficient_error"] == 0.0
    assert row["sdpa_cudnn_refused"] == "no kernel" and "relative error" in row["sdpa_flash_refused"]
    with pytest.raises(AssertionError, match="ours"):
        bench._checked({}, {"ours": lambda: torch.zeros(1, 2, 1, 4)}, expected)


def test_registered_for_chapter_12_and_precompiled_model_by_model():
    from book.bench import precompile

    benchmark = by_name("decode_models")
    assert benchmark.chapter == "ch12" and "kernels/flash_decoding.py" in benchmark.sources
    parts = precompile.parts_of("decode_models")
    assert len(parts) == len(bench.MODELS) + 1 and parts[-1] == {"skip": ["grid_rows"]}


@pytest.mark.gpu
def test_gpu_one_row_of_each_kind(monkeypatch):
    monkeypatch.setattr(bench, "BUDGET_MS", 50)
    monkeypatch.setattr(bench, "HOST_CALLS", 5)
    row = bench.grid_row(("a small GQA model", 8, 2, 64), 2, 3000)
    assert row["ours_us"] > 0 and row["ours_plain_us"] > 0 and row["ours_host_us"] > 0
    assert row["ours_error"] < bench.RTOL
    assert bench.grid_row(("too large", 64, 64, 256), 64, 100000) is None  # over MAX_KV_BYTES: not measured
    monkeypatch.setattr(bench, "MIXED", (3, 5000, 300))
    mixed = bench.mixed_row()
    assert mixed["ours_error"] < bench.RTOL and mixed["kv_bytes_read"] < mixed["kv_bytes_padded"]
    monkeypatch.setattr(bench, "SHORT_IN_LONG", (300, 8192))
    short = bench.short_in_long_row(2)
    assert short["ours_capacity_us"] > 0 and short["ours_exact_error"] < bench.RTOL
    host = bench.host_row()
    assert 0 < host["check_us"] < host["call_us"] < host["decode_us"]


def test_the_85_percent_target_is_chapter_12s_own():
    """decode_models restates decode's target constants (importing them at module level would be circular); they
    must stay equal, or the chapter would hold its two grids to different targets."""
    from book.bench import decode

    assert (bench.LARGE_BYTES, bench.TARGET_LARGE) == (decode.LARGE_BYTES, decode.TARGET_LARGE)
