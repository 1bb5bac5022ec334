"""The real-models benchmark: its views on made-up rows, its float64 reference against autograd, and one small row
pair measured on the CPU with a stand-in timer (the GPU run writes the real rows)."""

import warnings

import pytest
import torch

from book.bench import ALL, by_name
from book.bench import real_models as bench

GLUON, TRITON, CH5, CH10 = bench.GLUON, bench.TRITON, bench.READABLE_FORWARD, bench.READABLE_BACKWARD


def _row(kind, model, dtype, n, ours, cudnn, flash, efficient, *, forward=TRITON, backward=TRITON, fallback=None,
         repeated=None):
    spec = next(m for m in bench.MODELS if m.name == model)
    row = {"kind": kind, "model": model, "heads": spec.heads, "kv_heads": spec.kv_heads, "head_dim": spec.head_dim,
           "dtype": dtype, "N": n, "batch": bench.batch_size(n), "forward_path": forward, "fallback": fallback}
    if kind == "prefill":
        row.update(path=forward, fast=forward in bench.FAST_PATHS, ours_err=1e-3, sdpa_cudnn_err=2e-3,
                   sdpa_flash_err=None, sdpa_efficient_err=None, repeated_kv_err=None if repeated is None else 1e-3)
    else:
        row.update(path=f"{forward} forward, {backward} backward", backward_path=backward,
                   fast=forward in bench.FAST_PATHS and backward in bench.FAST_PATHS, ours_grad_err=4e-3,
                   sdpa_cudnn_grad_err=3e-3, sdpa_flash_grad_err=None, sdpa_efficient_grad_err=None)
    times = {name: 1.0 / t for name, t in (("ours", ours), ("sdpa_cudnn", cudnn), ("sdpa_flash", flash),
                                           ("sdpa_efficient", efficient), ("repeated_kv", repeated)) if t}
    names = ["ours", *bench.BACKENDS] + (["repeated_kv"] if kind == "prefill" else [])
    return bench._finish(row, names, times, 1e12)  # 1e12 FLOPs in 1/t ms: t * 1000 TFLOP/s


ROWS = [
    # Llama prefill: ahead of cuDNN at 8,191, behind it at 3,000 (a miss), behind at 1,000 (not a target).
    _row("prefill", "Llama-3.1-8B", "float16", 8191, 0.6, 0.5, 0.4, None, forward=TRITON, repeated=0.45),
    _row("prefill", "Llama-3.1-8B", "float16", 3000, 0.45, 0.5, 0.4, None, forward=TRITON, repeated=0.3),
    _row("prefill", "Llama-3.1-8B", "float16", 1000, 0.3, 0.4, 0.35, None, forward=TRITON, repeated=0.2),
    _row("prefill", "GPT-2", "bfloat16", 32768, 0.5, 0.5, 0.45, 0.2, forward=GLUON),  # exactly 1.0: met
    _row("prefill", "Gemma 7B", "bfloat16", 32768, 0.2, 0.5, 0.4, None, forward=CH5,
         fallback="head dim 256 (the fast path takes 64 and 128)"),
    _row("prefill", "Qwen2.5-7B", "bfloat16", 8191, 0.5, None, None, None, forward=TRITON, repeated=0.4),  # no peer
    # Training: the fast path at 32,768, a made-up fallback of the backward alone, the D = 256 fallback of both.
    _row("training", "Llama-3.1-70B, 1/8 shard", "float16", 32768, 0.4, 0.5, 0.3, None, forward=GLUON,
         backward=TRITON),
    _row("training", "Llama-3.1-8B", "bfloat16", 3000, 0.26, 0.4, 0.3, None, forward=TRITON, backward=CH10,
         fallback="backward: a GPU older than Hopper"),
    _row("training", "Gemma 7B", "float16", 8191, 0.1, 0.4, 0.3, 0.2, forward=CH5, backward=CH10,
         fallback="forward and backward: head dim 256 (the fast path takes 64 and 128)"),
]
RESULT = {"rows": ROWS}


def test_five_models_with_their_heads_and_a_batch_of_64k_tokens():
    heads = {m.name: (m.heads, m.kv_heads, m.head_dim) for m in bench.MODELS}
    assert heads == {"Llama-3.1-8B": (32, 8, 128), "Qwen2.5-7B": (28, 4, 128), "Llama-3.1-70B, 1/8 shard": (8, 1, 128),
                     "GPT-2": (12, 12, 64), "Gemma 7B": (16, 16, 256)}
    assert [m.group for m in bench.MODELS] == [4, 7, 8, 1, 1]
    assert bench.SIZES == [1000, 3000, 8191, 32768] and bench.DTYPES == ["float16", "bfloat16"]
    assert [bench.batch_size(n) for n in bench.SIZES] == [66, 22, 8, 2]


def test_registered_under_chapter_11_with_every_kernel_it_calls():
    benchmark = by_name("real_models")
    assert benchmark in ALL and benchmark.chapter == "ch11" and benchmark is bench.BENCHMARK
    assert {"kernels/flash_attention.py", "kernels/flash_attention_backward.py", "kernels/flash_attention_fast.py",
            "kernels/flash_attention_hopper.py", "kernels/flash_attention_backward_fast.py",
            "kernels/flash_attention_backward_hopper.py", "book/bench/real_models.py"} <= set(benchmark.sources)
    assert set(benchmark.views) == {"glance", "prefill-table", "training-table", "targets", "sharing", "checks"}


def test_finish_finds_the_fastest_backend_and_leaves_refusals_as_none():
    llama = ROWS[0]
    assert llama["ours"] == pytest.approx(600.0) and llama["sdpa_efficient"] is None
    assert llama["best_peer"] == "sdpa_cudnn" and llama["ratio"] == pytest.approx(1.2)
    assert llama["sharing"] == pytest.approx(0.6 / 0.45)
    alone = ROWS[5]
    assert alone["best_peer"] is None and alone["ratio"] is None
    assert "sharing" not in ROWS[6]  # training rows have no repeated K/V


def test_glance_gives_each_model_its_ranges_from_2k_and_every_path_it_took():
    text = bench.glance(RESULT)
    assert len(text.split("\n\n")[0].splitlines()) == 2 + 5  # one line per model, in the order measured
    # Llama from 3,000 on: prefill 450 and 600 TFLOP/s (0.90x and 1.20x), training 260 (0.65x, backward fallback)
    assert "| Llama-3.1-8B | 32/8 | 128 | Triton; backward ch. 10 | 450–600 | 0.90–1.20× | 260 | 0.65× |" in text
    assert "| Qwen2.5-7B | 28/4 | 128 | Triton | 500 | — | — | — |" in text  # no peer ran; no training row
    assert "| Gemma 7B | 16/16 | 256 | ch. 5; backward ch. 10 | 200 | 0.40× | 100 | 0.25× |" in text
    assert "N = 3,000, 8,191, 32,768" in text  # the 1,000 rows are left out of the table, and said below it
    assert "below the target's range, on the fast path: prefill 0.75× the fastest SDPA backend at N = 1,000." in text


def test_tables_show_every_row_the_path_and_dashes_for_refusals():
    prefill = bench.prefill_table(RESULT)
    assert len(prefill.split("\n\n")[0].splitlines()) == 2 + 6
    assert "| Llama-3.1-8B | float16 | 8,191 | 8 | Triton | 600 | 500 | 400 | — | 1.20× |" in prefill
    assert "| Gemma 7B | bfloat16 | 32,768 | 2 | ch. 5 (fallback) | 200 |" in prefill
    training = bench.training_table(RESULT)
    assert len(training.split("\n\n")[0].splitlines()) == 2 + 3
    assert "| Triton | ch. 10 (fallback) | 260 | 400 | 300 | — | 0.65× |" in training
    assert "| Gluon | Triton | 400 |" in training


def test_targets_list_the_misses_from_2k_and_every_fallback_with_its_reason():
    text = bench.targets(RESULT)
    assert text.startswith('!!! warning "Target: at least 1.0× the fastest SDPA backend from N = 2,048 on')
    # Fast rows from 2,048 on with a peer: prefill 8,191 (1.2), 3,000 (0.9), GPT-2 (1.0); training 70B (0.8).
    assert "Prefill: met in 2 of 3 rows; training step: met in 0 of 1 rows." in text
    assert "    | prefill | Llama-3.1-8B | float16 | 3,000 | Triton | 0.900× | cuDNN |" in text
    assert ("    | training | Llama-3.1-70B, 1/8 shard | float16 | 32,768 | Gluon forward, Triton backward | 0.800× | "
            "cuDNN |") in text
    assert "N = 1,000 (Triton)" not in text  # below 2,048: not a target ...
    assert "Below N = 2,048 (not a target) the lowest ratio on a fast path is 0.750×" in text  # ... but reported
    assert "No SDPA backend ran, so nothing to compare: prefill Qwen2.5-7B bfloat16 N = 8,191." in text
    assert "3 rows leave the fast paths" in text
    assert ("- Prefill, forward by chapter 5's kernel: head dim 256 (the fast path takes 64 and 128). Gemma 7B "
            "bfloat16 N = 32,768: 0.400×.") in text
    assert ("- Training, backward by chapter 10's kernels: a GPU older than Hopper. Llama-3.1-8B bfloat16 N = 3,000: "
            "0.650×.") in text
    assert ("- Training, forward by chapter 5's kernel and backward by chapter 10's kernels: head dim 256") in text


def test_targets_succeed_when_every_fast_row_is_at_or_above_the_fastest_backend():
    rows = [ROWS[0], ROWS[3]]
    text = bench.targets({"rows": rows})
    assert text.startswith("!!! success") and "Prefill: met in 2 of 2 rows" in text
    assert "Below 1.0×" not in text and "fall back" not in text


def test_sharing_compares_shared_and_repeated_kv_on_grouped_rows_only():
    text = bench.sharing(RESULT)
    table = text.split("\n\n")[0]
    assert len(table.splitlines()) == 2 + 4  # three Llama rows and Qwen; not GPT-2 or Gemma
    # K and V of Llama at 8,191: 2·8·8·8191·128·2 bytes, 256 MiB; repeated to 32 heads, 4 times as many.
    assert "| Llama-3.1-8B | 32/8 | float16 | 8,191 | 600 | 450 | 1.33× | 256 / 1,024 |" in table
    assert "Qwen2.5-7B | 28/4 | bfloat16 | 8,191 | 500 | 400 | 1.25× |" in table
    assert "Llama-3.1-8B 1.333× to 1.500×" in text and "Qwen2.5-7B 1.250× to 1.250×" in text
    assert bench.sharing({"rows": [ROWS[3]]}) == "No grouped model was measured."


def test_checks_give_the_worst_error_per_implementation_and_the_bound():
    text = bench.checks(RESULT)
    assert "| prefill | float16 | 1.0e-03 | 2.0e-03 | — | — | 1.0e-03 | 2.0e-03 |" in text
    assert "| training | bfloat16 | 4.0e-03 | 3.0e-03 | — | — | — | 5.0e-02 |" in text


def test_refusals_keep_what_the_backend_said():
    said = [warnings.WarningMessage(UserWarning("Flash attention does not support enable_gqa (Triggered internally "
                                                "at sdp_utils.cpp:1)"), UserWarning, "f", 1)] * 2
    assert bench._refusal(RuntimeError("No available kernel. Aborting execution."), said) == \
        "Flash attention does not support enable_gqa"
    assert bench._refusal(RuntimeError("No available kernel. Aborting execution."), []) == \
        "No available kernel. Aborting execution."
    assert bench._refusal(torch.OutOfMemoryError("CUDA out of memory. Tried"), said) == "out of memory"


def _plain_grads(q, k, v, do, group):
    """float64 causal attention by autograd, K and V repeated to the query heads."""
    inputs = [t.double().requires_grad_() for t in (q, k, v)]
    keys, values = (t.repeat_interleave(group, dim=1) for t in inputs[1:])
    s = inputs[0] @ keys.transpose(-1, -2) * q.shape[-1] ** -0.5
    n = q.shape[2]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ values
    return out.detach(), torch.autograd.grad(out, inputs, do.double())


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2), (6, 1)])
def test_reference_matches_autograd_in_chunks(monkeypatch, heads, kv_heads):
    monkeypatch.setattr(bench, "CHECK_ELEMENTS", 3 * heads // kv_heads * 37)  # three rows a chunk, the last short
    q, do = (torch.randn(2, heads, 37, 16, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(2, kv_heads, 37, 16, dtype=torch.float64) for _ in range(2))
    group = heads // kv_heads
    out, (dq, dk, dv) = _plain_grads(q, k, v, do, group)
    for b, g in bench._slices(q, k):
        heads_of_g = slice(g * group, (g + 1) * group)
        ref_out, (ref_dq, ref_dk, ref_dv) = bench.reference(q, k, v, b, g, do)
        torch.testing.assert_close(ref_out, out[b, heads_of_g])
        torch.testing.assert_close(ref_dq, dq[b, heads_of_g])
        torch.testing.assert_close(ref_dk, dk[b, g])
        torch.testing.assert_close(ref_dv, dv[b, g])
        assert bench.reference(q, k, v, b, g)[1] is None


def test_a_row_pair_measured_on_the_cpu(monkeypatch):
    """The whole measuring path on the CPU (the kernels under Triton's interpreter, the SDPA backends that run on
    the CPU), with a stand-in timer: every implementation that ran is checked and timed, the others are None with a
    reason."""
    timed = []

    def timer(fns):
        timed.append(sorted(fns))
        return {name: 2.0 if name == "ours" else 1.0 for name in fns}

    model = bench.Model("tiny grouped", 4, 2, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prefill, training = bench.measure(model, "float16", 100, batch=1, device="cpu", timer=timer)
    for row in (prefill, training):
        assert row["path"].startswith(CH5) and not row["fast"] and "interpreter" in row["fallback"]
        assert row["sdpa_cudnn"] is None and row["sdpa_cudnn_skipped"]  # no cuDNN on the CPU
        assert row["ours_ms"] == 2.0 and row["ours"] == pytest.approx(row["flops"] / 2e-3 / 1e12)
    assert prefill["flops"] == 4 * 1 * 4 * 100 * 100 * 64 / 2 and training["flops"] == 3.5 * prefill["flops"]
    assert prefill["ours_err"] < bench.FORWARD_RTOL["float16"] and prefill["repeated_kv_err"] is not None
    assert prefill["sharing"] == pytest.approx(0.5)  # ours took 2.0 ms, repeated 1.0
    assert training["ours_grad_err"] < bench.GRAD_RTOL["float16"]
    assert training["backward_path"] == CH10 and training["fallback"].startswith("forward and backward: ")
    assert prefill["fallback_warnings"] and "falling back" in prefill["fallback_warnings"][0]
    assert "ours" in timed[0] and "repeated_kv" in timed[0] and "ours" in timed[1]
    assert bench._line(prefill).startswith("tiny grouped float16 N=100 B=1 prefill: ours ")


def test_paths_follow_the_kernels_own_rules_on_the_cpu():
    from kernels import flash_attention_fast as fast

    q, k = torch.randn(1, 4, 256, 64, dtype=torch.float16), torch.randn(1, 2, 256, 64, dtype=torch.float16)
    assert bench._forward_path(q, k, k) == (CH5, fast.fallback_reason(q, k, k), None)  # the interpreter
    path, reason, not_gluon = bench._backward_path(q, k, k)  # the interpreter runs the Triton backward in fp16
    assert path == TRITON and reason is None and "interpreter" in not_gluon
    path, reason, _ = bench._backward_path(q.bfloat16(), k.bfloat16(), k.bfloat16())
    assert path == CH10 and "bfloat16" in reason
