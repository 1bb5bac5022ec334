"""Chapter 11 (the real-shapes page): are the real-model rows a percent or two behind cuDNN behind, or level?

The real-model benchmark (book/bench/real_models.py) keeps one median per implementation and row, so a ratio of
0.98 there could be noise. This probe measures again five of its shapes whose rows trailed the fastest SDPA backend
at N >= 2,048 on the fast paths (bf16; the prefill and the training step of each, exactly as that benchmark
builds, checks and times them), and takes each row's turns REPEATS times. Every repeat gives a ratio of ours to
the fastest SDPA backend from the same turns; the spread of those ratios is the row's noise. A row is "behind"
when every repeat's ratio is below 1, "ahead" when every one is above, and "level" otherwise.
"""

from __future__ import annotations

import statistics

from book import render
from book.bench.real_models import BACKENDS, BUDGET_MS, MODELS, measure
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved

DTYPE = "bfloat16"
CASES = [("Llama-3.1-8B", 8191), ("Llama-3.1-8B", 32768), ("Qwen2.5-7B", 32768), ("Llama-3.1-70B, 1/8 shard", 3000),
         ("Llama-3.1-70B, 1/8 shard", 32768)]
REPEATS = 5


def _repeated_timer(log: list[list[dict]]):
    """A timer for real_models.measure: REPEATS runs of chapter 7's timer on the same calls; it keeps every run's
    times in `log` (one list per call of the timer) and returns their medians."""
    def timer(fns: dict) -> dict:
        runs = [gpu_ms_interleaved(fns, budget_ms=BUDGET_MS) for _ in range(REPEATS)]
        log.append(runs)
        return {name: statistics.median(run[name] for run in runs) for name in fns}
    return timer


def _spread(row: dict, runs: list[dict]) -> dict:
    """Each repeat's ratio of ours to the fastest SDPA backend of that repeat (time over time, as TFLOP/s)."""
    ratios = []
    for run in runs:
        peers = [run[name] for name in BACKENDS if name in run]
        ratios.append(min(peers) / run["ours"] if peers and "ours" in run else None)
    ratios = [r for r in ratios if r is not None]
    verdict = None
    if ratios:
        verdict = "behind" if max(ratios) < 1 else "ahead" if min(ratios) > 1 else "level"
    keep = ("model", "dtype", "N", "batch", "kind", "path", "ratio", "best_peer")
    return {**{key: row.get(key) for key in keep}, "ratios": ratios, "verdict": verdict}


def run(progress: Progress) -> list[dict]:
    models = {model.name: model for model in MODELS}
    rows = []
    for name, n in CASES:
        log: list[list[dict]] = []
        measured = measure(models[name], DTYPE, n, timer=_repeated_timer(log))
        for row, runs in zip(measured, log, strict=True):
            rows.append(_spread(row, runs))
            r = rows[-1]
            progress(f"{name} N={n} {r['kind']}: " + ", ".join(f"{x:.3f}" for x in r["ratios"]) + f" ({r['verdict']})")
    return rows


# Views

def table(result: dict) -> str:
    body = [[r["model"], f"{r['N']:,}", r["kind"], f"{statistics.median(r['ratios']):.3f}",
             f"{min(r['ratios']):.3f}–{max(r['ratios']):.3f}", r["verdict"]] for r in result["rows"] if r["ratios"]]
    return render.table(["Model", "N", "Kind", "Ours / fastest SDPA (median of repeats)", "Range over the repeats",
                         "Verdict"], body) + (
        f"\n\nbf16, causal, the real-model benchmark's batch (about 64K tokens per call); each row's turns taken "
        f"{REPEATS} times from CUDA graphs. Behind: below 1 in every repeat; ahead: above 1 in every repeat; "
        "level: on both sides.")


def summary(result: dict) -> str:
    rows = [r for r in result["rows"] if r["verdict"]]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("behind", "level", "ahead")}
    return (f"Of {len(rows)} rows measured again, {counts['behind']} were behind the fastest SDPA backend in every "
            f"repeat, {counts['level']} level (on both sides of it) and {counts['ahead']} ahead in every repeat.")


BENCHMARK = Benchmark(
    name="real_models_spread",
    chapter="ch11",
    title="Real-model rows near cuDNN, each timed five times: behind, level or ahead",
    sources=["kernels/flash_attention_fast.py", "kernels/flash_attention_hopper.py",
             "kernels/flash_attention_backward_fast.py", "kernels/flash_attention_backward_hopper.py",
             "book/bench/backward.py", "book/bench/real_models.py", "book/bench/real_models_spread.py"],
    run=run,
    views={"table": table, "summary": summary},
    awaiting_gpu="issue 51: the same-turn spread of the real-model rows near cuDNN",
)
