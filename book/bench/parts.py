"""A benchmark too long for one sitting, run in parts and merged into one results file.

Some machines are lent for minutes at a time (the book's GPUs: ten minutes a command). A benchmark that lists
`parts` (module attributes to override, one dict per part, as book/bench/precompile.py does) can run one part per
call: `python -m book.bench --only NAME --part K` writes results/<gpu>/parts/NAME.K.json. Once every part is
there, `python -m book.bench --merge NAME` joins them into results/<gpu>/NAME.json, rows in part order, and removes
the parts. It refuses unless every part measured the same thing: the same source hashes, the same GPU, driver and
library versions. The date, the telemetry and the commit may differ: the merged file keeps the last date and commit,
the telemetry over all parts (and each part's own, `part_telemetry`) and each part's commit (`part_commits`). So
the parts of one measurement can be taken over several sessions, as long as nothing they measure changes; the part
files are kept in the repository (results/<gpu>/parts/) until they merge.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from pathlib import Path

from book import results

# What may differ between the parts of one measurement; every other provenance field must be equal.
MAY_DIFFER = ("date", "telemetry", "commit", "part_commits", "part_telemetry")


def part_path(name: str, gpu_slug: str, part: int, results_dir: Path = results.RESULTS_DIR) -> Path:
    return results_dir / gpu_slug / "parts" / f"{name}.{part}.json"


@contextlib.contextmanager
def overridden(name: str, overrides: dict):
    """book.bench.NAME's module attributes set to `overrides` while the block runs, then restored."""
    module = importlib.import_module(f"book.bench.{name}")
    missing = [attribute for attribute in overrides if not hasattr(module, attribute)]
    if missing:
        raise AttributeError(f"book.bench.{name} has no {', '.join(missing)} to override")
    saved = {attribute: getattr(module, attribute) for attribute in overrides}
    try:
        for attribute, value in overrides.items():
            setattr(module, attribute, value)
        yield
    finally:
        for attribute, value in saved.items():
            setattr(module, attribute, value)


def _telemetry(readings: list[dict]) -> dict | None:
    """The telemetry of several parts as one: the extremes over all, the median of the parts' medians."""
    if not readings:
        return None
    merged = {"samples": sum(r["samples"] for r in readings), "interval_ms": readings[0]["interval_ms"]}
    for key in ("sm_mhz", "power_w", "temperature_c"):
        medians = sorted(r[key]["median"] for r in readings)
        merged[key] = {"min": min(r[key]["min"] for r in readings), "median": medians[len(medians) // 2],
                       "max": max(r[key]["max"] for r in readings)}
    return merged


def merge(parts: list[dict]) -> dict:
    """One result from the results of every part, in part order; ValueError if they did not measure the same."""
    if not parts:
        raise ValueError("no parts to merge")
    first = parts[0]
    for k, part in enumerate(parts[1:], 2):
        if part["benchmark"] != first["benchmark"]:
            raise ValueError(f"part {k} is of {part['benchmark']}, part 1 of {first['benchmark']}")
        differ = sorted(key for key in set(first["provenance"]) | set(part["provenance"])
                        if key not in MAY_DIFFER and first["provenance"].get(key) != part["provenance"].get(key))
        if differ:
            raise ValueError(f"part {k} of {first['benchmark']} was measured with a different {', '.join(differ)} "
                             f"than part 1: run every part again with the same sources, on the same kind of machine")
    provenance = {key: value for key, value in first["provenance"].items() if key != "telemetry"}
    provenance["date"] = max(part["provenance"]["date"] for part in parts)
    latest = max(parts, key=lambda part: part["provenance"]["date"])
    provenance["commit"] = latest["provenance"]["commit"]
    provenance["part_commits"] = [part["provenance"]["commit"] for part in parts]
    telemetry = _telemetry([part["provenance"]["telemetry"] for part in parts if "telemetry" in part["provenance"]])
    if telemetry:
        provenance["telemetry"] = telemetry
        provenance["part_telemetry"] = [part["provenance"].get("telemetry") for part in parts]
    return {"schema": first["schema"], "benchmark": first["benchmark"], "provenance": provenance,
            "rows": [row for part in parts for row in part["rows"]]}


def merge_files(name: str, count: int, results_dir: Path = results.RESULTS_DIR) -> list[Path]:
    """Merge the parts of NAME on every GPU folder that holds all `count` of them; returns the files written."""
    written = []
    for folder in sorted(p for p in results_dir.iterdir() if (p / "parts").is_dir()):
        paths = [part_path(name, folder.name, k, results_dir) for k in range(1, count + 1)]
        present = [p for p in paths if p.exists()]
        if not present:
            continue
        if len(present) < count:
            missing = [str(k) for k, p in enumerate(paths, 1) if not p.exists()]
            raise ValueError(f"{name} on {folder.name}: part {', '.join(missing)} of {count} not measured yet")
        written.append(results.write(merge([json.loads(p.read_text()) for p in paths]), results_dir))
        for p in paths:
            p.unlink()
    return written
