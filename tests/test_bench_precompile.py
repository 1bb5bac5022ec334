"""The precompile pass: its parts name what the benchmarks really have, a part runs a benchmark with its overrides
and a stand-in timer, and the autotuners' choices from the pass are forgotten."""

import importlib
import sys
import types

import pytest

import book.bench
from book.bench import ALL, precompile
from book.bench.registry import Benchmark


@pytest.mark.parametrize("name", sorted(precompile.PARTS))
def test_parts_override_what_the_benchmark_has(name):
    assert name in {b.name for b in ALL}, f"PARTS names {name}, which is no benchmark"
    module = importlib.import_module(f"book.bench.{name}")
    for part in precompile.parts_of(name):
        for attribute, value in part.items():
            if attribute == "skip":
                assert all(callable(getattr(module, f)) for f in value)
            else:
                assert isinstance(getattr(module, attribute), list) and isinstance(value, list), attribute


def test_a_part_covers_each_value_once_where_the_split_is_by_size():
    parts = precompile.parts_of("fast_attention")
    from book.bench import fast_attention

    pairs = sorted((p["DTYPES"][0], p["SIZES"][0]) for p in parts)
    assert pairs == sorted((t, n) for t in fast_attention.DTYPES for n in fast_attention.SIZES)


def test_first_call_is_not_precompiled_and_others_run_whole():
    assert precompile.parts_of("first_call") == []
    assert precompile.parts_of("vector_add") == [{}]


def test_run_part_sets_overrides_skips_and_the_stand_in_timer(monkeypatch):
    seen = {}
    fake = types.ModuleType("book.bench.fake_part")
    fake.SIZES = [1, 2, 3]
    fake.gpu_ms_interleaved = None
    fake._heavy = lambda: ["row"]

    def run(progress):
        seen.update(sizes=fake.SIZES, timer=fake.gpu_ms_interleaved, heavy=fake._heavy())
        return []

    monkeypatch.setitem(sys.modules, "book.bench.fake_part", fake)
    monkeypatch.setattr(book.bench, "ALL", [Benchmark("fake_part", "ch00", "t", [], run)])
    precompile.run_part("fake_part", {"SIZES": [[2, True]], "skip": ["_heavy"]})
    assert seen == {"sizes": [(2, True)], "timer": precompile._one_plain_call_each, "heavy": []}
    with pytest.raises(AttributeError, match="has no SHAPES to override"):
        precompile.run_part("fake_part", {"SHAPES": [1]})


def test_forget_tunings_deletes_only_the_saved_choices(tmp_path, monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "_attn_fwd.autotune.json").write_text("{}")
    (tmp_path / "a" / "_attn_fwd.cubin").write_text("")
    assert precompile.forget_tunings() == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["_attn_fwd.cubin", "a"]
