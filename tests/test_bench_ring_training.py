"""Chapter 14's two-GPU training record: the snippet writes both runs' losses, and the views read them."""

import json
import subprocess
import sys

from book import ROOT
from book.bench import by_name
from book.bench import ring_training as bench

ROW = {"split": [5.7, 4.0, 2.5], "whole": [5.7, 4.01, 2.49], "tolerance": 0.02, "world": 2, "layout": "zigzag",
       "lr": 1e-3, "config": {"layers": 4, "heads": 8, "head_dim": 64, "context": 1024, "batch": 16, "vocab": 256},
       "wall_s": 66.4}


def test_agreement_states_the_largest_difference_against_the_tolerance():
    text = bench.agreement({"rows": [ROW]})
    assert text.startswith("3 steps of chapter 10's model (4 layers, 8 heads of dimension 64, batch 16 of 1,024")
    assert "equals the one-GPU run's within 0.02 (largest difference 1.00e-02)" in text
    assert "from 5.7000 to 2.5000" in text and "66 s" in text
    far = dict(ROW, whole=[5.7, 4.1, 2.5])
    assert "NOT within 0.02" in bench.agreement({"rows": [far]})


def test_the_snippet_records_both_runs_losses_on_cpus(tmp_path):
    record = tmp_path / "losses.json"
    command = [sys.executable, str(ROOT / bench.SNIPPET), "--losses", str(record)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(record.read_text())
    assert len(row["split"]) == len(row["whole"]) == 8 and row["world"] == 2 and row["layout"] == "zigzag"
    assert max(abs(a - b) for a, b in zip(row["split"], row["whole"], strict=True)) < row["tolerance"] == 1e-4
    assert row["config"]["context"] == 64


def test_registered_for_chapter_14_with_the_kernels_it_runs():
    benchmark = by_name("ring_training")
    assert benchmark.chapter == "ch14" and "two GPUs" in benchmark.awaiting_gpu
    assert {"snippets/ch10/tiny_gpt.py", "kernels/flash_attention_fast.py"} <= set(benchmark.sources)


def test_the_figure_draws_both_runs():
    (axes,) = bench.losses({"rows": [ROW]}).axes
    assert [line.get_label() for line in axes.get_lines()] == ["split over 2 GPUs", "one GPU"]
