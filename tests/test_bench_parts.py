"""A benchmark run in parts: the parts merge into one results file only when they measured the same thing."""

import json

import pytest

from book.bench import __main__ as cli
from book.bench import by_name, parts
from book.bench import ring as ring_bench


def _part(rows, date="2026-11-30T10:00:00Z", commit="a" * 40, sm_mhz=(1500, 1980, 1980), **changed):
    provenance = {"gpu": "NVIDIA H200", "gpu_slug": "nvidia-h200", "sm_count": 132, "driver": "580", "cuda": "13.0",
                  "torch": "2.11", "triton": "3.6.0", "date": date, "commit": commit,
                  "sources": {"book/bench/ring.py": "sha256:" + "f" * 64},
                  "telemetry": {"samples": 10, "interval_ms": 100,
                                "sm_mhz": dict(zip(("min", "median", "max"), sm_mhz, strict=True)),
                                "power_w": {"min": 100, "median": 500, "max": 700},
                                "temperature_c": {"min": 30, "median": 50, "max": 60}}}
    provenance.update(changed)
    return {"schema": 1, "benchmark": "ring", "provenance": provenance, "rows": rows}


def test_parts_merge_in_order_with_the_last_date_and_the_telemetry_of_all():
    merged = parts.merge([_part([{"N": 1}, {"N": 2}], sm_mhz=(1400, 1900, 1980)),
                          _part([{"N": 3}], date="2026-11-30T11:00:00Z", sm_mhz=(1300, 1980, 1980))])
    assert [row["N"] for row in merged["rows"]] == [1, 2, 3]
    assert merged["provenance"]["date"] == "2026-11-30T11:00:00Z"
    assert merged["provenance"]["telemetry"]["sm_mhz"] == {"min": 1300, "median": 1980, "max": 1980}
    assert merged["provenance"]["telemetry"]["samples"] == 20
    assert [t["sm_mhz"]["median"] for t in merged["provenance"]["part_telemetry"]] == [1900, 1980]


def test_parts_taken_at_other_commits_merge_when_their_sources_are_the_same():
    merged = parts.merge([_part([{"N": 1}]), _part([{"N": 2}], date="2026-12-01T09:00:00Z", commit="b" * 40)])
    assert merged["provenance"]["commit"] == "b" * 40  # the last part's
    assert merged["provenance"]["part_commits"] == ["a" * 40, "b" * 40]


@pytest.mark.parametrize("changed", [{"sources": {"book/bench/ring.py": "sha256:" + "0" * 64}},
                                     {"gpu": "NVIDIA H100 80GB HBM3"}, {"triton": "3.7.0"}])
def test_parts_measured_differently_are_refused(changed):
    with pytest.raises(ValueError, match="part 2 of ring was measured with a different"):
        parts.merge([_part([{"N": 1}]), _part([{"N": 2}], **changed)])


def test_merge_files_writes_the_results_file_and_removes_the_parts(tmp_path):
    for k, rows in ((1, [{"N": 1}]), (2, [{"N": 2}])):
        path = parts.part_path("ring", "nvidia-h200", k, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_part(rows)))
    with pytest.raises(ValueError, match="part 3 of 3 not measured yet"):
        parts.merge_files("ring", 3, tmp_path)
    (written,) = parts.merge_files("ring", 2, tmp_path)
    assert written == tmp_path / "nvidia-h200" / "ring.json"
    assert [row["N"] for row in json.loads(written.read_text())["rows"]] == [1, 2]
    assert not list((tmp_path / "nvidia-h200" / "parts").iterdir())


def test_a_part_overrides_module_attributes_only_while_it_runs():
    before = list(ring_bench.SIZES)
    with parts.overridden("ring", {"SIZES": [16]}):
        assert ring_bench.SIZES == [16]
    assert ring_bench.SIZES == before
    with pytest.raises(AttributeError, match="has no SIZE to override"):
        with parts.overridden("ring", {"SIZE": [16]}):
            pass


def test_the_ring_benchmark_splits_into_parts_that_cover_its_grid():
    benchmark = by_name("ring")
    ring_parts = [part for part in benchmark.parts if not part.get("CONTEXT_PARALLEL") and
                  all(n < ring_bench.LONG for n in part["SIZES"])]
    covered = [(n, h) for part in ring_parts for n in part["SIZES"] for h in part.get("HEADS", ring_bench.HEADS)]
    assert sorted(covered) == sorted((n, tuple(h)) for n in ring_bench.SIZES for h in ring_bench.HEADS)
    context_parallel = {n for part in benchmark.parts if part.get("CONTEXT_PARALLEL") for n in part["SIZES"]}
    assert context_parallel == {32768, 131072, 262144}  # from 32K, and the target's lengths from 128K
    assert any(n >= 1 << 20 for part in benchmark.parts for n in part["SIZES"])  # the 1M-token training step


def test_asking_for_a_part_a_benchmark_does_not_have_is_an_error(capsys):
    assert cli.main(["--only", "ring", "--part", "9"]) == 2
    assert "ring has no such part" in capsys.readouterr().err
