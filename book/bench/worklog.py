"""The worklog of chapters 7 (Triton steps) and 9 (Gluon steps): one change per step, to the fast kernel.

Every step is timed in the same run, on the same inputs, next to the SDPA backends and a cuBLAS matmul,
so each row can say what share of the fastest peer and of the matmul throughput it reaches. The
prediction of each step was written down before the step was first measured; the page prints it next
to the measured result.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from book import render
from book.bench.flash_attention import BACKENDS, HEADS, TOKENS, _sdpa
from book.bench.registry import Benchmark, Progress
from book.bench.timing import gpu_ms_interleaved, tflops

N = 4096
SHAPES = [(d, causal) for d in (64, 128) for causal in (False, True)]
MATMUL_N = 8192
BUDGET_MS = 6000  # GPU time to spend per column, over all its steps and peers


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    change: str
    prediction: str
    switches: dict[str, bool] | None = None  # None: chapter 5's readable kernel
    pinned: tuple[int, int, int, int] | None = None  # (BLOCK_M, BLOCK_N, warps, stages); None: autotuned
    kept: bool = True  # False: tried, measured, and left out of the final kernel
    gluon: dict[str, bool | int] | None = None  # the Gluon kernel (kernels/flash_attention_hopper.py), these settings


_OFF = {"SPLIT_DIAGONAL": False, "USE_TMA": False, "LONGEST_FIRST": False, "FUSED_SCALE": False,
        "LAZY_RESCALE": False, "WARP_SPECIALIZE": False, "OVERLAP": False}
_KEPT = {**_OFF, "SPLIT_DIAGONAL": True, "USE_TMA": True, "LONGEST_FIRST": True, "FUSED_SCALE": True}

STEPS = [
    Step("readable", "Chapter 5's kernel", "The readable kernel as chapter 5 ships it: masks on every load, "
         "head dim padded to a power of two, its own autotuned tiles.",
         "The starting point."),
    Step("specialize", "Specialize the shapes", "A second kernel that takes only head dim 64 or 128 and lengths "
         "that are a multiple of 128, so no load needs a mask and the head dim needs no padding; same algorithm "
         "(exp2, chapter 6's causal split), one fixed tile: 128 x 64, 4 warps, 2 stages.",
         "Small: masks cost a compare and a select per element loaded, next to a 64-wide dot product. "
         "A few percent at most, maybe nothing.", {**_OFF, "SPLIT_DIAGONAL": True}, pinned=(128, 64, 4, 2)),
    Step("autotune", "Autotune tiles, warps, stages", "Let Triton time five tile shapes, warp counts and "
         "pipeline depths per problem and keep the fastest.",
         "Up to 10-20% on some shapes: the best tile depends on the head dim (registers) and on causal "
         "(how many tiles are on the diagonal).", {**_OFF, "SPLIT_DIAGONAL": True}),
    Step("tma", "Load tiles through TMA", "Tensor descriptors instead of pointer arithmetic: Hopper's copy engine "
         "fetches whole tiles into shared memory, and no thread computes addresses.",
         "5-10%, more at head dim 128 where tiles are larger: fewer instructions per loop and loads that no "
         "longer compete with the softmax for issue slots.", {**_OFF, "SPLIT_DIAGONAL": True, "USE_TMA": True}),
    Step("longest", "Longest programs first (causal)", "Causal only: launch the Q tiles with the most keys "
         "first, so the grid does not end with a few long programs running alone.",
         "Small, a few percent at short N where there are few waves; nothing at long N.",
         {**_OFF, "SPLIT_DIAGONAL": True, "USE_TMA": True, "LONGEST_FIRST": True}),
    Step("fused", "Scale and subtract in one FMA", "Compute 2^(s * scale - m) with one fused multiply-add per "
         "score instead of a multiply and a subtract.",
         "A few percent: the softmax is not the bottleneck of the tensor cores, but it is on the critical "
         "path between the two matmuls of a tile.", _KEPT),
    Step("nosplit", "Without chapter 6's split (ablation)", "Causal only: turn the split off again, so every "
         "tile up to the diagonal builds a mask, to measure what chapter 6's change is worth here.",
         "Causal slower by the share of time the mask takes, perhaps 10-30%; non-causal unchanged.",
         {**_KEPT, "SPLIT_DIAGONAL": False}, kept=False),
    Step("lazy", "Lazy rescaling (tried)", "Rescale the accumulator only when some row's max grew by more than "
         "8 in log2 units, a factor of 2^8 in the exponentials (a trick from FlashAttention-4).",
         "Fewer multiplies on the 128-wide accumulator, maybe 5%, if the branch is cheap.",
         {**_KEPT, "LAZY_RESCALE": True}, kept=False),
    Step("overlap", "Overlap QKᵀ with the softmax by hand (tried)", "Start the next tile's scores on the tensor "
         "cores before the current tile's softmax, as FlashAttention-3 does inside each warpgroup (its "
         "intra-warpgroup pipelining).",
         "Up to 10-20% if the compiler keeps both score tiles in registers and lets the dot run async.",
         {**_KEPT, "OVERLAP": True}, kept=False),
    Step("warpspec", "Warp specialization (tried)", "tl.range(..., warp_specialize=True): producer warps load, "
         "consumer warps compute. Tried on the 128 x 64 tile with 4 warps (every tile shape failed the same way in "
         "earlier probes).",
         "The largest possible gain, 10-20%, if the compiler supports it for this loop on Hopper.",
         {**_KEPT, "WARP_SPECIALIZE": True}, pinned=(128, 64, 4, 2), kept=False),
    Step("gluon", "Rewrite in Gluon: roles and overlap", "The same algorithm in Gluon, Triton's lower-level "
         "language, which lets us write the schedule Triton would not: one warp only copies K and V tiles "
         "(TMA, two slots), two warpgroups only compute, each on 64 of the 128 query rows, with registers "
         "moved from the copying warp to them; inside each warpgroup the scores of the next tile and the "
         "P V product of this one run on the tensor cores while the softmax runs beside them.",
         "10-15% at head dim 128, where the exponentials can hide behind a 128-wide product; less at 64, "
         "where the products are half as long and the exponentials are as many.",
         {}, gluon={"schedule": "one_per_item", "warpgroups": 2}),
    Step("pingpong", "Ping-pong between warpgroups (tried)", "The two computing warpgroups take turns to start "
         "their products, so that one warpgroup's softmax runs while the other's products do "
         "(FlashAttention-3's ping-pong schedule), enforced with a pair of mbarriers.",
         "A few percent at head dim 128, if the warpgroups did not already fall into that rhythm on their own.",
         {}, gluon={"schedule": "one_per_item", "pingpong": True, "warpgroups": 2}, kept=False),
    Step("persistent", "Persistent grid", "Launch one program per SM instead of one per 128 query rows. Each "
         "program walks through its share of the work items, in pairs (a head's last query block with its "
         "first, and so on, so every pair holds about the same causal work). The copying warp fetches the next "
         "item's Q and first K/V tiles while the warpgroups finish the current one, and the output leaves "
         "through a buffer of its own, so the next item does not wait for the store.",
         "1-2% at N = 4096 non-causal, where a program runs 32 tiles and its start and end are a small part "
         "of that; more on causal shapes and short sequences, where a program has fewer tiles to spread that "
         "cost over.",
         {}, gluon={"schedule": "in_pairs", "warpgroups": 2}),
    Step("poly_exp2", "Exponentials on the FMA units (tried)", "Compute one of every four exponentials of P "
         "with a degree-3 polynomial on the FMA units (2^x = 2^floor(x) * 2^frac(x), the power of two added "
         "straight into the float's exponent bits), as FlashAttention-4 does on Blackwell, instead of on the "
         "special-function units.",
         "Up to 5-10% at head dim 64, if the special-function units are what the overlap waits for there; "
         "nothing or a small loss at head dim 128, where they have time to spare.",
         {}, gluon={"schedule": "in_pairs", "exp2_on_fma": 1, "warpgroups": 2}, kept=False),
    Step("warpgroups", "Three computing warpgroups at head dim 64", "At head dim 64, three computing "
         "warpgroups instead of two: each program takes 192 query rows, and each K/V tile copied serves three "
         "warpgroups. The registers allow it only there (160 per thread). The wrapper picks three where they "
         "paid off in our probes: non-causal N >= 2048 and causal N >= 4096; at N = 4096 that is both head dim 64 "
         "columns, so the head dim 128 columns repeat the persistent step.",
         "Up to 10% at head dim 64: a third warpgroup's softmax can run while the other two wait for their "
         "products, as in FlashAttention-3's 192-row tiles at head dim 64. No change elsewhere.",
         {}, gluon={"schedule": "in_pairs"}),
    Step("balanced", "Balance the last round", "The pairs of the persistent grid do not divide evenly among "
         "the 132 programs, so in the last round some programs take one pair more while the others wait. Now "
         "the host deals the pairs round by round except the last full round; that round and the partial one "
         "it splits into single items and hands them out longest first, each to the program with the least work "
         "so far (by a cost model of the items). The kernel reads each program's list from a small table in GPU "
         "memory.",
         "From the cost model, the busiest program's work over the mean drops from 1.047 to 1.020 (head dim 64), "
         "1.062 to 1.008 (64 causal) and 1.031 to 1.005 (128 causal): 2-5% faster there, no change at head dim "
         "128 non-causal, where the items are all equal and do not divide evenly either way.",
         {}, gluon={}),
]

GLUON_FROM = next(i for i, step in enumerate(STEPS) if step.gluon is not None)  # chapter 9 starts here
PARTS = {"triton": range(GLUON_FROM), "gluon": range(GLUON_FROM, len(STEPS))}  # steps shown in chapters 7 and 9


def run(progress: Progress) -> list[dict]:
    import torch

    rows = []
    a, b = (torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.float16) for _ in range(2))
    for d, causal in SHAPES:
        rows += _measure_shape(d, causal, lambda: a @ b, progress)
    return rows


def _measure_shape(d: int, causal: bool, matmul, progress: Progress) -> list[dict]:
    import torch

    from kernels import flash_attention as readable
    from kernels import flash_attention_fast as fast
    from kernels import flash_attention_hopper as hopper

    heads, batch = HEADS[d], TOKENS // N
    q, k, v = (torch.randn(batch, heads, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
    flops = 4 * batch * heads * N * N * d * (0.5 if causal else 1.0)
    expected = _sdpa("FLASH_ATTENTION", q, k, v, causal)()
    peers = {name: _sdpa(backend, q, k, v, causal) for name, backend in BACKENDS.items()}
    peers = {name: fn for name, fn in peers.items() if _runs(fn)}  # the backends that take these inputs

    # First call of each step: compile, autotune, check the result. A step that fails is a result too.
    fns, rows = {}, {}
    for step in STEPS:
        if step.switches is None:
            fn = lambda: readable.attention(q, k, v, causal=causal)  # noqa: E731
        elif step.gluon is not None:
            fn = lambda step=step: hopper.attention(q, k, v, causal=causal, sm_scale=d**-0.5,  # noqa: E731
                                                    return_lse=False, **step.gluon)
        else:
            cfg = fast.config(*step.pinned) if step.pinned else None
            fn = lambda step=step, cfg=cfg: fast.attention(q, k, v, causal=causal, gluon=False,  # noqa: E731
                                                            config=cfg, **step.switches)
        rows[step.key] = {"step": step.key, "head_dim": d, "causal": causal, "N": N, "tflops": None, "error": None}
        try:
            err = ((fn().float() - expected.float()).abs().max()).item()
            if not err < 2e-2:
                raise AssertionError(f"wrong result: max abs difference {err:.3g} from SDPA")
            fns[step.key] = fn
        except Exception as error:  # noqa: BLE001
            rows[step.key]["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
    # Then the steps, the peers and the matmul are timed together, their calls taken in turns, so that the
    # clock, which the GPU's power limit moves during the run, is the same for every one of them.
    matmul()
    times = gpu_ms_interleaved({**fns, **peers, "matmul": matmul}, budget_ms=BUDGET_MS)
    timed_peers = {name: tflops(flops, times.get(name)) for name in BACKENDS}
    best_peer = max((value for value in timed_peers.values() if value is not None), default=None)
    matmul_tflops = tflops(2 * MATMUL_N**3, times["matmul"])
    progress(f"d={d} causal={causal}: cuBLAS fp16 matmul {MATMUL_N}^3 {matmul_tflops:.0f} TFLOP/s")
    for step in STEPS:
        row = rows[step.key]
        row.update(timed_peers, matmul_tflops=matmul_tflops, tflops=tflops(flops, times.get(step.key)))
        row["share_of_best_peer"] = None if row["tflops"] is None or not best_peer else row["tflops"] / best_peer
        row["share_of_matmul"] = None if row["tflops"] is None else row["tflops"] / matmul_tflops
        shown = f"{row['tflops']:.0f} TFLOP/s" if row["tflops"] else row["error"]
        progress(f"d={d} causal={causal} {step.key:>10}: {shown}")
    return list(rows.values())


def _runs(fn) -> bool:
    """False when a peer refuses these inputs ("No available kernel" from a pinned SDPA backend) or runs out of
    memory."""
    import torch

    try:
        fn()
        torch.cuda.synchronize()
        return True
    except RuntimeError:  # torch.OutOfMemoryError is one too
        torch.cuda.empty_cache()
        return False


# --- views -------------------------------------------------------------------------------------------------

def _cell(row: dict) -> str:
    if row["tflops"] is None:
        return "did not run"
    return f"{row['tflops']:.0f} ({row['share_of_best_peer']:.2f}×)"


def _shape_label(d: int, causal: bool) -> str:
    return f"D={d} {'causal' if causal else 'non-causal'}"


def steps_table(result: dict, shown: range = range(len(STEPS))) -> str:
    """One row per step (the `shown` ones; a part that starts after step 0 begins with the last step kept
    before it, as its baseline): TFLOP/s per shape with the share of the fastest SDPA backend, then the peers."""
    by = {(r["step"], r["head_dim"], r["causal"]): r for r in result["rows"]}
    headers = ["#", "step", *(_shape_label(d, c) for d, c in SHAPES)]
    rows = []
    baseline = [i for i in range(shown.start) if STEPS[i].kept][-1:]
    for i in [*baseline, *shown]:
        step = STEPS[i]
        label = step.title if step.kept else f"*{step.title}*"
        rows.append([i, label, *(_cell(by[(step.key, d, c)]) if (step.key, d, c) in by else "—" for d, c in SHAPES)])
    first = [r for r in result["rows"] if r["step"] == STEPS[0].key]
    for name, key in (("SDPA cuDNN", "sdpa_cudnn"), ("SDPA FlashAttention-2", "sdpa_flash"),
                      ("SDPA memory-efficient", "sdpa_efficient")):
        cells = []
        for d, c in SHAPES:
            row = next((r for r in first if r["head_dim"] == d and r["causal"] == c), None)
            cells.append("—" if row is None or row[key] is None else f"{row[key]:.0f}")
        rows.append(["", name, *cells])
    note = (f"\n\nTFLOP/s at N = {N}, fp16, {TOKENS} tokens per batch; in brackets the share of the fastest SDPA "
            "backend measured in the same run. Steps in italics were tried and left out of the final kernel.")
    return render.table(headers, rows) + note


def matmul_share(result: dict) -> str:
    """The kept kernel's share of the cuBLAS matmul throughput measured in the same run."""
    rows = [r for r in result["rows"] if r["step"] == _last_kept().key and r["tflops"] is not None]
    if not rows:
        return "The final step did not run."
    matmuls = [r["matmul_tflops"] for r in rows]
    parts = [f"{_shape_label(r['head_dim'], r['causal'])}: {r['share_of_matmul']:.0%}" for r in rows]
    return (f"cuBLAS reached {min(matmuls):.0f}–{max(matmuls):.0f} TFLOP/s on an fp16 {MATMUL_N}³ matmul in this "
            "run, timed in turns with each column's steps. The final kernel reaches this share of the matmul "
            f"timed beside it: {', '.join(parts)}.")


def step_deltas(result: dict, shown: range = range(len(STEPS))) -> str:
    """For each step (the `shown` ones), the measured change against the step before it (against the last
    kept step for steps that were tried and dropped)."""
    by = {(r["step"], r["head_dim"], r["causal"]): r for r in result["rows"]}
    lines = []
    base = STEPS[0]
    for i, step in enumerate(STEPS[1:], start=1):
        parts = []
        for d, c in SHAPES:
            now, before = by.get((step.key, d, c)), by.get((base.key, d, c))
            if now is None or now["tflops"] is None:
                parts.append(f"{_shape_label(d, c)}: did not run")
            elif before is None or before["tflops"] is None:
                parts.append(f"{_shape_label(d, c)}: {now['tflops']:.0f} TFLOP/s")
            else:
                parts.append(f"{_shape_label(d, c)} {now['tflops'] / before['tflops'] - 1:+.0%}")
        errors = {by[(step.key, d, c)]["error"] for d, c in SHAPES if (step.key, d, c) in by} - {None}
        why = f" Error: `{sorted(errors)[0]}`." if errors else ""
        if i in shown:
            lines.append(f"- **{step.title}** (against *{base.title}*): {'; '.join(parts)}.{why}")
        if step.kept:
            base = step
    return "\n".join(lines)


def predictions(result: dict, shown: range = range(len(STEPS)), changes: bool = True) -> str:
    """Each step's change (the `shown` steps; left out when `changes` is false, for a page whose prose says it)
    and the prediction written before it was measured."""
    del result
    return "\n".join(f"- **{i}. {STEPS[i].title}.** {STEPS[i].change + ' ' if changes else ''}"  # i as in the table
                     f"*Prediction:* {STEPS[i].prediction}" for i in shown)


def steps_plot(result: dict):
    by = {(r["step"], r["head_dim"], r["causal"]): r for r in result["rows"]}
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = list(range(len(STEPS)))
    for d, c in SHAPES:
        ys = [by.get((s.key, d, c), {}).get("tflops") for s in STEPS]
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", markersize=4, label=_shape_label(d, c))
    ax.set_xticks(xs, [s.key for s in STEPS], rotation=30, ha="right")
    ax.set_xlabel("worklog step")
    ax.set_ylabel("TFLOP/s (fp16, N = 4096)")
    ax.set_title("TFLOP/s after each step (dropped steps included)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _last_kept() -> Step:
    return [s for s in STEPS if s.kept][-1]


BENCHMARK = Benchmark(
    name="worklog",
    chapter="ch07",
    title="Chapters 7 and 9 worklog: one change per step",
    sources=["kernels/flash_attention.py", "kernels/flash_attention_fast.py", "kernels/flash_attention_hopper.py",
             "kernels/hopper_schedule.py",
             "book/bench/worklog.py"],
    run=run,
    views={"table": steps_table, "plot": steps_plot, "deltas": step_deltas, "predictions": predictions,
           "matmul-share": matmul_share,
           **{f"{view}-{part}": partial(fn, shown=shown) for part, shown in PARTS.items()
              for view, fn in (("table", steps_table), ("deltas", step_deltas),
                               ("predictions", partial(predictions, changes=False)))}},
)
