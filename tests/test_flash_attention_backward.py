"""Chapter 10's FlashAttention backward kernels against float64 autograd.

Under the interpreter (no GPU) the shapes stay small and odd, in fp32; the @pytest.mark.gpu tests run the
half-precision dtypes, longer sequences and head dims up to 256 on the GPU.
"""

import math

import pytest
import torch

from kernels import flash_attention_backward as backward
from kernels.flash_attention import attention as forward_attention

# Relative error ||grad - ref|| / ||ref|| allowed per dtype. The backward rounds P and dS to the input dtype
# before its matrix products, one rounding more than the forward, so the half-precision bounds are looser.
RTOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def reference_grads(q, k, v, do, causal=False, alignment="top-left", sm_scale=None):
    """(out, dq, dk, dv) by float64 autograd; rows that see no key give out 0 and zero gradients."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]  # grouped-query attention: autograd sums the repeats' gradients per K/V head
    k_all, v_all = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = q @ k_all.transpose(-1, -2) * scale
    n_q, n_k = s.shape[-2:]
    if causal:
        offset = 0 if alignment == "top-left" else n_k - n_q
        hidden = torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None] + offset
        s = s.masked_fill(hidden.to(s.device), float("-inf"))
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(-1, keepdim=True)
    out = (e / torch.where(total == 0, torch.ones_like(total), total)) @ v_all
    out.backward(do.double())
    return out.detach(), q.grad, k.grad, v.grad


def rel_err(got, ref):
    scale = ref.norm().item()
    return (got.double() - ref).norm().item() / (scale if scale else 1.0)


def inputs(b, h, n_q, n_k, d, dtype, device, seed=0, kv_heads=None):
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn((b, heads, n, d), generator=generator).to(dtype=dtype, device=device)
               for heads, n in ((h, n_q), (kv_heads or h, n_k), (kv_heads or h, n_k)))
    do = torch.randn((b, h, n_q, d), generator=generator).to(dtype=dtype, device=device)
    return q, k, v, do


def check(q, k, v, do, causal=False, alignment="top-left", sm_scale=None):
    out, lse = forward_attention(q, k, v, causal=causal, causal_alignment=alignment, sm_scale=sm_scale,
                                 return_lse=True)
    grads = backward.attention_backward(do, q, k, v, out, lse, causal=causal, causal_alignment=alignment,
                                        sm_scale=sm_scale)
    _, *expected = reference_grads(q, k, v, do, causal, alignment, sm_scale)
    for name, got, ref, source in zip("qkv", grads, expected, (q, k, v), strict=True):
        assert got.shape == source.shape and got.dtype == source.dtype, name
        assert not torch.isnan(got).any(), f"d{name} has NaN"
        assert rel_err(got, ref) <= RTOL[q.dtype], f"d{name}: relative error {rel_err(got, ref):.2e}"
    return grads


# ---------------------------------------------------------------------------------------------------
# On any machine (the interpreter without a GPU): small, odd shapes in fp32


@pytest.mark.parametrize(
    ("b", "h", "n_q", "n_k", "d", "causal", "alignment"),
    [
        (1, 2, 33, 33, 16, False, "top-left"),
        (2, 1, 40, 23, 24, False, "top-left"),  # head dim not a power of two, Nq != Nk
        (1, 2, 37, 37, 16, True, "top-left"),
        (1, 1, 21, 45, 32, True, "bottom-right"),  # a KV cache longer than the queries
        (1, 1, 45, 21, 16, True, "bottom-right"),  # the first 24 queries see no key: zero gradients
        (1, 1, 30, 19, 16, True, "top-left"),
    ],
)
def test_gradients_match_float64_autograd(b, h, n_q, n_k, d, causal, alignment, device):
    dtype = torch.float32
    q, k, v, do = inputs(b, h, n_q, n_k, d, dtype, device)
    dq, dk, dv = check(q, k, v, do, causal, alignment)
    if causal and alignment == "bottom-right" and n_q > n_k:
        assert torch.all(dq[:, :, : n_q - n_k] == 0), "rows that see no key must get zero gradients"


# Grouped-query attention: dK and dV of a K/V head sum over the query heads of its group (1, 2, 7 and all).
@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (7, 1), (14, 2), (3, 3)], ids=["group2", "mqa7", "group7", "mha"])
@pytest.mark.parametrize("n_q, n_k, causal, alignment", [(37, 37, True, "top-left"), (21, 45, True, "bottom-right"),
                                                         (45, 21, True, "bottom-right"), (30, 19, False, "top-left")],
                         ids=["tl", "br-long-cache", "br-empty-rows", "full"])
def test_grouped_query_gradients_match_float64_autograd(heads, kv_heads, n_q, n_k, causal, alignment, device):
    q, k, v, do = inputs(1, heads, n_q, n_k, 16, torch.float32, device, kv_heads=kv_heads)
    check(q, k, v, do, causal, alignment)


# The interpreter computes 2^x before the mask selects 0, and numpy warns of the overflow it then discards.
@pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")
@pytest.mark.parametrize("causal", [False, True])
def test_keys_past_the_end_get_the_mask_when_every_score_is_far_below_zero(causal, device):
    """Scores near -100 give L near -100. A key past Nk loads as 0, so its score is 0 and, without the mask,
    its P would be e^100, which is inf in fp32: dQ would turn NaN. The partial last key block must stay
    masked in both kernels."""
    q, k, v, do = inputs(1, 1, 20, 21, 16, torch.float32, device, seed=4)
    dq, _, _ = check(q + 5.0, k - 5.0, v, do, causal)
    assert torch.isfinite(dq).all()


def test_non_contiguous_inputs_and_a_custom_scale(device):
    # (B, N, H, D) memory viewed as (B, H, N, D): strides jump, head_dim stays unit-stride.
    generator = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn((1, 19, 2, 16), generator=generator).to(device).transpose(1, 2) for _ in range(4))
    check(q, k, v, do, causal=True, sm_scale=0.3)


def test_chapter_5_attention_is_differentiable_and_says_what_it_cannot_do(device):
    q, k, v, _ = inputs(1, 1, 16, 16, 16, torch.float32, device)
    q.requires_grad_()
    with pytest.raises(ValueError, match="drop return_lse, out, block_m and block_n"):
        forward_attention(q, k, v, return_lse=True)
    with torch.no_grad():  # no gradients wanted: every option is open again
        assert forward_attention(q, k, v, return_lse=True)[1].shape == (1, 1, 16)
    from kernels.flash_attention_fast import attention as fast_attention

    with pytest.raises(ValueError, match="the fast path has no backward pass"):
        fast_attention(q, k, v)


def test_autograd_function_gives_every_gradient(device):
    q, k, v, do = inputs(1, 2, 26, 26, 16, torch.float32, device, seed=2)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = forward_attention(q, k, v, causal=True)
    out.backward(do)
    ref_out, *expected = reference_grads(q, k, v, do, causal=True)
    assert rel_err(out.detach(), ref_out) <= RTOL[torch.float32]
    for got, ref in zip((q.grad, k.grad, v.grad), expected, strict=True):
        assert rel_err(got, ref) <= RTOL[torch.float32]


def test_a_second_derivative_raises_instead_of_dropping_a_term(device):
    """The backward kernels' gradients carry no graph. Asking for a gradient to differentiate again (a gradient
    penalty) must fail loudly, not give a gradient that silently counts as a constant."""
    q, k, v, _ = inputs(1, 1, 20, 20, 16, torch.float32, device, seed=3)
    q.requires_grad_()
    with pytest.raises(RuntimeError, match="FlashAttention has no second derivative"):
        torch.autograd.grad(forward_attention(q, k, v, causal=True).sum(), q, create_graph=True)
    (dq_once,) = torch.autograd.grad(forward_attention(q, k, v, causal=True).sum(), q)  # one derivative: fine
    assert torch.isfinite(dq_once).all()


@pytest.mark.parametrize(("causal", "alignment", "n_q", "n_k"), [(False, "top-left", 20, 20),
                                                                  (True, "bottom-right", 12, 20)])
def test_gradients_agree_with_finite_differences_of_the_forward(causal, alignment, n_q, n_k, device, rng):
    """gradcheck's idea, in fp32 and without any reference implementation: along a random direction u, the
    slope of L = <attention(q, k, v), dO> measured by central differences of the forward kernel equals
    <gradient, u> from the backward kernels."""
    q, k, v, do = (torch.randn((1, 2, n, 16), generator=rng).to(device) for n in (n_q, n_k, n_k, n_q))
    inputs_ = [t.clone().requires_grad_() for t in (q, k, v)]
    forward_attention(*inputs_, causal=causal, causal_alignment=alignment).backward(do)
    for x, t in zip(inputs_, (q, k, v), strict=True):
        u = torch.randn(t.shape, generator=rng).to(device)
        eps = 1e-2

        def loss(shift, t=t, u=u):
            moved = [s + shift * u if s is t else s for s in (q, k, v)]
            return (forward_attention(*moved, causal=causal, causal_alignment=alignment).double() * do).sum()

        slope = (loss(eps) - loss(-eps)) / (2 * eps)
        predicted = (x.grad.double() * u).sum()
        assert abs(slope - predicted) <= 1e-3 * abs(predicted) + 1e-3, (slope.item(), predicted.item())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: {**a, "do": a["do"][..., :8]}, "do must have q's shape"),
        (lambda a: {**a, "lse": a["lse"].double()}, "lse must be the forward's contiguous float32 logsumexp"),
        (lambda a: {**a, "out": a["out"].transpose(-1, -2).contiguous().transpose(-1, -2)},
         "out must have unit stride along head_dim"),
    ],
)
def test_bad_input_gets_a_clear_error(change, message, device):
    q, k, v, do = inputs(1, 1, 16, 16, 16, torch.float32, device)
    out, lse = forward_attention(q, k, v, return_lse=True)
    args = change({"do": do, "out": out, "lse": lse})
    with pytest.raises(ValueError, match=message):
        backward.attention_backward(args["do"], q, k, v, args["out"], args["lse"])


# ---------------------------------------------------------------------------------------------------
# On the GPU: every dtype, longer and odd sequences, head dims up to 256, poisoned memory


def _poison_the_allocator():
    """Fill the memory the caching allocator will hand out next with NaN: an element a kernel forgets to
    write then shows up as NaN."""
    torch.full((64 * 2**20,), float("nan"), device="cuda", dtype=torch.float32)  # freed at once, cached


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("n_q", "n_k", "d", "causal", "alignment"), [
    (1024, 1024, 64, False, "top-left"),
    (1024, 1024, 128, True, "top-left"),
    (1000, 1000, 80, True, "top-left"),
    (333, 777, 64, True, "bottom-right"),
    (777, 333, 128, True, "bottom-right"),
    (257, 257, 256, False, "top-left"),
])
def test_gpu_gradients(dtype, n_q, n_k, d, causal, alignment):
    q, k, v, do = inputs(2, 3, n_q, n_k, d, dtype, "cuda", seed=n_q + d)
    _poison_the_allocator()
    check(q, k, v, do, causal, alignment)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads", "n_q", "n_k", "d", "causal", "alignment"), [
    (32, 8, 1000, 1000, 128, True, "top-left"),  # Llama 3's heads
    (28, 4, 777, 777, 64, False, "top-left"),  # Qwen2.5's
    (8, 1, 300, 1200, 128, True, "bottom-right"),  # one K/V head: a 70B model's shard, chunked prefill
])
def test_gpu_grouped_query_gradients(dtype, heads, kv_heads, n_q, n_k, d, causal, alignment):
    q, k, v, do = inputs(1, heads, n_q, n_k, d, dtype, "cuda", seed=heads, kv_heads=kv_heads)
    _poison_the_allocator()
    check(q, k, v, do, causal, alignment)


@pytest.mark.gpu
def test_gpu_autograd_matches_sdpa_in_a_small_model_step():
    q, k, v, do = inputs(4, 8, 2048, 2048, 64, torch.float16, "cuda", seed=3)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    forward_attention(*ours, causal=True).backward(do)
    torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=True).backward(do)
    _, *expected = reference_grads(q, k, v, do, causal=True)
    for mine, sdpa, ref in zip(ours, theirs, expected, strict=True):
        # As close to float64 as SDPA's own gradients are, within a factor of two.
        assert rel_err(mine.grad, ref) <= 2 * rel_err(sdpa.grad, ref) + 1e-4
