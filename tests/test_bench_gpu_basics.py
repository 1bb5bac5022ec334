"""The chapter 1 benchmark's views, fed small fake results (no GPU): medians and spreads over rounds."""

from book.bench import by_name
from book.bench import gpu_basics as bench

QUANTITIES = [("copy", "float32", 4 * 2**30, "TBps"), ("matmul", "float16", 8192, "TFLOPs"),
              ("matmul", "bfloat16", 8192, "TFLOPs"), ("tiny kernel", "float32", 1, "us")]


def _result(values_per_round: list[list[float]], rounds: bool = True) -> dict:
    rows = []
    for number, values in enumerate(values_per_round, start=1):
        for (quantity, dtype, size, key), value in zip(QUANTITIES, values, strict=True):
            rows.append({"quantity": quantity, "dtype": dtype, "size": size, "ms": 1.0, key: value,
                         **({"round": number} if rounds else {})})
    return {"schema": 1, "benchmark": "gpu_basics", "provenance": {"gpu": "NVIDIA H100 80GB HBM3"}, "rows": rows}


ROUNDS = _result([[3.00, 700.0, 690.0, 4.2], [3.03, 720.0, 700.0, 4.3], [3.06, 750.0, 710.0, 4.4]])
ONE_ROUND = _result([[3.03, 727.0, 687.0, 4.3]], rounds=False)  # results from before the rounds


def test_registered_for_chapter_1():
    assert by_name("gpu_basics").chapter == "ch01"
    assert set(by_name("gpu_basics").views) == {"ceilings", "spread", "roofline"}


def test_ceilings_show_the_median_of_the_rounds_against_the_datasheet():
    text = bench.ceilings_table(ROUNDS)
    assert "median of 3 rounds" in text
    assert "| 3.03 TB/s | 3.35 TB/s | 90% |" in text and "| 720 TFLOP/s | 989 TFLOP/s | 73% |" in text
    assert "132 SMs" in text


def test_spread_gives_lowest_highest_and_the_widest():
    text = bench.spread_table(ROUNDS)
    assert "| 720 TFLOP/s | 700 to 750 | 6.9% |" in text
    assert "The widest spread is 6.9%, for `torch.matmul` float16, 8192³" in text


def test_results_from_before_the_rounds_still_render():
    assert "| 3.03 TB/s | 3.35 TB/s | 90% |" in bench.ceilings_table(ONE_ROUND)
    assert "one round per quantity" in bench.spread_table(ONE_ROUND)
    bench.roofline_plot(ONE_ROUND)
    bench.roofline_plot(ROUNDS)
