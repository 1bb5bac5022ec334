"""The GPUs whose results the book shows: the reference GPU that the prose reads, and archived GPUs.

The reference GPU is named here and nowhere else, by its results folder (results/<gpu-slug>/). Every benchmark
has a fresh results file on it. Its tab comes first in every results view.

A GPU the book can no longer measure on is archived: its folder holds ARCHIVED.md, plain "key: value" lines

    since: 2026-11-28
    why: the maintainers can no longer measure on an H100: the H200 is the reference GPU now
    names: H100

(names: the short names prose uses for that GPU, comma separated). Its stale results stay on the pages, each
under a notice that says so, and fail no check. The reference GPU is never archived.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from book import RESULTS_DIR

REFERENCE_GPU = "nvidia-h200"
ARCHIVE_MARKER = "ARCHIVED.md"
_ARCHIVE_KEYS = ("since", "why", "names")


@dataclass(frozen=True)
class Archive:
    """What a GPU folder's ARCHIVED.md says."""

    since: str  # the date the GPU was archived
    why: str  # one line
    names: tuple[str, ...]  # how the prose names the GPU, e.g. ("H100",)


def parse_archive(text: str, where: str = ARCHIVE_MARKER) -> Archive:
    """The since, why and names lines of an ARCHIVED.md; other lines are ignored. Raises ValueError naming
    `where` if one of the three is missing or empty."""
    fields = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() in _ARCHIVE_KEYS:
            fields[key.strip()] = value.strip()
    names = tuple(name.strip() for name in fields.get("names", "").split(",") if name.strip())
    missing = [key for key in _ARCHIVE_KEYS if not (names if key == "names" else fields.get(key))]
    if missing:
        raise ValueError(f"{where}: no {', '.join(missing)} line; it needs the lines 'since: DATE', "
                         f"'why: ONE LINE' and 'names: SHORT NAME, ...'")
    return Archive(since=fields["since"], why=fields["why"], names=names)


def archive(slug: str, results_dir: Path = RESULTS_DIR) -> Archive | None:
    """The archive marker of a GPU folder, or None if the GPU is not archived (the reference GPU never is)."""
    path = results_dir / slug / ARCHIVE_MARKER
    if slug == REFERENCE_GPU or not path.is_file():
        return None
    return parse_archive(path.read_text(encoding="utf-8"), where=str(path))


def is_archived(slug: str, results_dir: Path = RESULTS_DIR) -> bool:
    return archive(slug, results_dir) is not None


def order_key(slug: str) -> tuple[bool, str]:
    """Sort key of GPU folders: the reference GPU first, then the others by folder name."""
    return (slug != REFERENCE_GPU, slug)
