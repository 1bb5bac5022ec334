"""Chapter 5: HBM traffic measured, not only counted. Nsight Compute (`ncu`) reads the GPU's DRAM counters
while the plain attention and the book's FlashAttention kernels run once each, and the views put the
measured bytes beside the chapter's simulator count and the two formulas.

Rows: one per (implementation, D, N), fp16, B = 1, H = 16, non-causal. Each row holds the DRAM bytes read
and written (`dram__bytes_read.sum`, `dram__bytes_write.sum`), the bytes the kernels asked of the L2 cache
(`lts__t_bytes.sum`), the kernels it launched, and the counts of the models in bytes.

How the counters are read: the benchmark starts this module again as a child process under `ncu`, which
profiles only the calls between cudaProfilerStart and cudaProfilerStop (after every warm-up and autotuning
run) and names each kernel after the NVTX range around its call. ncu flushes the caches before each kernel
it profiles (its default `--cache-control all`), so every kernel starts with a cold L2, as a kernel that
runs after other work would.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from book import ROOT, render
from book.bench.registry import Benchmark, BenchmarkSkipped, Progress

HEAD_DIMS = [64, 128]
SIZES = [1024, 2048, 4096, 8192, 16384]
HEADS = 16
ELEMENT_BYTES = 2  # fp16
METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum"]
IMPLEMENTATIONS = {
    "plain": "plain PyTorch (scale Q, QKᵀ, softmax, PV)",
    "flash": "chapter 5's kernel",
    "fast": "chapter 9's Gluon kernel",
}


# ---------------------------------------------------------------------------------------------------
# The models, in elements of one head


def standard_elements(n: int, d: int) -> int:
    """The simulator's count for standard attention: read Q and K, write S; read S, write P; read P and V,
    write O. Each pass reads its inputs once and writes its output once."""
    return 4 * n * d + 4 * n * n


def plain_elements(n: int, d: int) -> int:
    """What the plain PyTorch version here moves at best: the standard count, plus reading and writing Q once
    more for the scale (a separate kernel)."""
    return standard_elements(n, d) + 2 * n * d


def flash_elements(n: int, d: int, block_m: int) -> int:
    """The simulator's count for FlashAttention-2's loop order: Q read and O written once, K and V read once
    for every block of block_m query rows (the running statistics stay on chip). With block_m = Θ(M/d) for
    on-chip memory M, this is Θ(N²d²/M), as in the FlashAttention paper's Theorem 2."""
    return 2 * n * d + 2 * n * d * math.ceil(n / block_m)


def compulsory_elements(n: int, d: int) -> int:
    """Read Q, K and V once and write O once: what any exact attention must move."""
    return 4 * n * d


# ---------------------------------------------------------------------------------------------------
# The child: runs every case once between cudaProfilerStart and cudaProfilerStop, one NVTX range each


def _plain(q, k, v):
    import torch

    s = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)
    return torch.softmax(s, dim=-1) @ v


def _implementations() -> dict:
    import torch

    from kernels import flash_attention, flash_attention_fast

    found = {"plain": _plain, "flash": lambda q, k, v: flash_attention.attention(q, k, v)}
    if torch.cuda.get_device_capability() == (9, 0):
        found["fast"] = lambda q, k, v: flash_attention_fast.attention(q, k, v)
    return found


def _rows_per_program(name: str, d: int, n: int) -> int:
    """How many query rows share one pass over K and V: the tile chapter 5's autotuner chose for the shape it
    just ran, or 64 per computing warpgroup of chapter 9's kernel. The plain version has none (0)."""
    if name == "flash":
        from kernels.flash_attention import _attn_fwd_tuned

        return _attn_fwd_tuned.best_config.kwargs["BLOCK_M"]
    if name == "fast":
        from kernels.flash_attention_hopper import warpgroups_for

        return 64 * warpgroups_for(d, n, False)
    return 0


# --8<-- [start:child]
def child(cases_path: str) -> None:
    import torch
    import torch.cuda.nvtx as nvtx

    cases = []
    for d in HEAD_DIMS:
        for n in SIZES:
            q, k, v = (torch.randn(1, HEADS, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
            for name, fn in _implementations().items():
                fn(q, k, v)  # compile and autotune outside the profiled range
                torch.cuda.synchronize()
                case = {"implementation": name, "D": d, "N": n, "block_m": _rows_per_program(name, d, n)}
                torch.cuda.cudart().cudaProfilerStart()
                nvtx.range_push(f"{name}:{d}:{n}")
                fn(q, k, v)
                torch.cuda.synchronize()
                nvtx.range_pop()
                torch.cuda.cudart().cudaProfilerStop()
                cases.append(case)
            del q, k, v
            torch.cuda.empty_cache()
    with open(cases_path, "w") as f:
        json.dump(cases, f)
# --8<-- [end:child]


# ---------------------------------------------------------------------------------------------------
# The parent: runs the child under ncu and turns its CSV into rows


def parse_ncu_csv(text: str) -> dict[str, dict]:
    """{"name:D:N": {"kernels": [...], metric: total bytes, ...}} from ncu's --csv output, whose kernel names
    are "RANGE/KERNEL" (--print-nvtx-rename kernel)."""
    lines = text[text.index('"ID"'):].splitlines()
    found: dict[str, dict] = {}
    for record in csv.DictReader(lines):
        case, _, kernel = record["Kernel Name"].partition("/")
        entry = found.setdefault(case, {"kernels": [], **{metric: 0 for metric in METRICS}})
        if record["Metric Name"] in METRICS:
            entry[record["Metric Name"]] += int(record["Metric Value"].replace(",", ""))
        label = f'{record["ID"]}:{kernel}'
        if label not in entry["kernels"]:
            entry["kernels"].append(label)
    for entry in found.values():
        entry["kernels"] = [label.split(":", 1)[1] for label in entry["kernels"]]
    return found


def _ncu_version(ncu: str) -> str:
    done = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 else "unknown"


def run(progress: Progress) -> list[dict]:
    ncu = shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if os.path.isfile(p)), None)
    if ncu is None:
        raise BenchmarkSkipped("Nsight Compute (ncu) is not installed; the page keeps the committed results.")
    with tempfile.TemporaryDirectory() as tmp:
        cases_path, log_path = os.path.join(tmp, "cases.json"), os.path.join(tmp, "ncu.csv")
        # --8<-- [start:ncu]
        command = [ncu, "--profile-from-start", "off", "--nvtx", "--print-nvtx-rename", "kernel",
                   "--metrics", ",".join(METRICS), "--csv", "--log-file", log_path,
                   sys.executable, "-m", "book.bench.hbm_traffic", "--child", cases_path]
        # --8<-- [end:ncu]
        progress("profiling under ncu: " + " ".join(command[:-4]))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        said = done.stdout + done.stderr + (open(log_path).read() if os.path.isfile(log_path) else "")
        if "ERR_NVGPUCTRPERM" in said:
            raise BenchmarkSkipped("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM: "
                                   "run as root or allow profiling for all users); the page keeps the committed "
                                   "results.")
        if done.returncode != 0 or not os.path.isfile(cases_path):
            raise RuntimeError(f"ncu failed (exit {done.returncode}):\n{said[-3000:]}")
        with open(cases_path) as f:
            cases = json.load(f)
        with open(log_path) as f:
            measured = parse_ncu_csv(f.read())
    tool = _ncu_version(ncu)
    rows = []
    for case in cases:
        name, d, n = case["implementation"], case["D"], case["N"]
        counters = measured[f"{name}:{d}:{n}"]
        per_head = plain_elements(n, d) if name == "plain" else flash_elements(n, d, case["block_m"])
        row = {"implementation": name, "D": d, "N": n, "B": 1, "H": HEADS, "tool": tool,
               "dram_read_bytes": counters["dram__bytes_read.sum"],
               "dram_write_bytes": counters["dram__bytes_write.sum"],
               "l2_request_bytes": counters["lts__t_bytes.sum"],
               "kernels": " | ".join(counters["kernels"]),
               "standard_bytes": HEADS * ELEMENT_BYTES * standard_elements(n, d),
               "model_bytes": HEADS * ELEMENT_BYTES * per_head,
               "compulsory_bytes": HEADS * ELEMENT_BYTES * compulsory_elements(n, d)}
        if case["block_m"]:
            row["block_m"] = case["block_m"]
        rows.append(row)
        progress(f"{name:5s} D={d:3d} N={n:5d}: DRAM {_dram(row) / 1e6:9.1f} MB "
                 f"(model {row['model_bytes'] / 1e6:9.1f} MB), L2 requests {row['l2_request_bytes'] / 1e6:9.1f} MB")
    return rows


# ---------------------------------------------------------------------------------------------------
# Views


def _dram(row: dict) -> int:
    return row["dram_read_bytes"] + row["dram_write_bytes"]


def _by(rows: list[dict], name: str, d: int) -> list[dict]:
    return sorted((r for r in rows if r["implementation"] == name and r["D"] == d), key=lambda r: r["N"])


def bytes_plot(result: dict):
    """Measured DRAM bytes against N beside the models, one panel per head dim (log-log). Chapter 5's kernel
    also shows the bytes it asked of the L2 cache: that is where its model's re-reads of K and V land."""
    import matplotlib.pyplot as plt

    rows = result["rows"]
    dims = sorted({r["D"] for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(9.5, 4.6), sharey=True, squeeze=False)
    for ax, d in zip(axes[0], dims, strict=True):
        plain, flash, fast = (_by(rows, name, d) for name in ("plain", "flash", "fast"))
        ns = [r["N"] for r in plain]
        ax.plot(ns, [r["standard_bytes"] for r in plain], "--", color="C3", linewidth=1,
                label="standard attention, simulator count: 4Nd + 4N²")
        ax.plot(ns, [_dram(r) for r in plain], "o-", color="C3", label="plain PyTorch: DRAM, measured")
        if flash:
            ax.plot(ns, [r["model_bytes"] for r in flash], ":", color="C0", linewidth=1.2,
                    label="FlashAttention, simulator count: 2Nd + 2Nd·⌈N/B_M⌉")
            ax.plot(ns, [r["l2_request_bytes"] for r in flash], "s--", color="C0", markerfacecolor="none",
                    linewidth=0.8, label="chapter 5's kernel: L2 requests, measured")
            ax.plot(ns, [_dram(r) for r in flash], "s-", color="C0", label="chapter 5's kernel: DRAM, measured")
        if fast:
            ax.plot([r["N"] for r in fast], [_dram(r) for r in fast], "^-", color="C2",
                    label="chapter 9's kernel: DRAM, measured")
        ax.plot(ns, [r["compulsory_bytes"] for r in plain], "-.", color="grey", linewidth=1,
                label="floor: Q, K, V read and O written once (4Nd)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"Sequence length N (d = {d}, fp16, {rows[0]['H']} heads)")
        ax.set_title(f"head dim {d}")
    axes[0][0].set_ylabel("bytes (all heads)")
    axes[0][0].legend(fontsize=6.5, loc="upper left")
    fig.suptitle("HBM traffic measured with Nsight Compute, beside the simulator's counts")
    fig.tight_layout()
    return fig


def _row(rows: list[dict], name: str, d: int, n: int) -> dict | None:
    return next((r for r in rows if r["implementation"] == name and r["D"] == d and r["N"] == n), None)


def table(result: dict) -> str:
    """Per shape, in MB (10^6 bytes, all heads): measured DRAM traffic of each implementation beside its model,
    the L2 requests of chapter 5's kernel, and the floor."""
    rows = result["rows"]
    mb = 1e6
    body = []
    for d in sorted({r["D"] for r in rows}):
        for plain in _by(rows, "plain", d):
            n = plain["N"]
            flash, fast = _row(rows, "flash", d, n), _row(rows, "fast", d, n)
            body.append([
                d, f"{n:,}", _dram(plain) / mb, plain["model_bytes"] / mb,
                flash and _dram(flash) / mb, flash and flash["l2_request_bytes"] / mb,
                flash and flash["model_bytes"] / mb,
                fast and _dram(fast) / mb, plain["compulsory_bytes"] / mb,
            ])
    return render.table(
        ["D", "N", "plain: DRAM", "plain: count", "ch. 5 kernel: DRAM", "ch. 5 kernel: L2 requests",
         "ch. 5 kernel: count", "ch. 9 kernel: DRAM", "floor 4Nd"], body)


def summary(result: dict) -> str:
    """What the rows say, in sentences: plain against its count, the kernels against the floor, and where the
    FlashAttention count shows up instead (the L2 requests)."""
    rows = result["rows"]
    d, n = max(r["D"] for r in rows), max(r["N"] for r in rows)
    plain, flash = _row(rows, "plain", d, n), _row(rows, "flash", d, n)
    large = [r for r in rows if r["implementation"] == "plain" and r["N"] >= 4096]
    plain_ratio = [_dram(r) / r["model_bytes"] for r in large]
    kernels = [r for r in rows if r["implementation"] in ("flash", "fast")]
    floor = [_dram(r) / r["compulsory_bytes"] for r in kernels]
    requests = [r["l2_request_bytes"] / r["model_bytes"] for r in rows if r["implementation"] == "flash"]
    dram_share = [_dram(r) / r["model_bytes"] for r in rows if r["implementation"] == "flash"]
    return (
        f"From N = 4,096 on, the plain version's DRAM traffic is {min(plain_ratio):.2f} to {max(plain_ratio):.2f} "
        f"times its count: it really moves S and P through HBM. At N = {n:,} and head dim {d} it moved "
        f"{_dram(plain) / 1e9:.1f} GB, and chapter 5's kernel {_dram(flash) / 1e9:.2f} GB, "
        f"{_dram(plain) / _dram(flash):.0f} times less. "
        f"The book's kernels stayed within {min(floor):.2f} to {max(floor):.2f} times the floor of reading Q, K "
        f"and V and writing O once, far below FlashAttention's count ({min(dram_share):.2f} to "
        f"{max(dram_share):.2f} of it for chapter 5's kernel). That count did not vanish: chapter 5's kernel asked "
        f"the L2 cache for {min(requests):.2f} to {max(requests):.2f} times it."
    )


BENCHMARK = Benchmark(
    name="hbm_traffic",
    chapter="ch05",
    title="HBM traffic measured with Nsight Compute",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_fast.py", "kernels/flash_attention_hopper.py",
             "kernels/hopper_schedule.py", "book/bench/hbm_traffic.py"],
    run=run,
    views={"bytes-plot": bytes_plot, "table": table, "summary": summary},
)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
