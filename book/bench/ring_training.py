"""Chapter 14: chapter 10's small model trained on two GPUs, each sequence split over them (ring attention, zigzag
layout, the book's kernels, bf16), against the same training on one GPU from the same seed.

It runs `snippets/ch14/train_two_ranks.py --gpu` in a process of its own (which starts one process per GPU over
NCCL, then trains the one-GPU model) and records both runs' losses at every step, the tolerance the snippet checks
and the wall time, compiles included. The processes keep NVLink multicast off, as shared machines require.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from book import ROOT, render
from book.bench.registry import Benchmark, BenchmarkSkipped, Progress
from book.bench.ring import MULTICAST_OFF

SNIPPET = "snippets/ch14/train_two_ranks.py"
WORLD = 2
TIMEOUT_S = 480  # the first run on two H200s took about a minute, compiles included


def run(progress: Progress) -> list[dict]:
    import torch

    if torch.cuda.device_count() < WORLD:
        raise BenchmarkSkipped(f"needs {WORLD} GPUs of one host, found {torch.cuda.device_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "losses.json"
        started = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / SNIPPET), "--gpu", "--losses", str(record)], check=True,
                       timeout=TIMEOUT_S, env=os.environ | MULTICAST_OFF, cwd=ROOT)
        row = json.loads(record.read_text()) | {"wall_s": time.perf_counter() - started}
    progress(f"{len(row['split'])} steps, largest difference between the runs' losses {_gap(row):.2e} "
             f"(tolerance {row['tolerance']:g}), {row['wall_s']:.0f} s")
    return [row]


def _gap(row: dict) -> float:
    return max(abs(a - b) for a, b in zip(row["split"], row["whole"], strict=True))


# ---------------------------------------------------------------------------------------------------
# Views


def agreement(result: dict) -> str:
    """One sentence: the runs, their largest difference against the tolerance, the loss's fall."""
    (row,) = result["rows"]
    c, gap = row["config"], _gap(row)
    verdict = "within" if gap < row["tolerance"] else "NOT within"
    return (f"{len(row['split'])} steps of chapter 10's model ({c['layers']} layers, {c['heads']} heads of "
            f"dimension {c['head_dim']}, batch {c['batch']} of {c['context']:,}-token sequences, bf16), each sequence "
            f"split over {row['world']} GPUs ({row['layout']} layout, the book's kernels): every step's loss equals "
            f"the one-GPU run's {verdict} {row['tolerance']:g} (largest difference {gap:.2e}); the loss went from "
            f"{row['split'][0]:.4f} to {row['split'][-1]:.4f}. Both runs together took {row['wall_s']:.0f} s, "
            "compiles included.")


def losses(result: dict):
    """Both runs' loss at every step."""
    (row,) = result["rows"]
    steps = list(range(1, len(row["split"]) + 1))
    series = {f"split over {row['world']} GPUs": (steps, row["split"]), "one GPU": (steps, row["whole"])}
    return render.line_plot(series, xlabel="step", ylabel="training loss", logx=False,
                            title="Chapter 10's model, each sequence split over two GPUs or whole on one")


BENCHMARK = Benchmark(
    name="ring_training",
    chapter="ch14",
    title="Chapter 14: the small model trained on two GPUs against one",
    sources=[SNIPPET, "snippets/ch10/tiny_gpt.py", "kernels/ring_attention.py",
             "kernels/flash_attention_backward_fast.py", "book/bench/ring_training.py"],
    run=run,
    views={"agreement": agreement, "losses": losses},
    awaiting_gpu="issue 53: needs two GPUs of one host (nvidia-h200-x2)",
)
