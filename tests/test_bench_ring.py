"""Chapter 14's two-GPU benchmark: its views on made-up rows, and the whole measurement on two CPU processes over
gloo with tiny shapes (the GPU run uses NCCL and the book's kernels)."""

import torch.multiprocessing as mp

from book.bench import by_name
from book.bench import ring as bench


def _row(n, causal, layout, forward, no_overlap, training, one_gpu, send=1.0, saved=(0.4, 0.5, 0.6)):
    return {"kind": "ring", "N": n, "heads": 32, "kv_heads": 8, "causal": causal, "layout": layout, "world": 2,
            "dtype": "bfloat16", "forward_ms": forward, "forward_no_overlap_ms": no_overlap, "training_ms": training,
            "training_no_overlap_ms": training * 1.2, "send_ms": send, "one_gpu_forward_ms": one_gpu,
            "forward_saved_turns_ms": list(saved), "training_saved_turns_ms": [3 * t for t in saved],
            "one_gpu_training_ms": one_gpu * 3,
            "ulysses_forward_ms": forward * 0.8 if layout == "contiguous" else None,
            "ulysses_training_ms": training * 1.25 if layout == "contiguous" else None}


RESULT = {"rows": [_row(32768, False, "contiguous", 10.0, 10.5, 30.0, 18.0),
                   _row(32768, True, "zigzag", 6.0, 7.0, 18.0, 10.0, send=2.0, saved=(0.0, 1.0, 3.0))]}


def test_forward_table_sets_the_ring_against_one_gpu():
    text = bench.forward_table(RESULT)
    # 4 * 32768^2 * 32 * 128 FLOPs over 2 GPUs in 10 ms: 879.6 TFLOP/s per GPU
    assert "| 32,768 | 32/8 | no | contiguous | 10.00 | 880 | 18.00 | 1.80× |" in text
    assert "| 32,768 | 32/8 | yes | zigzag | 6.00 | 733 | 10.00 | 1.67× |" in text


def test_scaling_plot_draws_one_gpu_over_the_ring_per_mask_and_layout():
    (axes,) = bench.scaling(RESULT).axes
    lines = {line.get_label(): list(line.get_ydata()) for line in axes.get_lines()
             if not line.get_label().startswith("_")}  # the two reference lines are unlabelled
    assert lines == {"no mask, contiguous": [1.8], "causal, zigzag": [30.0 / 18.0]}  # training: 3 x one GPU's forward


def test_hidden_share_is_the_time_saved_per_turn_over_the_sends_alone():
    text = bench.hidden(RESULT)
    # forward: one 1 ms send, 0.5 ms saved (median of turns), range 0.2 ms: 50% hidden; training: 6 sends of 1 ms
    # in 36 ms without overlap, 1.5 ms saved
    assert "| 32,768 | 32/8 | no | 9.5% | 0.50 (0.40 to 0.60) | 50% | 16.7% | 1.50 (1.20 to 1.80) | 25% |" in text
    # causal, zigzag: 2 ms sends; the forward's turns range over 3 ms, more than the sends: not a share
    assert "| yes | 28.6% | 1.00 (0.00 to 3.00) | below the noise | 55.6% | 3.00 (0.00 to 9.00) | 25% |" in text


def test_hidden_share_says_slower_where_every_turn_lost_and_none_where_the_median_saved_nothing():
    assert bench._hidden_share([-3.0, -2.0, -1.0], sends=5.0) == "slower in all 3 turns"
    assert bench._hidden_share([-0.5, 0.0, 0.5], sends=5.0) == "none"
    assert bench._hidden_share([-4.0, 1.0, 2.0], sends=5.0) == "below the noise"
    assert bench._hidden_share([1.0, 2.0, 3.0], sends=4.0) == "50%"


def test_targets_read_the_scaling_share_and_the_rows_behind_pytorch():
    long = dict(_row(262144, True, "zigzag", 6.0, 7.0, 100.0, 10.0), one_gpu_training_ms=190.0)
    cp = {"kind": "context_parallel", "N": 262144, "heads": 32, "kv_heads": 8, "causal": True, "world": 2,
          "cp_cudnn_forward_ms": 6.6, "cp_cudnn_training_ms": 99.0, "cp_flash_forward_ms": 9.0,
          "cp_flash_training_ms": 150.0}
    text = bench.targets({"rows": [long, cp]})
    assert "met (262,144 tokens, 32/8 heads: 95.0%)" in text  # 190 / 2 / 100
    # training: 99 / 100 behind; without overlap (120 ms) further behind; the forward 6.6 / 6.0 ahead
    assert "met in 1 of 2; behind in 262,144 tokens, 32/8 heads, causal, training: 0.990× (0.825× without" in text
    assert bench.targets(RESULT).startswith("This run did not time")


def test_link_and_clocks_read_the_send_rate_and_each_parts_telemetry():
    # 32,768 tokens over 2 GPUs, 8 K/V heads, D 128, K and V in bf16: 64 MiB; the last longest row sends in 2 ms
    assert "64 MiB (8 K/V heads, 16,384 tokens) in 2.00 ms, 34 GB/s each way" in bench.link(RESULT)
    reading = {"sm_mhz": {"median": 1500.0}, "power_w": {"median": 690.0}}
    readings = [reading] * (len(bench.BENCHMARK.parts) - 1) + [None]
    text = bench.clocks({"provenance": {"part_telemetry": readings}, "rows": []})
    assert "| 1 | the ring and one GPU, 8,192, 32,768 tokens | 1,500 | 690 |" in text
    assert bench.clocks({"provenance": {}, "rows": []}).startswith("This run did not record")


def test_training_table_counts_three_and_a_half_forwards():
    assert "| 32,768 | 32/8 | no | contiguous | 30.00 | 1026 | 54.00 | 1.80× |" in bench.training_table(RESULT)


def test_all_to_all_table_sets_ulysses_against_the_rings_layout_for_the_mask():
    causal_contiguous = _row(32768, True, "contiguous", 8.0, 8.5, 24.0, 10.0)
    text = bench.all_to_all_table({"rows": RESULT["rows"] + [causal_contiguous]})
    assert "| 32,768 | 32/8 | no | contiguous | 10.00 | 8.00 | 1.25× | 30.00 | 37.50 | 0.80× |" in text
    # causal: the all-to-all was timed on the contiguous row (6.4 ms forward), the ring's zigzag row takes 6 ms
    assert "| 32,768 | 32/8 | yes | zigzag | 6.00 | 6.40 | 0.94× | 18.00 | 30.00 | 0.60× |" in text
    assert text.count("| 32,768 |") == 2


def test_projection_keeps_the_tokens_per_gpu_and_the_slowest_hop_sets_each_step():
    row = _row(32768, True, "zigzag", 6.0, 7.0, 18.0, 10.0, send=2.0)
    model = bench.step_model(row)
    assert model["forward_ms"] == (7.0 - 2.0) / 2  # without overlap, less its one send, per step
    assert model["training_ms"] == (18.0 * 1.2 - 6 * 2.0) / 2  # less 1 + 1 K/V sends and 2 dK/dV sends (x2 bytes)
    forward, training, send = bench.projected_share(model, 4)
    assert send == 2.0 and forward == 1.0  # compute 2.5 ms per step hides a 2 ms send
    assert training == 4 * 4.8 / (4.8 + 3 * 6.0 + 4.0)  # 3 sends' bytes per step exceed the compute
    fast = dict(model, link_bytes_per_s=1e12)  # a link faster than InfiniBand: across machines IB sets the hop
    assert bench.projected_share(fast, 64)[2] == model["chunk_bytes"] / bench.INFINIBAND_BYTES_PER_S * 1e3
    text = bench.projection(RESULT)
    assert "| 32/8 | 16,384 | 2 | 32,768 | measured link | 4.800 | 2.000 | 100% | 65% | 53% |" in text
    assert "| 32/8 | 16,384 | 64 | 1,048,576 | InfiniBand (datasheet) |" in text and "not a measurement" in text


def test_registered_for_chapter_14_and_waiting_for_two_gpus():
    benchmark = by_name("ring")
    assert benchmark.chapter == "ch14" and "kernels/ring_attention.py" in benchmark.sources
    assert "two GPUs" in benchmark.awaiting_gpu


def test_the_measurement_runs_end_to_end_on_two_cpu_processes():
    rows = bench.measure({"backend": "gloo", "sizes": [16, 32], "heads": [[4, 2]], "cases": bench.CASES,
                          "dtype": "float32", "use_kernels": False}, spawn=mp.spawn)
    assert len(rows) == 2 * len(bench.CASES)
    assert all(r["forward_ms"] > 0 and r["training_no_overlap_ms"] > 0 and r["one_gpu_forward_ms"] > 0 for r in rows)
    assert all(r["error"] < 1e-5 for r in rows if r["N"] == 16)  # checked at the smallest length only
    assert all(len(r["forward_saved_turns_ms"]) == len(r["training_saved_turns_ms"]) == bench.REPEATS for r in rows)
    contiguous = [r for r in rows if r["layout"] == "contiguous"]
    assert all(r["ulysses_training_ms"] > 0 for r in contiguous)
    assert all(r["ulysses_error"] < 1e-5 for r in contiguous if r["N"] == 16)
    assert all(r.get("ulysses_forward_ms") is None for r in rows if r["layout"] == "zigzag")


def test_a_long_row_times_the_training_step_alone_and_no_one_gpu():
    rows = bench.measure({"backend": "gloo", "sizes": [32], "heads": [[4, 2]], "cases": [(True, "zigzag")],
                          "dtype": "float32", "use_kernels": False, "long": 32, "one_gpu_max": 16}, spawn=mp.spawn)
    (row,) = rows
    assert row["training_ms"] > 0 and "forward_ms" not in row and "one_gpu_training_ms" not in row
    assert bench._rows({"rows": rows}) == []  # the full tables leave it out
    assert "At 32 tokens (4/2 heads, causal, zigzag), the ring's training step takes" in bench.long_sentence(
        {"rows": rows})


def test_context_parallel_rows_record_what_refuses_without_hanging():
    """On CPUs, SDPA's cuDNN and FlashAttention backends do not exist: both refuse, on both ranks, and the run ends."""
    rows = bench.measure({"backend": "gloo", "sizes": [16], "heads": [[4, 2]], "cases": [(True, "zigzag")],
                          "dtype": "float32", "use_kernels": False, "context_parallel": True}, spawn=mp.spawn)
    (row,) = rows
    assert row["kind"] == "context_parallel" and row["cp_cudnn_refused"] and row["cp_flash_refused"]
    assert "refused" in bench._line(row)


def test_context_parallel_table_sets_each_backend_against_the_ring():
    cp = {"kind": "context_parallel", "N": 32768, "heads": 32, "kv_heads": 8, "causal": True, "world": 2,
          "dtype": "bfloat16", "cp_cudnn_forward_ms": 9.0, "cp_cudnn_training_ms": 36.0,
          "cp_flash_refused": "no kernel"}
    text = bench.context_parallel_table({"rows": RESULT["rows"] + [cp]})
    # ring (zigzag, causal): forward 6.0, training 18.0; fastest CP 9.0 and 36.0
    assert "| 32,768 | 32/8 | yes | 6.00 | 9.00 | refused | 1.50× | 18.00 | 36.00 | refused | 2.00× |" in text
    assert "Not timed: FlashAttention-2: no kernel." in text
    wrong = dict(cp, cp_flash_refused="wrong output: relative error 9.1e-02 against SDPA on one GPU")
    assert "| 9.00 | wrong | 1.50× |" in bench.context_parallel_table({"rows": RESULT["rows"] + [wrong]})
    assert bench.context_parallel_table(RESULT).startswith("This run did not time")
