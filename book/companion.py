"""What every companion notebook (notebooks/chNN_*.py) needs once it has found the book's code: kernels
imported before Triton (so a machine without a GPU gets Triton's interpreter), the device to use, and a
way to run a chapter's snippet as `python snippets/chNN/name.py` would."""

from __future__ import annotations

import runpy
import sys

import torch

import kernels
from book import SNIPPETS_DIR

device = "cuda" if torch.cuda.is_available() else "cpu"
interpreting = kernels.interpreting


def run_snippet(name: str) -> None:
    """Run snippets/<name> as a program, with its folder on the import path (so it finds its siblings)."""
    path = SNIPPETS_DIR / name
    sys.path.insert(0, str(path.parent))
    runpy.run_path(str(path), run_name="__main__")
