"""Where a measurement came from: the GPU, the software stack, the commit and the kernel sources."""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import os
import re
import subprocess

from book import ROOT

# A benchmark module's views (the tables, figures and sentences pages show) start at this line and end where the
# module's BENCHMARK = Benchmark( begins. They format what was measured and change nothing that is measured.
VIEWS_START = "# Views"
BENCHMARK_START = "BENCHMARK = Benchmark("


def views_section(text: str) -> tuple[int, int] | None:
    """The lines [start, end) of a benchmark module's views section, or None if it has none."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line == VIEWS_START), None)
    if start is None:
        return None
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(BENCHMARK_START)), None)
    return None if end is None else (start, end)


def views_argument(text: str) -> tuple[int, int] | None:
    """The lines [start, end) of the `views=` argument of a module's BENCHMARK = Benchmark(...), where it stands on
    lines of its own (nothing else before it on its first line, at most a comma after it on its last), or None."""
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and any(isinstance(t, ast.Name) and t.id == "BENCHMARK" for t in node.targets)):
            continue
        lines = text.splitlines()
        for keyword in node.value.keywords:
            if keyword.arg == "views" and not lines[keyword.lineno - 1][:keyword.col_offset].strip() \
                    and lines[keyword.end_lineno - 1][keyword.end_col_offset:].strip() in ("", ","):
                return keyword.lineno - 1, keyword.end_lineno
    return None


# A line that only marks where a section the pages include starts or ends (pymdownx.snippets' section markers).
# It is a comment: it changes nothing that runs, so a page can show a kernel step by step without staling results.
SNIPPET_MARKER = re.compile(r"^\s*# --8<-- \[(start|end):[\w.-]+\]\s*$")


def measured_text(relative_path: str, text: str) -> tuple[str, bool]:
    """The text of a source as its results' hash sees it, and whether a views section was left out: without lines
    that only mark an included section, and for a benchmark module with a views section, without that section and
    the lines of BENCHMARK's `views=` argument."""
    lines = text.splitlines(keepends=True)
    left_out = {i for i, line in enumerate(lines) if SNIPPET_MARKER.match(line)}
    section = views_section(text) if relative_path.startswith("book/bench/") else None
    if section is not None:
        left_out |= set(range(*section)) | set(range(*(views_argument(text) or (0, 0))))
    return "".join(line for i, line in enumerate(lines) if i not in left_out), section is not None


def source_hash(relative_path: str) -> str:
    """sha256 of a source file in the repository, or "missing" if it is gone, without the lines that change nothing
    measured: section markers for the pages (so a page can include a kernel step by step), and a benchmark module's
    views section and BENCHMARK's `views=` argument ("sha256-measured:"). So a change to how results are shown, or
    to which lines a page includes, leaves them current; a change to anything else makes them stale."""
    path = ROOT / relative_path
    if not path.is_file():
        return "missing"
    measured, views_left_out = measured_text(relative_path, path.read_bytes().decode())
    return ("sha256-measured:" if views_left_out else "sha256:") + hashlib.sha256(measured.encode()).hexdigest()


def gpu_slug(gpu_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (the folder name under results/)."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def _git_commit() -> str:
    if os.environ.get("BOOK_COMMIT"):
        return os.environ["BOOK_COMMIT"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout
        return out.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def _clocks() -> dict:
    """The GPU's clocks in MHz from nvidia-smi ({} when it cannot say): the application clocks work runs at unless
    they are locked otherwise, and the maximum, for the SM and the memory. A GPU set below its maximum reads slower
    than the same code at full clocks. (Not the current clock: read when the results are written, the GPU is idle.)"""
    fields = ["clocks.applications.graphics", "clocks.max.sm", "clocks.applications.memory", "clocks.max.mem"]
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout
        values = [int(v) for v in out.strip().splitlines()[0].split(",")]
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return {}
    names = ["application_sm_mhz", "max_sm_mhz", "application_memory_mhz", "max_memory_mhz"]
    return dict(zip(names, values, strict=True))


def collect(sources: list[str]) -> dict:
    """Provenance of a run on the current CUDA device, with hashes of the measured sources."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "gpu_slug": gpu_slug(props.name),
        "sm_count": props.multi_processor_count,
        "l2_cache_bytes": getattr(props, "L2_cache_size", 0),  # as the driver reports it (0: this torch cannot say)
        "driver": _driver_version(),
        "cuda": torch.version.cuda or "unknown",
        "cudnn": str(torch.backends.cudnn.version() or "unknown"),  # the SDPA cuDNN backend's library
        "clocks": _clocks(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _git_commit(),
        "sources": {path: source_hash(path) for path in sources},
    }


def stale_sources(provenance: dict) -> list[str]:
    """The measured sources whose current text differs from the text that was measured."""
    return [path for path, digest in provenance["sources"].items() if source_hash(path) != digest]
