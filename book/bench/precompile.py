"""Compile every kernel the chosen benchmarks call before they are timed, many processes at once.

The first call of a Triton kernel at a new shape compiles it, and an autotuned kernel compiles every candidate
configuration, one after another, on one CPU core. Over the book's grids that is most of a refresh's time (chapter
7's worklog compiles about forty kernels per column). This pass runs each benchmark in small parts, one process
per part and as many at once as the machine has cores, with the timer replaced by one plain call per
implementation: every kernel gets compiled into Triton's cache directory, which the timed run then reads.

Two things keep the timed run exactly what it would have been. Nothing measured here is written. And the choices
the autotuners saved in the cache during this pass are deleted at its end: processes timing candidates on one GPU
at the same time disturb each other, so the timed run tunes again, on a quiet GPU, but finds every candidate
compiled.

python -m book.bench --precompile [--only ...] runs this pass before the benchmarks (make refresh does).
python -m book.bench.precompile NAME OVERRIDES is one part, run in its own process.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from book.bench.decode_models import MODELS as DECODE_MODELS

ROOT = Path(__file__).resolve().parents[2]
PART_TIMEOUT_S = 900
_SIZES = [1024, 2048, 4096, 8192, 16384]
_DTYPES = ["float16", "bfloat16"]
_SHAPES = [[d, causal] for d in (64, 128) for causal in (False, True)]

# How each benchmark splits into parts: module attributes to override, one dict per part ("skip" names functions
# of the module that return a list of rows, to return none in that part). A benchmark not named runs whole, in one
# process; one named with None is skipped (first_call measures cold compiles in caches of its own; ring starts a
# process per GPU itself).
PARTS: dict[str, list[dict] | None] = {
    "first_call": None,
    "ring": None,
    "fast_attention": [{"DTYPES": [t], "SIZES": [n]} for t in _DTYPES for n in _SIZES],
    "backward": ([{"DTYPES": [t], "SIZES": [n], "MEMORY_SIZES": []} for t in _DTYPES for n in _SIZES]
                 + [{"DTYPES": [], "MEMORY_SIZES": [4096]}]),
    "worklog": [{"SHAPES": [s]} for s in _SHAPES],
    "backward_fast": ([{"SHAPES": [s], "DQ_SIZES": [], "DTYPES": []} for s in _SHAPES]  # the worklog's steps
                      + [{"SHAPES": [s], "DTYPES": [], "skip": ["_measure_steps"]} for s in _SHAPES]  # dQ rows
                      + [{"SHAPES": [s], "DQ_SIZES": [], "DTYPES": [t], "skip": ["_measure_steps"]}
                         for s in _SHAPES for t in _DTYPES]),
    "backward_hopper": [{"DTYPES": [t], "SIZES": [n]} for t in _DTYPES for n in _SIZES],
    "real_models": [{"DTYPES": [t], "SIZES": [n]} for t in _DTYPES for n in (1000, 3000, 8191, 32768)],
    "any_length": ([{"LENGTHS": [n], "CHUNKS": []} for n in (1000, 3000, 5000, 8191, 12345)]
                   + [{"LENGTHS": [], "CHUNKS": [n]} for n in (1000, 2048)]),
    "decode_models": ([{"MODELS": [list(m)], "skip": ["other_rows"]} for m in DECODE_MODELS]
                      + [{"skip": ["grid_rows"]}]),
}


def parts_of(name: str) -> list[dict]:
    """The parts benchmark `name` runs in; [] when it is skipped."""
    parts = PARTS.get(name, [{}])
    return [] if parts is None else parts


def run(benchmarks, workers: int | None = None) -> None:
    """Compile for every part of every benchmark, `workers` processes at a time; then forget the tunings."""
    jobs = [(b.name, part) for b in benchmarks for part in parts_of(b.name)]
    if not jobs:
        return
    workers = workers or max(1, min(len(jobs), (os.cpu_count() or 2) - 1))
    started = time.time()
    print(f"precompile: {len(jobs)} parts, {workers} at a time", flush=True)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for line in pool.map(lambda job: _run_part(*job), jobs):
            print(f"  precompile: {line}", flush=True)
    print(f"  precompile: done in {time.time() - started:.0f} s; forgot {forget_tunings()} saved tunings",
          flush=True)


def _run_part(name: str, overrides: dict) -> str:
    started = time.time()
    try:
        done = subprocess.run([sys.executable, "-m", "book.bench.precompile", name, json.dumps(overrides)],
                              cwd=ROOT, capture_output=True, text=True, timeout=PART_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{name} {overrides}: stopped after {PART_TIMEOUT_S} s"
    said = (done.stdout + done.stderr).strip().splitlines()
    ending = f" ({said[-1][:160]})" if done.returncode and said else ""
    return f"{name} {overrides}: exit {done.returncode} in {time.time() - started:.0f} s{ending}"


def forget_tunings() -> int:
    """Delete the autotuners' saved choices (Triton's *.autotune.json files); return how many there were."""
    from triton import knobs

    cache = Path(knobs.cache.dir)
    found = list(cache.rglob("*.autotune.json")) if cache.is_dir() else []
    for path in found:
        path.unlink(missing_ok=True)
    return len(found)


def _one_plain_call_each(fns: dict, **_options) -> dict[str, float]:
    """Stands in for the benchmarks' timer: one plain call of each fn, in milliseconds. Enough to compile and
    tune everything the timed run will call, and positive, so that what a benchmark derives from it stays finite."""
    import torch

    times = {}
    for name, fn in fns.items():
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times[name] = (time.perf_counter() - started) * 1e3
    return times


def run_part(name: str, overrides: dict) -> None:
    """One part, in this process: the benchmark's run() with `overrides` set and the stand-in timer."""
    from book.bench import ALL

    benchmark = next(b for b in ALL if b.name == name)
    module = importlib.import_module(f"book.bench.{name}")
    for loaded in [m for key, m in sys.modules.items() if key.startswith("book.bench.")]:
        if hasattr(loaded, "gpu_ms_interleaved"):
            loaded.gpu_ms_interleaved = _one_plain_call_each
    overrides = dict(overrides)
    for function in overrides.pop("skip", []):
        getattr(module, function)  # it must exist
        setattr(module, function, lambda *args, **kwargs: [])
    for attribute, value in overrides.items():
        if not hasattr(module, attribute):
            raise AttributeError(f"book.bench.{name} has no {attribute} to override")
        setattr(module, attribute, [tuple(x) if isinstance(x, list) else x for x in value])
    benchmark.run(lambda message: print(message, flush=True))


if __name__ == "__main__":
    run_part(sys.argv[1], json.loads(sys.argv[2]))
