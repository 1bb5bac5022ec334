"""Chapter 14's four-GPU check of the ring's model: its view on made-up rows, and ring.py's measurement at a world
size other than two (three CPU processes over gloo)."""

import torch.multiprocessing as mp

from book.bench import by_name, ring
from book.bench import ring_four as bench


def _row(world, tokens, no_overlap_ms, training_ms, send_ms=1.0):
    return {"kind": "ring", "N": tokens * world, "heads": 32, "kv_heads": 8, "causal": True, "layout": "zigzag",
            "world": world, "dtype": "bfloat16", "forward_ms": no_overlap_ms / 3, "forward_no_overlap_ms":
            no_overlap_ms / 3, "training_ms": training_ms, "training_no_overlap_ms": no_overlap_ms, "send_ms": send_ms}


def test_the_check_sets_the_models_prediction_beside_the_four_gpu_measurement():
    # two GPUs: training without overlap 26 ms = 2 steps of compute + (2 + 4) sends of 1 ms: 10 ms a step
    result = {"rows": [_row(2, 32768, 26.0, 25.0), _row(4, 32768, 52.0, 50.0)]}
    text = bench.check(result)
    # four GPUs: ideal 4 x 10 = 40 ms; the model: 10 + 3 x max(10, 3) + 2 = 42 ms, 95%; measured 40 / 50 = 80%
    assert "| 32,768 | 25.0 | 50.0 | 40.0 | 95% | 80% |" in text
    assert bench.check({"rows": [_row(2, 32768, 26.0, 25.0)]}).startswith("This run did not time")


def test_ring_measures_at_another_world_size():
    rows = ring.measure({"backend": "gloo", "world": 3, "sizes": [24], "heads": [[4, 2]], "cases": [[True, "zigzag"]],
                         "dtype": "float32", "use_kernels": False}, spawn=mp.spawn)
    (row,) = rows
    assert row["world"] == 3 and row["error"] < 1e-5 and row["training_ms"] > 0


def test_registered_for_chapter_14_and_waiting_for_four_gpus():
    benchmark = by_name("ring_four")
    assert benchmark.chapter == "ch14" and "four GPUs" in benchmark.awaiting_gpu
    assert "book/bench/ring.py" in benchmark.sources and "kernels/flash_attention_fast.py" in benchmark.sources
