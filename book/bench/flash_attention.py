"""Chapter 5: chapter 5's FlashAttention forward kernel against a plain torch attention and every SDPA
backend that runs, measured in the same run; and peak memory of the plain attention vs the kernel as N grows.

Speed rows (kind "speed"): fp16, B*N = 16384 tokens, H = 32 at D = 64 and H = 16 at D = 128, N from 1K to
16K, non-causal and causal. FLOPs 4*B*H*N*N*D, halved for causal (softmax FLOPs not counted).
Before it is timed, every implementation's output (ours, each SDPA backend, the plain torch attention) is
compared with a float64 reference on the first CHECK_HEADS heads of batch 0: the row records its largest
absolute error (KEY_max_err) and its relative error (KEY_rel_err). Ours out of tolerance stops the run; a
peer out of tolerance is recorded as KEY_ok = False and not timed.
Memory rows (kind "memory"): B = 1, H = 8, D = 64, fp16, N from 4K up, until the plain attention runs out
of memory (recorded as None and naive_oom = True). Each row has the peak memory of the plain attention, of
our kernel and of every SDPA backend that runs, beyond the inputs.
"""

from __future__ import annotations

from book import render
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_or_oom, tflops

SPEED_SIZES = [1024, 2048, 4096, 8192, 16384]
TOKENS = 16384
HEADS = {64: 32, 128: 16}  # head dim -> heads
MEMORY_SIZES = [4096, 8192, 16384, 32768, 65536, 131072]
MEMORY_HEADS = 8
TARGET_FROM = 2048
TARGET_RATIO = 1.0  # ours / the FlashAttention-2 backend of SDPA
BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION"}
GiB = 2**30
CHECK_HEADS = 2  # heads of batch 0 compared with a float64 reference before timing
CHECK_CHUNK = 2048  # query rows of the reference computed at a time: a chunk's scores take at most 256 MiB
# Tolerances against the float64 reference, for fp16 inputs: relative error (Frobenius norm of the
# difference over the norm of the reference) and largest absolute error of one output element.
MAX_REL_ERR = 5e-3
MAX_ABS_ERR = 1e-2


def naive_attention(q, k, v, causal: bool):
    """The plain way: materialize the (B, H, N, N) scores and probabilities in HBM."""
    import torch

    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _sdpa(backend_name: str, q, k, v, causal: bool):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def fn():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return fn


def _first_output(fn):
    """fn's output from a first call (it compiles, autotunes, or raises); None when it cannot run these inputs."""
    import torch

    try:
        out = fn()
        torch.cuda.synchronize()
        return out
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None
    except RuntimeError as error:  # "No available kernel" from a pinned SDPA backend
        if "out of memory" in str(error).lower():
            torch.cuda.empty_cache()
        return None


def _time(fn) -> float | None:
    """Median ms after a first call, None when out of memory or when the backend refuses these inputs."""
    return None if _first_output(fn) is None else gpu_ms_or_oom(fn)


def reference_heads(q, k, v, causal: bool):
    """float64 attention for the first CHECK_HEADS heads of batch 0, CHECK_CHUNK query rows at a time."""
    import torch

    n, d = q.shape[-2], q.shape[-1]
    out = torch.empty(CHECK_HEADS, n, d, dtype=torch.float64, device=q.device)
    for h in range(CHECK_HEADS):
        keys, values = k[0, h].double(), v[0, h].double()
        for start in range(0, n, CHECK_CHUNK):
            stop = min(start + CHECK_CHUNK, n)
            s = (q[0, h, start:stop].double() @ keys.T) * d**-0.5
            if causal:  # top-left: query i sees keys j <= i
                rows = torch.arange(start, stop, device=q.device)[:, None]
                s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > rows, float("-inf"))
            out[h, start:stop] = torch.softmax(s, dim=-1) @ values
            del s
    return out


def errors(out, ref) -> tuple[float, float]:
    """(largest absolute error, relative error) of out's first CHECK_HEADS heads of batch 0 against ref."""
    diff = out[0, :CHECK_HEADS].double() - ref
    return diff.abs().max().item(), (diff.norm() / ref.norm()).item()


def within_tolerance(max_err: float, rel_err: float) -> bool:
    return max_err <= MAX_ABS_ERR and rel_err <= MAX_REL_ERR


def _peak_extra_bytes(fn) -> int | None:
    """Peak memory allocated by fn beyond what was allocated before, or None when it cannot run.

    Where fn's first call compiles, autotunes or sets up a workspace, call it once before, so that those
    are not counted.
    """
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    try:
        result = fn()
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None
    except RuntimeError as error:  # "No available kernel" from a pinned SDPA backend
        if "out of memory" in str(error).lower():
            torch.cuda.empty_cache()
        return None
    peak = torch.cuda.max_memory_allocated() - before
    del result
    torch.cuda.empty_cache()
    return peak


def _speed_row(d: int, n: int, causal: bool) -> dict:
    import torch

    from kernels.flash_attention import attention

    b, h = TOKENS // n, HEADS[d]
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    ref = reference_heads(q, k, v, causal)
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    row = {"kind": "speed", "D": d, "N": n, "B": b, "H": h, "causal": causal}
    implementations = {"ours": lambda: attention(q, k, v, causal=causal),
                       "naive": lambda: naive_attention(q, k, v, causal)}
    implementations.update({key: _sdpa(backend, q, k, v, causal) for key, backend in BACKENDS.items()})
    for key, fn in implementations.items():
        out = _first_output(fn)  # checked before it is timed
        ms, max_err, rel_err, ok = None, None, None, None
        if out is not None:
            max_err, rel_err = errors(out, ref)
            ok = within_tolerance(max_err, rel_err)
            del out
            assert ok or key != "ours", (f"our kernel is wrong at D={d} N={n} causal={causal}: max error "
                                         f"{max_err:.2e}, relative error {rel_err:.2e} against float64")
            ms = gpu_ms_or_oom(fn) if ok else None
        row.update({f"{key}_max_err": max_err, f"{key}_rel_err": rel_err, f"{key}_ok": ok, f"{key}_ms": ms,
                    f"{key}_TFLOPs": tflops(flops, ms)})
    return row


def _memory_row(n: int) -> dict:
    import torch

    from kernels.flash_attention import attention

    b, h, d = 1, MEMORY_HEADS, 64
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    inputs = 3 * q.numel() * q.element_size()
    naive_peak = _peak_extra_bytes(lambda: naive_attention(q, k, v, False))
    # Time ours first: its first call autotunes, and the timer's own buffers must not count as its memory.
    ours_ms = _time(lambda: attention(q, k, v))
    ours_peak = _peak_extra_bytes(lambda: attention(q, k, v))
    row = {"kind": "memory", "N": n, "B": b, "H": h, "D": d, "inputs_GiB": inputs / GiB,
           "naive_oom": naive_peak is None,
           "naive_peak_GiB": None if naive_peak is None else naive_peak / GiB,
           "ours_peak_GiB": None if ours_peak is None else ours_peak / GiB,
           "scores_GiB": b * h * n * n * 2 / GiB,  # one fp16 N x N matrix for each of the H heads
           "naive_ms": None if naive_peak is None else _time(lambda: naive_attention(q, k, v, False)),
           "ours_ms": ours_ms}
    for key, backend in BACKENDS.items():
        fn = _sdpa(backend, q, k, v, False)
        ran = _first_output(fn) is not None  # the first call may set up a workspace: not counted
        peak = _peak_extra_bytes(fn) if ran else None
        row[f"{key}_peak_GiB"] = None if peak is None else peak / GiB
    return row


def run(progress: Progress) -> list[dict]:
    rows = []
    for d in HEADS:
        for causal in (False, True):
            for n in SPEED_SIZES:
                rows.append(_speed_row(d, n, causal))
                r = rows[-1]
                for key in LABELS:
                    if r[f"{key}_ok"] is False:
                        progress(f"WRONG OUTPUT, not timed: {LABELS[key]} at D={d} N={n} causal={causal}: max "
                                 f"error {r[f'{key}_max_err']:.2e}, relative error {r[f'{key}_rel_err']:.2e}")
                progress(f"D={d} N={n:>5} causal={causal!s:<5}: ours {_fmt(r['ours_TFLOPs'])}, "
                         f"FA2 {_fmt(r['sdpa_flash_TFLOPs'])}, cuDNN {_fmt(r['sdpa_cudnn_TFLOPs'])}, "
                         f"naive {_fmt(r['naive_TFLOPs'])} TFLOP/s")
    stop = False
    for n in MEMORY_SIZES:
        if stop:
            break
        rows.append(_memory_row(n))
        r = rows[-1]
        stop = r["naive_oom"]
        sdpa = ", ".join(f"{LABELS[key]} {_fmt(r[f'{key}_peak_GiB'])}" for key in BACKENDS)
        progress(f"memory N={n:>6}: naive {_fmt(r['naive_peak_GiB'])} GiB, ours {_fmt(r['ours_peak_GiB'])} GiB, "
                 f"{sdpa} GiB")
    return rows


def _fmt(value: float | None) -> str:
    return "OOM/n.a." if value is None else f"{value:.3g}"


# ---- views ----

LABELS = {"ours": "Triton (this chapter)", "sdpa_flash": "SDPA: FlashAttention-2", "sdpa_cudnn": "SDPA: cuDNN",
          "sdpa_efficient": "SDPA: memory-efficient", "naive": "plain torch (materializes N×N)"}


def _speed(result: dict, d: int | None = None, causal: bool | None = None) -> list[dict]:
    return [r for r in result["rows"] if r.get("kind") == "speed" and (d is None or r["D"] == d)
            and (causal is None or r["causal"] == causal)]


def _memory(result: dict) -> list[dict]:
    return [r for r in result["rows"] if r.get("kind") == "memory"]


def tflops_plot(result: dict):
    panels = {}
    for d in sorted({r["D"] for r in _speed(result)}):
        for causal in (False, True):
            rows = _speed(result, d, causal)
            if rows:
                panels[f"D = {d}, {'causal' if causal else 'non-causal'}"] = {
                    label: ([r["N"] for r in rows], [r.get(f"{key}_TFLOPs") for r in rows])
                    for key, label in LABELS.items()}
    return render.panel_plot(panels, xlabel="Sequence length N", ylabel="TFLOP/s (fp16, 4·B·H·N²·D, causal halved)",
                             legend_below=True)


def _ratio(a: float | None, b: float | None) -> str | None:
    return None if a is None or b is None else f"{a / b:.2f}×"


def table(result: dict) -> str:
    rows = [[r["D"], "yes" if r["causal"] else "no", f"{r['N']:,}", f"{r['B']}×{r['H']}", r["ours_TFLOPs"],
             r["sdpa_flash_TFLOPs"], r["sdpa_cudnn_TFLOPs"], r["sdpa_efficient_TFLOPs"], r["naive_TFLOPs"],
             _ratio(r["ours_TFLOPs"], r["sdpa_flash_TFLOPs"]), _ratio(r["ours_TFLOPs"], r["sdpa_cudnn_TFLOPs"])]
            for r in _speed(result)]
    return render.table(["D", "Causal", "N", "B×H", "Ours TFLOP/s", "SDPA FA2", "SDPA cuDNN", "SDPA mem-eff",
                         "Plain torch", "Ours / FA2", "Ours / cuDNN"], rows)


def target(result: dict) -> str:
    rows = [r for r in _speed(result) if r["N"] >= TARGET_FROM]
    pairs = [(r, r["ours_TFLOPs"] / r["sdpa_flash_TFLOPs"]) for r in rows
             if r["ours_TFLOPs"] is not None and r["sdpa_flash_TFLOPs"] is not None]
    if not pairs:
        return ('!!! warning "Target not checked"\n\n'
                "    The FlashAttention-2 backend of SDPA did not run on this GPU, so there is nothing to compare.\n")
    worst_row, worst = min(pairs, key=lambda p: p[1])
    best = max(ratio for _, ratio in pairs)
    met = worst >= TARGET_RATIO
    kind, verdict = ("success", "Target met") if met else ("failure", "Target not met")
    return (
        f'!!! {kind} "{verdict}: at least {TARGET_RATIO:.1f}× the FlashAttention-2 backend of SDPA from '
        f'N = {TARGET_FROM:,} up"\n\n'
        f"    Over {len(pairs)} shapes (D = 64 and 128, causal and not, N = {TARGET_FROM:,} to "
        f"{max(r['N'] for r, _ in pairs):,}) the kernel reaches {worst:.2f}× to {best:.2f}× the FlashAttention-2 "
        f"backend's TFLOP/s, measured in the same run. The lowest ratio is at D = {worst_row['D']}, "
        f"N = {worst_row['N']:,}, {'causal' if worst_row['causal'] else 'non-causal'} "
        f"({worst_row['ours_TFLOPs']:.0f} vs {worst_row['sdpa_flash_TFLOPs']:.0f} TFLOP/s).\n"
    )


def versus_plain(result: dict) -> str:
    """Our kernel's speed-up over the plain torch attention, per panel of the plot, as a list of sentences."""
    lines = []
    for d in sorted({r["D"] for r in _speed(result)}):
        for causal in (False, True):
            pairs = [(r["N"], r["ours_TFLOPs"] / r["naive_TFLOPs"]) for r in _speed(result, d, causal)
                     if r["ours_TFLOPs"] is not None and r["naive_TFLOPs"] is not None]
            if not pairs:
                continue
            (n_low, low), (n_high, high) = min(pairs, key=lambda p: p[1]), max(pairs, key=lambda p: p[1])
            lines.append(f"- D = {d}, {'causal' if causal else 'non-causal'}: {low:.1f}× at N = {n_low:,} "
                         f"(the least) to {high:.1f}× at N = {n_high:,} (the most).")
    if not lines:
        return "The plain torch attention did not run in this measurement."
    return "Our kernel's speed over the plain torch attention's, in this run:\n\n" + "\n".join(lines) + "\n"


def checks(result: dict) -> str:
    """The worst error of each implementation against the float64 reference, over every speed row."""
    rows = _speed(result)
    if not rows or "ours_max_err" not in rows[0]:
        worst = max((r["rel_err_vs_sdpa"] for r in rows if r.get("rel_err_vs_sdpa") is not None), default=None)
        seen = "" if worst is None else f" (largest relative error {worst:.1e})"
        return ('!!! note "Only our kernel was checked in this run"\n\n'
                "    These results were measured before every implementation was checked against a float64 "
                "reference. They record only the Triton kernel's output against SDPA's default choice of "
                f"backend{seen}. The next run of the benchmark adds the check of every implementation.\n")
    lines = []
    for key, label in LABELS.items():
        checked = [r for r in rows if r.get(f"{key}_max_err") is not None]
        wrong = [r for r in checked if r[f"{key}_ok"] is False]
        lines.append([label, f"{len(checked)} of {len(rows)}",
                      max((r[f"{key}_max_err"] for r in checked), default=None),
                      max((r[f"{key}_rel_err"] for r in checked), default=None),
                      "none" if not wrong else ", ".join(f"D={r['D']} N={r['N']:,}" for r in wrong)])
    body = render.table(["Implementation", "Shapes checked", "Worst max abs error", "Worst relative error",
                         "Out of tolerance (not timed)"], lines)
    return (body + f"\n\nTolerance: max abs error ≤ {MAX_ABS_ERR:g} and relative error ≤ {MAX_REL_ERR:g}, "
            f"on the first {CHECK_HEADS} heads of batch 0 against float64 attention. A shape not checked did not "
            "run (the backend refused it, or it ran out of memory).\n")


def memory_plot(result: dict):
    rows = _memory(result)
    xs = [r["N"] for r in rows]
    series = {"plain torch attention": (xs, [r["naive_peak_GiB"] for r in rows]),
              "Triton FlashAttention (this chapter)": (xs, [r["ours_peak_GiB"] for r in rows])}
    series.update({LABELS[key]: (xs, [r.get(f"{key}_peak_GiB") for r in rows]) for key in BACKENDS
                   if any(r.get(f"{key}_peak_GiB") is not None for r in rows)})
    series[f"one fp16 N×N matrix for each of the {MEMORY_HEADS} heads"] = (xs, [r["scores_GiB"] for r in rows])
    return render.line_plot(
        series, xlabel=f"Sequence length N (B = 1, H = {MEMORY_HEADS}, D = 64, fp16)",
        ylabel="Peak extra GPU memory (GiB)",
        title="Memory beyond the inputs: plain attention, FlashAttention, SDPA", logy=True,
    )


def memory_table(result: dict) -> str:
    rows = _memory(result)
    sdpa = [key for key in BACKENDS if any(r.get(f"{key}_peak_GiB") is not None for r in rows)]
    lines = [[f"{r['N']:,}", "out of memory" if r["naive_oom"] else r["naive_peak_GiB"], r["ours_peak_GiB"],
              *(r.get(f"{key}_peak_GiB") for key in sdpa), r["scores_GiB"], r["naive_ms"], r["ours_ms"]]
             for r in rows]
    text = render.table(["N", "Plain torch peak GiB", "Ours peak GiB", *(f"{LABELS[key]} peak GiB" for key in sdpa),
                         f"One fp16 N×N matrix, all {MEMORY_HEADS} heads, GiB", "Plain torch ms", "Ours ms"], lines)
    if not sdpa:
        text += ("\n\n*The SDPA backends' peaks are not in this results file: it was measured before they were "
                 "recorded. The next run of the benchmark adds them.*")
    return text


def memory_ratio(result: dict) -> str:
    """How many fp16 N×N matrices (all heads) the plain version holds at its peak, as a sentence."""
    ratios = [r["naive_peak_GiB"] / r["scores_GiB"] for r in _memory(result) if r["naive_peak_GiB"] is not None]
    if not ratios:
        return "The plain version ran out of memory at every N of this run."
    return (f"At every N that fit, the plain version's peak was {min(ratios):.2f}× to {max(ratios):.2f}× "
            f"the size of one fp16 N×N matrix for all {MEMORY_HEADS} heads.")


BENCHMARK = Benchmark(
    name="flash_attention",
    chapter="ch05",
    title="FlashAttention forward vs SDPA backends and plain attention",
    sources=["kernels/flash_attention.py", "book/bench/flash_attention.py"],
    run=run,
    views={"tflops-plot": tflops_plot, "table": table, "target": target, "versus-plain": versus_plain,
           "checks": checks,
           "memory-plot": memory_plot, "memory-table": memory_table, "memory-ratio": memory_ratio},
)
