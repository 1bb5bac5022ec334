"""The chapter 3 benchmark's views, fed a small fake result (no GPU needed; nothing is written to results/)."""

import pytest

matplotlib_figure = pytest.importorskip("matplotlib.figure", reason="needs the documentation tools (`make setup`)")

from book.bench import by_name  # noqa: E402
from book.bench import matmul as bench  # noqa: E402


def _fake_result(ratios: dict[tuple[str, int], float], gpu: str = "NVIDIA H100 80GB HBM3",
                 tma_ratios: dict[tuple[str, int], float] | None = None) -> dict:
    """Rows as run() writes them; tma_ratios=None gives rows measured before the TMA kernel existed."""
    rows = []
    for dtype in bench.DTYPES:
        for n in bench.SIZES:
            torch_ms = 2 * n**3 / 700e12 * 1e3  # a 700 TFLOP/s peer
            triton_ms = torch_ms / ratios.get((dtype, n), 0.95)
            row = {"dtype": dtype, "n": n, "triton_ms": triton_ms, "torch_ms": torch_ms,
                   "triton_TFLOPs": 2 * n**3 / triton_ms / 1e9, "torch_TFLOPs": 2 * n**3 / torch_ms / 1e9,
                   "ratio": torch_ms / triton_ms, "config": "128x256x64, 3 stages, 8 warps",
                   "triton_rel_error": 3e-4, "torch_rel_error": 3e-4}
            if tma_ratios is not None:
                tma_ms = torch_ms / tma_ratios.get((dtype, n), 0.8)
                row.update({"tma_ms": tma_ms, "tma_TFLOPs": 2 * n**3 / tma_ms / 1e9, "tma_ratio": torch_ms / tma_ms,
                            "tma_config": "256x128x64, 4 stages, 8 warps", "tma_rel_error": 3e-4})
            rows.append(row)
    return {"schema": 1, "benchmark": "matmul", "provenance": {"gpu": gpu, "gpu_slug": "fake"}, "rows": rows}


def test_registered_for_chapter_3():
    benchmark = by_name("matmul")
    assert benchmark.chapter == "ch03"
    assert set(benchmark.views) == {"tflops-plot", "table", "target", "small-sizes", "tma-gain"}
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


def test_plot_is_a_figure_with_four_lines_and_the_peak():  # results measured before the TMA kernel
    fig = bench.tflops_plot(_fake_result({}))
    assert isinstance(fig, matplotlib_figure.Figure)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 5  # Triton and cuBLAS per dtype, plus the datasheet line
    assert "TFLOP/s" in ax.get_ylabel() and "n" in ax.get_xlabel()


def test_plot_adds_the_tma_kernel():
    ax = bench.tflops_plot(_fake_result({}, tma_ratios={})).axes[0]
    assert len(ax.get_lines()) == 7  # two Triton kernels and cuBLAS per dtype, plus the datasheet line
    assert any("matmul_tma, bfloat16" in line.get_label() for line in ax.get_lines())


def test_table_adds_tma_columns():
    text = bench.table(_fake_result({("float16", 4096): 1.05}, tma_ratios={("float16", 4096): 1.1}))
    lines = text.splitlines()
    assert len(lines) == 2 + len(bench.DTYPES) * len(bench.SIZES)
    assert "| Triton / cuBLAS | TMA TFLOP/s | TMA / cuBLAS |" in lines[0] and "TMA block sizes" in lines[0]
    assert any(line.startswith("| float16 | 4,096 | 735 | 700 | 1.05× | 770 | 1.10× |") for line in lines)
    assert lines[-1].endswith("| 256x128x64, 4 stages, 8 warps |")


def test_old_results_keep_their_table():
    assert "TMA" not in bench.table(_fake_result({}))


TARGETS = [("float16", 4096), ("float16", 8192), ("bfloat16", 4096), ("bfloat16", 8192)]


@pytest.mark.parametrize(
    "ratios, tma_ratios, kind, verdict, other",
    [
        # TMA ahead everywhere: it is judged, and the pointer kernel's weakest is reported beside it.
        ({}, {**dict.fromkeys(TARGETS, 0.99), ("float16", 4096): 0.97}, "success",
         "Target met by matmul_tma", "`matmul` (pointer loads), is at 0.95× at its weakest"),
        ({}, dict.fromkeys(TARGETS, 1.02), "success", "Goal met by matmul_tma", "is at 0.95×"),
        # The pointer kernel is better at its weakest size, even though TMA wins some sizes (default 0.8).
        ({("bfloat16", 8192): 0.91}, {("float16", 4096): 1.3, ("bfloat16", 4096): 0.85}, "success",
         "Target met by matmul:", "`matmul_tma` (tensor descriptors (TMA)), is at 0.80×"),
        ({("float16", 8192): 0.8}, {**dict.fromkeys(TARGETS, 1.0), ("float16", 8192): 0.88}, "failure",
         "Target not met by matmul_tma", "is at 0.80× at its weakest (float16 at 8192)"),
    ],
    ids=["tma-target", "tma-goal", "pointer-better", "both-miss"],
)
def test_target_judges_the_better_kernel(ratios, tma_ratios, kind, verdict, other):
    text = bench.target(_fake_result(ratios, tma_ratios=tma_ratios))
    assert text.startswith(f'!!! {kind} "{verdict}')
    assert "The weakest is" in text and "float16 4096:" in text and "bfloat16 8192:" in text
    assert other in text
    assert "of the datasheet peak (989 TFLOP/s dense" in text


def test_tma_gain_sentence():
    text = bench.tma_gain(_fake_result({("float16", 4096): 0.9}, tma_ratios={("float16", 4096): 0.99,
                                                                             ("bfloat16", 8192): 0.95}))
    assert "the speed of `matmul`" in text
    assert "1.10× (float16, n = 4,096)" in text  # 0.99 / 0.9
    assert "float16 4,096: 0.90× → 0.99×" in text and "bfloat16 8,192: 0.95× → 0.95×" in text
    assert "before the TMA kernel" in bench.tma_gain(_fake_result({}))


def test_small_sizes_say_how_the_rows_were_timed():
    old = _fake_result({("float16", 512): 0.15}, tma_ratios={})
    assert "timed with `do_bench`" in bench.small_sizes(old) and "next run replaces" in bench.small_sizes(old)
    new = _fake_result({}, tma_ratios={})
    for row in new["rows"]:
        row["timer"] = bench.TIMER
    assert "timed from CUDA graphs, in turns" in bench.small_sizes(new)
