"""What a benchmark is: a name, the chapter it belongs to, the sources it measures, how to run it,
and the views (tables, figures, sentences) that pages render from its results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Progress = Callable[[str], None]


class BenchmarkSkipped(Exception):
    """Raised by a benchmark's run when this machine lacks something it needs (a profiler, say); the message
    says what, in one line. No results file is written, so the pages keep the committed results."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    chapter: str
    title: str
    sources: list[str]
    run: Callable[[Progress], list[dict]]
    views: dict[str, Callable[[dict], object]] = field(default_factory=dict)
    # Why a new benchmark has no results file yet (say which issue tracks its first GPU run). While set,
    # the checks accept the missing file; pages show "No measurements yet". Stale results still fail.
    awaiting_gpu: str = ""
    # A run too long for one sitting: module attributes to override, one dict per part (book/bench/parts.py).
    parts: list[dict] = field(default_factory=list)
