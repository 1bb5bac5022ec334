"""The chapter 5 benchmark's views, fed small fake results (no GPU): they render and state the right verdicts."""

import json

from book import render
from book.bench import by_name
from book.bench import flash_attention as bench


def _speed(d, n, causal, ours, fa2, cudnn=None, efficient=100.0, naive=20.0):
    b, h = bench.TOKENS // n, bench.HEADS[d]
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    row = {"kind": "speed", "D": d, "N": n, "B": b, "H": h, "causal": causal}
    for key, tf in {"ours": ours, "sdpa_flash": fa2, "sdpa_cudnn": cudnn, "sdpa_efficient": efficient,
                    "naive": naive}.items():
        row[f"{key}_TFLOPs"] = tf
        row[f"{key}_ms"] = None if tf is None else flops / (tf * 1e12) * 1e3
        ran = tf is not None
        row[f"{key}_max_err"], row[f"{key}_rel_err"], row[f"{key}_ok"] = (2e-3, 3e-4, True) if ran else (None,) * 3
    return row


def _old_speed(*args, **kwargs):
    """A speed row as results files measured before every implementation was checked have it."""
    row = {key: value for key, value in _speed(*args, **kwargs).items() if not key.endswith(("_err", "_ok"))}
    return {**row, "rel_err_vs_sdpa": 3e-4}


def _memory(n, naive_gib, ours_gib=0.01, sdpa_gib=0.02):
    row = {"kind": "memory", "N": n, "B": 1, "H": 8, "D": 64, "inputs_GiB": 0.01, "naive_oom": naive_gib is None,
           "naive_peak_GiB": naive_gib, "ours_peak_GiB": ours_gib, "scores_GiB": 8 * n * n * 2 / 2**30,
           "naive_ms": None if naive_gib is None else 5.0, "ours_ms": 1.0}
    if sdpa_gib is not None:
        row.update({f"{key}_peak_GiB": sdpa_gib for key in bench.BACKENDS})
    return row


def _result(rows):
    return {"schema": 1, "benchmark": "flash_attention", "provenance": {"gpu": "Fake GPU"}, "rows": rows}


MEMORY = [_memory(4096, 0.6), _memory(8192, 2.3), _memory(16384, 9.1), _memory(32768, None)]
GOOD = _result([_speed(64, 1024, False, 250.0, 280.0), _speed(64, 2048, False, 390.0, 300.0, 430.0),
                _speed(64, 2048, True, 330.0, 260.0, None), _speed(128, 16384, True, 420.0, 310.0, 540.0, naive=None)]
               + MEMORY)
BAD = _result([_speed(64, 2048, False, 390.0, 300.0), _speed(128, 4096, True, 280.0, 300.0)] + MEMORY)


def test_registered_for_chapter_5():
    benchmark = by_name("flash_attention")
    assert benchmark.chapter == "ch05"
    assert set(benchmark.views) == {"tflops-plot", "table", "target", "versus-plain", "checks", "memory-plot",
                                    "memory-table", "memory-ratio"}
    assert "kernels/flash_attention.py" in benchmark.sources


def test_target_met_ignores_small_n():
    text = bench.target(GOOD)
    assert text.startswith("!!! success") and "Target met" in text
    # N = 1024 (0.89x) is below TARGET_FROM and does not count; 330/260 = 1.27, 390/300 = 1.30, 420/310 = 1.35.
    assert "1.27× to 1.35×" in text and "N = 2,048, causal" in text


def test_target_not_met_names_the_worst_shape():
    text = bench.target(BAD)
    assert text.startswith("!!! failure") and "Target not met" in text
    assert "0.93×" in text and "D = 128, N = 4,096, causal (280 vs 300 TFLOP/s)" in text


def test_target_without_fa2_backend():
    rows = [dict(_speed(64, 4096, False, 300.0, None))]
    assert "Target not checked" in bench.target(_result(rows))


def test_table_shows_ratios_and_missing_peers():
    text = bench.table(GOOD)
    assert "| Ours / FA2 |" in text and "1.30×" in text and "0.91×" in text  # 390/430 vs cuDNN
    assert "—" in text  # cuDNN did not run for one row; naive ran out of memory for another
    assert text.count("\n") == 1 + len([r for r in GOOD["rows"] if r["kind"] == "speed"])


def test_memory_table_records_out_of_memory():
    text = bench.memory_table(GOOD)
    assert "out of memory" in text and "32,768" in text
    assert "SDPA: cuDNN peak GiB" in text and "not in this results file" not in text


def test_memory_table_without_sdpa_peaks_says_so():
    old = _result([_memory(4096, 0.5, sdpa_gib=None), _memory(8192, None, sdpa_gib=None)])
    text = bench.memory_table(old)
    assert "SDPA: cuDNN" not in text and "not in this results file" in text


def test_memory_ratio_counts_matrices():
    # 0.5 GiB against one 8-head fp16 matrix of 0.25 GiB at N = 4096: two matrices.
    text = bench.memory_ratio(_result([_memory(4096, 0.5), _memory(8192, None)]))
    assert "2.00× to 2.00×" in text and "all 8 heads" in text


def test_checks_reports_every_implementation():
    rows = [_speed(64, 2048, False, 390.0, 300.0, 430.0), _speed(64, 4096, True, 390.0, 300.0, None)]
    rows[1].update({"sdpa_efficient_ok": False, "sdpa_efficient_max_err": 0.5, "sdpa_efficient_TFLOPs": None})
    text = bench.checks(_result(rows))
    for label in bench.LABELS.values():
        assert f"| {label} |" in text
    assert "| SDPA: cuDNN | 1 of 2 |" in text  # cuDNN did not run for one row
    assert "| 0.5 |" in text and "D=64 N=4,096" in text  # the wrong one is named


def test_checks_on_old_results_is_a_note():
    text = bench.checks(_result([_old_speed(64, 2048, False, 390.0, 300.0)]))
    assert text.startswith('!!! note "Only our kernel was checked') and "3.0e-04" in text


def test_plots_render():
    for view in (bench.tflops_plot, bench.memory_plot):
        svg = render.svg_bytes(view(GOOD))
        assert svg.startswith(b"<?xml") and b"</svg>" in svg


def test_rows_are_flat_json():
    for row in GOOD["rows"]:
        assert all(isinstance(v, (int, float, str, bool)) or v is None for v in row.values())
    json.dumps(GOOD)


def test_versus_plain_names_least_and_most_per_panel():
    rows = [_speed(64, 1024, False, 250.0, 280.0, naive=50.0), _speed(64, 2048, False, 390.0, 300.0, naive=30.0),
            _speed(128, 16384, True, 420.0, 310.0, naive=None)]
    text = bench.versus_plain(_result(rows))
    assert "- D = 64, non-causal: 5.0× at N = 1,024 (the least) to 13.0× at N = 2,048 (the most)." in text
    assert "D = 128" not in text  # the plain version did not run there
