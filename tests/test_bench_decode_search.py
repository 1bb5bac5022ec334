"""Chapter 12's search benchmark: its views on a small fake result, and its row run end to end on a small shape with a
stand-in timer (no GPU needed; nothing is written)."""

from book import results
from book.bench import decode_search as bench

PROVENANCE = {"gpu": "g", "gpu_slug": "g", "sm_count": 1, "driver": "d", "cuda": "c", "torch": "t", "triton": "t",
              "date": "2026-01-01T00:00:00Z", "commit": "c", "sources": {"a": "missing"}}


def _config(context, splits, block_n, stages, us):
    return {"kind": "config", "batch": 8, "context": context, "splits": splits, "block_n": block_n, "stages": stages,
            "us": us}


ROW = {"kind": "search", "batch": 8, "context": 131072, "q_heads": 32, "kv_heads": 32, "kv_bytes": 16384 * 2**20,
       "limit_us": 4000.0, "plan": {"splits": 1, "block_n": 128, "stages": 3},
       "best": {"splits": 16, "block_n": 128, "stages": 3},
       "peers_us": {"sdpa_cudnn": 3710.0, "sdpa_flash": 6000.0},
       "again_us": {"plan": 3800.0, "best": 3720.0, "sdpa_cudnn": 3700.0, "sdpa_flash": 6100.0}}
CONFIGS = [_config(131072, 16, 128, 3, 3700.0), _config(131072, 1, 128, 3, 3800.0), _config(131072, 1, 64, 3, 3780.0),
           _config(131072, 16, 64, 3, 3750.0)]
SHORT = ROW | {"context": 8192, "kv_bytes": 1024 * 2**20, "limit_us": 250.0,
               "again_us": {"plan": 240.0, "best": 240.0, "sdpa_cudnn": 244.0, "sdpa_flash": 380.0}}
SHORT_CONFIGS = [_config(8192, 1, 128, 3, 240.0), _config(8192, 2, 128, 3, 250.0)]
RESULT = {"rows": [{"kind": "copy", "bytes_per_s": 4.2e12, "ways": {}}, ROW, *CONFIGS, SHORT, *SHORT_CONFIGS]}


def test_table_gives_the_second_timing_and_both_ratios():
    text = bench.table(RESULT)
    # 4000 / 3800, 4000 / 3720, 4000 / 3700, 4000 / 6100; 3800 / 3720; 3700 / 3800, 3700 / 3720
    assert ("| 8 | 131,072 | 16,384 | 4,000.0 | 1 × 128/3 | 3,800.0 (105%) | 16 × 128/3 | 3,720.0 (108%) | "
            "3,700.0 (108%) | 6,100.0 (66%) | 1.022 | 0.974 | 0.995 |") in text
    assert "| 8 | 8,192 | 1,024 | 250.0 | 1 × 128/3 | 240.0 (104%) |" in text and "| 1.000 | 1.017 | 1.017 |" in text


def test_summary_counts_the_configurations_and_the_shapes_cudnn_leads():
    text = bench.summary(RESULT)
    # four configurations at the first shape; gains 3800/3720 = 1.022 and 1.000; cuDNN ahead at 128K only
    assert text.startswith("Of the 4 configurations, the fastest is 1.000 to 1.022 times as fast")
    # the choice: 3700 / 3800 behind at 128K, 244 / 240 ahead at 8K; the fastest: 3700 / 3720 behind at 128K
    assert "The choice trails cuDNN at 1 of the 2 shapes, by at most 2.6% (batch 8, 131,072 keys);" in text
    assert "the fastest configuration trails cuDNN at 1 of the 2 shapes, by at most 0.5% (batch 8, " in text
    ahead = {"rows": [SHORT, *SHORT_CONFIGS]}
    assert "the fastest configuration is at or above cuDNN at all 1 shapes" in bench.summary(ahead)
    behind = {"rows": [ROW, *CONFIGS]}
    assert "The choice trails cuDNN at all 1 shapes" in bench.summary(behind)
    assert "datasheet" not in text  # a GPU without a known datasheet: no sentence about it


def test_summary_measures_cudnn_and_the_fastest_against_the_datasheet():
    text = bench.summary(RESULT | {"provenance": PROVENANCE | {"gpu": "NVIDIA H200"}})
    # 16 GiB in 3700 us is 4.64 TB/s, 97% of 4.8; 1 GiB in 244 us is 4.40 TB/s, 92%. The fastest: 3720 and 240 us.
    assert ("Against the 4.8 TB/s of the H200 SXM 141GB's datasheet, cuDNN reads K and V at 92% to 97% of it at "
            "these shapes, and the fastest configuration at 93% to 96%.") in text


def test_plot_draws_a_line_per_tile_and_cudnn_as_a_level():
    fig = bench.plot(RESULT)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels[:2] == ["128 keys per tile, 3 stages", "64 keys per tile, 3 stages"]
    xs, ys = fig.axes[0].get_lines()[0].get_data()
    assert list(xs) == [1, 16] and abs(ys[1] - 4000 / 3700) < 1e-12  # sorted by split count
    assert len(fig.axes[0].get_lines()) == 3  # two tiles and cuDNN's level; the 8K shape is not drawn


def test_a_row_runs_end_to_end_with_a_stand_in_timer(monkeypatch, device):
    """The rows' own code (inputs, the output check of every configuration, the second timing, the fields the views
    read) on a small cache; only the GPU timer is a stand-in, which makes 2 splits the fastest."""
    monkeypatch.setattr(bench, "SPLIT_COUNTS", [1, 2])
    monkeypatch.setattr(bench, "Q_HEADS", 2)
    monkeypatch.setattr(bench, "KV_HEADS", 2)
    monkeypatch.setattr(bench, "gpu_ms_interleaved",
                        lambda fns, **_: {name: 0.005 if name.startswith("2 × 64/3") or name == "best" else 0.01
                                          for name in fns})
    row, *configs = rows = bench._rows(2, 100, bandwidth=3.0e12, progress=lambda message: None, device=device)
    assert row["kind"] == "search" and row["best"] == {"splits": 2, "block_n": 64, "stages": 3}
    assert len(configs) == 2 * 6 and all(c["kind"] == "config" and c["us"] in (5.0, 10.0) for c in configs)
    assert row["again_us"]["plan"] == 10.0 and row["again_us"]["best"] == 5.0
    assert row["kv_bytes"] == 2 * 2 * 2 * 100 * 128 * 2 and row["limit_us"] == row["kv_bytes"] / 3.0e12 * 1e6
    assert "| 2 | 100 |" in bench.table({"rows": rows})
    results.validate({"schema": 1, "benchmark": "decode_search", "provenance": PROVENANCE, "rows": rows})
