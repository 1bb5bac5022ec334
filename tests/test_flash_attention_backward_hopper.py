"""Chapter 11, steps 8-13: the Gluon backward against float64 autograd.

Gluon does not run in Triton's CPU interpreter, so without a GPU only the refusal is tested. The @pytest.mark.gpu
tests run both half-precision dtypes, both head dims, both masks, and poisoned memory, with step 11's launch order
and without it; at head dim 64 also steps 8 and 9 (at 128 steps 9 and 10 do not apply, and the kernel is step
8's), at head dim 128 also step 12 (which does not apply at 64), and step 13 at both. Step 11 groups heads by 4,
2 or 1; a test covers each.
"""

import pytest
import torch

import kernels
from kernels import flash_attention_backward_hopper as hopper
from kernels.flash_attention import attention as forward_attention
from tests.test_flash_attention_backward import RTOL, _poison_the_allocator, inputs, reference_grads, rel_err


def test_without_a_gpu_it_says_gluon_needs_one(device):
    if not kernels.interpreting():
        pytest.skip("a GPU is here: the interpreter's refusal does not apply")
    q, k, v, do = inputs(1, 1, 128, 128, 64, torch.float16, device)
    out, lse = forward_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="Gluon kernels run only on a GPU"):
        hopper.attention_backward(do, q, k, v, out, lse)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "d", "dtype", "message"), [
    (256, 80, torch.float16, "head dim"),
    (256, 64, torch.float32, "float32"),
])
def test_gpu_inputs_it_cannot_take_get_a_clear_error(n, d, dtype, message):
    q, k, v, do = inputs(1, 2, n, n, d, dtype, "cuda")
    out, lse = forward_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=message):
        hopper.attention_backward(do, q, k, v, out, lse)


@pytest.mark.gpu
def test_gpu_bad_lse_gets_a_clear_error():
    q, k, v, do = inputs(1, 2, 256, 256, 64, torch.float16, "cuda")
    out, lse = forward_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="lse must be the forward's contiguous float32"):
        hopper.attention_backward(do, q, k, v, out, lse[:, :, :128])


# The keyword each step from 9 on adds; step N of the worklog is the kernel with every later step's turned off.
ADDED_BY = {9: "kv_in_registers", 10: "dq_by_turns", 11: "longest_first", 12: "rows_in_accumulators",
            13: "rows_in_shared"}
STEPS = {step: {name: False for later, name in ADDED_BY.items() if later > step} for step in range(8, 14)}
# The steps that are a kernel of their own at each head dim: 12 only at 128, 9 and 8 only at 64.
KERNELS = [(d, step) for d in (64, 128) for step in STEPS if (d == 64 and step != 12) or (d == 128 and step >= 10)]


@pytest.mark.gpu
@pytest.mark.parametrize(("batch", "heads"), [(1, 4), (2, 6), (1, 3), (3, 1)])
def test_gpu_launch_order_covers_every_program(batch, heads):
    """Step 11 groups 4 heads when it can, else 2, else 1: every (batch, head) and key block is still computed."""
    q, k, v, do = inputs(batch, heads, 640, 640, 64, torch.float16, "cuda", seed=batch * 10 + heads)
    out, lse = forward_attention(q, k, v, causal=True, return_lse=True)
    _poison_the_allocator()
    grads = hopper.attention_backward(do, q, k, v, out, lse, causal=True)
    _, *expected = reference_grads(q, k, v, do, True)
    for name, got, ref in zip("qkv", grads, expected, strict=True):
        assert not torch.isnan(got).any(), f"d{name} has NaN"
        assert rel_err(got, ref) <= RTOL[torch.float16], f"d{name}: relative error {rel_err(got, ref):.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize(("heads", "kv_heads", "n_q", "n_k", "causal", "alignment"), [
    (4, 2, 200, 200, True, "top-left"),  # a partial last block of keys and of queries
    (3, 3, 1000, 1000, False, "top-left"),
    (4, 1, 300, 1000, True, "bottom-right"),  # chunked prefill: fewer queries than keys
    (2, 2, 1000, 300, True, "bottom-right"),  # the first 700 queries see no key: zero gradients
    (2, 1, 129, 383, False, "top-left"),
])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_any_length_and_chunked_prefill(heads, kv_heads, n_q, n_k, causal, alignment, d):
    q, k, v, do = inputs(2, heads, n_q, n_k, d, torch.bfloat16, "cuda", seed=n_q + d, kv_heads=kv_heads)
    out, lse = forward_attention(q, k, v, causal=causal, causal_alignment=alignment, return_lse=True)
    _poison_the_allocator()
    grads = hopper.attention_backward(do, q, k, v, out, lse, causal=causal, causal_alignment=alignment)
    _, *expected = reference_grads(q, k, v, do, causal, alignment)
    for name, got, ref in zip("qkv", grads, expected, strict=True):
        assert not torch.isnan(got).any(), f"d{name} has NaN"
        assert rel_err(got, ref) <= RTOL[torch.bfloat16], f"d{name}: relative error {rel_err(got, ref):.2e}"
    if causal and alignment == "bottom-right" and n_q > n_k:
        assert torch.all(grads[0][:, :, : n_q - n_k] == 0), "rows that see no key must get zero gradients"


@pytest.mark.gpu
@pytest.mark.parametrize(("batch", "heads", "kv_heads"), [(1, 8, 2), (2, 7, 1), (1, 12, 3), (3, 4, 4)])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_grouped_heads_sum_into_each_kv_head(batch, heads, kv_heads, d, causal):
    """Grouped-query attention: a program owns a block of keys of one K/V head and runs every Q block of every
    query head of its group, so dK and dV sum over the group; step 11's launch order groups K/V heads."""
    q, k, v, do = inputs(batch, heads, 384, 384, d, torch.bfloat16, "cuda", seed=heads + d, kv_heads=kv_heads)
    out, lse = forward_attention(q, k, v, causal=causal, return_lse=True)
    _poison_the_allocator()
    grads = hopper.attention_backward(do, q, k, v, out, lse, causal=causal)
    _, *expected = reference_grads(q, k, v, do, causal)
    for name, got, ref in zip("qkv", grads, expected, strict=True):
        assert not torch.isnan(got).any(), f"d{name} has NaN"
        assert rel_err(got, ref) <= RTOL[torch.bfloat16], f"d{name}: relative error {rel_err(got, ref):.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("d", "step"), KERNELS, ids=[f"d{d}-step{step}" for d, step in KERNELS])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [128, 384, 1024])
def test_gpu_gradients_match_float64(dtype, d, step, causal, n):
    q, k, v, do = inputs(2, 3, n, n, d, dtype, "cuda", seed=n + d + causal)
    out, lse = forward_attention(q, k, v, causal=causal, return_lse=True)
    _poison_the_allocator()  # an element the kernels forget to write shows up as NaN
    grads = hopper.attention_backward(do, q, k, v, out, lse, causal=causal, **STEPS[step])
    _, *expected = reference_grads(q, k, v, do, causal)
    for name, got, ref, source in zip("qkv", grads, expected, (q, k, v), strict=True):
        assert got.shape == source.shape and got.dtype == source.dtype, name
        assert not torch.isnan(got).any(), f"d{name} has NaN"
        assert rel_err(got, ref) <= RTOL[dtype], f"d{name}: relative error {rel_err(got, ref):.2e}"
