"""Chapter 12's floor benchmark: its views on a small fake result, and its row run end to end on a small shape
with a stand-in timer (no GPU needed; nothing is written)."""

from book.bench import decode_floor as bench

ROW = {"kind": "floor", "context": 8192, "kv_bytes": 32 * 2**20, "limit_us": 8.0, "empty_one_us": 2.0,
       "empty_two_us": 4.0, "ours_empty_us": 9.0, "ours_us": 20.0, "sdpa_cudnn_us": 22.0}
RESULT = {"rows": [{"kind": "copy", "bytes_per_s": 4.2e12, "ways": {}}, ROW]}


def test_table_has_every_graph_and_the_difference():
    text = bench.table(RESULT)
    assert "| 8,192 | 32 | 8.0 | 2.0 | 4.0 | 9.0 | 20.0 | 22.0 | 5.0 | 11.0 |" in text


def test_target_sentence_computes_what_sixty_percent_allows():
    text = bench.target(RESULT)
    assert "allows a step of at most 13.3 µs" in text  # 8.0 / 0.6
    assert "11.0 µs more than on the empty one for 32 MiB" in text
    assert "would take 12.0 µs, 67% of the limit; with one kernel, 10.0 µs, 80%." in text  # 8 / (4 + 8), 8 / (2 + 8)


def test_a_row_runs_end_to_end_with_a_stand_in_timer(monkeypatch, device):
    """The row's own code (inputs, the checks of both steps' outputs, the fields the views read) on a small cache;
    only the GPU timer is a stand-in, which says 10 us for every graph."""
    monkeypatch.setattr(bench, "gpu_ms_interleaved", lambda fns, **_: {name: 0.01 for name in fns})
    row = bench._row(100, bandwidth=3.0e12, progress=lambda message: None, device=device)
    assert row["ours_us"] == 10.0 and row["ours_empty_us"] == 10.0 and row["empty_two_us"] == 10.0
    assert row["kv_bytes"] == 2 * 8 * 100 * 128 * 2 and row["limit_us"] == row["kv_bytes"] / 3.0e12 * 1e6
    assert "| 100 | 0 |" in bench.table({"rows": [row]})
