"""The fast kernel of chapters 7 and 9: correct on every benchmarked shape (GPU), a tested fallback elsewhere."""

import math
import warnings

import pytest
import torch
from triton.runtime.errors import OutOfResources

from kernels import flash_attention as readable
from kernels import flash_attention_fast as fast
from kernels import flash_attention_hopper as hopper

from .conftest import HAS_CUDA

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def reference(q, k, v, causal):
    """float64 attention, one head at a time so long sequences fit."""
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    scale = 1.0 / math.sqrt(q.shape[-1])
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h].double() @ k[b, h].double().T) * scale
            if causal:
                n_q, n_k = s.shape
                visible = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
                s = s.masked_fill(~visible, float("-inf"))
            out[b, h] = torch.softmax(s, dim=-1) @ v[b, h].double()
    return out


def rel_error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def poisoned_call(fn, like):
    """Run fn right after freeing a NaN-filled block of the output's size, so the caching allocator hands
    the kernel poisoned memory: an element the kernel forgets to write stays NaN."""
    torch.full_like(like, float("nan"))
    return fn()


def make_qkv(batch, heads, n, d, dtype, device, generator):
    return [torch.randn(batch, heads, n, d, generator=generator, dtype=torch.float32).to(device, dtype)
            for _ in range(3)]


# --- everywhere: validation and the fallback ------------------------------------------------------------

def test_bad_input_gets_chapter_5_message(device):
    q = torch.randn(1, 2, 16, 64, device=device, dtype=torch.float16)
    with pytest.raises(ValueError, match="head_dim must be between"):
        fast.attention(q[..., :8], q[..., :8], q[..., :8])
    with pytest.raises(TypeError, match="one dtype"):
        fast.attention(q, q.float(), q)


def test_unknown_switch_is_an_error(device):
    q = torch.randn(1, 1, 16, 64, device=device, dtype=torch.float16)
    with pytest.raises(TypeError, match="unknown feature switches"):
        fast.attention(q, q, q, USE_TMAA=True)


@pytest.mark.parametrize("causal", [False, True])
def test_fallback_says_why_and_is_correct(device, rng, causal):
    # Head dim 96 is off the fast path (and on a CPU the interpreter is the reason): chapter 5's kernel runs.
    q, k, v = make_qkv(1, 2, 40, 96, torch.float16, device, rng)
    with pytest.warns(fast.FallbackWarning, match="falling back to chapter 5's kernel"):
        out = fast.attention(q, k, v, causal=causal)
    assert rel_error(out, reference(q, k, v, causal)) < TOLERANCE[torch.float16]


def test_gluon_cannot_take_triton_switches(device):
    q = torch.randn(1, 1, 16, 64, device=device, dtype=torch.float16)
    with pytest.raises(TypeError, match="cannot go with gluon=True"):
        fast.attention(q, q, q, gluon=True, USE_TMA=False)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_scale_is_an_error_on_every_path(device, scale):
    q = torch.randn(1, 1, 128, 64, device=device, dtype=torch.float16)
    with pytest.raises(ValueError, match="sm_scale must be a positive finite number"):
        fast.attention(q, q, q, sm_scale=scale)


def test_three_warpgroups_only_at_head_dim_64_on_long_sequences():
    assert hopper.warpgroups_for(64, 2048, causal=False) == 3 and hopper.warpgroups_for(64, 1024, causal=False) == 2
    assert hopper.warpgroups_for(64, 4096, causal=True) == 3 and hopper.warpgroups_for(64, 2048, causal=True) == 2
    assert hopper.warpgroups_for(128, 16384, causal=False) == 2


@pytest.mark.parametrize(("d", "warpgroups"), [(128, 3), (64, 4), (64, 1)])
def test_gluon_warpgroups_must_fit_the_registers(device, d, warpgroups):
    q = torch.randn(1, 1, 128, d, device=device, dtype=torch.float16)
    message = f"warpgroups must be 2, or 3 at head dim 64 .*got {warpgroups} at head dim {d}"
    with pytest.raises(ValueError, match=message):
        hopper.attention(q, q, q, causal=False, sm_scale=0.125, return_lse=False, warpgroups=warpgroups)


@pytest.mark.parametrize("value", [3, -1])
def test_gluon_exponential_switch_takes_0_1_or_2(device, value):
    q = torch.randn(1, 1, 128, 64, device=device, dtype=torch.float16)
    with pytest.raises(ValueError, match=f"exp2_on_fma must be 0, 1 or 2 .*, got {value}"):
        hopper.attention(q, q, q, causal=False, sm_scale=0.125, return_lse=False, exp2_on_fma=value)


def test_gluon_schedule_must_be_known(device):
    q = torch.randn(1, 1, 128, 64, device=device, dtype=torch.float16)
    with pytest.raises(ValueError, match="schedule must be one of one_per_item, in_pairs, balanced; got 'pairs'"):
        hopper.attention(q, q, q, causal=False, sm_scale=0.125, return_lse=False, schedule="pairs")


def test_fallback_reason_names_the_interpreter():
    if HAS_CUDA:
        pytest.skip("the interpreter is only used without a GPU")
    q = torch.randn(1, 1, 128, 64, dtype=torch.float16)
    assert "interpreter" in fast.fallback_reason(q, q, q)


# --- GPU: every benchmarked configuration and every worklog step ------------------------------------

BENCH_SHAPES = [(n, d) for n in (1024, 2048, 4096, 8192, 16384) for d in (64, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n", "d"), BENCH_SHAPES)
def test_fast_path_matches_float64(rng, n, d, causal, dtype):
    heads = 32 if d == 64 else 16
    batch = 16384 // n
    q, k, v = make_qkv(batch, heads, n, d, dtype, "cuda", rng)
    assert fast.fallback_reason(q, k, v) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", fast.FallbackWarning)  # this shape must take the fast path
        out, lse = poisoned_call(lambda: fast.attention(q, k, v, causal=causal, return_lse=True), q)
    assert not out.isnan().any(), "some output element was never written"
    # Check two (batch, head) pairs against float64: the full reference at 16K tokens is slow.
    for b, h in ((0, 0), (batch - 1, heads - 1)):
        sl = (slice(b, b + 1), slice(h, h + 1))
        ref = reference(q[sl], k[sl], v[sl], causal)
        assert rel_error(out[sl], ref) < TOLERANCE[dtype]
        s = (q[sl].double() @ k[sl].double().transpose(-1, -2)) / math.sqrt(d)
        if causal:
            s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device="cuda").tril(), float("-inf"))
        torch.testing.assert_close(lse[sl].double(), torch.logsumexp(s, dim=-1), rtol=0, atol=1e-3)


STEPS = [
    {"SPLIT_DIAGONAL": False, "USE_TMA": False, "LONGEST_FIRST": False, "FUSED_SCALE": False},
    {"SPLIT_DIAGONAL": True, "USE_TMA": False, "LONGEST_FIRST": False, "FUSED_SCALE": False},
    {"USE_TMA": False},
    {"SPLIT_DIAGONAL": False},
    {"LAZY_RESCALE": True},
    {"OVERLAP": True},
    {},
]


@pytest.mark.gpu
@pytest.mark.parametrize("switches", STEPS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "best")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_every_worklog_step_is_correct(rng, switches, causal, d):
    q, k, v = make_qkv(2, 4, 1024, d, torch.float16, "cuda", rng)
    q[0, 0, 5] *= 60.0  # a row with very large logits: the running max jumps, and must stay finite
    ref = reference(q, k, v, causal)
    # The configurations the autotuner would try for this head dim and mask (it drops the ones that spill).
    # Like the autotuner, skip one that needs more shared memory than the GPU has (the OVERLAP step holds
    # two K tiles at once), but at least one configuration must run.
    ran = 0
    for cfg in fast._prune(fast.CONFIGS, {"HEAD_DIM": d, "CAUSAL": causal}):
        try:
            out = poisoned_call(lambda cfg=cfg: fast.attention(q, k, v, causal=causal, config=cfg, **switches), q)
        except OutOfResources:
            continue
        assert torch.isfinite(out).all(), fast.describe(cfg)
        assert rel_error(out, ref) < TOLERANCE[torch.float16], fast.describe(cfg)
        ran += 1
    assert ran, "no configuration fits on this GPU"


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "dtype"), [(96, torch.bfloat16), (64, torch.float32)])
def test_odd_inputs_fall_back_correctly(rng, d, dtype):
    q, k, v = (torch.randn(2, 3, 512, d, generator=rng).to("cuda", dtype) for _ in range(3))
    with pytest.warns(fast.FallbackWarning):
        out = fast.attention(q, k, v)
    expected = readable.attention(q, k, v)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert rel_error(out, reference(q, k, v, causal=False)) < TOLERANCE.get(dtype, 1e-5) * 2


def reference_any(q, k, v, causal, alignment):
    """float64 attention with grouped K/V heads and either causal alignment; rows that see no key give 0."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
    s = (q.double() @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    n_q, n_k = s.shape[-2:]
    if causal:
        offset = 0 if alignment == "top-left" else n_k - n_q
        hidden = torch.arange(n_k, device=q.device)[None, :] > torch.arange(n_q, device=q.device)[:, None] + offset
        s = s.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0) @ v, lse


# Real models' shapes: grouped K/V heads (Llama 3: 32/8, Qwen2.5: 28/4, a sharded 70B: 8/1), lengths that are not
# a multiple of 128, and chunked prefill (fewer queries than keys, bottom-right).
ANY_SHAPES = [  # (heads, kv_heads, n_q, n_k, causal, alignment)
    (4, 1, 1000, 1000, True, "top-left"),
    (8, 2, 3000, 3000, False, "top-left"),
    (7, 1, 255, 255, True, "top-left"),
    (4, 4, 129, 129, True, "top-left"),
    (4, 2, 300, 2000, True, "bottom-right"),
    (4, 2, 2000, 300, True, "bottom-right"),
    (4, 4, 1, 777, True, "bottom-right"),
    (6, 3, 640, 384, False, "top-left"),
    (4, 1, 1024, 1024, True, "top-left"),
    (32, 8, 512, 512, False, "top-left"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("gluon", [None, False], ids=["default", "triton"])
@pytest.mark.parametrize(("heads", "kv_heads", "n_q", "n_k", "causal", "alignment"), ANY_SHAPES)
def test_fast_path_takes_any_length_and_grouped_heads(rng, heads, kv_heads, n_q, n_k, causal, alignment, gluon, d,
                                                      dtype):
    q = torch.randn(2, heads, n_q, d, generator=rng).to("cuda", dtype)
    k, v = (torch.randn(2, kv_heads, n_k, d, generator=rng).to("cuda", dtype) for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fast.FallbackWarning)  # these shapes must take the fast path
        out, lse = poisoned_call(lambda: fast.attention(q, k, v, causal=causal, causal_alignment=alignment,
                                                        return_lse=True, gluon=gluon), q)
    ref, ref_lse = reference_any(q, k, v, causal, alignment)
    assert not out.isnan().any(), "some output element was never written"
    assert rel_error(out, ref) < TOLERANCE[dtype]
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~seen), "lse must be -inf exactly for rows that see no key"
    torch.testing.assert_close(lse[seen].double(), ref_lse[seen], rtol=0, atol=1e-3)


# --- GPU: the Gluon kernel (the worklog's last step) -----------------------------------------------------

needs_hopper = pytest.mark.skipif(not HAS_CUDA or torch.cuda.get_device_capability()[0] != 9,
                                  reason="the Gluon kernel uses Hopper's wgmma (compute capability 9.0)")
# The Gluon kernel's variants: the final one (at these lengths, two computing warpgroups), three computing
# warpgroups (head dim 64 only), and the worklog's other steps (one program per item, items in pairs,
# ping-pong, exponentials on the FMA units).
SCHEDULES = {"balanced": {}, "three_warpgroups": {"warpgroups": 3}, "in_pairs": {"schedule": "in_pairs"},
             "one_per_item": {"schedule": "one_per_item"},
             "pingpong": {"schedule": "one_per_item", "pingpong": True}, "exp2_on_fma": {"exp2_on_fma": 1}}


@pytest.mark.gpu
@needs_hopper
def test_hopper_fast_path_is_the_gluon_kernel(rng, monkeypatch):
    calls = []
    monkeypatch.setattr(hopper, "attention", lambda *a, **kw: calls.append(kw) or torch.zeros_like(a[0]))
    q, k, v = make_qkv(1, 2, 256, 64, torch.float16, "cuda", rng)
    fast.attention(q, k, v, causal=True)
    assert len(calls) == 1 and calls[0]["causal"] is True
    fast.attention(q, k, v, gluon=False)  # the Triton kernel
    assert len(calls) == 1


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
# One tile, an odd number of tiles, more tiles than stages; with 192-row blocks (three warpgroups) 128 and 640
# end in a partial block, and 384 and 1152 do not.
@pytest.mark.parametrize("n", [128, 384, 640, 1152])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_gluon_kernel_writes_every_element_and_matches_float64(rng, schedule, n, d, causal, dtype):
    if SCHEDULES[schedule].get("warpgroups") == 3 and d != 64:
        pytest.skip("three computing warpgroups run at head dim 64 only")
    q, k, v = make_qkv(2, 3, n, d, dtype, "cuda", rng)
    q[1, 2, n - 1] *= 60.0  # one row with very large logits: its running max jumps, and must stay finite
    out = torch.full_like(q, float("nan"))
    out, lse = hopper.attention(q, k, v, causal=causal, sm_scale=1 / math.sqrt(d), return_lse=True, out=out,
                                **SCHEDULES[schedule])
    assert not out.isnan().any(), "some output element was never written"
    assert rel_error(out, reference(q, k, v, causal)) < TOLERANCE[dtype]
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    if causal:
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, dim=-1), rtol=0, atol=1e-3)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("d", "warpgroups"), [(64, 2), (64, 3), (128, 2)])
@pytest.mark.parametrize("schedule", ["in_pairs", "balanced"])
def test_persistent_programs_take_many_items_and_a_short_last_group(rng, schedule, d, warpgroups, causal):
    # 285 heads x 3 query blocks of 128 rows: 855 items, several pairs per program, and in pairs one program
    # ends on a lone item; the balanced schedule deals the last two rounds out item by item. With blocks of
    # 192 rows, N = 896: 285 heads x 5 blocks, the last one partial (128 rows).
    q, k, v = make_qkv(5, 57, 384 if warpgroups == 2 else 896, d, torch.float16, "cuda", rng)
    out = torch.full_like(q, float("nan"))
    out = hopper.attention(q, k, v, causal=causal, sm_scale=1 / math.sqrt(d), return_lse=False, out=out,
                           warpgroups=warpgroups, schedule=schedule)
    assert not out.isnan().any(), "some output element was never written"
    assert rel_error(out, reference(q, k, v, causal)) < TOLERANCE[torch.float16]


@pytest.mark.gpu
def test_gluon_on_a_gpu_other_than_hopper_is_refused(rng, monkeypatch):
    q, k, v = make_qkv(1, 2, 256, 64, torch.float16, "cuda", rng)
    monkeypatch.setattr(fast, "capability", lambda device: (10, 0))
    with pytest.raises(ValueError, match=r"gluon=True needs a Hopper GPU \(compute capability 9.0\); .* has 10.0"):
        fast.attention(q, k, v, gluon=True)
    # Without gluon=True, such a GPU takes the Triton kernel (on this GPU it still runs, so check it).
    assert rel_error(fast.attention(q, k, v), reference(q, k, v, False)) < TOLERANCE[torch.float16]


@pytest.mark.gpu
@pytest.mark.parametrize("switches", [{"LAZY_RESCALE": True}, {"SPLIT_DIAGONAL": False}, {"OVERLAP": True}])
def test_gpu_worklog_switches_give_empty_rows_zero(rng, switches):
    """More queries than keys, bottom-right: the first 230 rows see no key, on every switch of the Triton kernel."""
    q = torch.randn(1, 2, 300, 64, generator=rng).to("cuda", torch.float16)
    k, v = (torch.randn(1, 2, 70, 64, generator=rng).to("cuda", torch.float16) for _ in range(2))
    out, lse = fast.attention(q, k, v, causal=True, causal_alignment="bottom-right", return_lse=True, **switches)
    ref, ref_lse = reference_any(q, k, v, True, "bottom-right")
    assert not out.isnan().any() and torch.all(out[:, :, :230] == 0)
    assert rel_error(out, ref) < TOLERANCE[torch.float16]
    assert torch.equal(torch.isneginf(lse), ~torch.isfinite(ref_lse))


@pytest.mark.gpu
def test_gpu_no_query_returns_empty(rng):
    q = torch.randn(1, 2, 0, 64).to("cuda", torch.float16)
    k = torch.randn(1, 2, 128, 64, generator=rng).to("cuda", torch.float16)
    out, lse = fast.attention(q, k, k, return_lse=True)
    assert out.shape == q.shape and lse.shape == (1, 2, 0)
