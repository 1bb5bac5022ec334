"""The chapter 4 benchmark's views, fed small fake results (no GPU): they render and state the right verdicts."""

import pytest

from book import render
from book.bench import by_name
from book.bench import softmax as bench
from kernels.softmax import launch_config


def _row(dtype, n_cols, triton_gbps, torch_gbps, copy_gbps=3000.0):
    nbytes = 2 * bench.TENSOR_BYTES
    ms = lambda g: None if g is None else nbytes / (g * 1e9) * 1e3  # noqa: E731
    config = launch_config(n_cols)
    return {"dtype": dtype, "n_cols": n_cols, "n_rows": bench.TENSOR_BYTES // (n_cols * 4), "MiB": 512.0,
            "path": config["path"], "block_size": config["block_size"],
            "rows_per_program": config["rows_per_program"], "num_warps": config["num_warps"],
            "triton_ms": ms(triton_gbps), "torch_ms": ms(torch_gbps), "copy_ms": ms(copy_gbps),
            "triton_GBps": triton_gbps, "torch_GBps": torch_gbps, "copy_GBps": copy_gbps}


def _result(rows):
    return {"schema": 1, "benchmark": "softmax", "provenance": {"gpu": "Fake GPU"}, "rows": rows}


GOOD = _result([_row("float32", 256, 2700.0, 2500.0), _row("float32", 4096, 2800.0, 2700.0),
                _row("float32", 65536, 2100.0, 1800.0), _row("float16", 1024, 2750.0, 2600.0),
                _row("float16", 131072, 2000.0, None)])
BAD = _result([_row("float32", 256, 2000.0, 2500.0), _row("float32", 4096, 2800.0, 2700.0),
               _row("float16", 65536, 1500.0, 1800.0)])


def test_registered_for_chapter_4():
    assert by_name("softmax").chapter == "ch04"
    assert set(by_name("softmax").views) == {"gbps-plot", "table", "target"}


def test_target_met_is_stated_from_the_rows():
    text = bench.target(GOOD)
    assert text.count("!!! success") == 2 and "failure" not in text
    assert "90% to 93%" in text  # 2700/3000 to 2800/3000, the single-block rows
    assert "online two-pass path" in text and "67% to 70%" in text
    assert "above that share, so the L2 cache served part of the second read" in text  # 70% > 2/3 + 2%


def test_target_not_met_names_the_failing_rows():
    text = bench.target(BAD)
    assert text.count("!!! failure") == 2
    assert "67%" in text and "float32, 256 values per row" in text
    assert "below that share" in text  # 1500 / 3000 = 50%
    assert "Slower than torch at: float32 256 (0.80×), float16 65,536 (0.83×)" in text


def test_online_rows_at_the_no_reuse_share_show_no_l2_help():
    text = bench.target(_result([_row("float32", 65536, 2000.0, 1500.0)]))
    assert "66.7%" in text and "about that share, so the data show no help from the L2 cache" in text


def test_rows_with_a_missing_timing_are_left_out_of_verdicts():
    text = bench.target(_result([_row("float32", 256, 2700.0, None)]))
    assert "!!! success" in text and "torch.softmax at any" not in text


def test_table_has_a_line_per_row_with_ratios():
    text = bench.table(GOOD)
    lines = text.splitlines()
    assert len(lines) == 2 + len(GOOD["rows"])
    assert "| float32 | 256 |" in text and "90%" in text and "1.08×" in text
    assert "| float16 | 131,072 |" in text and "—" in text  # torch missing: an em dash, not a crash


@pytest.mark.parametrize("result", [GOOD, BAD])
def test_plot_renders(result):
    svg = render.svg_bytes(bench.gbps_plot(result))
    assert svg.startswith(b"<?xml") and b"torch.softmax" in svg
