"""Chapter 9: the fast kernel, chapter 5's readable kernel and every SDPA backend that runs, in one run.

N from 1K to 16K, head dim 64 (32 heads) and 128 (16 heads), causal and non-causal, fp16 and bf16,
16K tokens per batch. FLOPs 4*B*H*N*N*D, halved for causal. Each row records the ratio of the fast
kernel to the fastest backend of that row. The implementations of a row are timed together, their calls
replayed from CUDA graphs and taken in turns (GPU time alone, under the same clock), and each also by plain
calls from Python (GPU time plus whatever wait the CPU adds).
"""

from __future__ import annotations

from book import render
from book.bench.flash_attention import BACKENDS, HEADS, TOKENS, _sdpa, _time
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops

SIZES = [1024, 2048, 4096, 8192, 16384]
DTYPES = ["float16", "bfloat16"]
TARGET_FROM = 2048
TARGET_RATIO = 1.0  # fast kernel / fastest SDPA backend, N >= TARGET_FROM
FLOOR_RATIO = 0.9  # nowhere below this
READABLE_DTYPES = ["float16"]  # chapter 5's kernel is timed in fp16 only: its bf16 speed is the same story
PEER_NAMES = {"sdpa_cudnn": "cuDNN", "sdpa_flash": "FlashAttention-2", "sdpa_efficient": "memory-efficient"}


def run(progress: Progress) -> list[dict]:
    rows = []
    for dtype in DTYPES:
        for d in (64, 128):
            for causal in (False, True):
                for n in SIZES:
                    rows.append(_measure(dtype, d, causal, n))
                    r = rows[-1]
                    progress(f"{dtype} d={d} causal={causal} N={n}: fast {r['fast']:.0f}, "
                             f"best peer {r['best_peer']} {r['best_peer_tflops']:.0f} TFLOP/s ({r['ratio']:.2f}x)")
    return rows


def _measure(dtype_name: str, d: int, causal: bool, n: int) -> dict:
    import torch

    from kernels import flash_attention as readable
    from kernels import flash_attention_fast as fast

    dtype = getattr(torch, dtype_name)
    heads, batch = HEADS[d], TOKENS // n
    q, k, v = (torch.randn(batch, heads, n, d, device="cuda", dtype=dtype) for _ in range(3))
    assert fast.fallback_reason(q, k, v) is None, "the benchmark shapes must take the fast path"
    expected = _sdpa("FLASH_ATTENTION", q, k, v, causal)()
    ours = {"fast": lambda: fast.attention(q, k, v, causal=causal)}
    if dtype_name in READABLE_DTYPES:
        ours["readable"] = lambda: readable.attention(q, k, v, causal=causal)
    for name, fn in ours.items():
        err = (fn().float() - expected.float()).abs().max().item()
        assert err < 3e-2, f"{name} kernel is wrong at {dtype_name} d={d} causal={causal} N={n}: {err:.3g}"
    flops = _flops(d, causal, n)
    fns = {**ours, **{name: _sdpa(backend, q, k, v, causal) for name, backend in BACKENDS.items()}}
    # First one timing of plain calls per implementation (None: the backend refused these inputs); it also
    # compiles and autotunes. Then all that run are timed together, replayed from CUDA graphs and taken in
    # turns: graphs keep the CPU out of the GPU time (the plain-call column shows how much of it gets in at
    # short lengths), and turns give every implementation the same clock while the GPU's power limit moves it.
    eager = {name: _time(fn) for name, fn in fns.items()}
    graphed = gpu_ms_interleaved({name: fn for name, fn in fns.items() if eager[name] is not None})
    row = {"dtype": dtype_name, "head_dim": d, "causal": causal, "N": n, "readable": None}
    for name in fns:  # rows hold plain values: one key per implementation and measure
        row[name] = tflops(flops, graphed.get(name))
        row[f"plain_{name}"] = tflops(flops, eager[name])
        row[f"host_us_{name}"] = _host_us(fns[name]) if name in graphed else None
    peers = {name: row[name] for name in BACKENDS if row[name] is not None}
    row["best_peer"] = max(peers, key=peers.get)
    row["best_peer_tflops"] = peers[row["best_peer"]]
    row["ratio"] = row["fast"] / row["best_peer_tflops"]
    return row


def _flops(d: int, causal: bool, n: int) -> float:
    return 4 * (TOKENS // n) * HEADS[d] * n * n * d * (0.5 if causal else 1.0)


def _host_us(fn, calls: int = 20) -> float:
    """CPU time of one call in microseconds: the Python wrapper and the launch, not the kernel.

    Calls return before their kernels finish, so this is the time the CPU needs to queue one call. When
    it approaches the kernel's own time, back-to-back calls leave the GPU waiting for the CPU, and a GPU
    timer measures the CPU."""
    import time

    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


# --- views -------------------------------------------------------------------------------------------------

def _label(row: dict) -> str:
    return f"{row['dtype']} D={row['head_dim']} {'causal' if row['causal'] else 'non-causal'}"


def table(result: dict) -> str:
    headers = ["dtype", "D", "causal", "N", "fast", "readable", "cuDNN", "FA2", "mem-eff.", "fastest", "fast / fastest"]
    rows = [[r["dtype"], r["head_dim"], "yes" if r["causal"] else "no", r["N"], r["fast"], r["readable"],
             r["sdpa_cudnn"], r["sdpa_flash"], r["sdpa_efficient"], PEER_NAMES[r["best_peer"]], f"{r['ratio']:.2f}×"]
            for r in result["rows"]]
    return render.table(headers, rows) + ("\n\nTFLOP/s; — means the backend refused these inputs (or, for "
                                          "chapter 5's kernel, that it was timed in fp16 only).")


def plot(result: dict):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.0, 4.0), sharey=True)
    for ax, d in zip(axes, (64, 128), strict=True):
        for causal, style in ((False, "-"), (True, "--")):
            rows = [r for r in result["rows"]
                    if r["head_dim"] == d and r["causal"] == causal and r["dtype"] == "float16"]
            xs = [r["N"] for r in rows]
            for key, label in (("fast", "fast kernel"), ("sdpa_cudnn", "SDPA cuDNN"), ("sdpa_flash", "SDPA FA2"),
                               ("readable", "chapter 5 kernel")):
                pts = [(x, r[key]) for x, r in zip(xs, rows, strict=True) if r[key] is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=True), style, marker="o", markersize=3,
                            label=f"{label}{' (causal)' if causal else ''}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_title(f"fp16, head dim {d}")
    axes[0].set_ylabel("TFLOP/s")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def verdict(result: dict) -> str:
    """The chapter's targets, checked against this run's rows."""
    rows = result["rows"]
    target_rows = [r for r in rows if r["N"] >= TARGET_FROM]
    met = [r for r in target_rows if r["ratio"] >= TARGET_RATIO]
    floor_miss = [r for r in rows if r["ratio"] < FLOOR_RATIO]
    worst = min(rows, key=lambda r: r["ratio"])
    best = max(rows, key=lambda r: r["ratio"])
    lines = []
    kind = "success" if len(met) == len(target_rows) else "warning"
    lines.append(f'!!! {kind} "Target 1: at least {TARGET_RATIO:.1f}× the fastest backend at N ≥ {TARGET_FROM}"')
    lines.append(f"    Met in {len(met)} of {len(target_rows)} rows.")
    if len(met) < len(target_rows):
        misses = "; ".join(f"{_label(r)}, N = {r['N']}: {r['ratio']:.3f}×" for r in target_rows if r not in met)
        lines.append(f"    Below {TARGET_RATIO:.1f}×: {misses}.")
    by_group: dict[str, list[float]] = {}
    for r in target_rows:
        by_group.setdefault(_label(r), []).append(r["ratio"])
    ranges = "; ".join(f"{label}: {min(v):.3f}–{max(v):.3f}×" for label, v in by_group.items())
    lines.append(f"    Ratio range per group at N ≥ {TARGET_FROM}: {ranges}.")
    kind = "success" if not floor_miss else "warning"
    lines.append("")
    lines.append(f'!!! {kind} "Target 2: nowhere below {FLOOR_RATIO:.1f}× the fastest backend"')
    lines.append(f"    {len(rows) - len(floor_miss)} of {len(rows)} rows are at or above {FLOOR_RATIO:.1f}×. "
                 f"Lowest: {worst['ratio']:.3f}× ({_label(worst)}, N = {worst['N']}, against "
                 f"{PEER_NAMES[worst['best_peer']]}); highest: {best['ratio']:.3f}× ({_label(best)}, N = {best['N']}).")
    return "\n".join(lines)


def host_time(result: dict) -> str:
    """CPU time per call beside GPU time, and what plain calls from Python measure, for the short fp16 rows."""
    rows = [r for r in result["rows"] if r["dtype"] == "float16" and r["N"] <= TARGET_FROM and "plain_fast" in r]
    if not rows:
        return "This run did not time plain calls."
    headers = ["D", "causal", "N", "fast: GPU µs", "fast: CPU µs", "cuDNN: GPU µs", "cuDNN: CPU µs",
               "fast / fastest, graphs", "fast / fastest, plain calls"]
    table_rows = []
    for r in rows:
        table_rows.append([r["head_dim"], "yes" if r["causal"] else "no", r["N"], _gpu_micros(r, "fast"),
                           _micros(r["host_us_fast"]), _gpu_micros(r, "sdpa_cudnn"), _micros(r["host_us_sdpa_cudnn"]),
                           f"{r['ratio']:.2f}×", f"{_plain_ratio(r):.2f}×"])
    return render.table(headers, table_rows) + (
        "\n\nGPU µs: one call replayed from a CUDA graph (the median of its turns). CPU µs: 20 calls queued back "
        "to back, divided by 20. Plain calls: the same do_bench timing with each call made from Python.")


def _gpu_micros(row: dict, name: str) -> str:
    value = row[name]
    return "—" if value is None else f"{_flops(row['head_dim'], row['causal'], row['N']) / (value * 1e12) * 1e6:.0f}"


def _plain_ratio(row: dict) -> float:
    """The fast kernel against the fastest backend, both timed by plain calls from Python."""
    return row["plain_fast"] / max(row[f"plain_{name}"] or 0.0 for name in PEER_NAMES)


def _micros(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def margins(result: dict, count: int = 3) -> str:
    """The rows where the fast kernel leads the fastest backend by the least, at N >= TARGET_FROM and overall."""
    rows = sorted(result["rows"], key=lambda r: r["ratio"])
    target_rows = [r for r in rows if r["N"] >= TARGET_FROM][:count]
    if not target_rows:
        return "No row was measured."
    named = "; ".join(f"{_label(r)}, N = {r['N']} ({r['ratio']:.3f}×)" for r in target_rows)
    return (f"The {len(target_rows)} smallest ratios to the fastest backend at N ≥ {TARGET_FROM}: {named}. "
            f"Over all rows the smallest is {_label(rows[0])}, N = {rows[0]['N']} ({rows[0]['ratio']:.3f}×).")


def against_fa2(result: dict) -> str:
    """How the fast kernel compares with the FlashAttention-2 backend, which the earlier chapters aimed at."""
    ratios = [r["fast"] / r["sdpa_flash"] for r in result["rows"] if r["sdpa_flash"]]
    if not ratios:
        return "The FlashAttention-2 backend did not run."
    return (f"Against SDPA's FlashAttention-2 backend, the fast kernel is {min(ratios):.2f}× to {max(ratios):.2f}× "
            f"across all {len(ratios)} rows.")


BENCHMARK = Benchmark(
    name="fast_attention",
    chapter="ch09",
    title="Chapter 9: the fast kernel against every SDPA backend",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_fast.py", "kernels/flash_attention_hopper.py",
             "kernels/hopper_schedule.py",
             "book/bench/fast_attention.py"],
    run=run,
    views={"table": table, "plot": plot, "verdict": verdict, "against-fa2": against_fa2, "host-time": host_time,
           "margins": margins},
)
