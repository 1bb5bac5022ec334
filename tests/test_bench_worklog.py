"""The benchmark views of chapters 7 and 9, fed small fake results (no GPU needed)."""

import itertools

from book.bench import fast_attention, worklog
from book.render import svg_bytes


def fake_worklog():
    rows = []
    for i, step in enumerate(worklog.STEPS):
        for d, causal in worklog.SHAPES:
            broken = step.key == "warpspec"
            t = None if broken else 300.0 + 10 * i
            rows.append({"step": step.key, "head_dim": d, "causal": causal, "N": worklog.N, "sdpa_cudnn": 450.0,
                         "sdpa_flash": 300.0, "sdpa_efficient": None, "matmul_tflops": 700.0, "tflops": t,
                         "error": "RuntimeError: PassManager::run failed" if broken else None,
                         "share_of_best_peer": None if broken else t / 450.0,
                         "share_of_matmul": None if broken else t / 700.0})
    return {"rows": rows}


def test_worklog_views():
    result = fake_worklog()
    table = worklog.steps_table(result)
    assert "Chapter 5's kernel" in table and "*Warp specialization (tried)*" in table
    assert "did not run" in table and "(0.67×)" in table  # 300 / 450
    deltas = worklog.step_deltas(result)
    assert "PassManager::run failed" in deltas and "+3%" in deltas  # 310 / 300
    assert "Prediction" in worklog.predictions(result)
    assert svg_bytes(worklog.steps_plot(result)).startswith(b"<?xml")


def test_worklog_parts_split_the_steps_between_the_chapters():
    result = fake_worklog()
    triton, gluon = (worklog.BENCHMARK.views[f"table-{part}"](result) for part in ("triton", "gluon"))
    assert "Chapter 5's kernel" in triton and "Rewrite in Gluon" not in triton
    assert "Rewrite in Gluon" in gluon and "Chapter 5's kernel" not in gluon
    assert "| Scale and subtract in one FMA |" in gluon  # the Gluon part starts from the last Triton step kept
    deltas = worklog.BENCHMARK.views["deltas-gluon"](result)
    assert deltas.startswith("- **Rewrite in Gluon: roles and overlap** (against *Scale and subtract in one FMA*)")
    assert "Ping-pong" not in worklog.BENCHMARK.views["predictions-triton"](result)
    gluon_predictions = worklog.BENCHMARK.views["predictions-gluon"](result)
    first = f"- **{worklog.GLUON_FROM}. Rewrite in Gluon: roles and overlap.** *Prediction:*"  # as in the table
    assert gluon_predictions.startswith(first)


def test_worklog_matmul_share_uses_last_kept_step():
    result = fake_worklog()
    kept = [s for s in worklog.STEPS if s.kept][-1]
    value = next(r for r in result["rows"] if r["step"] == kept.key)["share_of_matmul"]
    assert f"{value:.0%}" in worklog.matmul_share(result)


def fake_grid(ratio_low):
    rows = []
    for dtype, d, causal, n in itertools.product(fast_attention.DTYPES, (64, 128), (False, True), fast_attention.SIZES):
        fast = 450.0 * (ratio_low if n == 1024 else 1.05)
        rows.append({"dtype": dtype, "head_dim": d, "causal": causal, "N": n, "fast": fast, "readable": 400.0,
                     "sdpa_cudnn": 450.0, "sdpa_flash": 300.0, "sdpa_efficient": None, "best_peer": "sdpa_cudnn",
                     "best_peer_tflops": 450.0, "ratio": fast / 450.0,
                     "host_us_fast": 120.0, "host_us_sdpa_cudnn": 70.0, "plain_fast": 0.8 * fast,
                     "plain_sdpa_cudnn": 450.0, "plain_sdpa_flash": 300.0, "plain_sdpa_efficient": None})
    return {"rows": rows}


def test_grid_views_targets_met():
    result = fake_grid(0.95)
    text = fast_attention.verdict(result)
    assert '!!! success "Target 1' in text and "Met in 32 of 32 rows" in text and "Below" not in text
    assert "Ratio range per group at N ≥ 2048: float16 D=64 non-causal: 1.050–1.050×" in text  # the margins
    assert '!!! success "Target 2' in text and "Lowest: 0.950×" in text
    assert "| float16 | 64 | no | 1024 |" in fast_attention.table(result)
    assert "1.43× to 1.57×" in fast_attention.against_fa2(result)
    assert fast_attention.margins(result).startswith("The 3 smallest ratios to the fastest backend at N ≥ 2048: ")
    assert "Over all rows the smallest is float16 D=64 non-causal, N = 1024 (0.950×)" in fast_attention.margins(result)
    assert svg_bytes(fast_attention.plot(result)).startswith(b"<?xml")


def test_host_time_view_sets_cpu_time_beside_gpu_time():
    result = fake_grid(0.95)
    text = fast_attention.host_time(result)
    # fp16, D=64, non-causal, N=1024: 4 * 16 * 32 * 1024^2 * 64 FLOP at 450 * 0.95 TFLOP/s = 321 µs, at 450
    # TFLOP/s (cuDNN) 305 µs; plain calls: 0.8 * 0.95 of cuDNN's plain-call rate.
    assert "| 64 | no | 1024 | 321 | 120 | 305 | 70 | 0.95× | 0.76× |" in text
    assert len([line for line in text.splitlines() if line.startswith("| 1")]) == 4  # D=128 rows, N ≤ 2048
    for row in result["rows"]:
        del row["plain_fast"]
    assert "did not time plain calls" in fast_attention.host_time(result)


def test_grid_views_targets_missed():
    result = fake_grid(0.5)
    text = fast_attention.verdict(result)
    assert '!!! warning "Target 2' in text and "32 of 40 rows" in text
