"""The decode-gap search: its shape is the row decode_repeats found behind, and its views read the repeats."""

from book.bench import by_name, decode_repeats
from book.bench import decode_gap as bench

PLAN = {"splits": 4, "block_n": 64, "stages": 3}
BEST = {"splits": 2, "block_n": 128, "stages": 3}
SEARCH = {"kind": "search", "model": "Llama-2-13B", "heads": 40, "kv_heads": 40, "head_dim": 128, "batch": 4,
          "context": 2048, "plan": PLAN, "best": BEST, "sdpa_cudnn_us": 56.0,
          "again_us": [{"plan": 57.0 + r / 10, "best": 55.0, "sdpa_cudnn": 56.0} for r in range(5)]}
CONFIGS = [{"kind": "config", "splits": s, "block_n": n, "stages": st, "us": 50.0 + s + n / 64}
           for n, st in ((128, 3), (64, 3)) for s in (2, 4)]
RESULT = {"rows": [SEARCH, *CONFIGS]}


def test_the_shape_is_the_row_the_repeats_found_behind_in_graphs():
    (case,) = [c for c in decode_repeats.CASES if c[3] == "level in graphs"]
    assert (bench.MODEL[0], bench.BATCH, bench.CONTEXT) == case[:3]
    assert by_name("decode_gap").chapter == "ch12"


def test_table_marks_the_plans_choice_and_gives_cudnn():
    text = bench.table(RESULT)
    assert "| 4 | 56.0 | **55.0** |" in text  # 4 splits: 128-key tile 50 + 4 + 2, 64-key tile (the plan) 50 + 4 + 1
    assert "cuDNN in the same turns: 56.0 µs." in text


def test_summary_sets_cudnn_against_the_plan_and_the_fastest():
    text = bench.summary(RESULT)
    assert "over the plan's choice (4 × 64/3) 0.976–0.982× (median 0.979)" in text  # 56 / 57.4 ... 56 / 57.0
    assert "over the search's fastest (2 × 128/3) 1.018–1.018× (median 1.018)" in text  # 56 / 55
