"""Results files: every committed one follows the schema, and the schema rejects what it should."""

import copy
import json

import pytest

from book import RESULTS_DIR, results

# The GPU machine runs only the `gpu` tests and may lack the docs and test extras; skip there, not fail.
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is installed by `make setup`")

COMMITTED = sorted(RESULTS_DIR.glob("*/*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=[f"{p.parent.name}/{p.name}" for p in COMMITTED])
def test_committed_results_follow_the_schema(path):
    result = json.loads(path.read_text())
    results.validate(result)
    assert path.parent.name == result["provenance"]["gpu_slug"]
    assert path.stem == result["benchmark"]


def _valid_result() -> dict:
    return {
        "schema": 1,
        "benchmark": "vector_add",
        "provenance": {
            "gpu": "NVIDIA H100 80GB HBM3", "gpu_slug": "nvidia-h100-80gb-hbm3", "sm_count": 132,
            "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130", "triton": "3.6.0",
            "date": "2026-11-23T10:00:00Z", "commit": "abc123",
            "sources": {"kernels/vector_add.py": "sha256:" + "0" * 64},
        },
        "rows": [{"n": 1000, "triton_ms": 0.01, "cpu_ms": None}],
    }


def test_a_valid_result_passes():
    results.validate(_valid_result())


@pytest.mark.parametrize(
    "breakage",
    [
        lambda r: r["provenance"].pop("triton"),
        lambda r: r["provenance"].pop("sources"),
        lambda r: r["provenance"].update(date="yesterday"),
        lambda r: r["provenance"]["sources"].update({"kernels/x.py": "not-a-hash"}),
        lambda r: r.update(rows=[]),
        lambda r: r["rows"][0].update(nested={"a": {"b": 1}}),
        lambda r: r.update(schema=2),
    ],
    ids=["no-triton", "no-sources", "bad-date", "bad-hash", "no-rows", "nested-row", "schema-version"],
)
def test_schema_rejects_broken_results(breakage):
    broken = copy.deepcopy(_valid_result())
    breakage(broken)
    with pytest.raises(jsonschema.ValidationError):
        results.validate(broken)


def test_schema_takes_a_list_of_flat_records_but_not_deeper_nesting():
    repeats = copy.deepcopy(_valid_result())
    repeats["rows"][0]["again_us"] = [{"plan": 57.0, "best": 55.0}, {"plan": 56.9, "best": None}]
    results.validate(repeats)  # each repeat's times of the calls timed in turns
    repeats["rows"][0]["again_us"] = [{"plan": {"us": 57.0}}]
    with pytest.raises(jsonschema.ValidationError):
        results.validate(repeats)


def test_write_puts_the_file_under_the_gpu_folder(tmp_path):
    path = results.write(_valid_result(), results_dir=tmp_path)
    assert path == tmp_path / "nvidia-h100-80gb-hbm3" / "vector_add.json"
    assert results.load_all("vector_add", results_dir=tmp_path)[0] == _valid_result()


def test_provenance_records_cudnn_clocks_and_l2(monkeypatch):
    """A run records the application and maximum clocks nvidia-smi reports, and an empty dict when it cannot say;
    both pass the schema, as does the L2 size (a byte count, never negative)."""
    import subprocess

    from book import provenance

    def smi(args, **_kwargs):
        return subprocess.CompletedProcess(args, 0, stdout="1980, 1980, 3201, 3201\n")

    monkeypatch.setattr(provenance.subprocess, "run", smi)
    assert provenance._clocks() == {"application_sm_mhz": 1980, "max_sm_mhz": 1980, "application_memory_mhz": 3201,
                                    "max_memory_mhz": 3201}
    result = _valid_result()
    result["provenance"] |= {"cudnn": "91002", "clocks": provenance._clocks(), "l2_cache_bytes": 62914560}
    results.validate(result)
    result["provenance"]["l2_cache_bytes"] = -1
    with pytest.raises(jsonschema.ValidationError):
        results.validate(result)

    def missing(args, **_kwargs):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(provenance.subprocess, "run", missing)
    assert provenance._clocks() == {}
