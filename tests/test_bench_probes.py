"""The three probes (partial_code, matmul_power, grouped_order): their views on made-up rows, and the partial-code
switch, which must hand every launch WHOLE=False and put the kernel back afterwards."""

import pytest

from book.bench import grouped_order, matmul_power, partial_code


def test_partial_code_views_separate_the_code_from_the_length():
    rows = [{"model": "Llama-3.1-8B", "head_dim": 128, "N": 1000, "whole": 1024, "batch": 66, "whole_code": 500.0,
             "partial_code": 400.0, "partial_length": 380.0, "code_cost": 0.8, "length_cost": 0.95, "to_whole": 0.76}]
    text = partial_code.table({"rows": rows})
    assert "| Llama-3.1-8B | 1,000 | 1,024 | 66 | 500 | 400 | 0.800 | 380 | 0.950 | 0.760 |" in text
    summary = partial_code.summary({"rows": rows})
    assert "0.800 to 0.800 of the whole-length code's speed" in summary and "Llama-3.1-8B at N = 1,000" in summary


def test_the_partial_switch_forces_whole_false_and_restores_the_kernel(monkeypatch):
    pytest.importorskip("triton.experimental.gluon")
    from kernels import flash_attention_hopper as hopper

    seen = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.append((grid, kwargs["WHOLE"]))

    original = Kernel()
    monkeypatch.setattr(hopper, "_hopper_fwd_kernel", original)
    with partial_code._forced_partial():
        hopper._hopper_fwd_kernel[(4,)](WHOLE=True)
    assert seen == [((4,), False)]
    assert hopper._hopper_fwd_kernel is original


def _power_rows():
    rows = []
    for dtype in matmul_power.DTYPES:
        for i, mode in enumerate(matmul_power.MODES):
            for round_number in (1, 2, 3):
                rows.append({"dtype": dtype, "mode": mode, "round": round_number,
                             "TFLOPs": 600.0 + 50 * i + round_number, "sm_mhz": 1500.0 + 100 * i, "power_w": 650.0,
                             "samples": 4})
    return rows


def test_matmul_power_views_give_medians_ranges_and_the_spread_of_ways():
    result = {"rows": _power_rows()}
    table = matmul_power.table(result)
    assert "| float16 | back to back | 602 | 601–603 | 1500 | 650 |" in table
    assert "| bfloat16 | in turns with a pause | 752 | 751–753 | 1800 | 650 |" in table
    assert "602 TFLOP/s back to back and at 752 in turns with a pause: 1.25× apart" in matmul_power.summary(result)


def test_grouped_order_views_compare_every_group_with_the_default():
    rows = [{"dtype": dtype, "n": 8192, "config": "128x256x64, 3 stages, 8 warps", "group_m": g, "ms": 1.0,
             "TFLOPs": 600.0 + g, "to_default": (600.0 + g) / 608.0, "cublas_TFLOPs": 640.0}
            for dtype in grouped_order.DTYPES for g in grouped_order.GROUPS]
    table = grouped_order.table({"rows": rows})
    assert "| float16 | 8 | 608 | 1.000 | 640 |" in table
    assert "the fastest setting 1.105× the slowest" in grouped_order.summary({"rows": rows})


def test_real_models_spread_judges_each_row_by_every_repeat(monkeypatch):
    from book.bench import real_models_spread as spread

    times = iter([{"ours": 1.0, "sdpa_cudnn": 0.99, "sdpa_flash": 2.0}, {"ours": 1.0, "sdpa_cudnn": 1.01},
                  {"ours": 1.0, "sdpa_cudnn": 0.98}, {"ours": 1.0, "sdpa_cudnn": 0.97},
                  {"ours": 1.0, "sdpa_cudnn": 0.99}])
    monkeypatch.setattr(spread, "gpu_ms_interleaved", lambda fns, budget_ms: next(times))
    log = []
    medians = spread._repeated_timer(log)({"ours": None, "sdpa_cudnn": None})
    assert medians == {"ours": 1.0, "sdpa_cudnn": 0.99} and len(log) == 1 and len(log[0]) == spread.REPEATS
    row = spread._spread({"model": "M", "N": 8191, "kind": "prefill"}, log[0])
    assert row["ratios"] == [0.99, 1.01, 0.98, 0.97, 0.99] and row["verdict"] == "level"
    behind = spread._spread({"model": "M", "N": 8191, "kind": "training"}, [{"ours": 1.0, "sdpa_cudnn": 0.9}] * 3)
    assert behind["verdict"] == "behind"
    result = {"rows": [row, behind]}
    assert "| M | 8,191 | prefill | 0.990 | 0.970–1.010 | level |" in spread.table(result)
    assert "1 were behind the fastest SDPA backend in every repeat, 1 level" in spread.summary(result)
