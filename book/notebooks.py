"""Companion notebooks: sources in notebooks/chNN_*.py (jupytext percent format), executed copies with their
outputs in docs/notebooks/chNN_*.ipynb, which the site renders (mkdocs-jupyter, no execution at build time)
and Colab opens from GitHub.

    python -m book.notebooks --write                      # execute every notebook and store it
    python -m book.notebooks --write notebooks/ch02_vector_add.py
    python -m book.notebooks                              # check: fresh runs match the stored notebooks

A notebook is executed from the notebooks/ folder on the CPU (Triton under its interpreter) with the
repository on the import path. Any cell that raises fails the run: a stored notebook never shows an error.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

from book import ROOT

SOURCES = ROOT / "notebooks"
RENDERED = ROOT / "docs" / "notebooks"
TIMEOUT_S = 300


def sources() -> list[Path]:
    return sorted(SOURCES.glob("ch[0-9][0-9]_*.py"))


def stored_path(source: Path) -> Path:
    return RENDERED / (source.stem + ".ipynb")


def execute(source: Path):
    """Read a percent script as a notebook and run it top to bottom; raises on the first failing cell."""
    import jupytext
    from nbclient import NotebookClient

    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata.pop("jupytext", None)
    env_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    os.environ["PYTHONPATH"] = env_path  # the kernel inherits it: `import kernels` works before the setup cell
    client = NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3", allow_errors=False,
                            record_timing=False, resources={"metadata": {"path": str(SOURCES)}})
    client.execute()
    for cell in notebook.cells:
        cell.pop("id", None)
        if cell.cell_type == "code":
            cell.metadata.pop("execution", None)
    notebook.nbformat_minor = 4
    return notebook


def write(source: Path) -> Path:
    import nbformat

    notebook = execute(source)
    target = stored_path(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return target


def comparable(notebook) -> list[tuple]:
    """What must agree between a fresh run and the stored notebook: sources and text outputs (not images)."""
    cells = []
    for cell in notebook.cells:
        texts = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                if texts and texts[-1][0] == output["name"]:  # a stream arrives in chunks that vary by run
                    texts[-1] = (output["name"], texts[-1][1] + output["text"])
                else:
                    texts.append((output["name"], output["text"]))
            elif output.get("output_type") in ("execute_result", "display_data"):
                data = copy.deepcopy(output.get("data", {}))
                texts.append(("data", sorted(data)))
                if "image/png" not in data and "text/plain" in data:
                    texts.append(("text/plain", data["text/plain"]))
            else:
                texts.append((output.get("output_type"), output.get("ename")))
        cells.append((cell.cell_type, cell.source, texts))
    return cells


def errors(notebook) -> list[str]:
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" or output.get("name") == "stderr":
                found.append(f"{output.get('ename') or 'stderr'}: {output.get('evalue') or output.get('text')}")
    return found


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="store the executed notebooks")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.paths] or sources()
    status = 0
    for source in paths:
        if args.write:
            print(f"wrote {write(source).relative_to(ROOT)}")
            continue
        fresh = comparable(execute(source))
        stored = stored_path(source)
        same = stored.exists() and comparable(nbformat.read(stored, as_version=4)) == fresh
        print(f"{'ok' if same else 'STALE'}  {source.relative_to(ROOT)}")
        status |= not same
    return status


if __name__ == "__main__":
    sys.exit(main())
