"""Reading, writing and validating results files: results/<gpu-slug>/<benchmark>.json."""

from __future__ import annotations

import json
from pathlib import Path

from book import RESULTS_DIR, ROOT

SCHEMA_PATH = ROOT / "book" / "results.schema.json"


def path_for(benchmark: str, gpu_slug: str, results_dir: Path = RESULTS_DIR) -> Path:
    return results_dir / gpu_slug / f"{benchmark}.json"


def write(result: dict, results_dir: Path = RESULTS_DIR) -> Path:
    try:
        validate(result)
    except ImportError:  # a GPU image without jsonschema: the test suite validates every committed file
        pass
    path = path_for(result["benchmark"], result["provenance"]["gpu_slug"], results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    return path


def validate(result: dict) -> None:
    """Raise jsonschema.ValidationError if the result does not follow the schema."""
    import jsonschema

    jsonschema.validate(result, json.loads(SCHEMA_PATH.read_text()))


def load_all(benchmark: str, results_dir: Path = RESULTS_DIR) -> list[dict]:
    """Every GPU's results for one benchmark, sorted by GPU folder name."""
    found = []
    for path in sorted(results_dir.glob(f"*/{benchmark}.json")):
        found.append(json.loads(path.read_text()))
    return found
