"""Chapter 12: a search at the decode rows furthest behind cuDNN. With 32 query heads on 32 KV heads, head dim 128, fp16
and one query per sequence, at batch 8 for three cache lengths and at batch 1 with 128K keys, one run times the book's
kernel (kernels/flash_decoding.py) with every split count in SPLIT_COUNTS and every tile of its TILES and of
DEEPER_TILES (pipelines deeper than the wrapper ever picks, and a longer tile), beside cuDNN and FlashAttention-2, all
from CUDA graphs in turns (chapter 7's timer, clearing the L2 cache by reading as the decode benchmark does). Every
output is checked first, on the first sequence, against the math backend in float32.

The fastest of many timings is picked from the same run, and that favours it a little: a configuration with a lucky
reading wins. So a second timing, in turns again, takes only the wrapper's own choice (plan), the fastest configuration
of the search and the two SDPA backends; the ratios the views give come from it. The limit is the bytes of K and V over
the copy bandwidth measured in the same run, as in the decode benchmark.
"""

from __future__ import annotations

from book import render
from book.bench.decode import CLEAR_L2, HEAD_DIM, MiB, _copy_bandwidths
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved
from book.datasheets import for_gpu

SHAPES = [(8, 8192), (8, 32768), (8, 131072), (1, 131072)]  # (batch, cache length)
Q_HEADS, KV_HEADS = 32, 32
SPLIT_COUNTS = list(range(1, 17))
DEEPER_TILES = ((128, 4), (64, 4), (256, 2))  # (keys per tile, stages) that the wrapper never picks, searched too
PEERS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION"}
PEER_NAMES = {"sdpa_cudnn": "cuDNN", "sdpa_flash": "FlashAttention-2"}
PLOTTED = (8, 131072)  # the shape the plot shows


def _label(config: dict) -> str:
    return f"{config['splits']} × {config['block_n']}/{config['stages']}"


def _rows(batch: int, context: int, bandwidth: float, progress: Progress, device: str = "cuda") -> list[dict]:
    """One row of kind "search" for the shape, then one of kind "config" for each configuration searched."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import flash_decoding

    q = torch.randn(batch, Q_HEADS, 1, HEAD_DIM, device=device, dtype=torch.float16)
    k, v = (torch.randn(batch, KV_HEADS, context, HEAD_DIM, device=device, dtype=torch.float16) for _ in range(2))
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    expected = torch.nn.functional.scaled_dot_product_attention(q[:1].float(), k[:1].float(), v[:1].float())
    splits, block_n, stages = flash_decoding.plan(q, KV_HEADS, context)
    plan = {"splits": splits, "block_n": block_n, "stages": stages}
    configs = [{"splits": s, "block_n": n, "stages": st} for n, st in flash_decoding.TILES + DEEPER_TILES
               for s in SPLIT_COUNTS]
    configs += [plan] if plan not in configs else []
    # check_lengths=False, as in the decode benchmark: the host-side check cannot be captured in a graph.
    fns = {_label(c): (lambda c=c: flash_decoding.decode(q, k, v, lens, num_splits=c["splits"], block_n=c["block_n"],
                                                         num_stages=c["stages"], check_lengths=False))
           for c in configs}

    def peer(backend):
        def fn():
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return fn

    peers = {name: peer(backend) for name, backend in PEERS.items()} if device == "cuda" else {}
    for name, fn in (fns | peers).items():
        err = ((fn()[:1].float() - expected).norm() / expected.norm()).item()
        assert err < 2e-2, f"{name}: wrong decode output at batch {batch}, {context} keys: relative error {err:.2e}"
    if device == "cuda":
        torch.cuda.synchronize()
    searched = gpu_ms_interleaved(fns | peers, budget_ms=3000, clear_l2=CLEAR_L2)
    best = min(configs, key=lambda c: searched[_label(c)])
    again = gpu_ms_interleaved({"plan": fns[_label(plan)], "best": fns[_label(best)]} | peers, budget_ms=3000,
                               clear_l2=CLEAR_L2)
    kv_bytes = 2 * batch * KV_HEADS * context * HEAD_DIM * 2
    row = {"kind": "search", "batch": batch, "context": context, "q_heads": Q_HEADS, "kv_heads": KV_HEADS,
           "kv_bytes": kv_bytes, "limit_us": kv_bytes / bandwidth * 1e6, "plan": plan, "best": best,
           "peers_us": {name: searched[name] * 1e3 for name in peers},
           "again_us": {name: t * 1e3 for name, t in again.items()}}
    progress(f"B={batch} L={context}: plan {_label(plan)} {row['again_us']['plan']:.1f} us, fastest {_label(best)} "
             f"{row['again_us']['best']:.1f} us"
             + "".join(f", {PEER_NAMES[n]} {row['again_us'][n]:.1f} us" for n in peers))
    return [row] + [{"kind": "config", "batch": batch, "context": context, **c, "us": searched[_label(c)] * 1e3}
                    for c in configs]


def run(progress: Progress) -> list[dict]:
    ways = _copy_bandwidths()
    bandwidth = max(ways.values())
    progress("copy bandwidth " + ", ".join(f"{name} {b / 1e9:.0f} GB/s" for name, b in ways.items()))
    return [{"kind": "copy", "bytes_per_s": bandwidth, "ways": ways}] + [
        row for batch, context in SHAPES for row in _rows(batch, context, bandwidth, progress)]


# ---------------------------------------------------------------------------------------------------
# Views


def _searches(result: dict) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == "search"]


def _configs(result: dict, search: dict) -> list[dict]:
    """The configurations searched at the shape of this search row."""
    return [r for r in result["rows"] if r["kind"] == "config"
            and (r["batch"], r["context"]) == (search["batch"], search["context"])]


def _cell(us: float, limit_us: float) -> str:
    return f"{us:,.1f} ({limit_us / us:.0%})"


def table(result: dict) -> str:
    """Per shape: the wrapper's choice, the fastest configuration of the search and the two SDPA backends, from the
    second timing, with the ratios that matter."""
    body = []
    for r in _searches(result):
        again, limit = r["again_us"], r["limit_us"]
        body.append([str(r["batch"]), f"{r['context']:,}", f"{r['kv_bytes'] / MiB:,.0f}", f"{limit:,.1f}",
                     _label(r["plan"]), _cell(again["plan"], limit), _label(r["best"]), _cell(again["best"], limit),
                     *(_cell(again[name], limit) if name in again else None for name in PEERS),
                     f"{again['plan'] / again['best']:.3f}",
                     *(f"{again['sdpa_cudnn'] / again[name]:.3f}" if "sdpa_cudnn" in again else None
                       for name in ("plan", "best"))])
    return render.table(["batch", "context", "K+V MiB", "copy reference µs", "the wrapper's choice",
                         "its µs (share of the copy reference)", "the fastest searched",
                         "its µs (share of the copy reference)",
                         *(f"{label} µs (share of the copy reference)" for label in PEER_NAMES.values()),
                         "speed-up of the fastest over the choice", "cuDNN over the choice",
                         "cuDNN over the fastest"], body) + (
        f"\n\n{Q_HEADS} query heads on {KV_HEADS} KV heads, head dim {HEAD_DIM}, fp16, one query per sequence. A "
        f"configuration is splits × keys per tile/stages. The search timed every split count from "
        f"{SPLIT_COUNTS[0]} to {SPLIT_COUNTS[-1]} with each tile of `TILES` and of `DEEPER_TILES`, and both SDPA "
        f"backends, in turns; the "
        f"times here come from a second timing, in turns, of only the wrapper's choice, the fastest of the search "
        f"and the two backends. The last two columns are cuDNN's time over the choice's and over the fastest "
        f"configuration's: under 1 where cuDNN is faster.")


def summary(result: dict) -> str:
    """One sentence: how far the fastest configuration gets against the choice and against cuDNN."""
    rows = [r for r in _searches(result) if "sdpa_cudnn" in r["again_us"]]
    gains = [r["again_us"]["plan"] / r["again_us"]["best"] for r in rows]
    count = len(_configs(result, rows[0])) if rows else 0

    def against_cudnn(name: str) -> str:
        behind = [r for r in rows if r["again_us"]["sdpa_cudnn"] < r["again_us"][name]]
        if not behind:
            return f"is at or above cuDNN at all {len(rows)} shapes"
        worst = min(behind, key=lambda r: r["again_us"]["sdpa_cudnn"] / r["again_us"][name])
        ratio = worst["again_us"]["sdpa_cudnn"] / worst["again_us"][name]
        where = f"all {len(rows)}" if len(behind) == len(rows) else f"{len(behind)} of the {len(rows)}"
        return (f"trails cuDNN at {where} shapes, by at most {1 - ratio:.1%} (batch {worst['batch']}, "
                f"{worst['context']:,} keys)")

    return (f"Of the {count} configurations, the fastest is {min(gains):.3f} to {max(gains):.3f} times as fast as "
            f"the wrapper's choice. The choice {against_cudnn('plan')}; the fastest configuration "
            f"{against_cudnn('best')}.") + _against_datasheet(result, rows)


def _against_datasheet(result: dict, rows: list[dict]) -> str:
    """How close cuDNN and the fastest configuration come to the GPU's datasheet bandwidth: how much room is left."""
    sheet = for_gpu(result.get("provenance", {}).get("gpu", ""))
    if sheet is None or not rows:
        return ""

    def shares(name: str) -> list[float]:
        return [r["kv_bytes"] / (r["again_us"][name] * 1e-6) / (sheet.hbm_tbps * 1e12) for r in rows]

    cudnn, best = shares("sdpa_cudnn"), shares("best")
    return (f" Against the {sheet.hbm_tbps} TB/s of the {sheet.model}'s datasheet, cuDNN reads K and V at "
            f"{min(cudnn):.0%} to {max(cudnn):.0%} of it at these shapes, and the fastest configuration at "
            f"{min(best):.0%} to {max(best):.0%}.")


def plot(result: dict):
    """Share of the copy reference against the split count at one shape, one line per tile, cuDNN as a level line."""
    r = next(r for r in _searches(result) if (r["batch"], r["context"]) == PLOTTED)
    configs, series = _configs(result, r), {}
    for n, st in dict.fromkeys((c["block_n"], c["stages"]) for c in configs):
        chosen = sorted((c for c in configs if (c["block_n"], c["stages"]) == (n, st)), key=lambda c: c["splits"])
        series[f"{n} keys per tile, {st} stages"] = ([c["splits"] for c in chosen],
                                                      [r["limit_us"] / c["us"] for c in chosen])
    hlines = {f"{PEER_NAMES[name]}, same run": r["limit_us"] / us for name, us in r["peers_us"].items()
              if name == "sdpa_cudnn"}
    return render.line_plot(series, xlabel="splits per sequence", ylabel="share of the copy reference (can pass 1)",
                            title=f"Batch {r['batch']}, {r['context']:,} keys, {Q_HEADS} query heads on {KV_HEADS} KV "
                                  f"heads, fp16", logx=False, hlines=hlines)


BENCHMARK = Benchmark(
    name="decode_search",
    chapter="ch12",
    title="Chapter 12: every split count and tile at the decode rows furthest behind cuDNN",
    sources=["kernels/flash_decoding.py", "book/bench/decode.py", "book/bench/decode_search.py"],
    run=run,
    views={"table": table, "summary": summary, "plot": plot},
    awaiting_gpu="issue 21: the search's first GPU run",
)
