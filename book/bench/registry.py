"""What a benchmark is: a name, the chapter it belongs to, the sources it measures, how to run it,
and the views (tables, figures, sentences) that pages render from its results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Progress = Callable[[str], None]


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
