"""The GPU's clock, power and temperature while a benchmark runs: sampled lines summarized, stored in the provenance
(schema-checked) and shown under every view."""

import copy
import json

import pytest

from book import render, results, telemetry
from book.provenance import ROOT


def test_summary_keeps_min_median_max_and_skips_unreadable_lines():
    lines = ["1980, 650.5, 50", "[N/A], 600, 51", "1755, 699.9, 64", "1890, 420.0, 38", ""]
    summary = telemetry.summarize(lines)
    assert summary["samples"] == 3 and summary["interval_ms"] == telemetry.INTERVAL_MS
    assert summary["sm_mhz"] == {"min": 1755.0, "median": 1890.0, "max": 1980.0}
    assert summary["power_w"] == {"min": 420.0, "median": 650.5, "max": 699.9}
    assert summary["temperature_c"] == {"min": 38.0, "median": 50.0, "max": 64.0}
    assert telemetry.summarize(["not a number"]) == {}


def test_a_sampler_without_nvidia_smi_gives_nothing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with telemetry.Sampler() as sampler:
        pass
    assert sampler.summary() == {}


def test_the_provenance_keeps_it_and_the_line_under_a_view_shows_it():
    pytest.importorskip("jsonschema")
    path = next((ROOT / "results").glob("*/*.json"))
    result = copy.deepcopy(json.loads(path.read_text()))
    result["provenance"]["telemetry"] = telemetry.summarize(["1980, 650.5, 50", "1755, 699.9, 64"])
    results.validate(result)
    line = render.provenance_line(result["provenance"])
    assert "While it ran: SM clock 1,755–1,980 MHz, 650–700 W, 50–64 °C.</p>" in line
    result["provenance"]["telemetry"]["sm_mhz"].pop("max")
    with pytest.raises(Exception, match="max"):
        results.validate(result)
