"""Chapter 12's decode benchmark views, fed a small fake result (no GPU needed; nothing is written)."""

from book.bench import decode as bench


def _row(dtype, batch, context, heads, ours_us, flash_us, cudnn_us=None):
    kv_bytes = 2 * batch * heads[1] * context * 128 * 2
    limit_us = kv_bytes / 3.0e12 * 1e6
    row = {"kind": "decode", "dtype": dtype, "batch": batch, "context": context, "q_heads": heads[0],
           "kv_heads": heads[1], "kv_bytes": kv_bytes, "limit_us": limit_us, "ours_plain_us": ours_us + 20}
    for name, us in (("ours", ours_us), ("naive", 4 * ours_us), ("sdpa_flash", flash_us), ("sdpa_efficient", None),
                     ("sdpa_cudnn", cudnn_us), ("sdpa_math", 10 * ours_us)):
        row[f"{name}_us"] = us
        row[f"{name}_share"] = None if us is None else limit_us / us
    return row


RESULT = {"rows": [{"kind": "copy", "bytes_per_s": 3.0e12,
                    "ways": {"copy_graph": 2.0e12, "kernel_graph": 3.0e12, "copy_plain": 2.9e12}},
                   _row("float16", 1, 8192, (32, 8), ours_us=20.0, flash_us=25.0),
                   _row("float16", 64, 131072, (32, 8), ours_us=3000.0, flash_us=2900.0, cudnn_us=3100.0),
                   _row("bfloat16", 1, 8192, (32, 8), ours_us=18.0, flash_us=25.0),
                   *({"kind": "splits", "context": c, "splits": s, "us": 100.0 / s, "share": s / 100}
                     for c in bench.SPLIT_CONTEXTS for s in bench.SPLIT_COUNTS),
                   *({"kind": "tiles", "batch": 8, "context": 131072, "q_heads": 32, "kv_heads": 32, "block_n": n,
                      "stages": s, "splits": 1, "programs": 256, "chosen": (n, s) == (64, 3), "us": 4000.0 + n + s,
                      "share": 0.9} for n, s in ((128, 3), (64, 3), (64, 2))),
                   *({"kind": "tile_memory", "block_n": n, "stages": s, "warps": 4, "shared_per_sm": 233472,
                      "estimate": p}
                     | ({} if b is None else {"shared_bytes": b, "registers": r, "programs_per_sm": p,
                                              "programs_per_sm_registers": 65536 // (-(-r // 8) * 8 * 128)})
                     for n, s, b, r, p in ((128, 3, 139264, 143, 1), (64, 3, 71680, 90, 3), (64, 2, None, None, 5))),
                   *({"kind": "paged", "batch": 1, "context": 131072, "q_heads": 32, "kv_heads": 8, "pages": name,
                      "us": 150.0, "share": 0.84, "splits": 16, "block_n": 64, "stages": 3}
                     for name in ["contiguous", *map(str, bench.PAGE_SIZES)])]}


def test_targets_count_each_target_and_name_the_small_case():
    text = bench.targets(RESULT)
    assert "margin for level), in 2 of 3 rows" in text  # the 64 x 128K row is 3.3% slower than FlashAttention-2
    assert "strictly at or above it in 2 of 3" in text
    assert "in 1 of the 1 rows with at least 256 MiB" in text  # 16 GiB of K and V: only the batch-64 row
    assert "float16 32/8 heads 56%" in text and "bfloat16 32/8 heads 62%" in text  # 11.2 us over 20 and over 18


def test_headline_puts_each_target_beside_what_the_run_measured():
    text = bench.headline(RESULT)
    assert "| level with the fastest SDPA backend, or ahead (within 2%) | 2 of 3 rows | missed |" in text
    assert "| at least 85% of the copy reference from 256 MiB of K and V | 1 of 1 rows | met |" in text
    assert "| 32/8 heads 56–62% | met in 1 of 2 rows |" in text  # fp16 and bf16 at batch 1, 8K: one range


def test_targets_end_with_the_gaps_sentence():
    assert bench.targets(RESULT).endswith(bench.gaps(RESULT))


def test_paged_table_gives_the_split_count_and_tile():
    assert "| 150.0 (84%), 16 splits, 64/3 |" in bench.paged_table(RESULT)
    one = [r | {"splits": 1} if r["kind"] == "paged" else r for r in RESULT["rows"]]
    assert "| 150.0 (84%), 1 split, 64/3 |" in bench.paged_table({"rows": one})


def test_plan_is_the_wrappers(device):
    import torch

    from kernels import flash_decoding

    q = torch.zeros(8, 32, 1, 128, device=device, dtype=torch.float16)
    splits, block_n, stages = flash_decoding.plan(q, 8, 4096, page_size=16)
    assert bench._plan(q, 8, 4096, page_size=16) == {"splits": splits, "block_n": block_n, "stages": stages}
    assert block_n == 16  # pages of 16 keys cap the tile


def test_gaps_count_rows_below_the_fastest_backend_per_cache_length():
    text = bench.gaps(RESULT)
    assert "8,192 keys: none of 2" in text  # 20 and 18 us against FlashAttention-2's 25
    assert "131,072 keys: 1 of 1, the lowest 0.967 (3.3% behind; batch 64, 32/8 heads, float16)" in text  # 2900/3000
    assert "1,024 keys" not in text and "32,768 keys" not in text  # no rows of those lengths


def test_table_shows_fp16_rows_and_refusals():
    text = bench.table(RESULT)
    assert text.count("\n| 1 | 8,192 |") == 1 and "| 64 | 131,072 |" in text
    assert "| — |" in text  # the memory-efficient backend refused in every fake row
    assert "1.250×" in text  # FlashAttention-2's 25 us over ours 20 us
    assert "The bf16 rows are in a table of their own" in text
    assert "| 1,678 |" in text  # 33,554,432 bytes of K and V in 20 us
    bf16 = bench.table_bf16(RESULT)  # the one bf16 row: 18 us
    assert bf16.count("\n| 1 | 8,192 |") == 1 and "| 64 | 131,072 |" not in bf16 and "| 18.0 (" in bf16
    assert "per decode step, bf16" in bf16 and "The fp16 rows are in a table of their own" in bf16


def test_splits_table_has_one_line_per_split_count():
    assert bench.splits_table(RESULT).count("\n|") == len(bench.SPLIT_COUNTS) + 1


def test_tiles_table_and_copy_sentence():
    row = "| 8 | 131,072 | 32/32 | 1 | 256 | 4131.0 (90%) | **4067.0 (90%)** | 4066.0 (90%) |"
    assert row in bench.tiles_table(RESULT)
    assert ("fastest of the three at 0 of 1 shapes: elsewhere batch 8, 131,072 keys, 32/32 heads, 0.0% behind 64 keys "
            "and 2 stages.") in bench.tiles_table(RESULT)
    sentence = bench.tile_memory_sentence(RESULT)
    assert ("65,536 registers of one SM: 128 keys and 3 stages 136 KiB and 143 registers per thread: 1 per SM by "
            "shared memory, 3 by registers (estimate: 1)") in sentence
    assert "64 keys and 2 stages not read (estimate: 5)" in sentence
    text = bench.copy_sentence(RESULT)
    assert "a copy captured in a CUDA graph 2,000 GB/s" in text and "element-wise kernel in a graph 3,000" in text


def test_paged_table_has_a_column_per_page_size():
    text = bench.paged_table(RESULT)
    assert "| 1 | 131,072 | 32/8 | 150.0 (84%), 16 splits, 64/3 |" in text
    assert text.count("150.0 (84%)") == 1 + len(bench.PAGE_SIZES)


def test_plot_draws():
    assert bench.plot(RESULT) is not None


def test_a_row_runs_end_to_end_with_a_stand_in_timer(monkeypatch, device):
    """The row's own code (inputs, the check against the math backend, refusals, the fields the views read) runs
    here on a small shape; only the GPU timer is a stand-in, which says 10 us for every graph."""
    monkeypatch.setattr(bench, "gpu_ms_interleaved", lambda fns, **_: {name: 0.01 for name in fns})
    monkeypatch.setattr(bench, "gpu_ms", lambda fn: 0.02)
    row = bench._decode_row("float16", 2, 100, (4, 2), bandwidth=3.0e12, progress=lambda message: None,
                            device=device)
    assert row["ours_us"] == 10.0 and row["ours_plain_us"] == 20.0 and row["naive_us"] == 10.0
    assert row["kv_bytes"] == 2 * 2 * 2 * 100 * 128 * 2 and row["limit_us"] == row["kv_bytes"] / 3.0e12 * 1e6
    assert row["sdpa_math_us"] == 10.0  # the math backend runs everywhere; the others may refuse on a CPU
    assert "| 2 | 100 | 4/2 |" in bench.table({"rows": [row]})


def test_paged_rows_run_end_to_end_with_a_stand_in_timer(monkeypatch, device):
    """Pages in a shuffled order must give the contiguous cache's output (the row checks it); only the timer is a
    stand-in."""
    monkeypatch.setattr(bench, "gpu_ms_interleaved", lambda fns, **_: {name: 0.01 for name in fns})
    rows = bench._paged_rows(3.0e12, lambda message: None, shapes=[(2, 128, (4, 2))], device=device)
    assert [r["pages"] for r in rows] == ["contiguous", *map(str, bench.PAGE_SIZES)]
    assert "| 2 | 128 | 4/2 | 10.0 (" in bench.paged_table({"rows": rows})
