"""Building the site in tests: once per session into a temporary folder, and in throw-away copies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from book import ROOT

# What a copy of the book needs to build.
BOOK_PARTS = ["mkdocs.yml", "docs", "snippets", "kernels", "book", "results"]


def build(root: Path, site_dir: Path, strict: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site_dir)]
    if strict:
        command.append("--strict")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(root))
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)


def copy_book(destination: Path) -> Path:
    """A copy of the parts of the repository the site is built from."""
    destination.mkdir(parents=True, exist_ok=True)
    for part in BOOK_PARTS:
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, destination / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, destination / part)
    return destination
