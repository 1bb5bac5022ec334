"""Chapter 5's FlashAttention forward kernel against a float64 reference.

Under the interpreter (no GPU) the shapes stay small and odd; the @pytest.mark.gpu tests run long
sequences, every dtype and head dims 16 to 256 on the GPU.
"""

import math
import os
import subprocess
import sys

import pytest
import torch

import kernels
from book import ROOT
from kernels.flash_attention import attention, validate_inputs

# Relative error ||out - ref|| / ||ref|| allowed per dtype. fp32 uses exact ("ieee") dot products.
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def reference(q, k, v, causal=False, alignment="top-left", sm_scale=None):
    """Float64 attention and its natural-log logsumexp; rows with no visible key give 0 and -inf."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]  # grouped-query attention: the reference repeats K and V, the kernel must not
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = q @ k.transpose(-1, -2) * scale
    n_q, n_k = s.shape[-2:]
    if causal:
        offset = 0 if alignment == "top-left" else n_k - n_q
        rows = torch.arange(n_q, device=s.device)[:, None]
        cols = torch.arange(n_k, device=s.device)[None, :]
        s = s.masked_fill(cols > rows + offset, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
    return p @ v, lse


def randn(shape, dtype, device, rng, scale=1.0):
    return (torch.randn(shape, generator=rng) * scale).to(dtype=dtype, device=device)


def qkv(b, h, n_q, n_k, d, dtype, device, rng, scale=1.0):
    return (randn((b, h, n_q, d), dtype, device, rng, scale), randn((b, h, n_k, d), dtype, device, rng, scale),
            randn((b, h, n_k, d), dtype, device, rng))


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def check(q, k, v, causal=False, alignment="top-left", sm_scale=None, **kwargs):
    out, lse = attention(q, k, v, causal=causal, causal_alignment=alignment, sm_scale=sm_scale, return_lse=True,
                         **kwargs)
    ref, ref_lse = reference(q, k, v, causal, alignment, sm_scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert rel_err(out, ref) <= RTOL[q.dtype], f"relative error {rel_err(out, ref):.2e}"
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~seen), "lse must be -inf exactly for rows that see no key"
    # fp32 logsumexp: a few units in the last place of its magnitude (scores of thousands in the large-logit test)
    torch.testing.assert_close(lse.double()[seen], ref_lse[seen], rtol=2e-6, atol=1e-3)
    assert torch.all(out[~seen] == 0), "rows that see no key must be 0"
    return out, lse


# (Nq, Nk, D): lengths 1, 17 and 100, head dims 16, 40, 64, 80 (40 and 80 are padded to 64 and 128).
SHAPES = [(1, 1, 16), (17, 17, 40), (100, 100, 64), (17, 100, 80), (100, 17, 16), (100, 37, 40)]
MODES = [(False, "top-left"), (True, "top-left"), (True, "bottom-right")]


@pytest.mark.parametrize("n_q, n_k, d", SHAPES)
@pytest.mark.parametrize("causal, alignment", MODES, ids=["full", "causal-tl", "causal-br"])
def test_matches_float64(n_q, n_k, d, causal, alignment, device, rng):
    check(*qkv(2, 2, n_q, n_k, d, torch.float32, device, rng), causal=causal, alignment=alignment)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal, alignment", MODES, ids=["full", "causal-tl", "causal-br"])
def test_half_precision(dtype, causal, alignment, device, rng):
    check(*qkv(1, 2, 70, 45, 64, dtype, device, rng), causal=causal, alignment=alignment)


@pytest.mark.parametrize("block_m, block_n", [(16, 32), (32, 16), (16, 16), (64, 16)])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_tile_shapes_with_causal(block_m, block_n, alignment, device, rng):
    # BLOCK_M != BLOCK_N puts the diagonal across several K tiles, or several Q blocks on one K tile.
    for n_q, n_k in [(97, 97), (50, 83), (83, 50)]:
        check(*qkv(1, 1, n_q, n_k, 16, torch.float32, device, rng), causal=True, alignment=alignment,
              block_m=block_m, block_n=block_n)


# Grouped-query attention: (query heads, K/V heads) from multi-head (group 1) through groups of 2 and 7 to
# multi-query (one K/V head), at odd lengths with both causal alignments.
@pytest.mark.parametrize("heads, kv_heads", [(2, 2), (4, 2), (7, 1), (14, 2), (3, 1)],
                         ids=["mha", "group2", "mqa7", "group7", "mqa3"])
@pytest.mark.parametrize("n_q, n_k, causal, alignment", [(37, 37, True, "top-left"), (23, 41, True, "bottom-right"),
                                                         (29, 19, False, "top-left")], ids=["tl", "br", "full"])
def test_grouped_query_attention_matches_float64(heads, kv_heads, n_q, n_k, causal, alignment, device, rng):
    q = randn((1, heads, n_q, 16), torch.float32, device, rng)
    k, v = (randn((1, kv_heads, n_k, 16), torch.float32, device, rng) for _ in range(2))
    check(q, k, v, causal, alignment)


def test_rows_without_keys_are_zero(device, rng):
    # Bottom-right, Nq = 40 > Nk = 8: queries 0..31 see no key at all.
    out, lse = check(*qkv(1, 1, 40, 8, 16, torch.float32, device, rng), causal=True, alignment="bottom-right")
    assert torch.all(out[0, 0, :32] == 0) and torch.all(torch.isneginf(lse[0, 0, :32]))
    assert torch.all(torch.isfinite(lse[0, 0, 32:]))


def test_custom_scale(device, rng):
    check(*qkv(1, 2, 33, 21, 32, torch.float32, device, rng), sm_scale=0.3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_large_logits_stay_finite(dtype, device, rng):
    # Scores of several thousand: exp would overflow without the running max.
    q, k, v = qkv(1, 1, 40, 40, 32, dtype, device, rng, scale=30.0)
    out, lse = check(q, k, v, causal=True)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()


def test_every_output_element_is_written(device, rng):
    q, k, v = qkv(2, 3, 37, 29, 40, torch.float16, device, rng)
    out = torch.full_like(q, float("nan"))  # poison: any element the kernel skips stays NaN
    result = attention(q, k, v, out=out)
    assert result is out and not torch.isnan(out).any()
    assert rel_err(out, reference(q, k, v)[0]) <= RTOL[torch.float16]


def test_non_contiguous_inputs(device, rng):
    b, h, n, d = 2, 3, 33, 40
    # (B, N, H, D) memory viewed as (B, H, N, D), as a fused QKV projection produces.
    q = randn((b, n, h, d), torch.float32, device, rng).transpose(1, 2)
    # Every other key of a longer sequence.
    k = randn((b, h, 2 * n, d), torch.float32, device, rng)[:, :, ::2]
    # The first d columns of a wider tensor.
    v = randn((b, h, n, d + 24), torch.float32, device, rng)[..., :d]
    assert not any(t.is_contiguous() for t in (q, k, v))
    out, _ = check(q, k, v, causal=True)
    assert torch.equal(out, attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True))


def test_empty_query(device, rng):
    q, k, v = qkv(1, 1, 0, 5, 16, torch.float32, device, rng)
    assert attention(q, k, v).shape == (1, 1, 0, 16)


def _bad(device, **changes):
    shapes = {"q": (1, 2, 8, 16), "k": (1, 2, 8, 16), "v": (1, 2, 8, 16)}
    tensors = {name: torch.randn(shape, device=device) for name, shape in shapes.items()}
    tensors.update({name: change(tensors[name]) for name, change in changes.items()})
    return tensors["q"], tensors["k"], tensors["v"]


BAD_INPUTS = {
    "k-head-dim": (lambda d: _bad(d, k=lambda t: torch.randn(1, 2, 8, 32, device=d)), ValueError,
                   "k must have q's batch and head_dim"),
    "k-heads": (lambda d: _bad(d, k=lambda t: torch.randn(1, 3, 8, 16, device=d)), ValueError,
                r"the query heads \(2\) must be a multiple of the K/V heads \(3\)"),
    "v-length": (lambda d: _bad(d, v=lambda t: torch.randn(1, 2, 9, 16, device=d)), ValueError,
                 r"v must have k's shape"),
    "mixed-dtype": (lambda d: _bad(d, v=lambda t: t.half()), TypeError, "one dtype"),
    "int-dtype": (lambda d: _bad(d, q=lambda t: t.long(), k=lambda t: t.long(), v=lambda t: t.long()), TypeError,
                  "q has dtype int64"),
    "fp64": (lambda d: _bad(d, q=lambda t: t.double()), TypeError, "q has dtype float64; supported"),
    "3d": (lambda d: _bad(d, q=lambda t: t[0]), ValueError, "q must be 4-D"),
    "head-dim-small": (lambda d: tuple(torch.randn(1, 1, 4, 8, device=d) for _ in range(3)), ValueError,
                       "head_dim must be between 16 and 256, got 8"),
    "head-dim-large": (lambda d: tuple(torch.randn(1, 1, 4, 512, device=d) for _ in range(3)), ValueError,
                       "head_dim must be between 16 and 256, got 512"),
    "no-keys": (lambda d: _bad(d, k=lambda t: t[:, :, :0], v=lambda t: t[:, :, :0]), ValueError, "no keys"),
    "head-dim-stride": (lambda d: _bad(d, q=lambda t: torch.randn(1, 2, 8, 32, device=d)[..., ::2]), ValueError,
                        "q must have unit stride along head_dim"),
    "not-a-tensor": (lambda d: _bad(d, k=lambda t: t.tolist()), TypeError, "k must be a torch.Tensor"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_names_the_problem(name, device):
    make, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        attention(*make(device))


def test_offsets_past_32_bits_are_refused():
    """The kernel computes 32-bit element offsets: a tensor with an element at offset 2**31 or beyond is refused by
    name. Meta tensors have shapes and strides but no memory, so the check runs without allocating 4 GiB."""
    from kernels.validate import check_int32_offsets, largest_offset

    exactly = torch.empty(1, 1, 2**27, 16, device="meta")  # 2**31 elements: the last at offset 2**31 - 1
    check_int32_offsets("q", exactly)
    assert largest_offset(exactly) == 2**31 - 1
    with pytest.raises(ValueError, match=r"q reaches element offset 2,147,483,663 .* 32-bit offsets"):
        check_int32_offsets("q", torch.empty(1, 1, 2**27 + 1, 16, device="meta"))
    # A strided view reaches past 2**31 with fewer elements: (B, N, H, D) memory seen as (B, H, N, D).
    view = torch.empty(1, 2**22, 64, 16, device="meta").transpose(1, 2)[:, :1]  # 2**26 elements
    with pytest.raises(ValueError, match="k reaches element offset"):
        check_int32_offsets("k", view)


@pytest.mark.parametrize("kwargs, message", [
    ({"causal_alignment": "middle"}, "causal_alignment must be one of"),
    ({"sm_scale": -1.0}, "sm_scale must be a positive finite number"),
    ({"sm_scale": float("nan")}, "sm_scale must be a positive finite number"),
    ({"block_m": 24, "block_n": 16}, "powers of two"),
    ({"block_m": 32}, "powers of two"),
])
def test_bad_options_name_the_problem(kwargs, message, device):
    with pytest.raises(ValueError, match=message):
        attention(*_bad(device), **kwargs)


def test_bad_out_buffer(device):
    q, k, v = _bad(device)
    with pytest.raises(ValueError, match="out must have q's shape"):
        attention(q, k, v, out=torch.empty(1, 2, 8, 16, device=device, dtype=torch.float16))


def test_validate_inputs_accepts_good_inputs(device):
    validate_inputs(*_bad(device))


def test_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not kernels.interpreting()
    with pytest.raises(ValueError, match="q is on the CPU; Triton kernels need a CUDA tensor"):
        attention(*_bad("cpu"))


# ---- On the GPU: long sequences, every dtype, head dims 16..256 ----

GPU_HEAD_DIMS = [16, 32, 40, 64, 80, 96, 128, 256]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("d", GPU_HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_every_dtype_and_head_dim(dtype, d, causal, rng):
    check(*qkv(2, 3, 1000, 1000, d, dtype, "cuda", rng), causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("n_q, n_k", [(4096, 4096), (8192, 8192), (3001, 5003), (5003, 3001), (1, 8192)])
@pytest.mark.parametrize("causal, alignment", MODES, ids=["full", "causal-tl", "causal-br"])
def test_gpu_long_sequences(n_q, n_k, causal, alignment, rng):
    check(*qkv(1, 2, n_q, n_k, 128, torch.float16, "cuda", rng), causal=causal, alignment=alignment)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_agrees_with_sdpa(dtype, causal, rng):
    q, k, v = qkv(4, 8, 2048, 2048, 64, dtype, "cuda", rng)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref = reference(q, k, v, causal)[0]
    # Both are rounded results of the same exact attention: each close to float64, so close to each other.
    assert rel_err(attention(q, k, v, causal=causal), ref) <= RTOL[dtype]
    assert rel_err(expected, ref) <= RTOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128, 256])
def test_gpu_poisoned_output_and_strided_inputs(d, rng):
    b, h, n = 2, 4, 3001
    q = randn((b, n, h, d), torch.bfloat16, "cuda", rng).transpose(1, 2)
    k = randn((b, n, h, d), torch.bfloat16, "cuda", rng).transpose(1, 2)
    v = randn((b, h, n, d + 64), torch.bfloat16, "cuda", rng)[..., :d]
    out = torch.full((b, h, n, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    attention(q, k, v, causal=True, out=out)
    assert not torch.isnan(out).any()
    assert rel_err(out, reference(q, k, v, True)[0]) <= RTOL[torch.bfloat16]


@pytest.mark.gpu
def test_gpu_large_logits(rng):
    q, k, v = qkv(1, 4, 2048, 2048, 64, torch.float16, "cuda", rng, scale=8.0)
    out, lse = check(q, k, v, causal=True)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()


@pytest.mark.gpu
def test_gpu_cpu_tensor_beside_gpu_tensor_is_refused():
    q = torch.randn(1, 1, 8, 16, device="cuda")
    with pytest.raises(ValueError, match="k is on the CPU"):
        attention(q, q.cpu(), q)


@pytest.mark.gpu
def test_gpu_a_tensor_past_2_to_the_31_elements_is_refused_before_launch():
    q = torch.empty(1, 1, 2**27 + 1, 16, device="cuda", dtype=torch.float16)  # just past 2**31 elements, 4 GiB
    small = torch.randn(1, 1, 64, 16, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="q reaches element offset 2,147,483,663"):
        attention(q, small, small)


# First calls at new lengths, in a process with an empty Triton cache, so that the autotuner compiles and times every
# candidate tile shape: without and with the causal mask and the logsumexp (the backward's forward), at a length that
# is not a multiple of 16 and at one that is. It prints what the autotuner skipped (a candidate that failed to
# compile) and the relative error against float64 SDPA if too large; a crash of the PTX assembler prints its dump.
FIRST_CALL = """
import torch
from kernels import flash_attention as fa

dtype = getattr(torch, "{dtype}")
for n_q, n_k, causal, alignment in ((1000 + {d}, 1000 + {d}, False, "top-left"), (777, 2048, True, "bottom-right")):
    q = torch.randn(1, 3, n_q, {d}, device="cuda", dtype=dtype)
    k, v = (torch.randn(1, 3, n_k, {d}, device="cuda", dtype=dtype) for _ in range(2))
    result = fa.attention(q, k, v, causal=causal, causal_alignment=alignment, return_lse=causal)
    out = result[0] if causal else result
    mask = torch.ones(n_q, n_k, device="cuda", dtype=torch.bool).tril(n_k - n_q) if causal else None
    expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    error = ((out.double() - expected).norm() / expected.norm()).item()
    skipped = [str(c) for c, t in getattr(fa._attn_fwd_tuned, "configs_timings", {{}}).items() if t[0] == float("inf")]
    if skipped or error > {rtol}:
        print(f"{{n_q}} x {{n_k}} causal={{causal}}: relative error {{error:.1e}}, failed candidates: {{skipped}}")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("d", GPU_HEAD_DIMS)
def test_gpu_first_call_at_a_new_length_prints_nothing(dtype, d, tmp_path):
    """No compiler dump on a reader's screen: every candidate the autotuner tries compiles, at every head dim and
    dtype, and nothing reaches stdout or stderr."""
    code = FIRST_CALL.format(dtype=str(dtype).removeprefix("torch."), d=d, rtol=RTOL[dtype])
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, TRITON_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "", done.stdout[:3000]
    assert done.stderr == "", done.stderr[:3000]
