"""Chapter 10: a small transformer trained twice from the same seed on the book's own pages, once with the book's
attention (chapter 5's forward, chapter 10's backward) and once with scaled_dot_product_attention.

The model and the loop are snippets/ch10/tiny_gpt.py: 4 layers, 8 heads of dim 64, context 1,024, batch 16, bf16
autocast, AdamW, 300 steps. Rows: the loss of every step of each run, then one summary row per run (tokens per
second from step 10 on, peak memory). The two runs see the same initial weights and the same batches.
"""

from __future__ import annotations

import importlib.util
import sys

from book import ROOT, render
from book.bench.registry import Benchmark, Progress

STEPS = 300
RUNS = {"book": "the book's attention", "sdpa": "scaled_dot_product_attention",
        "sdpa_again": "scaled_dot_product_attention, again"}  # the same run twice: the noise between runs
MODEL = "snippets/ch10/tiny_gpt.py"
GiB = 2**30


def _tiny_gpt():
    spec = importlib.util.spec_from_file_location("tiny_gpt", ROOT / MODEL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run(progress: Progress) -> list[dict]:
    tiny_gpt = _tiny_gpt()
    config = tiny_gpt.Config()
    attention = {"book": tiny_gpt.book_attention, "sdpa": tiny_gpt.sdpa_attention,
                 "sdpa_again": tiny_gpt.sdpa_attention}
    rows = []
    for name in RUNS:
        result = tiny_gpt.train(attention[name], config, STEPS, "cuda")
        rows += [{"kind": "loss", "run": name, "step": step, "loss": loss}
                 for step, loss in enumerate(result["losses"])]
        rows.append({"kind": "summary", "run": name, "steps": STEPS, "layers": config.layers, "heads": config.heads,
                     "head_dim": config.head_dim, "context": config.context, "batch": config.batch,
                     "tokens_per_s": result["tokens_per_s"], "peak_bytes": result["peak_bytes"]})
        progress(f"{name}: loss {result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}, "
                 f"{result['tokens_per_s']:,.0f} tokens/s, peak {result['peak_bytes'] / GiB:.2f} GiB")
    return rows


def _losses(result: dict, name: str) -> list[float]:
    return [r["loss"] for r in sorted((r for r in result["rows"] if r["kind"] == "loss" and r["run"] == name),
                                      key=lambda r: r["step"])]


def loss_plot(result: dict):
    """Both runs' training loss step by step, and below it how far each run is from SDPA's first run."""
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 5.2), sharex=True, height_ratios=[2, 1])
    reference = _losses(result, "sdpa")
    for name in ("book", "sdpa"):
        losses = _losses(result, name)
        top.plot(range(len(losses)), losses, linewidth=1, label=RUNS[name])
    for name in ("book", "sdpa_again"):
        losses = _losses(result, name)
        bottom.plot(range(len(losses)), [a - b for a, b in zip(losses, reference, strict=True)], linewidth=0.8,
                    label=f"{RUNS[name]} minus SDPA's first run")
    top.set_ylabel("training loss (nats per byte)")
    top.set_title("The same model, seed and batches, two attention implementations")
    top.legend(fontsize=8)
    bottom.axhline(0, color="grey", linewidth=0.6)
    bottom.set_xlabel("step")
    bottom.set_ylabel("loss difference")
    bottom.legend(fontsize=7)
    fig.tight_layout()
    return fig


def summary(result: dict) -> str:
    """Speed and memory of each run, and how far apart their losses were."""
    rows = {r["run"]: r for r in result["rows"] if r["kind"] == "summary"}
    book, sdpa, again = _losses(result, "book"), _losses(result, "sdpa"), _losses(result, "sdpa_again")
    gaps = [abs(a - b) for a, b in zip(book, sdpa, strict=True)]
    noise = [abs(a - b) for a, b in zip(again, sdpa, strict=True)]
    speed = rows["book"]["tokens_per_s"] / rows["sdpa"]["tokens_per_s"]
    tail = max(1, len(book) // 10)
    table = render.table(
        ["run", "tokens/s", "peak memory (GiB)", "mean loss, last 10% of steps"],
        [[RUNS[name], f"{rows[name]['tokens_per_s']:,.0f}", rows[name]["peak_bytes"] / GiB,
          sum(losses[-tail:]) / tail] for name, losses in (("book", book), ("sdpa", sdpa))])
    return table + (
        f"\n\nThe book's run and SDPA's differ by at most {max(gaps):.3f} at any step (mean "
        f"{sum(gaps) / len(gaps):.4f}); SDPA run twice differs from itself by at most {max(noise):.3f} (mean "
        f"{sum(noise) / len(noise):.4f}). "
        f"The losses fell from {book[0]:.2f} to {book[-1]:.2f} with the book's attention and from {sdpa[0]:.2f} to "
        f"{sdpa[-1]:.2f} with SDPA. The book's run processed {speed:.2f} "
        f"times as many tokens per second.")


BENCHMARK = Benchmark(
    name="training",
    chapter="ch10",
    title="A small transformer trained with the book's attention and with SDPA",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_backward.py", MODEL, "book/bench/training.py"],
    run=run,
    views={"loss-plot": loss_plot, "summary": summary},
    awaiting_gpu="issue 20: the training benchmark's first GPU run",
)
