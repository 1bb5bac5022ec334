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
