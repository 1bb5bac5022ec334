"""Chapter 11's step-8 benchmark views, fed a small fake result (no GPU needed)."""

from book.bench import backward_hopper as bench


def _row(n, gluon, triton, cudnn, d=128, causal=False, dtype="float16"):
    return {"kind": "speed", "dtype": dtype, "head_dim": d, "causal": causal, "N": n, "gluon_backward": gluon,
            "triton_backward": triton, "sdpa_cudnn_backward": cudnn, "sdpa_flash_backward": 100.0,
            "sdpa_efficient_backward": None, "gluon_grad_err": 1e-3, "triton_grad_err": 2e-3,
            "sdpa_cudnn_grad_err": 1e-3, "sdpa_flash_grad_err": 1e-3, "sdpa_efficient_grad_err": None,
            "gluon_vs_triton": 1e-4}


ROWS = [_row(1024, 900.0, 100.0, 100.0),  # below N = 2,048: not counted by the columns view
        _row(2048, 450.0, 400.0, 500.0), _row(4096, 380.0, 400.0, 500.0, dtype="bfloat16")]
OTHERS = [_row(2048, 100.0, 100.0, 100.0, d=d, causal=c) for d, c in bench.SHAPES if (d, c) != (128, False)]
RESULT = {"rows": [*ROWS, *OTHERS]}


def test_columns_count_from_the_targets_range_and_compare_both_kernels_with_sdpa():
    text = bench.columns(RESULT)
    line = next(line for line in text.splitlines() if "D=128 non-causal" in line)
    assert "| 1 of 2 |" in line  # 450 > 400, 380 < 400; the N = 1,024 row is left out
    assert "0.95–1.12×" in line  # 380 / 400, 450 / 400
    assert "0.76–0.90×" in line  # Gluon / best SDPA: 380 / 500, 450 / 500
    # rows at or above 0.8 of the best SDPA: Gluon 1 (0.90), Triton 2 (0.80, 0.80)
    assert "| Gluon 1 of 2, Triton 2 of 2 |" in line


def test_table_gives_both_ratios_per_row():
    text = bench.table({"rows": ROWS})
    assert "1.12×" in text and "0.90×" in text  # 450 / 400 against Triton, 450 / 500 against cuDNN


def test_executed_counts_the_rows_where_step_6s_products_beat_cudnn():
    text = bench.executed(RESULT)  # step 6 runs 7 products where 5 are credited: 7/5 of 400 is 560, of 100 is 140
    assert "did 140 to 560 TFLOP/s of products" in text
    assert "in 5 of 5 rows; the ratio of the two runs from 1.12× to 1.40×" in text  # 560 / 500, 140 / 100


def test_checks_report_the_agreement_of_the_two_kernels():
    text = bench.checks({"rows": ROWS})
    assert "1.0e-04" in text and "2.0e-03" in text
