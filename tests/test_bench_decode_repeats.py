"""The decode repeats probe: its cases come from the real-model grid, and its views give each verdict."""

from book.bench import by_name, decode_models
from book.bench import decode_repeats as bench


def _repeat(model, batch, context, missed, ours, cudnn, ours_plain, cudnn_plain, repeat):
    name, _, kv_heads, head_dim = next(m for m in decode_models.MODELS if m[0] == model)
    return {"kind": "repeat", "model": name, "batch": batch, "context": context, "missed": missed,
            "kv_bytes": 2 * batch * kv_heads * context * head_dim * 2, "splits": 8, "repeat": repeat,
            "first_plain": "ours", "ours_us": ours, "sdpa_cudnn_us": cudnn, "ours_plain_us": ours_plain,
            "sdpa_cudnn_plain_us": cudnn_plain, "ours_host_us": 30.0, "sdpa_cudnn_host_us": 40.0}


ROWS = [{"kind": "copy", "reference": 4.0e12},
        # plain calls behind in every repeat (cuDNN 16 us against ours 30-34 us)
        *(_repeat("Llama-3.1-70B, 1/8 shard", 1, 20000, "plain call", 14.0, 16.0, 30.0 + r, 16.0, r) for r in range(5)),
        # in graphs on both sides of cuDNN: level
        *(_repeat("Llama-2-13B", 4, 2048, "level in graphs", 57.0, 56.5 + r / 4, 56.0, 60.0, r) for r in range(5)),
        # 256 MiB in 80 us at 4 TB/s of copy: 268,435,456 / 4e12 s = 67.1 us, 83.9% of the copy reference
        *(_repeat("Qwen2.5-7B", 64, 2048, "85% of the copy reference", 80.0 - 2 * r, 81.0, 80.0, 80.0, r)
          for r in range(5))]
RESULT = {"rows": ROWS}


def test_every_case_is_a_shape_of_the_real_model_grid():
    names = {model[0] for model in decode_models.MODELS}
    assert all(model in names and batch in decode_models.BATCHES and context in decode_models.CONTEXTS
               for model, batch, context, _ in bench.CASES)
    assert {missed for *_, missed in bench.CASES} == {"plain call", "level in graphs", "85% of the copy reference"}


def test_registered_for_chapter_12_with_the_decode_sources():
    benchmark = by_name("decode_repeats")
    assert benchmark.chapter == "ch12" and "kernels/flash_decoding.py" in benchmark.sources
    assert set(benchmark.views) == {"table", "summary"}


def test_table_gives_the_range_and_verdict_of_each_case():
    text = bench.table(RESULT)
    assert "| Llama-3.1-70B, 1/8 shard | 1 | 20,000 | plain call | 1.143–1.143 (ahead) | 0.471–0.533 (behind) |" in text
    assert "| Llama-2-13B | 4 | 2,048 | level in graphs | 0.991–1.009 (level) |" in text
    assert "| 83.9%–93.2% (4 of 5) |" in text  # shares 67.1/80 ... 67.1/72; only rows of 256 MiB or more


def test_summary_names_each_verdict_on_the_target_missed():
    text = bench.summary(RESULT)
    assert "Llama-3.1-70B, 1/8 shard batch 1 at 20,000 keys: behind cuDNN as plain calls, 0.47–0.53×" in text
    assert "Llama-2-13B batch 4 at 2,048 keys: level with cuDNN in graphs, 0.991–1.009×" in text
    assert "Qwen2.5-7B batch 64 at 2,048 keys: 85% of the copy reference reached in 4 of 5 repeats" in text
