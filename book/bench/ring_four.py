"""Chapter 14: the two-GPU model of the ring checked on four GPUs of one host.

Chapter 14 models the ring beyond two GPUs from a two-GPU run (book/bench/ring.py, `step_model` and
`projected_share`): with the zigzag layout and the tokens per GPU kept, every step's compute is the same at any
world size, and a step takes the longer of its compute and its sends. Here, on four GPUs of one host, the causal
zigzag ring (32/8 heads, head dim 128, bf16, batch 1) is timed on two of them and on all four at the same tokens
per GPU, with ring.py's own measurement (each rank a process, NCCL, multicast off, the slowest rank's time): the
two-GPU rows give the model, the four-GPU rows what the model predicts.
"""

from __future__ import annotations

from book import render
from book.bench import ring
from book.bench.registry import Benchmark, BenchmarkSkipped, Progress

WORLDS = (2, 4)
TOKENS_PER_GPU = (32768, 65536)
HEADS = (32, 8)


def run(progress: Progress) -> list[dict]:
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < max(WORLDS):
        raise BenchmarkSkipped(f"needs {max(WORLDS)} GPUs of one host, found {torch.cuda.device_count()}")
    rows = []
    for world in WORLDS:
        rows += ring.measure({"backend": "nccl", "world": world, "sizes": [t * world for t in TOKENS_PER_GPU],
                              "heads": [list(HEADS)], "cases": [[True, "zigzag"]], "dtype": ring.DTYPE,
                              "use_kernels": True, "context_parallel": False, "long": ring.LONG,
                              "one_gpu_max": 0}, spawn=mp.spawn)
        progress(f"{world} GPUs: " + "; ".join(ring._line(r) for r in rows if r["world"] == world))
    return rows


# ---------------------------------------------------------------------------------------------------
# Views


def check(result: dict) -> str:
    """Per tokens per GPU: the training step's share of ideal scaling on four GPUs, as the model predicts it from
    the two-GPU row and as measured."""
    by = {(r["world"], r["N"] // r["world"]): r for r in result["rows"]}
    body = []
    for tokens in TOKENS_PER_GPU:
        two, four = by.get((2, tokens)), by.get((4, tokens))
        if two is None or four is None:
            continue
        model = ring.step_model(two)
        forward, training, _ = ring.projected_share(model, 4)
        body.append([f"{tokens:,}", f"{two['training_ms']:,.1f}", f"{four['training_ms']:,.1f}",
                     f"{4 * model['training_ms']:,.1f}", f"{training:.0%}",
                     f"{4 * model['training_ms'] / four['training_ms']:.0%}", f"{forward:.0%}",
                     f"{4 * model['forward_ms'] / four['forward_ms']:.0%}"])
    if not body:
        return "This run did not time the ring on two and on four GPUs."
    return render.table(["tokens per GPU", "2 GPUs: training ms", "4 GPUs: training ms",
                         "4 GPUs, compute alone (model) ms", "training: share of ideal, model",
                         "training: share of ideal, measured", "forward: share, model", "forward: share, measured"],
                        body) + (
        "\n\nCausal, zigzag layout, 32/8 heads, bf16, the slowest rank's time, plain calls; two of the four GPUs, "
        "then all four, at the same tokens per GPU (so 4 GPUs hold twice the sequence). The model takes each step's "
        "compute from the two-GPU row without overlap, less its sends (chapter 14's projection); ideal is that "
        "compute alone, four steps of it. Measured share: the model's compute alone over the four-GPU time.")


BENCHMARK = Benchmark(
    name="ring_four",
    chapter="ch14",
    title="Chapter 14: the ring's two-GPU model checked on four GPUs",
    sources=["kernels/ring_attention.py", "book/bench/ring.py", "book/bench/ring_four.py"],
    run=run,
    views={"check": check},
    awaiting_gpu="needs four GPUs of one host (nvidia-h200-x4), which no session of issue 53 was lent",
)
