"""Run the book's snippets and keep what they print next to them.

Each snippet snippets/chNN/name.py is a standalone program. What it prints is stored in
snippets/chNN/name.out, which the page shows under the code. `python -m book.snippets --write`
refreshes the stored outputs; the tests run each snippet and fail when it prints something else.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from book import ROOT, SNIPPETS_DIR


def output_path(snippet: Path) -> Path:
    return snippet.with_suffix(".out")


def all_snippets() -> list[Path]:
    return sorted(SNIPPETS_DIR.glob("ch*/*.py"))


def run(snippet: Path | str, timeout: float = 600) -> str:
    """Run a snippet as a learner would (python snippets/chNN/name.py) and return what it printed.

    Without a CUDA GPU the snippet runs under the Triton interpreter, as the pages tell learners to do.
    """
    path = ROOT / snippet if not Path(snippet).is_absolute() else Path(snippet)
    # The repository root on the path, as `make setup`'s editable install gives a learner.
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONUNBUFFERED="1", PYTHONPATH=python_path)
    if not _has_cuda():
        env["TRITON_INTERPRET"] = "1"
    completed = subprocess.run(
        [sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{path.relative_to(ROOT)} failed with exit code {completed.returncode}:\n"
                           f"{completed.stderr[-4000:]}")
    return completed.stdout


def check(snippet: Path | str) -> tuple[str, str]:
    """(stored output, fresh output) of a snippet, for a test to compare."""
    path = ROOT / snippet if not Path(snippet).is_absolute() else Path(snippet)
    stored = output_path(path)
    if not stored.exists():
        raise FileNotFoundError(f"{stored.relative_to(ROOT)} is missing; run `make outputs` to create it")
    return stored.read_text(), run(path)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book.snippets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="store each snippet's output in its .out file")
    parser.add_argument("paths", nargs="*", type=Path, help="snippets to run (default: all)")
    args = parser.parse_args(argv)
    snippets = [p.resolve() for p in args.paths] or all_snippets()
    failed = 0
    for snippet in snippets:
        fresh = run(snippet)
        stored = output_path(snippet)
        rel = snippet.relative_to(ROOT)
        if args.write:
            stored.write_text(fresh)
            print(f"wrote {stored.relative_to(ROOT)}")
        elif not stored.exists() or stored.read_text() != fresh:
            failed += 1
            print(f"DIFFERS {rel}")
        else:
            print(f"ok      {rel}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
