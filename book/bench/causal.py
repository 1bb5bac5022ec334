"""Chapter 6: what skipping the hidden tiles buys. Our kernel (kernels/flash_attention.py) causal and
non-causal over N, and its causal throughput beside torch's SDPA backends (FlashAttention-2, cuDNN,
memory-efficient), all pinned with torch.nn.attention.sdpa_kernel and measured in the same run.

Shapes follow the usual FlashAttention benchmarks: B * N = 16384 tokens, H = 32 at head dim 64 and
H = 16 at head dim 128, fp16, random normal inputs. FLOPs are 4 * B * H * N^2 * D (the two matmuls),
halved for causal; softmax and rescaling are left out by convention (FlashAttention-2, section 4.1).

Before it is timed, every implementation (ours causal and not, each SDPA backend) is compared with a float32
reference on the first CHECK_HEADS heads of batch 0. A row records each one's largest absolute error and
relative error. Ours out of tolerance stops the run; an SDPA backend out of tolerance is recorded with
KEY_ok = False and not timed.
"""

from __future__ import annotations

import math
import statistics

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_or_oom, tflops

SEQ_LENS = [1024, 2048, 4096, 8192, 16384]
TOKENS = 16384  # batch * seq_len
HEADS = {64: 32, 128: 16}  # head dim -> heads
PEERS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
PEER_LABELS = {"flash": "SDPA flash (FA2)", "cudnn": "SDPA cuDNN", "efficient": "SDPA efficient"}
# Every SDPA run the benchmark times, by its key in a row: the three backends causal, and FA2 non-causal.
CHECKED_PEERS = {**{f"sdpa_{p}_causal": f"{label}, causal" for p, label in PEER_LABELS.items()},
                 "sdpa_flash": "SDPA flash (FA2), non-causal"}
CHECK_HEADS = 2  # heads of batch 0 compared with a float32 reference before timing
CHECK_CHUNK = 2048  # query rows of the reference computed at a time: a chunk's scores take at most 128 MiB
ROUNDS = 5  # non-causal and causal are timed this many times, interleaved; each keeps its median
CHECK_RTOL = 5e-3  # fp16: relative error (norm of the difference over the norm of the reference)
CHECK_ATOL = 1e-2  # fp16: largest absolute error of one output element
SPEEDUP_FROM, SPEEDUP_TARGET = 4096, 1.8  # causal at least 1.8x faster than non-causal from N = 4K
PEER_FROM, PEER_TARGET = 2048, 1.0  # causal at least as fast as FlashAttention-2 from N = 2K


def attention_flops(batch: int, heads: int, n: int, head_dim: int, causal: bool) -> float:
    flops = 4.0 * batch * heads * n * n * head_dim
    return flops / 2 if causal else flops


def computed_tile_share(n: int, block_m: int, block_n: int) -> float:
    """Share of the tiles a causal kernel computes (chapter 6's formula), top-left, N_q = N_k = n."""
    q_blocks, k_blocks = -(-n // block_m), -(-n // block_n)
    computed = sum(-(-min((i + 1) * block_m, n) // block_n) for i in range(q_blocks))
    return computed / (q_blocks * k_blocks)


def run(progress: Progress) -> list[dict]:
    rows = []
    for head_dim, heads in HEADS.items():
        for n in SEQ_LENS:
            row = _measure(TOKENS // n, heads, n, head_dim)
            rows.append(row)
            for key in CHECKED_PEERS:
                if row[f"{key}_ok"] is False:
                    progress(f"WRONG OUTPUT, not timed: {CHECKED_PEERS[key]} at D={head_dim} N={n}: max error "
                             f"{row[f'{key}_max_err']:.2e}, relative error {row[f'{key}_rel_err']:.2e}")
            peers = ", ".join(f"{p} {_fmt(row[f'sdpa_{p}_causal_TFLOPs'])}" for p in PEERS)
            progress(f"D={head_dim:>3} N={n:>5}: non-causal {row['triton_ms']:.3f} ms, causal "
                     f"{row['triton_causal_ms']:.3f} ms ({row['causal_speedup']:.2f}x); causal TFLOP/s: ours "
                     f"{_fmt(row['triton_causal_TFLOPs'])}, {peers}")
    return rows


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _reference(q, k, v, causal: bool):
    """float32 attention for the first CHECK_HEADS heads of batch 0, CHECK_CHUNK query rows at a time."""
    import torch

    n, d = q.shape[-2], q.shape[-1]
    out = torch.empty(CHECK_HEADS, n, d, dtype=torch.float32, device=q.device)
    for h in range(CHECK_HEADS):
        keys, values = k[0, h].float(), v[0, h].float()
        for start in range(0, n, CHECK_CHUNK):
            stop = min(start + CHECK_CHUNK, n)
            s = (q[0, h, start:stop].float() @ keys.T) / math.sqrt(d)
            if causal:  # top-left: query i sees keys j <= i
                rows = torch.arange(start, stop, device=q.device)[:, None]
                s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > rows, float("-inf"))
            out[h, start:stop] = torch.softmax(s, dim=-1) @ values
            del s
    return out


def _errors(out, ref) -> tuple[float, float, bool]:
    """(largest absolute error, relative error, within tolerance) of out's checked heads against ref."""
    diff = out[0, :CHECK_HEADS].float() - ref
    max_err, rel_err = diff.abs().max().item(), (diff.norm() / ref.norm()).item()
    return max_err, rel_err, max_err <= CHECK_ATOL and rel_err <= CHECK_RTOL


def _check(out, ref, what: str) -> tuple[float, float]:
    """Our kernel's (largest absolute error, relative error); stops the run if it is out of tolerance."""
    max_err, rel_err, ok = _errors(out, ref)
    assert ok, (f"{what}: max error {max_err:.2e} (limit {CHECK_ATOL}), relative error {rel_err:.2e} "
                f"(limit {CHECK_RTOL}) against a float32 reference")
    return max_err, rel_err


def _tiles(kernel) -> tuple[int | None, int | None]:
    """The tile shape the autotuner picked for the last call, if it says."""
    config = getattr(kernel, "best_config", None)
    if config is None:
        return None, None
    return config.kwargs.get("BLOCK_M"), config.kwargs.get("BLOCK_N")


def _sdpa(q, k, v, backend_name: str, causal: bool):
    """SDPA pinned to one backend: (a callable, its first output), or (None, None) if the backend cannot run."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def fn():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    try:
        out = fn()
        torch.cuda.synchronize()
    except RuntimeError:  # "No available kernel" for this backend, GPU or shape
        return None, None
    return fn, out


def _measure(batch: int, heads: int, n: int, head_dim: int) -> dict:
    import torch

    from kernels import flash_attention as fa

    gen = torch.Generator(device="cuda")
    gen.manual_seed(n * head_dim)
    q, k, v = (torch.randn(batch, heads, n, head_dim, device="cuda", dtype=torch.float16, generator=gen)
               for _ in range(3))

    # Correctness first: both modes against a float32 reference on a few heads.
    refs = {causal: _reference(q, k, v, causal) for causal in (False, True)}
    max_err, err = _check(fa.attention(q, k, v), refs[False], f"non-causal N={n} D={head_dim}")
    max_err_causal, err_causal = _check(fa.attention(q, k, v, causal=True), refs[True], f"causal N={n} D={head_dim}")
    torch.cuda.empty_cache()

    row = {"head_dim": head_dim, "heads": heads, "batch": batch, "seq_len": n, "max_err": max_err,
           "rel_err": err, "max_err_causal": max_err_causal, "rel_err_causal": err_causal}
    fa.attention(q, k, v)
    row["block_m"], row["block_n"] = _tiles(fa._attn_fwd_tuned)
    fa.attention(q, k, v, causal=True)
    row["block_m_causal"], row["block_n_causal"] = _tiles(fa._attn_fwd_tuned)
    # The speed-up is a ratio of two timings: time both modes in turn, several times, so that a drift of
    # the GPU's clock during the run touches both alike.
    times = {False: [], True: []}
    for _ in range(ROUNDS):
        for causal in (False, True):
            times[causal].append(gpu_ms_or_oom(lambda causal=causal: fa.attention(q, k, v, causal=causal)))
    row["triton_ms"], row["triton_causal_ms"] = (
        None if None in times[causal] else statistics.median(times[causal]) for causal in (False, True))
    for peer, backend in PEERS.items():
        for causal in (True, False) if peer == "flash" else (True,):
            key = f"sdpa_{peer}_causal" if causal else f"sdpa_{peer}"
            fn, out = _sdpa(q, k, v, backend, causal)
            row[f"{key}_max_err"], row[f"{key}_rel_err"], row[f"{key}_ok"] = (
                (None, None, None) if out is None else _errors(out, refs[causal]))
            del out
            row[f"{key}_ms"] = gpu_ms_or_oom(fn) if row[f"{key}_ok"] else None  # checked before it is timed

    flops, flops_causal = (attention_flops(batch, heads, n, head_dim, c) for c in (False, True))
    row["triton_TFLOPs"] = tflops(flops, row["triton_ms"])
    row["triton_causal_TFLOPs"] = tflops(flops_causal, row["triton_causal_ms"])
    row["sdpa_flash_TFLOPs"] = tflops(flops, row["sdpa_flash_ms"])
    for peer in PEERS:
        row[f"sdpa_{peer}_causal_TFLOPs"] = tflops(flops_causal, row[f"sdpa_{peer}_causal_ms"])
    row["causal_speedup"] = _ratio(row["triton_ms"], row["triton_causal_ms"])
    row["flash_causal_speedup"] = _ratio(row["sdpa_flash_ms"], row["sdpa_flash_causal_ms"])
    return row


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _x(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}×"


def _head_dims(result: dict) -> list[int]:
    return sorted({row["head_dim"] for row in result["rows"]})


def _tile_bound(row: dict) -> float | None:
    """The speed-up that skipping tiles alone allows, for the causal tile shape the autotuner picked."""
    if not row.get("block_m_causal") or not row.get("block_n_causal"):
        return None
    return 1 / computed_tile_share(row["seq_len"], row["block_m_causal"], row["block_n_causal"])


# Views


def speedup_plot(result: dict):
    series = {}
    for d in _head_dims(result):
        rows = [row for row in result["rows"] if row["head_dim"] == d]
        xs = [row["seq_len"] for row in rows]
        series[f"ours, D = {d}"] = (xs, [row["causal_speedup"] for row in rows])
        series[f"SDPA flash (FA2), D = {d}"] = (xs, [row["flash_causal_speedup"] for row in rows])
    return render.line_plot(series, xlabel="Sequence length N (B·N = 16384 tokens)",
                            ylabel="Speed-up of causal over non-causal (×)",
                            title="Causal vs non-causal time, fp16", hlines={"2×: half the tiles": 2.0})


def speedup_table(result: dict) -> str:
    rows = [[row["head_dim"], f"{row['seq_len']:,}", f"{row['batch']} × {row['heads']}",
             row["triton_ms"], row["triton_causal_ms"], _x(row["causal_speedup"]), _x(_tile_bound(row)),
             None if not row.get("block_m_causal") else f"{row['block_m_causal']} × {row['block_n_causal']}",
             _x(row["flash_causal_speedup"])]
            for row in result["rows"]]
    return render.table(["D", "N", "B × H", "Non-causal ms", "Causal ms", "Speed-up",
                         "Tile bound", "Causal tile (M × N)", "FA2 speed-up"], rows)


def tflops_table(result: dict) -> str:
    rows = []
    for row in result["rows"]:
        flash, cudnn = row["sdpa_flash_causal_TFLOPs"], row["sdpa_cudnn_causal_TFLOPs"]
        ours = row["triton_causal_TFLOPs"]
        rows.append([row["head_dim"], f"{row['seq_len']:,}", ours, flash, cudnn, row["sdpa_efficient_causal_TFLOPs"],
                     _x(_ratio(ours, flash)), _x(_ratio(ours, cudnn))])
    return render.table(["D", "N", "Ours", "SDPA flash (FA2)", "SDPA cuDNN", "SDPA efficient",
                         "Ours / FA2", "Ours / cuDNN"], rows)


def tflops_plot(result: dict):
    keys = {"ours (Triton)": "triton_causal_TFLOPs", **{PEER_LABELS[p]: f"sdpa_{p}_causal_TFLOPs" for p in PEERS}}
    panels = {}
    for d in _head_dims(result):
        rows = [row for row in result["rows"] if row["head_dim"] == d]
        panels[f"Causal, head dim {d}, fp16"] = {label: ([row["seq_len"] for row in rows], [row[key] for row in rows])
                                                  for label, key in keys.items()}
    return render.panel_plot(panels, xlabel="Sequence length N", ylabel="TFLOP/s (causal FLOPs: half of 4·B·H·N²·D)",
                             panel_width=4.2, height=4.0)


def checks(result: dict) -> str:
    """The worst error of every implementation against the float32 reference, over all rows."""
    rows = result["rows"]
    if not rows or "max_err" not in rows[0]:
        worst = max(max(row["rel_err"], row["rel_err_causal"]) for row in rows) if rows else None
        seen = "" if worst is None else f" (largest relative error {worst:.1e})"
        return ('!!! note "Only our kernel was checked in this run"\n\n'
                "    These results were measured before the SDPA backends were checked too. They record only our "
                f"kernel's error against the float32 reference{seen}. The next run of the benchmark checks "
                "every implementation.\n")
    runs = {"max_err": "ours, non-causal", "max_err_causal": "ours, causal",
            **{f"{key}_max_err": label for key, label in CHECKED_PEERS.items()}}
    lines = []
    for max_key, label in runs.items():
        rel_key = max_key.replace("max_err", "rel_err")
        checked = [row for row in rows if row.get(max_key) is not None]
        ok_key = max_key.replace("max_err", "ok")
        wrong = [row for row in checked if row.get(ok_key) is False]
        lines.append([label, f"{len(checked)} of {len(rows)}", max((row[max_key] for row in checked), default=None),
                      max((row[rel_key] for row in checked), default=None),
                      "none" if not wrong else ", ".join(f"D={r['head_dim']} N={r['seq_len']:,}" for r in wrong)])
    body = render.table(["Implementation", "Shapes checked", "Worst max abs error", "Worst relative error",
                         "Out of tolerance (not timed)"], lines)
    return (body + f"\n\nTolerance: max abs error ≤ {CHECK_ATOL:g} and relative error ≤ {CHECK_RTOL:g}, on the "
            f"first {CHECK_HEADS} heads of batch 0 against float32 attention. A shape not checked did not run (the "
            "backend refused it).\n")


def _verdict(title: str, met: bool | None, body: str) -> str:
    if met is None:
        return f'!!! note "{title}: not measured"\n\n    {body}\n'
    kind, word = ("success", "Target met") if met else ("failure", "Target not met")
    return f'!!! {kind} "{word}: {title}"\n\n    {body}\n'


def target_speedup(result: dict) -> str:
    rows = [row for row in result["rows"] if row["seq_len"] >= SPEEDUP_FROM and row["causal_speedup"] is not None]
    title = f"causal at least {SPEEDUP_TARGET}× faster than non-causal from N = {SPEEDUP_FROM:,}"
    if not rows:
        return _verdict(title, None, "No row of this run has both timings at these lengths.")
    worst = min(rows, key=lambda row: row["causal_speedup"])
    speedups = [row["causal_speedup"] for row in rows]
    body = (f"From N = {SPEEDUP_FROM:,} to {max(r['seq_len'] for r in rows):,}, at head dims "
            f"{', '.join(str(d) for d in sorted({r['head_dim'] for r in rows}))}, causal attention runs "
            f"{min(speedups):.2f}× to {max(speedups):.2f}× faster than non-causal (slowest gain at D = "
            f"{worst['head_dim']}, N = {worst['seq_len']:,}: {worst['triton_ms']:.3f} ms → "
            f"{worst['triton_causal_ms']:.3f} ms).")
    bound = _tile_bound(worst)
    if bound is not None:
        body += (f" Skipping tiles alone would allow {bound:.2f}× there, with the tiles its causal tile shape "
                 f"computes; that limit tends to 2× as N grows.")
    return _verdict(title, min(speedups) >= SPEEDUP_TARGET, body)


def target_peer(result: dict) -> str:
    rows = [row for row in result["rows"] if row["seq_len"] >= PEER_FROM]
    ratios = [(row, _ratio(row["triton_causal_TFLOPs"], row["sdpa_flash_causal_TFLOPs"])) for row in rows]
    ratios = [(row, r) for row, r in ratios if r is not None]
    title = f"causal at least {PEER_TARGET:.1f}× the FlashAttention-2 backend from N = {PEER_FROM:,}"
    if not ratios:
        return _verdict(title, None, "The SDPA flash backend did not run in this measurement.")
    worst_row, worst = min(ratios, key=lambda pair: pair[1])
    values = [r for _, r in ratios]
    body = (f"From N = {PEER_FROM:,} up, our causal kernel reaches {min(values):.2f}× to {max(values):.2f}× the "
            f"throughput of SDPA's FlashAttention-2 backend in the same run (lowest at D = {worst_row['head_dim']}, "
            f"N = {worst_row['seq_len']:,}: {worst_row['triton_causal_TFLOPs']:.0f} vs "
            f"{worst_row['sdpa_flash_causal_TFLOPs']:.0f} TFLOP/s).")
    return _verdict(title, worst >= PEER_TARGET, body)


def targets(result: dict) -> str:
    return target_speedup(result) + "\n" + target_peer(result)


BENCHMARK = Benchmark(
    name="causal",
    chapter="ch06",
    title="Causal attention: skipped tiles and SDPA backends",
    sources=["kernels/flash_attention.py", "book/bench/causal.py"],
    run=run,
    views={"speedup-plot": speedup_plot, "speedup-table": speedup_table, "tflops-table": tflops_table,
           "tflops-plot": tflops_plot, "targets": targets, "checks": checks},
)
