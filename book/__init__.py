"""Tooling that turns the book's sources into a site: benchmarks, results files, snippet outputs, pages."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "results"
SNIPPETS_DIR = ROOT / "snippets"
