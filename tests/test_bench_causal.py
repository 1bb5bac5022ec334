"""Chapter 6 benchmark views, fed a small made-up result (no GPU needed). The numbers below are fake and
only exercise the views; real ones come from `python -m book.bench --only ch06` on a GPU."""

import json

import pytest

Figure = pytest.importorskip("matplotlib.figure", reason="needs the documentation tools (`make setup`)").Figure


from book.bench import by_name  # noqa: E402
from book.bench import causal as bench  # noqa: E402


def _row(head_dim, n, speedup, ratio_to_flash, cudnn=True, tiles=(128, 64)):
    heads = bench.HEADS[head_dim]
    batch = bench.TOKENS // n
    flops = bench.attention_flops(batch, heads, n, head_dim, causal=True)
    flash_causal_ms = flops / 300e12 * 1e3
    causal_ms = flash_causal_ms / ratio_to_flash
    row = {"head_dim": head_dim, "heads": heads, "batch": batch, "seq_len": n, "rel_err": 4e-4,
           "rel_err_causal": 4e-4, "triton_ms": causal_ms * speedup, "triton_causal_ms": causal_ms,
           "block_m": 128, "block_n": 128, "block_m_causal": tiles[0], "block_n_causal": tiles[1],
           "sdpa_flash_ms": flash_causal_ms * 1.7, "sdpa_flash_causal_ms": flash_causal_ms,
           "sdpa_cudnn_causal_ms": flash_causal_ms * 0.7 if cudnn else None,
           "sdpa_efficient_causal_ms": flash_causal_ms * 2.0}
    row["triton_TFLOPs"] = 2 * flops / (row["triton_ms"] * 1e-3) / 1e12
    row["triton_causal_TFLOPs"] = flops / (causal_ms * 1e-3) / 1e12
    row["sdpa_flash_TFLOPs"] = 2 * flops / (row["sdpa_flash_ms"] * 1e-3) / 1e12
    for peer in bench.PEERS:
        ms = row[f"sdpa_{peer}_causal_ms"]
        row[f"sdpa_{peer}_causal_TFLOPs"] = None if ms is None else flops / (ms * 1e-3) / 1e12
    row["causal_speedup"] = speedup
    row["flash_causal_speedup"] = 1.7
    row.update({"max_err": 2e-3, "max_err_causal": 2e-3})
    for key in bench.CHECKED_PEERS:
        ran = row[f"{key}_ms"] is not None
        row[f"{key}_max_err"], row[f"{key}_rel_err"], row[f"{key}_ok"] = (2e-3, 3e-4, True) if ran else (None,) * 3
    return row


def _result(speedup=1.9, ratio=1.3, cudnn=True):
    rows = [_row(d, n, speedup if n >= 4096 else 1.6, ratio if n >= 2048 else 0.9, cudnn=cudnn)
            for d in (64, 128) for n in bench.SEQ_LENS]
    return {"schema": 1, "benchmark": "causal", "provenance": {}, "rows": rows}


def test_registered_for_chapter_6():
    benchmark = by_name("causal")
    assert benchmark.chapter == "ch06"
    assert "kernels/flash_attention.py" in benchmark.sources and "book/bench/causal.py" in benchmark.sources
    assert set(benchmark.views) == {"speedup-plot", "speedup-table", "tflops-table", "tflops-plot", "targets",
                                    "checks"}


def test_rows_are_flat_json():
    for row in _result()["rows"]:
        assert all(v is None or isinstance(v, (int, float, str, bool)) for v in row.values())
    json.dumps(_result())


def test_flops_are_halved_for_causal():
    assert bench.attention_flops(2, 3, 1024, 64, causal=False) == 4 * 2 * 3 * 1024**2 * 64
    assert bench.attention_flops(2, 3, 1024, 64, causal=True) == 2 * 2 * 3 * 1024**2 * 64


def test_tile_share_matches_chapter_formula():
    # BLOCK_M = 128, BLOCK_N = 64, N = 4096: 1056 of 2048 tiles (snippets/ch06/tile_count.out).
    assert bench.computed_tile_share(4096, 128, 64) == pytest.approx(1056 / 2048)
    assert bench.computed_tile_share(8, 2, 2) == pytest.approx(10 / 16)


@pytest.mark.parametrize("name", ["speedup-plot", "tflops-plot"])
def test_plots_are_figures(name):
    figure = bench.BENCHMARK.views[name](_result())
    assert isinstance(figure, Figure)
    labels = [ax.get_ylabel() for ax in figure.axes]
    assert any("×" in label or "TFLOP/s" in label for label in labels)


def test_speedup_table():
    table = bench.speedup_table(_result())
    lines = table.splitlines()
    assert lines[0].startswith("| D | N | B × H |")
    assert len(lines) == 2 + 10
    assert "| 64 | 4,096 | 4 × 32 |" in table and "1.90×" in table
    assert "1.94×" in table  # the tile bound for 128 x 64 tiles at N = 4096
    assert "128 × 64" in table


def test_tflops_table_ratios_and_missing_peer():
    table = bench.tflops_table(_result(cudnn=False))
    assert "1.30×" in table and "0.90×" in table
    assert "—" in table  # cuDNN did not run: an em dash, not a crash


def test_targets_met():
    text = bench.targets(_result(speedup=1.9, ratio=1.3))
    assert text.count("!!! success") == 2
    assert "1.90× to 1.90× faster than non-causal" in text
    assert "1.30× to 1.30× the throughput" in text


def test_targets_not_met():
    text = bench.targets(_result(speedup=1.7, ratio=0.95))
    assert text.count("!!! failure") == 2 and "Target not met" in text


def test_target_one_row_fails_all():
    result = _result()
    result["rows"][-1]["causal_speedup"] = 1.5  # D = 128, N = 16K
    text = bench.target_speedup(result)
    assert "!!! failure" in text and "D = 128, N = 16,384" in text


def test_targets_without_peer():
    result = _result()
    for row in result["rows"]:
        row["sdpa_flash_causal_TFLOPs"] = None
    assert '!!! note "' in bench.target_peer(result)


def test_checks_names_every_implementation_and_the_wrong_one():
    result = _result(cudnn=False)
    result["rows"][0].update({"sdpa_efficient_causal_ok": False, "sdpa_efficient_causal_max_err": 0.5})
    text = bench.checks(result)
    for label in ["ours, non-causal", "ours, causal", *bench.CHECKED_PEERS.values()]:
        assert f"| {label} |" in text
    assert "| SDPA cuDNN, causal | 0 of 10 |" in text
    assert "| 0.5 |" in text and "D=64 N=1,024" in text


def test_checks_on_old_results_is_a_note():
    result = _result()
    for row in result["rows"]:
        for key in [k for k in row if "max_err" in k or k.endswith("_ok") or k.startswith("sdpa_") and "rel_err" in k]:
            del row[key]
    text = bench.checks(result)
    assert text.startswith('!!! note "Only our kernel was checked') and "4.0e-04" in text
