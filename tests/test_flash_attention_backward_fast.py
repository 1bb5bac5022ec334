"""Chapter 11's fast backward against float64 autograd, every switch of the worklog on and off.

Without a GPU the Triton kernels run in Triton's interpreter on small fp16 shapes, one pinned tile shape each. The
@pytest.mark.gpu tests run both half-precision dtypes with the autotuner, longer sequences, poisoned memory, the
final path (the Gluon kernel of steps 8-13) beside the Triton one, and the differentiable fast path against SDPA.
The Gluon kernel's own tests are in tests/test_flash_attention_backward_hopper.py.
"""

import itertools
import warnings

import pytest
import torch

from kernels import flash_attention_backward_fast as fast
from kernels.flash_attention import attention as forward_attention
from kernels.flash_attention_fast import FallbackWarning
from tests.test_flash_attention_backward import RTOL, _poison_the_allocator, inputs, reference_grads, rel_err

TRITON_SWITCHES = [name for name in fast.BEST_FEATURES if name not in fast.GLUON_SWITCHES]
EVERY_STEP = [{**dict(zip(TRITON_SWITCHES, values, strict=True)), "GLUON": False}
              for values in itertools.product((False, True), repeat=len(TRITON_SWITCHES))]


def step_id(switches: dict) -> str:
    return "-".join(name.lower() for name, on in switches.items() if on) or "none"


def check(q, k, v, do, causal, alignment="top-left", **kwargs):
    out, lse = forward_attention(q, k, v, causal=causal, causal_alignment=alignment, return_lse=True)
    grads = fast.attention_backward(do, q, k, v, out, lse, causal=causal, causal_alignment=alignment, **kwargs)
    _, *expected = reference_grads(q, k, v, do, causal, alignment)
    for name, got, ref, source in zip("qkv", grads, expected, (q, k, v), strict=True):
        assert got.shape == source.shape and got.dtype == source.dtype, name
        assert not torch.isnan(got).any(), f"d{name} has NaN"
        assert rel_err(got, ref) <= RTOL[q.dtype], f"d{name}: relative error {rel_err(got, ref):.2e}"
    return grads


# ---------------------------------------------------------------------------------------------------
# On any machine (the interpreter without a GPU): fp16, N = 256, every combination of switches


@pytest.mark.parametrize("switches", EVERY_STEP, ids=step_id)
@pytest.mark.parametrize("causal", [False, True])
def test_every_step_of_the_worklog_matches_float64(switches, causal, device):
    q, k, v, do = inputs(1, 2, 256, 256, 64, torch.float16, device, seed=len(str(switches)) + causal)
    check(q, k, v, do, causal, dkdv_config=fast.config(64, 128, 4, 1), dq_config=fast.config(128, 64, 4, 1),
          **switches)


def test_a_second_derivative_through_the_fast_path_raises(device):
    q, k, v, _ = inputs(1, 1, 128, 128, 64, torch.float16, device, seed=4)
    q.requires_grad_()
    out = fast.attention(q, k, v)
    with pytest.raises(RuntimeError, match="FastFlashAttention has no second derivative"):
        torch.autograd.grad(out.float().sum(), q, create_graph=True)


def test_inputs_off_the_fast_path_fall_back_to_chapter_10_with_a_reason(device):
    q, k, v, do = inputs(1, 1, 200, 200, 96, torch.float16, device)
    with pytest.warns(FallbackWarning, match="head dim 96"):
        check(q, k, v, do, True)


# Any length, chunked prefill (fewer queries than keys, and the other way round), grouped heads: every partial
# tile masked in both kernels, every partial block stored without writing the next head's rows.
@pytest.mark.parametrize(("heads", "kv_heads", "n_q", "n_k", "causal", "alignment"), [
    (2, 1, 200, 200, True, "top-left"),
    (2, 2, 333, 333, False, "top-left"),
    (2, 1, 100, 300, True, "bottom-right"),
    (2, 2, 300, 100, True, "bottom-right"),  # the first 200 queries see no key: zero gradients
    (3, 3, 140, 260, False, "top-left"),
    (2, 1, 128, 384, True, "top-left"),  # whole tiles (WHOLE): key blocks no query sees
    (2, 2, 384, 128, True, "bottom-right"),  # whole tiles, 256 queries that see no key
])
@pytest.mark.parametrize("switches", [{}, {"USE_TMA": False, "TRANSPOSED": False}, {"ATOMIC_DQ": True},
                                      {"ATOMIC_DQ": True, "USE_TMA": False}, {"SPLIT_DIAGONAL": False}],
                         ids=["best", "pointers", "atomic-dq", "atomic-dq-pointers", "no-split"])
def test_any_length_and_chunked_prefill_match_float64(heads, kv_heads, n_q, n_k, causal, alignment, switches,
                                                      device):
    q, k, v, do = inputs(1, heads, n_q, n_k, 64, torch.float16, device, kv_heads=kv_heads)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # these shapes must take the fast backward
        dq, _, _ = check(q, k, v, do, causal, alignment, **switches)
    if causal and alignment == "bottom-right" and n_q > n_k:
        assert torch.all(dq[:, :, : n_q - n_k] == 0), "rows that see no key must get zero gradients"


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 2), (3, 1)], ids=["group2", "mqa3"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("switches", [{}, {"ATOMIC_DQ": True}, {"USE_TMA": False, "TRANSPOSED": False}],
                         ids=["best", "atomic-dq", "pointers"])
def test_grouped_heads_match_float64(heads, kv_heads, causal, switches, device):
    """dK and dV of a K/V head sum over its group's query heads, in the program that owns those keys."""
    q, k, v, do = inputs(1, heads, 256, 256, 64, torch.float16, device, kv_heads=kv_heads)
    check(q, k, v, do, causal, **switches)


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: {**t, "lse": t["lse"].to(torch.float16)}, "lse must be the forward's contiguous float32"),
    (lambda t: {**t, "do": t["do"][:, :, :128]}, "do must have q's shape"),
    (lambda t: {**t, "out": t["out"].float()}, "inputs must have one dtype"),
])
def test_bad_input_gets_a_clear_error(change, message, device):
    q, k, v, do = inputs(1, 1, 256, 256, 64, torch.float16, device)
    out, lse = forward_attention(q, k, v, return_lse=True)
    args = change({"do": do, "out": out, "lse": lse})
    with pytest.raises((ValueError, TypeError), match=message):
        fast.attention_backward(args["do"], q, k, v, args["out"], args["lse"])


@pytest.mark.parametrize(("dkdv", "dq", "message"), [
    ((128, 64, 4, 1), (64, 64, 4, 1), "dK/dV kernel's BLOCK_N to be a multiple of its BLOCK_M"),
    ((64, 64, 4, 1), (64, 128, 4, 1), "dQ kernel's BLOCK_M to be a multiple of its BLOCK_N"),
])
def test_causal_tiles_that_do_not_nest_are_refused(dkdv, dq, message, device):
    q, k, v, do = inputs(1, 1, 256, 256, 64, torch.float16, device)
    out, lse = forward_attention(q, k, v, causal=True, return_lse=True)
    with pytest.raises(ValueError, match=message):
        fast.attention_backward(do, q, k, v, out, lse, causal=True, dkdv_config=fast.config(*dkdv),
                                dq_config=fast.config(*dq), GLUON=False)  # the Triton kernels' tiles


def test_tiles_that_do_not_nest_would_still_be_exact(monkeypatch, device):
    """The refusal above is stricter than the bounds need: each kernel rounds its unmasked range to its own
    blocks (chapter 11, exercise 3). With the refusal bypassed, both shapes it refuses give float64's gradients,
    at a length that is not a multiple of either block."""
    monkeypatch.setattr(fast, "_check_causal_tiles", lambda dkdv_config, dq_config: None)
    q, k, v, do = inputs(1, 1, 200, 200, 64, torch.float16, device, seed=6)
    check(q, k, v, do, True, dkdv_config=fast.config(128, 64, 4, 1), dq_config=fast.config(64, 128, 4, 1),
          GLUON=False)


def test_the_benchmark_times_the_kernel_the_library_ships():
    from book.bench import backward_fast

    assert backward_fast._final_switches() == fast.BEST_FEATURES


def test_where_gluon_cannot_run_the_gluon_switch_leaves_the_triton_kernels(device):
    if fast.gluon_reason(torch.empty(1, device=device)) is None:
        pytest.skip("a Hopper GPU is here: GLUON runs the Gluon kernel")
    q, k, v, do = inputs(1, 2, 128, 128, 64, torch.float16, device, seed=5)
    out, lse = forward_attention(q, k, v, return_lse=True)
    tiles = {"dkdv_config": fast.config(64, 128, 4, 1), "dq_config": fast.config(128, 64, 4, 1)}
    with_gluon = fast.attention_backward(do, q, k, v, out, lse, **tiles, GLUON=True)
    without = fast.attention_backward(do, q, k, v, out, lse, **tiles, GLUON=False)
    for a, b in zip(with_gluon, without, strict=True):
        assert torch.equal(a, b)


def test_without_gluon_the_gradients_are_the_same_bits_every_run(device):
    # The Triton kernels sum every dQ row in one program, in a fixed order; the Gluon kernel adds dQ's shares in
    # the order they arrive, which chapter 11 says is not reproducible. Three runs on one input, poisoned between.
    n = 1000 if device == "cuda" else 96  # a partial last tile on the GPU; small under the interpreter
    q, k, v, do = inputs(2, 4, n, n, 64, torch.float16, device, seed=3)
    out, lse = forward_attention(q, k, v, causal=True, return_lse=True)
    first = fast.attention_backward(do, q, k, v, out, lse, causal=True, GLUON=False)
    for _ in range(2):
        if device == "cuda":
            _poison_the_allocator()
        again = fast.attention_backward(do, q, k, v, out, lse, causal=True, GLUON=False)
        for a, b in zip(first, again, strict=True):
            assert torch.equal(a, b)


def test_unknown_switch_is_named(device):
    q, k, v, do = inputs(1, 1, 128, 128, 64, torch.float16, device)
    out, lse = forward_attention(q, k, v, return_lse=True)
    with pytest.raises(TypeError, match="unknown feature switches"):
        fast.attention_backward(do, q, k, v, out, lse, SPLIT_DIAG=True)


# ---------------------------------------------------------------------------------------------------
# On a GPU: both half-precision dtypes, the autotuner, poisoned memory


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("n", "d", "causal"), [(128, 64, True), (1024, 64, False), (1024, 128, True),
                                                (2048, 64, True), (384, 128, False), (1000, 64, True),
                                                (333, 128, False)])  # the last two: partial tiles
@pytest.mark.parametrize("switches", [{}, {"GLUON": False}, {"GLUON": False, "ATOMIC_DQ": True}],
                         ids=["final", "triton", "triton-atomic"])
def test_gpu_gradients_with_the_autotuner(dtype, n, d, causal, switches):
    q, k, v, do = inputs(2, 3, n, n, d, dtype, "cuda", seed=n + d)
    _poison_the_allocator()
    check(q, k, v, do, causal, **switches)


@pytest.mark.gpu
def test_gpu_on_hopper_the_final_path_is_the_gluon_kernel(monkeypatch):
    from kernels import flash_attention_backward_hopper as hopper

    q, k, v, do = inputs(1, 2, 256, 256, 64, torch.float16, "cuda")
    if fast.gluon_reason(q) is not None:
        pytest.skip(f"the Gluon kernel cannot run here: {fast.gluon_reason(q)}")
    out, lse = forward_attention(q, k, v, return_lse=True)
    calls = []
    monkeypatch.setattr(hopper, "attention_backward", lambda *args, **kwargs: calls.append(kwargs) or (q, k, v))
    fast.attention_backward(do, q, k, v, out, lse, causal=True)
    assert calls == [{"causal": True, "causal_alignment": "top-left", "sm_scale": 64**-0.5, "kv_in_registers": True,
                      "dq_by_turns": True, "longest_first": True, "rows_in_accumulators": True,
                      "rows_in_shared": True}]
    fast.attention_backward(do, q, k, v, out, lse, GLUON=False)
    assert len(calls) == 1  # GLUON=False: the Triton kernels
    with pytest.raises(ValueError, match="pass GLUON=False with them"):
        fast.attention_backward(do, q, k, v, out, lse, dkdv_config=fast.config(64, 64, 4, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("switches", EVERY_STEP, ids=step_id)
def test_gpu_every_step_of_the_worklog(switches):
    q, k, v, do = inputs(2, 4, 1024, 1024, 128, torch.bfloat16, "cuda", seed=7)
    for causal in (False, True):
        _poison_the_allocator()
        check(q, k, v, do, causal, dkdv_config=fast.config(64, 128, 8, 2), dq_config=fast.config(128, 64, 8, 2),
              **switches)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_fast_path_trains_like_sdpa(causal):
    q, k, v, do = inputs(4, 8, 2048, 2048, 128, torch.bfloat16, "cuda", seed=11)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    fast.attention(*ours, causal=causal).backward(do)
    torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=causal).backward(do)
    _, *expected = reference_grads(q, k, v, do, causal)
    for mine, sdpa, ref in zip(ours, theirs, expected, strict=True):
        # As close to float64 as SDPA's own gradients are, within a factor of two.
        assert rel_err(mine.grad, ref) <= 2 * rel_err(sdpa.grad, ref) + 1e-4


def test_no_query_gives_no_gradient(device):
    q, k, v, do = inputs(1, 2, 0, 128, 64, torch.float16, device)
    out, lse = forward_attention(q, k, v, return_lse=True)
    dq, dk, dv = fast.attention_backward(do, q, k, v, out, lse)
    assert dq.shape == q.shape and torch.all(dk == 0) and torch.all(dv == 0)
