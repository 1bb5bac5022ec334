"""Chapter 11: the book's attention at the shapes of real models, a prefill and a training step, against every SDPA
backend that takes them, in one run.

Models (their attention only: query heads / K/V heads, head dim): Llama-3.1-8B (32/8, 128), Qwen2.5-7B (28/4, 128),
one GPU's shard of Llama-3.1-70B split over 8 GPUs by tensor parallelism (64/8 heads over 8 GPUs: 8/1, 128), GPT-2
(12/12, 64) and Gemma 7B (16/16, 256). Prompt lengths N = 1,000, 3,000, 8,191 and 32,768 (only the last a multiple
of 128), causal, fp16 and bf16. The batch fills the GPU as a serving or training batch would: B = round(65,536 / N)
sequences (at least one), about 64K tokens per call (66 sequences of 1,000 tokens, 2 of 32,768). That is enough
programs to fill every SM at every length, and small enough that every SDPA backend's workspace and a training
step's saved tensors fit in memory.

Two rows per (model, dtype, N):

- "prefill": the forward alone, under torch.no_grad(). Ours is kernels.flash_attention_fast.attention, which runs
  the Gluon kernel (chapter 9), the fast Triton kernel (chapter 7) or falls back to chapter 5's kernel; the row
  records which, and why. For the grouped models also ours given K and V repeated to the query heads
  (repeat_interleave timed with the call): what a caller without grouped-query support would run.
- "training": forward and backward, autograd.grad of the output for a random dO on fresh leaf tensors, as chapter
  10's benchmark times a step. Ours is kernels.flash_attention_backward_fast.attention (chapter 9's forward, chapter
  11's backward, which falls back to chapter 10's kernels where it must); at head dim 256, which the fast forward
  does not take, chapter 5's forward with chapter 10's backward (kernels.flash_attention.attention).

The SDPA backends get enable_gqa=True for the grouped models; a backend that refuses the inputs (or runs out of
memory) is recorded as None, with what it said. FLOPs: the forward 4·B·H·N²·D, halved for causal; a training step
3.5 times that (the backward is 2.5 forwards, FlashAttention-2 paper, section 4.1). The implementations of a row are
timed in the same turns, replayed from CUDA graphs (chapter 7's timer). Before timing, every implementation's output
(prefill) or dQ, dK and dV (training) is compared with float64 on two slices: batch 0's first K/V head and the last
sequence's last K/V head, each with the query heads that read it. Ours out of tolerance stops the run; an SDPA
backend out of tolerance is not timed, and the row says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

from book import render
from book.bench.backward import BACKENDS, BACKWARD_FLOPS, GRAD_RTOL, _step
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops


@dataclass(frozen=True)
class Model:
    name: str
    heads: int  # query heads
    kv_heads: int  # K/V heads: fewer than the query heads for grouped-query attention
    head_dim: int

    @property
    def group(self) -> int:
        """Query heads per K/V head."""
        return self.heads // self.kv_heads


MODELS = [
    Model("Llama-3.1-8B", 32, 8, 128),  # grouped-query attention, 4 query heads per K/V head
    Model("Qwen2.5-7B", 28, 4, 128),  # grouped, 7 query heads per K/V head
    # Llama-3.1-70B's 64 query and 8 K/V heads split over 8 GPUs by tensor parallelism: one GPU's shard is
    # multi-query attention.
    Model("Llama-3.1-70B, 1/8 shard", 8, 1, 128),
    Model("GPT-2", 12, 12, 64),  # multi-head attention, head dim 64
    Model("Gemma 7B", 16, 16, 256),  # multi-head attention, head dim 256: off the fast paths
]
SIZES = [1000, 3000, 8191, 32768]
DTYPES = ["float16", "bfloat16"]
KINDS = ["prefill", "training"]
TOKENS = 65536  # tokens per call: B = round(TOKENS / N)
BUDGET_MS = 1500  # GPU time per row, over every implementation
TARGET_FROM = 2048
TARGET_RATIO = 1.0  # ours / the fastest SDPA backend, N >= TARGET_FROM, on the fast paths
# Relative error allowed against float64: the forward as in tests/test_flash_attention_fast.py, the gradients as
# in chapter 10's benchmark (GRAD_RTOL).
FORWARD_RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
CHECK_ELEMENTS = 2**27  # float64 scores of the reference computed at a time (1 GiB)
PEER_NAMES = {"sdpa_cudnn": "cuDNN", "sdpa_flash": "FlashAttention-2", "sdpa_efficient": "memory-efficient"}

# The paths ours can take. Chapters 9 and 11 call the first two fast; the others are the fallbacks.
GLUON, TRITON = "Gluon", "Triton"
READABLE_FORWARD, READABLE_BACKWARD = "chapter 5's kernel", "chapter 10's kernels"
FAST_PATHS = (GLUON, TRITON)
SHORT = {GLUON: "Gluon", TRITON: "Triton", READABLE_FORWARD: "ch. 5 (fallback)", READABLE_BACKWARD: "ch. 10 (fallback)"}


def batch_size(n: int) -> int:
    return max(1, round(TOKENS / n))


def forward_flops(batch: int, heads: int, n: int, d: int) -> float:
    return 4 * batch * heads * n * n * d * 0.5  # causal: half the scores


# ---------------------------------------------------------------------------------------------------
# Measuring


def run(progress: Progress) -> list[dict]:
    rows = []
    for model in MODELS:
        for dtype in DTYPES:
            for n in SIZES:
                for row in measure(model, dtype, n):
                    rows.append(row)
                    progress(_line(row))
    return rows


def measure(model: Model, dtype_name: str, n: int, *, batch: int | None = None, device: str = "cuda",
            timer: Callable[[dict], dict] | None = None) -> list[dict]:
    """The prefill row and the training row of one model, dtype and length. The tests run it on the CPU with a
    small batch and a stand-in timer (CUDA graphs need a GPU)."""
    import torch

    dtype = getattr(torch, dtype_name)
    batch = batch_size(n) if batch is None else batch
    timer = timer or (lambda fns: gpu_ms_interleaved(fns, budget_ms=BUDGET_MS))
    q, do = (torch.randn(batch, model.heads, n, model.head_dim, device=device, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(batch, model.kv_heads, n, model.head_dim, device=device, dtype=dtype) for _ in range(2))
    common = {"model": model.name, "heads": model.heads, "kv_heads": model.kv_heads, "head_dim": model.head_dim,
              "dtype": dtype_name, "N": n, "batch": batch}
    rows = [_prefill(common, q, k, v, timer), _training(common, q, k, v, do, timer)]
    if q.is_cuda:
        torch.cuda.empty_cache()
    return rows


def _forward_path(q, k, v) -> tuple[str, str | None, str | None]:
    """(the path kernels.flash_attention_fast.attention takes, why it falls back, why not the Gluon kernel), by the
    rules its wrapper applies: fallback_reason, then the Gluon kernel on compute capability 9.0."""
    from kernels import flash_attention_fast as fast

    reason = fast.fallback_reason(q, k, v)
    if reason is not None:
        return READABLE_FORWARD, reason, None
    major, minor = fast.capability(q.device)
    not_gluon = None if major == 9 else f"compute capability {major}.{minor} (the Gluon kernel runs on 9.0 only)"
    return (GLUON if not_gluon is None else TRITON), None, not_gluon


def _backward_path(q, k, v) -> tuple[str, str | None, str | None]:
    """(the path of kernels.flash_attention_backward_fast's backward, why it falls back, why not the Gluon kernel), by
    the rules attention_backward applies: fallback_reason, then the Gluon kernel if the GLUON switch is on and it
    can run here (gluon_reason), the Triton kernels otherwise."""
    from kernels import flash_attention_backward_fast as fast_backward

    reason = fast_backward.fallback_reason(q, k, v)
    if reason is not None:
        return READABLE_BACKWARD, reason, None
    not_gluon = ("the GLUON switch is off" if not fast_backward.BEST_FEATURES["GLUON"]
                 else fast_backward.gluon_reason(q))
    return (GLUON if not_gluon is None else TRITON), None, not_gluon


def _sdpa_attention(backend: str, grouped: bool):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn(q, k, v, causal):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=grouped)
    return fn


def _quiet(fn):
    """fn with our FallbackWarnings silenced: the row records the path, and the timer calls fn many times."""
    from kernels.flash_attention_fast import FallbackWarning

    def call():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            return fn()
    return call


def _first_call(fn, refusable: bool):
    """Call fn once (it compiles and autotunes; the timer needs that done). Returns (its result, or None if it refused
    the inputs; why it refused; the FallbackWarnings it raised). Only an SDPA backend may refuse (refusable)."""
    import torch

    from kernels.flash_attention_fast import FallbackWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        except RuntimeError as error:  # "No available kernel" from a pinned SDPA backend; torch.OutOfMemoryError too
            if not refusable:
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return None, _refusal(error, [w for w in caught if not issubclass(w.category, FallbackWarning)]), []
    return result, None, [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]


def _refusal(error: RuntimeError, said: list) -> str:
    """Why an SDPA backend did not run: out of memory, or what its warnings said (they name the failed checks)."""
    if "out of memory" in str(error).lower():
        return "out of memory"
    reasons = dict.fromkeys(str(w.message).split(" (Triggered internally")[0].strip() for w in said)
    text = "; ".join(r for r in reasons if r) or (str(error).strip().splitlines() or ["refused"])[0]
    return text[:400]


def _slices(q, k) -> list[tuple[int, int]]:
    """The (sequence, K/V head) pairs checked against float64: the first and the last."""
    return list(dict.fromkeys([(0, 0), (q.shape[0] - 1, k.shape[1] - 1)]))


def reference(q, k, v, b: int, g: int, do=None):
    """Causal attention of sequence b's query heads that read K/V head g, in float64, a few query rows at a time so
    long sequences fit: (out of those heads, shape (group, N, D); and with do, their (dq, dk, dv) with dk and dv of
    K/V head g, summed over the group, else None). The backward is chapter 10's formulas (dV = Pᵀ dO,
    dS = P ∘ (dO Vᵀ − rowsum(dO ∘ O)), dQ = dS K · scale, dK = dSᵀ Q · scale); the tests check it against autograd."""
    import torch

    heads, kv_heads, n, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    group = heads // kv_heads
    rows = slice(g * group, (g + 1) * group)
    keys, values, scale = k[b, g].double(), v[b, g].double(), d**-0.5
    out = torch.empty(group, n, d, dtype=torch.float64, device=q.device)
    if do is not None:
        dq, dk, dv = torch.empty_like(out), torch.zeros_like(keys), torch.zeros_like(values)
    chunk = max(1, CHECK_ELEMENTS // (group * n))
    columns = torch.arange(n, device=q.device)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        queries = q[b, rows, start:stop].double()
        s = (queries @ keys.T) * scale  # (group, rows, n)
        s.masked_fill_(columns[None, :] > torch.arange(start, stop, device=q.device)[:, None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        del s
        o = p @ values
        out[:, start:stop] = o
        if do is not None:
            grad_out = do[b, rows, start:stop].double()
            dv += (p.transpose(-1, -2) @ grad_out).sum(0)
            ds = p * (grad_out @ values.T - (grad_out * o).sum(-1, keepdim=True))
            dq[:, start:stop] = (ds @ keys) * scale
            dk += (ds.transpose(-1, -2) @ queries).sum(0) * scale
    return out, (None if do is None else (dq, dk, dv))


def _rel_error(value, expected) -> float:
    return ((value.double() - expected).norm() / expected.norm()).item()


def _forward_error(out, expected: dict, group: int) -> float:
    return max(_rel_error(out[b, g * group:(g + 1) * group], ref) for (b, g), (ref, _) in expected.items())


def _grad_error(grads, expected: dict, group: int) -> float:
    """Largest relative error of dq, dk, dv on the checked slices; infinite if any gradient anywhere is not finite."""
    if not all(bool(t.isfinite().all()) for t in grads):
        return float("inf")
    dq, dk, dv = grads
    return max(max(_rel_error(dq[b, g * group:(g + 1) * group], ref[0]), _rel_error(dk[b, g], ref[1]),
                   _rel_error(dv[b, g], ref[2])) for (b, g), (_, ref) in expected.items())


def _checked(row: dict, fns: dict, error: Callable[[object], float], key: str, bound: float) -> dict:
    """Run each fn once and check its result (error(result) against bound); return those to time. Ours, and ours on
    repeated K/V, out of bounds stop the run; an SDPA backend out of bounds is left out, and the row says why."""
    chosen = {}
    for name, fn in fns.items():
        result, refused, fallbacks = _first_call(fn, refusable=name in BACKENDS)
        if name == "ours":
            row["fallback_warnings"] = fallbacks  # what the kernels said, beside what the rules predicted
        err = None if result is None else error(result)
        del result
        row[f"{name}_{key}"] = err
        row[f"{name}_skipped"] = refused
        if err is not None and not err <= bound:
            message = f"relative error {err:.1e} against float64, above {bound:.0e}"
            if name not in BACKENDS:
                raise AssertionError(f"{name} is wrong at {row['model']} {row['dtype']} N={row['N']} "
                                     f"({row['kind']}): {message}")
            row[f"{name}_skipped"] = f"{message}: not timed"
        if row[f"{name}_skipped"] is None:
            chosen[name] = _quiet(fn)
    return chosen


def _prefill(common: dict, q, k, v, timer) -> dict:
    import torch

    from kernels import flash_attention_fast as fast

    path, fallback, not_gluon = _forward_path(q, k, v)
    group = q.shape[1] // k.shape[1]
    row = {**common, "kind": "prefill", "path": path, "forward_path": path, "fast": path in FAST_PATHS,
           "fallback": fallback, "forward_not_gluon": not_gluon}

    def ours():
        with torch.no_grad():
            return fast.attention(q, k, v, causal=True)

    def repeated():  # what a caller without grouped-query support runs: K and V copied to every query head
        with torch.no_grad():
            return fast.attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), causal=True)

    fns = {"ours": ours}
    for name, backend in BACKENDS.items():
        attn = _sdpa_attention(backend, group > 1)
        fns[name] = lambda attn=attn: attn(q, k, v, True)
    if group > 1:
        fns["repeated_kv"] = repeated
    expected = {(b, g): reference(q, k, v, b, g) for b, g in _slices(q, k)}
    chosen = _checked(row, fns, lambda out: _forward_error(out, expected, group), "err", FORWARD_RTOL[row["dtype"]])
    expected.clear()  # the float64 slices are not needed while timing
    names = [*fns, *([] if group > 1 else ["repeated_kv"])]  # the column exists in every prefill row
    return _finish(row, names, timer(chosen), forward_flops(q.shape[0], q.shape[1], q.shape[2], q.shape[3]))


def _training(common: dict, q, k, v, do, timer) -> dict:
    from kernels import flash_attention as readable
    from kernels import flash_attention_backward_fast as fast_backward

    forward, forward_reason, forward_not_gluon = _forward_path(q, k, v)
    if forward in FAST_PATHS:
        backward, backward_reason, backward_not_gluon = _backward_path(q, k, v)
        attn = lambda q, k, v, causal: fast_backward.attention(q, k, v, causal=causal)
    else:  # the fast forward does not take these inputs at all: chapter 5's forward, chapter 10's backward
        backward, backward_reason, backward_not_gluon = READABLE_BACKWARD, forward_reason, None
        attn = lambda q, k, v, causal: readable.attention(q, k, v, causal=causal)
    if forward_reason is not None:
        fallback = f"forward and backward: {forward_reason}"
    else:
        fallback = None if backward_reason is None else f"backward: {backward_reason}"
    group = q.shape[1] // k.shape[1]
    row = {**common, "kind": "training", "path": f"{forward} forward, {backward} backward", "forward_path": forward,
           "backward_path": backward, "fast": forward in FAST_PATHS and backward in FAST_PATHS, "fallback": fallback,
           "forward_not_gluon": forward_not_gluon, "backward_not_gluon": backward_not_gluon}
    fns = {"ours": _step(attn, q, k, v, do, True, backward=True)}
    for name, backend in BACKENDS.items():
        fns[name] = _step(_sdpa_attention(backend, group > 1), q, k, v, do, True, backward=True)
    expected = {(b, g): reference(q, k, v, b, g, do) for b, g in _slices(q, k)}
    chosen = _checked(row, fns, lambda grads: _grad_error(grads, expected, group), "grad_err", GRAD_RTOL[row["dtype"]])
    expected.clear()  # the float64 slices are not needed while timing
    flops = (1 + BACKWARD_FLOPS) * forward_flops(q.shape[0], q.shape[1], q.shape[2], q.shape[3])
    return _finish(row, list(fns), timer(chosen), flops)


def _finish(row: dict, names: list[str], times: dict[str, float], flops: float) -> dict:
    """Fill in the TFLOP/s and milliseconds of each implementation (None where it did not run), the fastest SDPA
    backend, ours against it, and, on grouped prefill rows, ours against ours on repeated K/V."""
    row["flops"] = flops
    for name in names:
        row[f"{name}_ms"] = times.get(name)
        row[name] = tflops(flops, times.get(name))
    peers = {name: row[name] for name in BACKENDS if row.get(name) is not None}
    row["best_peer"] = max(peers, key=peers.get) if peers else None
    row["best_peer_tflops"] = peers.get(row["best_peer"])
    row["ratio"] = row["ours"] / row["best_peer_tflops"] if row["ours"] and peers else None
    if "repeated_kv" in names:
        row["sharing"] = row["ours"] / row["repeated_kv"] if row["ours"] and row["repeated_kv"] else None
    return row


def _line(row: dict) -> str:
    """One progress line per row."""
    peer = ("no SDPA backend ran" if row["best_peer"] is None else
            f"best SDPA {PEER_NAMES[row['best_peer']]} {row['best_peer_tflops']:.0f} TFLOP/s ({row['ratio']:.2f}x)")
    repeated = f", K/V repeated {row['repeated_kv']:.0f}" if row.get("repeated_kv") else ""
    return (f"{row['model']} {row['dtype']} N={row['N']} B={row['batch']} {row['kind']}: ours "
            f"{row['ours']:.0f} TFLOP/s ({row['path']}){repeated}; {peer}")


# ---------------------------------------------------------------------------------------------------
# Views


def _rows(result: dict, kind: str) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == kind]


def _times(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}×"


def _label(row: dict) -> str:
    return f"{row['model']} {row['dtype']} N = {row['N']:,}"


def glance(result: dict) -> str:
    """One line per model: its heads, the paths ours took, and from N = 2,048 on the range of ours' TFLOP/s and of
    ours over the fastest SDPA backend, prefill and training step, both dtypes."""
    body = []
    for model in dict.fromkeys(r["model"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["model"] == model and r["N"] >= TARGET_FROM]
        first = rows[0]
        forward = sorted({SHORT[r["forward_path"]].removesuffix(" (fallback)") for r in rows})
        backward = sorted({SHORT[r["backward_path"]].removesuffix(" (fallback)") for r in rows
                           if r["kind"] == "training"})
        kernels = ", ".join(forward) + (f"; backward {', '.join(backward)}" if backward and backward != forward else "")
        cells = [model, f"{first['heads']}/{first['kv_heads']}", first["head_dim"], kernels]
        for kind in ("prefill", "training"):
            chosen = [r for r in rows if r["kind"] == kind]
            ratios = [r["ratio"] for r in chosen if r["ratio"] is not None]
            cells += [render.span([r["ours"] for r in chosen], ".0f") if chosen else None,
                      render.span(ratios, ".2f") + "×" if ratios else None]
        body.append(cells)
    lengths = sorted({r["N"] for r in result["rows"] if r["N"] >= TARGET_FROM})
    short = []
    for kind in ("prefill", "training"):
        ratios = [r["ratio"] for r in result["rows"]
                  if r["kind"] == kind and r["fast"] and r["N"] < TARGET_FROM and r["ratio"] is not None]
        if ratios:
            short.append(f"{kind} {render.span(ratios, '.2f')}×")
    shorter = ", ".join(f"{n:,}" for n in sorted({r["N"] for r in result["rows"] if r["N"] < TARGET_FROM}))
    below = (f" Shorter prompts, below the target's range, on the fast path: {' and '.join(short)} the fastest SDPA "
             f"backend at N = {shorter}." if short else "")
    return render.table(["model", "query/KV heads", "head dim", "kernels", "prefill: ours TFLOP/s",
                         "prefill: ours / fastest SDPA", "training: ours TFLOP/s", "training: ours / fastest SDPA"],
                        body) + (
        f"\n\nRanges over N = {', '.join(f'{n:,}' for n in lengths)} and fp16 and bf16, a batch filling the GPU, "
        "each implementation replayed from a CUDA graph, taking turns with the others. Above 1×: ours is faster than "
        "the fastest SDPA backend. Kernels: the chapter's kernels that ran, forward and backward (ch. 5 and ch. 10: "
        f"the readable fallbacks).{below} The full tables, every row, are in the notes below.")


def prefill_table(result: dict) -> str:
    """Prefill TFLOP/s per model, dtype and length: ours (and the path it took), every SDPA backend, ours / fastest."""
    body = [[r["model"], r["dtype"], f"{r['N']:,}", r["batch"], SHORT[r["path"]], r["ours"], r["sdpa_cudnn"],
             r["sdpa_flash"], r["sdpa_efficient"], _times(r["ratio"])] for r in _rows(result, "prefill")]
    return render.table(["model", "dtype", "N", "B", "path", "ours", "cuDNN", "FA2", "mem-eff.", "ours / fastest"],
                        body) + (
        "\n\nCausal forward TFLOP/s (4·B·H·N²·D / 2 over the time of one call). Path: the kernel ours ran, Gluon "
        "(chapter 9), Triton (chapter 7) or chapter 5's kernel as a fallback; — means the backend refused these "
        "inputs or ran out of memory.")


def training_table(result: dict) -> str:
    """Training-step TFLOP/s (forward and backward) per model, dtype and length, with the paths ours took."""
    body = [[r["model"], r["dtype"], f"{r['N']:,}", r["batch"], SHORT[r["forward_path"]], SHORT[r["backward_path"]],
             r["ours"], r["sdpa_cudnn"], r["sdpa_flash"], r["sdpa_efficient"], _times(r["ratio"])]
            for r in _rows(result, "training")]
    return render.table(["model", "dtype", "N", "B", "forward", "backward", "ours", "cuDNN", "FA2", "mem-eff.",
                         "ours / fastest"], body) + (
        "\n\nForward and backward TFLOP/s (3.5 times the causal forward's FLOPs over the step's time). The backward "
        "is chapter 11's (Gluon or Triton) or, as a fallback, chapter 10's; — means the backend refused these inputs "
        "or ran out of memory.")


def targets(result: dict) -> str:
    """The target (at least 1.0× the fastest SDPA backend from N = 2,048 on, on the fast paths), checked row by row;
    then every row that fell back, with the reason and its ratio."""
    rows = result["rows"]
    counted = [r for r in rows if r["fast"] and r["N"] >= TARGET_FROM and r["ratio"] is not None]
    misses = [r for r in counted if r["ratio"] < TARGET_RATIO]
    kind = "success" if counted and not misses else "warning"
    lines = [f'!!! {kind} "Target: at least {TARGET_RATIO:.1f}× the fastest SDPA backend from N = {TARGET_FROM:,} on, '
             f'on the fast paths"']
    parts = []
    for name, label in (("prefill", "Prefill"), ("training", "training step")):
        chosen = [r for r in counted if r["kind"] == name]
        met = sum(r["ratio"] >= TARGET_RATIO for r in chosen)
        parts.append(f"{label}: met in {met} of {len(chosen)} rows")
    lines.append(f"    {'; '.join(parts)}.")
    if misses:
        table = render.table(["", "model", "dtype", "N", "path", "ours / fastest SDPA", "fastest SDPA"],
                             [[r["kind"], r["model"], r["dtype"], f"{r['N']:,}", r["path"], f"{r['ratio']:.3f}×",
                               PEER_NAMES[r["best_peer"]]] for r in misses])
        lines += ["", f"    Below {TARGET_RATIO:.1f}×:", ""] + ["    " + line for line in table.splitlines()] + [""]
    alone = [r for r in rows if r["fast"] and r["N"] >= TARGET_FROM and r["ratio"] is None]
    if alone:
        lines.append("    No SDPA backend ran, so nothing to compare: " + "; ".join(
            f"{r['kind']} {_label(r)}" for r in alone) + ".")
    short = [r for r in rows if r["fast"] and r["N"] < TARGET_FROM and r["ratio"] is not None]
    if short:
        low = min(short, key=lambda r: r["ratio"])
        lines.append(f"    Below N = {TARGET_FROM:,} (not a target) the lowest ratio on a fast path is "
                     f"{low['ratio']:.3f}× ({low['kind']} {_label(low)}).")
    fallen = [r for r in rows if not r["fast"]]
    if fallen:
        by_reason: dict[tuple[str, str], list[dict]] = {}
        for r in fallen:
            by_reason.setdefault((r["kind"], r["fallback"]), []).append(r)
        lines += ["", '!!! note "Rows that fall back, and why"',
                  f"    {len(fallen)} rows leave the fast paths; ours / the fastest SDPA backend in each:", ""]
        for (kind, reason), group in by_reason.items():
            ratios = "; ".join(f"{_label(r)}: " + ("no SDPA backend ran" if r["ratio"] is None else
                                                   f"{r['ratio']:.3f}×") for r in group)
            lines.append(f"    - {kind.capitalize()}, {_fallback_text(kind, reason)}. {ratios}.")
    return "\n".join(lines)


def _fallback_text(kind: str, reason: str) -> str:
    """Which kernels ran instead of the fast paths, and why (from a row's fallback field)."""
    if kind == "prefill":
        return f"forward by {READABLE_FORWARD}: {reason}"
    part, _, why = reason.partition(": ")
    if part == "backward":
        return f"backward by {READABLE_BACKWARD}: {why}"
    return f"forward by {READABLE_FORWARD} and backward by {READABLE_BACKWARD}: {why}"


def sharing(result: dict) -> str:
    """What grouped-query attention saves: ours on shared K/V heads against ours on K and V repeated to every query
    head (the repeat timed with the call), per grouped prefill row, and the memory the K/V tensors take either way."""
    rows = [r for r in _rows(result, "prefill") if r["kv_heads"] < r["heads"]]
    if not rows:
        return "No grouped model was measured."
    body = []
    for r in rows:
        group = r["heads"] // r["kv_heads"]
        kv_mib = 2 * r["batch"] * r["kv_heads"] * r["N"] * r["head_dim"] * 2 / 2**20  # K and V, 2 bytes an element
        body.append([r["model"], f"{r['heads']}/{r['kv_heads']}", r["dtype"], f"{r['N']:,}", r["ours"],
                     r["repeated_kv"], _times(r["sharing"]), f"{kv_mib:,.0f} / {kv_mib * group:,.0f}"])
    table = render.table(["model", "heads (Q/KV)", "dtype", "N", "shared", "repeated", "shared / repeated",
                          "K and V, MiB (shared / repeated)"], body)
    ranges = []
    for model in dict.fromkeys(r["model"] for r in rows):
        ratios = [r["sharing"] for r in rows if r["model"] == model and r["sharing"] is not None]
        if ratios:
            ranges.append(f"{model} {min(ratios):.3f}× to {max(ratios):.3f}×")
    return table + (
        "\n\nPrefill TFLOP/s of ours, both counted with the same FLOPs; the repeated column includes the "
        "repeat_interleave that copies K and V to every query head. Shared over repeated: "
        + ("; ".join(ranges) if ranges else "not measured") + ".")


def checks(result: dict) -> str:
    """The largest relative error against float64 per implementation, kind and dtype, over every row where it ran:
    the output for the prefill, dQ, dK and dV for the training step."""
    names = {"ours": "ours", **PEER_NAMES, "repeated_kv": "ours, K/V repeated"}
    body = []
    for kind, key, bounds in (("prefill", "err", FORWARD_RTOL), ("training", "grad_err", GRAD_RTOL)):
        for dtype in DTYPES:
            rows = [r for r in _rows(result, kind) if r["dtype"] == dtype]
            if not rows:
                continue
            worst = [max((r[f"{n}_{key}"] for r in rows if r.get(f"{n}_{key}") is not None), default=None)
                     for n in names]
            body.append([kind, dtype, *[None if w is None else f"{w:.1e}" for w in worst], f"{bounds[dtype]:.1e}"])
    return render.table(["kind", "dtype", *names.values(), "allowed"], body) + (
        "\n\nChecked before timing, on two slices of each row (the first and the last K/V head with their query "
        "heads); a backend out of bounds is not timed.")


BENCHMARK = Benchmark(
    name="real_models",
    chapter="ch11",
    title="Real models' attention shapes: prefill and a training step against every SDPA backend",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_backward.py", "kernels/flash_attention_fast.py",
             "kernels/flash_attention_hopper.py", "kernels/hopper_schedule.py",
             "kernels/flash_attention_backward_fast.py", "kernels/flash_attention_backward_hopper.py",
             "book/bench/backward.py", "book/bench/real_models.py"],
    run=run,
    views={"glance": glance, "prefill-table": prefill_table, "training-table": training_table, "targets": targets,
           "sharing": sharing, "checks": checks},
    awaiting_gpu="issue 51: the real models' shapes' first GPU run",
)
