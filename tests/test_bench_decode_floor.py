"""Chapter 12's floor benchmark: its views on a small fake result, and its row run end to end on a small shape
with a stand-in timer (no GPU needed; nothing is written)."""

from book.bench import decode_floor as bench

ROW = {"kind": "floor", "pass": 0, "batch": 1, "context": 8192, "kernels": 2, "kv_bytes": 32 * 2**20, "limit_us": 8.0,
       "empty_one_us": 2.0, "empty_two_us": 4.0, "ours_empty_us": 9.0, "ours_us": 20.0, "sdpa_cudnn_us": 22.0}
LARGE = {"kind": "floor", "pass": 0, "batch": 64, "context": 1024, "kernels": 1, "kv_bytes": 256 * 2**20,
         "limit_us": 64.0, "empty_one_us": 2.0, "empty_two_us": 4.0, "ours_empty_us": 10.0, "ours_us": 80.0,
         "sdpa_cudnn_us": 78.0}
WRITTEN = {"ours_written_us": 24.0, "sdpa_cudnn_written_us": 25.5}
LAYERED = {"layers": 32, "layer_empty_one_us": 1.0, "layer_empty_two_us": 2.0, "layer_ours_empty_us": 5.0,
           "layer_ours_us": 12.5, "layer_sdpa_cudnn_us": 16.0, "layer_ours_no_pdl_us": 14.0,
           "layer_gemms_us": 30.0, "layer_gemms_ours_us": 42.0, "layer_gemms_ours_no_pdl_us": 43.0,
           "layer_gemms_sdpa_cudnn_us": 45.0}
RESULT = {"rows": [{"kind": "copy", "bytes_per_s": 4.2e12, "ways": {}}, ROW | WRITTEN | LAYERED, LARGE,
                   ROW | LAYERED | {"pass": 1, "ours_us": 21.0, "layer_ours_us": 13.0},
                   LARGE | {"pass": 1, "sdpa_cudnn_us": 80.0}]}


def test_table_has_every_graph_and_the_difference():
    text = bench.table(RESULT)
    assert "| 1 | 8,192 | 32 | 2 | 8.0 | 2.0 | 4.0 | 9.0 | 20.0 | 22.0 | 5.0 | 11.0 |" in text
    # one kernel (one split, no merge): the fixed cost subtracts one empty kernel, not two
    assert "| 64 | 1,024 | 256 | 1 | 64.0 | 2.0 | 4.0 | 10.0 | 80.0 | 78.0 | 8.0 | 70.0 |" in text
    assert text.count("\n| 1 | 8,192") == 1  # the first pass only


def test_target_sentence_computes_what_sixty_percent_allows():
    text = bench.target(RESULT)
    assert "allows a step of at most 13.33 µs" in text  # 8.0 / 0.6
    assert "11.0 µs more than on the empty one for 32 MiB" in text
    # 8 / (4 + 8), 8 / (2 + 8)
    assert "would take 12.00 µs, 66.7% of the copy reference; with one kernel, 10.00 µs, 80.0%." in text


def test_large_table_takes_the_256_mib_shape_apart():
    text = bench.large(RESULT)
    # 64 / 0.85 = 75.3; 64 / 80, 64 / 78; empty 10.0, own fixed 10 - 2 (one kernel), reading 70 = 1.09 x 64;
    # 10 + 64 = 74.0, 64 / 74 = 86%
    assert ("| 64 | 1,024 | 256 | 64.0 | 75.3 | 80.0 (80%) | 78.0 (82%) | 10.0 | 8.0 | 70.0 | 1.09 | 74.0 (86%) |"
            in text)
    assert "| 1 | 8,192" not in text  # 32 MiB is not a large shape
    assert text.count("\n| 64 | 1,024") == 1  # the first pass only


def test_clearing_table_sets_the_two_ways_of_clearing_side_by_side():
    text = bench.clearing(RESULT)
    # ours 20.0 read, 24.0 written (4.0 added); cuDNN 22.0 and 25.5 (3.5); 8.0 / 24.0 of the limit
    assert "| 1 | 8,192 | 32 | 8.0 | 20.0 | 24.0 | 4.0 | 22.0 | 25.5 | 3.5 | 33% |" in text
    assert "| 64 | 1,024" not in text  # a row without the written timings is left out
    assert "added 3.5 to 4.0 µs to a step." in text
    assert bench.clearing({"rows": [LARGE]}).startswith("This run did not time")


def test_layers_table_sets_a_step_alone_beside_a_step_per_layer():
    text = bench.layers(RESULT)
    # two empty 4.0 / 2.0, ours 20.0 / 12.5, cuDNN 22.0 / 16.0; 8 / 20, 8 / 12.5, 8 / 16
    assert "| 1 | 8,192 | 32 | 8.0 | 4.0 | 2.0 | 20.0 | 12.5 | 22.0 | 16.0 | 40% | 64% | 50% |" in text
    assert "| 64 | 1,024" not in text  # a row without the per-layer timings is left out
    assert "for each of 32 layers" in text and "changed by at most 4.0%" in text  # 13.0 / 12.5
    assert "our step takes 12.50 µs per layer, 64.0% of the copy reference (40.0% alone)" in text
    assert "60% of the copy reference allows 13.33 µs" in text
    assert "would take 10.00 µs, 80.0% of the copy reference" in text
    assert "takes 5.00 µs per layer: 3.00 µs of its own fixed cost" in text
    assert bench.layers({"rows": [LARGE]}).startswith("This run did not time")


def test_with_gemms_table_takes_the_gemms_off_each_layer():
    text = bench.with_gemms(RESULT)
    # added: 42 - 30 = 12, 43 - 30 = 13, 45 - 30 = 15; 15 / 12; 8 / 12; back to back 12.5 and 14.0
    assert "| 1 | 8,192 | 8.0 | 30.0 | 12.0 | 13.0 | 15.0 | 1.250 | 67% | 12.5 | 14.0 |" in text
    assert "our step adds 12.00 µs to a layer, 66.7% of the copy reference (60% allows 13.33 µs)" in text
    assert bench.with_gemms({"rows": [LARGE]}).startswith("This run did not time")


def test_repeat_table_compares_the_two_passes():
    text = bench.repeat(RESULT)
    assert "| 1 | 8,192 | 20.0 | 21.0 | 22.0 | 22.0 | 1.100 | 1.048 | 5.0% | 4.8% |" in text  # 21 / 20; 20 / 21
    assert "| 64 | 1,024 | 80.0 | 80.0 | 78.0 | 80.0 | 0.975 | 1.000 | 2.6% | 2.6% |" in text
    assert "changed by at most 5.0%, and the ratio of the two by at most 4.8%." in text
    assert bench.repeat({"rows": [ROW]}) == "This run has one pass."


def test_a_row_runs_end_to_end_with_a_stand_in_timer(monkeypatch, device):
    """The row's own code (inputs, the checks of both steps' outputs, the fields the views read) on a small cache;
    only the GPU timer is a stand-in, which says 10 us for every graph."""
    monkeypatch.setattr(bench, "gpu_ms_interleaved", lambda fns, **_: {name: 0.01 for name in fns})
    monkeypatch.setattr(bench, "LAYERS", 2)  # the interpreter runs each layer's step once, for the output check
    row = bench._row(2, 100, bandwidth=3.0e12, progress=lambda message: None, device=device, pass_=1)
    assert row["ours_us"] == 10.0 and row["ours_empty_us"] == 10.0 and row["empty_two_us"] == 10.0
    assert row["ours_written_us"] == 10.0  # timed again with the L2 cleared by writing
    assert row["layers"] == 2 and row["layer_ours_us"] == 5.0  # one graph of both layers, divided by 2
    assert row["kv_bytes"] == 2 * 2 * 8 * 100 * 128 * 2 and row["limit_us"] == row["kv_bytes"] / 3.0e12 * 1e6
    assert row["pass"] == 1 and row["batch"] == 2 and row["kernels"] in (1, 2)
    assert "| 2 | 100 | 1 |" in bench.table({"rows": [row | {"pass": 0}]})
