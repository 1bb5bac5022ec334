"""Chapter 11's benchmark views that count from the rows, fed a small fake result (no GPU needed)."""

from book.bench import backward_fast as bench

FINAL = [s for s in bench.STEPS if s.kept][-1].key


def _speed(n, fast, cudnn, dtype="float16", d=64, causal=False):
    return {"kind": "speed", "dtype": dtype, "head_dim": d, "causal": causal, "N": n, "fast_backward": fast,
            "sdpa_cudnn_backward": cudnn}


RESULT = {"rows": [
    {"kind": "step", "step": FINAL, "head_dim": 64, "causal": False, "N": 4096, "tflops": 490.0},
    {"kind": "step", "step": "readable", "head_dim": 64, "causal": False, "N": 4096, "tflops": 300.0},
    {"kind": "dq", "head_dim": 64, "causal": False, "N": 16384, "second_pass_backward": 400.0, "atomic_backward": 300.0,
     "gluon_backward": 540.0},
    _speed(4096, 500.0, 400.0), _speed(16384, 500.0, 600.0), _speed(4096, 100.0, 150.0, dtype="bfloat16"),
    _speed(1024, 300.0, 100.0),  # below the targets' range: not counted
]}


def test_noise_compares_the_final_kernel_with_itself_per_length():
    text = bench.noise(RESULT)
    assert "at N = 4,096 the two readings differ by up to 2.0%" in text  # 500 / 490; bf16 rows are not compared
    assert "at N = 16,384 the two readings differ by up to 8.0%" in text  # 540 / 500


def test_the_final_kernel_is_step_13_in_gluon_and_the_library_ships_it():
    from kernels import flash_attention_backward_fast as fast

    assert FINAL == "rows_in_shared" and bench._final_switches() == fast.BEST_FEATURES
    gluon_off = dict.fromkeys(fast.GLUON_SWITCHES, False)
    assert bench._triton_switches() == {**fast.BEST_FEATURES, **gluon_off}  # step 6: every Triton switch as kept
    assert [s.key for s in bench.STEPS][-6:] == ["gluon", "kv_registers", "dq_turns", "longest_first",
                                                 "rows_in_accumulators", "rows_in_shared"]  # 8-13


def test_dq_table_sets_each_way_against_the_second_pass():
    text = bench.dq_table(RESULT)
    assert "| 0.75× | 1.35× |" in text  # 300 / 400, 540 / 400


def test_tile_changes_name_only_the_tiles_that_changed_against_the_last_kept_step():
    keys = [s.key for s in bench.STEPS]
    tuned = "64x64, 4 warps, 3 stages"
    rows = [{"kind": "step", "step": key, "head_dim": d, "causal": c, "configs": {"dkdv": tuned, "dq": tuned}}
            for key in keys[2:] for d, c in bench.SHAPES]
    rows[0]["configs"] = {"dkdv": "64x64, 4 warps, 2 stages", "dq": tuned}  # the first autotuned step, D=64
    text = bench.tile_changes({"rows": rows})
    first = text.splitlines()[0]  # against the pinned step: 64x64, 4 warps, 2 stages for both kernels
    assert "D=64 non-causal: dQ 64x64, 4 warps, 2 stages → 64x64, 4 warps, 3 stages" in first
    assert "dK/dV" not in first.split("D=64 causal")[0]  # unchanged there
    assert "D=64 non-causal: dK/dV 64x64, 4 warps, 2 stages → 64x64, 4 warps, 3 stages" in text.splitlines()[1]
    autotuned = [s for s in bench.STEPS[1:] if s.pinned is None and not s.switches["GLUON"]]  # Gluon: fixed tiles
    assert text.count("no tile changed") == len(autotuned) - 2  # every later step kept the same tiles


def test_spills_lists_the_gluon_steps_only_with_what_each_compiled_kernel_recorded():
    rows = [{"kind": "step", "step": key, "head_dim": 128, "causal": True, "spills": spills}
            for key, spills in (("gluon", 28), (FINAL, 0), ("readable", None))]
    text = bench.spills({"rows": rows})
    keys = [s.key for s in bench.STEPS]
    assert f"| {keys.index('gluon')} | {bench.STEPS[keys.index('gluon')].title} | not recorded | not recorded | " \
           "not recorded | 28 |" in text
    assert f"| {keys.index(FINAL)} |" in text and "| 0 |" in text
    assert bench.STEPS[0].title not in text  # the Triton steps compile no Gluon kernel


def test_ratio_noise_takes_the_spread_of_each_step_against_its_baseline_over_repeated_turns():
    keys = [s.key for s in bench.STEPS]
    rows = [{"kind": "step", "step": key, "head_dim": 64, "causal": False, "tflops_repeats": [100.0, 100.0, 100.0]}
            for key in keys]
    rows[1]["tflops_repeats"] = [110.0, 111.1, 108.9]  # against step 0: ratios 1.10, 1.111, 1.089
    text = bench.ratio_noise({"rows": rows})
    assert f"Each column's turns ran {bench.STEP_REPEATS} times." in text
    assert "D=64 non-causal: up to 2.0% (median 0.0%)" in text  # 1.111 / 1.089 - 1; every other pair is flat
    assert bench.ratio_noise({"rows": []}) == "This run did not repeat the worklog's turns."


def _step(key, d, causal, repeats):
    return {"kind": "step", "step": key, "head_dim": d, "causal": causal, "N": 4096,
            "tflops": sorted(repeats)[len(repeats) // 2], "tflops_repeats": repeats}


def test_one_steps_view_sets_it_against_the_last_kept_step_and_the_columns_noise_bound():
    keys = [s.key for s in bench.STEPS]
    tried = next(i for i, s in enumerate(bench.STEPS) if not s.kept)  # step 4, the ablation: not kept
    before, after = bench.STEPS[tried - 1].key, bench.STEPS[tried + 1].key
    rows = []
    for d, causal in bench.SHAPES:
        rows += [_step(before, d, causal, [100.0, 100.0, 100.0]), _step(keys[tried], d, causal, [90.0, 91.0, 92.0]),
                 _step(after, d, causal, [101.0, 101.0, 101.0])]
    result = {"rows": rows}
    # step 5 is set against step 3 (step 4 was not kept): +1.0%; the column's bound is the widest spread of the
    # ratios over the repeats: 92/100 against 90/100, 2.2%
    text = bench.one_step(tried + 1)(result)
    assert f"step {tried - 1} TFLOP/s | step {tried + 1} TFLOP/s" in text
    assert "| D=64 non-causal | 100 | 101 | +1.0% | within the noise (±2.2%) |" in text
    assert "| D=64 non-causal | 100 | 91 | -9.0% | beyond the noise (±2.2%) |" in bench.one_step(tried)(result)
    rows = [r for r in rows if r["step"] != after]
    rows += [_step(after, d, c, [102.2, 102.2, 102.2]) for d, c in bench.SHAPES]
    close = bench.one_step(tried + 1)({"rows": rows})  # +2.2% against a 2.2% bound: one more digit tells them apart
    assert "| +2.20% | within the noise (±2.22%) |" in close
    assert set(bench.BENCHMARK.views) >= {f"step-{i}" for i in range(1, len(bench.STEPS))}
