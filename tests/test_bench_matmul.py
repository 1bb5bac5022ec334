"""The chapter 3 benchmark's views, fed a small fake result (no GPU needed; nothing is written to results/)."""

import matplotlib.figure
import pytest

from book.bench import by_name
from book.bench import matmul as bench


def _fake_result(ratios: dict[tuple[str, int], float], gpu: str = "NVIDIA H100 80GB HBM3") -> dict:
    rows = []
    for dtype in bench.DTYPES:
        for n in bench.SIZES:
            torch_ms = 2 * n**3 / 700e12 * 1e3  # a 700 TFLOP/s peer
            triton_ms = torch_ms / ratios.get((dtype, n), 0.95)
            rows.append({"dtype": dtype, "n": n, "triton_ms": triton_ms, "torch_ms": torch_ms,
                         "triton_TFLOPs": 2 * n**3 / triton_ms / 1e9, "torch_TFLOPs": 2 * n**3 / torch_ms / 1e9,
                         "ratio": torch_ms / triton_ms, "config": "128x256x64, 3 stages, 8 warps",
                         "triton_rel_error": 3e-4, "torch_rel_error": 3e-4})
    return {"schema": 1, "benchmark": "matmul", "provenance": {"gpu": gpu, "gpu_slug": "fake"}, "rows": rows}


def test_registered_for_chapter_3():
    benchmark = by_name("matmul")
    assert benchmark.chapter == "ch03"
    assert set(benchmark.views) == {"tflops-plot", "table", "target", "small-sizes"}
    assert "kernels/matmul.py" in benchmark.sources and "book/bench/matmul.py" in benchmark.sources
    assert bench.SIZES[0] == 256 and bench.SIZES[-1] == 8192 and set(bench.TARGET_SIZES) <= set(bench.SIZES)


def test_table_has_a_row_per_dtype_and_size_with_the_ratio():
    text = bench.table(_fake_result({("float16", 4096): 1.05}))
    lines = text.splitlines()
    assert len(lines) == 2 + len(bench.DTYPES) * len(bench.SIZES)
    assert "Triton / cuBLAS" in lines[0]
    assert any(line.startswith("| float16 | 4,096 | 735 | 700 | 1.05× |") for line in lines)
    assert "128x256x64, 3 stages, 8 warps" in lines[-1]


@pytest.mark.parametrize(
    "ratios, kind, verdict",
    [
        ({("float16", 4096): 1.02, ("float16", 8192): 1.1, ("bfloat16", 4096): 1.0, ("bfloat16", 8192): 1.01},
         "success", "Goal met"),
        ({("bfloat16", 8192): 0.91}, "success", "Target met"),
        ({("bfloat16", 8192): 0.85}, "failure", "Target not met"),
        ({("float16", 4096): 0.89, ("bfloat16", 4096): 1.2}, "failure", "Target not met"),
    ],
    ids=["goal", "target", "miss", "miss-one"],
)
def test_target_verdict_comes_from_the_rows(ratios, kind, verdict):
    text = bench.target(_fake_result(ratios))
    assert text.startswith(f'!!! {kind} "{verdict}')
    worst = min(ratios.values()) if min(ratios.values()) < 0.95 else 0.95
    if verdict != "Goal met":
        assert f"at {worst:.2f}×" in text
    assert "float16 4096:" in text and "bfloat16 8192:" in text
    assert "of the datasheet peak (989 TFLOP/s dense" in text


def test_target_without_a_datasheet_leaves_the_peak_out():
    text = bench.target(_fake_result({}, gpu="Some Future GPU"))
    assert "datasheet" not in text and "Target met" in text


def test_small_sizes_sentence():
    text = bench.small_sizes(_fake_result({("float16", 256): 0.5, ("bfloat16", 2048): 1.1}))
    assert "0.50× (float16, n = 256)" in text and "1.10× (bfloat16, n = 2,048)" in text
    assert "below 0.9× at float16 256." in text
    assert "stays at or above" in bench.small_sizes(_fake_result({}))


def test_plot_is_a_figure_with_four_lines_and_the_peak():
    fig = bench.tflops_plot(_fake_result({}))
    assert isinstance(fig, matplotlib.figure.Figure)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 5  # Triton and cuBLAS per dtype, plus the datasheet line
    assert "TFLOP/s" in ax.get_ylabel() and "n" in ax.get_xlabel()
