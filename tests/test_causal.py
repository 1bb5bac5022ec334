"""Chapter 6: causal attention in kernels/flash_attention.py, both alignments, against float64 references.

Under the interpreter the shapes stay small; the @pytest.mark.gpu tests run large shapes in fp16 and bf16.
Some tests pin the tile shape (BLOCK_M < BLOCK_N, equal, and greater), because the wrapper's autotuner
picks one shape per machine and the causal loop bounds must hold for all of them.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels.flash_attention import attention

RTOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 1e-2}


def _qkv(b, h, n_q, n_k, d, dtype, device, rng):
    def make(n):
        return torch.randn(b, h, n, d, generator=rng, dtype=torch.float32).to(dtype=dtype, device=device)

    return make(n_q), make(n_k), make(n_k)


def visible_mask(n_q, n_k, alignment, device="cpu"):
    """True where query i may look at key j: j <= i (top-left) or j <= i + n_k - n_q (bottom-right)."""
    offset = 0 if alignment == "top-left" else n_k - n_q
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j <= i + offset


def reference(q, k, v, alignment, sm_scale=None):
    """Float64 causal attention and its logsumexp; rows that see no key give 0 and -inf."""
    q, k, v = q.double(), k.double(), v.double()
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * scale
    mask = visible_mask(q.shape[2], k.shape[2], alignment, q.device)
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isneginf(lse), 0.0, lse)[..., None])  # all-hidden rows: p = 0
    return p @ v, lse


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _rtol(dtype):
    # Under the interpreter bf16 results are truncated to bf16, one ulp (2^-7) toward zero at worst.
    return RTOL[dtype] + (2**-8 if dtype == torch.bfloat16 and kernels.interpreting() else 0.0)


def launch(q, k, v, *, alignment, block_m, block_n):
    """Causal attention with the tile shape pinned instead of autotuned; returns (o, lse)."""
    return attention(q, k, v, causal=True, causal_alignment=alignment, return_lse=True,
                     block_m=block_m, block_n=block_n)


SHAPES = [  # (batch, heads, N_q, N_k, head_dim)
    (1, 1, 1, 1, 16),
    (1, 2, 64, 64, 16),
    (2, 1, 77, 77, 32),  # not a multiple of any block size
    (1, 2, 40, 100, 16),  # fewer queries than keys
    (1, 2, 100, 40, 16),  # more queries than keys
    (1, 1, 3, 50, 64),  # a few new queries after many keys, as in decoding
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_top_left_matches_sdpa_and_float64(shape, dtype, device, rng):
    q, k, v = _qkv(*shape, dtype, device, rng)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    ref, ref_lse = reference(q, k, v, "top-left")
    assert out.shape == q.shape and out.dtype == dtype
    assert rel_err(out, ref) < _rtol(dtype)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-4)
    # torch's own is_causal=True is top-left aligned, also when N_q != N_k.
    sdpa = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert rel_err(out, sdpa) < _rtol(dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bottom_right_matches_float64(shape, dtype, device, rng):
    q, k, v = _qkv(*shape, dtype, device, rng)
    out, lse = attention(q, k, v, causal=True, causal_alignment="bottom-right", return_lse=True)
    ref, ref_lse = reference(q, k, v, "bottom-right")
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert rel_err(out, ref) < _rtol(dtype)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-4)


def test_bf16_both_alignments(device, rng):
    q, k, v = _qkv(1, 2, 50, 70, 32, torch.bfloat16, device, rng)
    for alignment in ("top-left", "bottom-right"):
        out = attention(q, k, v, causal=True, causal_alignment=alignment)
        assert rel_err(out, reference(q, k, v, alignment)[0]) < _rtol(torch.bfloat16)


def test_reference_agrees_with_torch_lower_right_bias(rng):
    """Our float64 bottom-right reference is torch's causal_lower_right mask (where every row sees a key)."""
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = _qkv(1, 2, 5, 12, 8, torch.float64, "cpu", rng)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(5, 12))
    torch.testing.assert_close(reference(q, k, v, "bottom-right")[0], sdpa)


def test_equal_lengths_alignments_agree(device, rng):
    q, k, v = _qkv(1, 2, 45, 45, 16, torch.float32, device, rng)
    top_left = attention(q, k, v, causal=True, causal_alignment="top-left")
    bottom_right = attention(q, k, v, causal=True, causal_alignment="bottom-right")
    assert torch.equal(top_left, bottom_right)


@pytest.mark.parametrize("block_m, block_n", [(16, 16), (32, 16), (16, 32), (64, 16)])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
@pytest.mark.parametrize("n_q, n_k", [(70, 70), (45, 90), (90, 45)])
def test_every_tile_shape(block_m, block_n, alignment, n_q, n_k, device, rng):
    q, k, v = _qkv(1, 1, n_q, n_k, 16, torch.float32, device, rng)
    out, lse = launch(q, k, v, alignment=alignment, block_m=block_m, block_n=block_n)
    ref, ref_lse = reference(q, k, v, alignment)
    assert rel_err(out, ref) < RTOL[torch.float32]
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_future_keys_have_no_influence(alignment, dtype, device, rng):
    """Change every key and value after position p: the rows that cannot see them stay bitwise equal."""
    n_q, n_k = (60, 60) if alignment == "top-left" else (40, 70)
    offset = 0 if alignment == "top-left" else n_k - n_q
    q, k, v = _qkv(2, 2, n_q, n_k, 32, dtype, device, rng)
    before = attention(q, k, v, causal=True, causal_alignment=alignment)
    for p in (0, 17, 45):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, p + 1:] = 100 * torch.randn(k2[:, :, p + 1:].shape, generator=rng).to(dtype=dtype, device=device)
        v2[:, :, p + 1:] = 100 * torch.randn(v2[:, :, p + 1:].shape, generator=rng).to(dtype=dtype, device=device)
        after = attention(q, k2, v2, causal=True, causal_alignment=alignment)
        unaffected = p - offset + 1  # rows i with i + offset <= p never see a changed key
        if unaffected > 0:
            assert torch.equal(after[:, :, :unaffected], before[:, :, :unaffected]), f"p={p}"
        if unaffected < n_q:
            assert not torch.equal(after[:, :, unaffected:], before[:, :, unaffected:]), f"p={p}"


@pytest.mark.filterwarnings("ignore:All-NaN slice")  # later Q blocks do load the poisoned tiles
@pytest.mark.parametrize("block_m, block_n", [(16, 16), (32, 16), (16, 32)])
def test_skipped_tiles_are_never_loaded(block_m, block_n, device, rng):
    """Poison the keys and values past the diagonal tiles of the first Q block with NaN: its rows stay finite,
    so those tiles were never loaded (a masked tile would still multiply 0 by NaN in P V)."""
    q, k, v = _qkv(1, 1, 64, 64, 16, torch.float32, device, rng)
    ref, _ = reference(q[:, :, :block_m], k, v, "top-left")
    first_skipped_key = -(-block_m // block_n) * block_n  # Q block 0 computes ceil(BLOCK_M / BLOCK_N) tiles
    k[:, :, first_skipped_key:] = float("nan")
    v[:, :, first_skipped_key:] = float("nan")
    out, _ = launch(q, k, v, alignment="top-left", block_m=block_m, block_n=block_n)
    assert torch.isfinite(out[:, :, :block_m]).all()
    assert rel_err(out[:, :, :block_m], ref) < RTOL[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rows_that_see_no_key(dtype, device, rng):
    """Bottom-right with N_q > N_k: the first N_q - N_k queries see nothing; their output is 0 and lse -inf."""
    n_q, n_k = 90, 30
    q, k, v = _qkv(2, 2, n_q, n_k, 16, dtype, device, rng)
    out, lse = attention(q, k, v, causal=True, causal_alignment="bottom-right", return_lse=True)
    empty = n_q - n_k
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.equal(out[:, :, :empty], torch.zeros_like(out[:, :, :empty]))
    assert torch.isneginf(lse[:, :, :empty]).all()
    assert torch.isfinite(lse[:, :, empty:]).all()
    assert (out[:, :, empty:].abs().sum(-1) > 0).all()


def test_causal_with_custom_scale(device, rng):
    q, k, v = _qkv(1, 2, 33, 33, 16, torch.float32, device, rng)
    out = attention(q, k, v, causal=True, sm_scale=0.3)
    assert rel_err(out, reference(q, k, v, "top-left", sm_scale=0.3)[0]) < RTOL[torch.float32]


def test_unknown_alignment_is_refused(device, rng):
    q, k, v = _qkv(1, 1, 8, 8, 16, torch.float32, device, rng)
    with pytest.raises(ValueError, match="causal_alignment must be one of"):
        attention(q, k, v, causal=True, causal_alignment="top-right")


# ---------------------------------------------------------------------------------------------------------
# On a GPU: realistic sizes, fp16 and bf16.


def _reference_fp32_per_head(q, k, v, alignment):
    """A float32 reference computed one (batch, head) at a time, to keep memory small at large N."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    mask = visible_mask(q.shape[2], k.shape[2], alignment, q.device)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h].float() @ k[b, h].float().T) / math.sqrt(q.shape[-1])
            s = s.masked_fill(~mask, float("-inf"))
            p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # all-hidden rows: 0
            out[b, h] = p @ v[b, h].float()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b, h, n, d", [(2, 8, 4096, 64), (1, 4, 8192, 128), (1, 2, 16384, 64), (3, 5, 1999, 96)])
def test_gpu_large_top_left(b, h, n, d, dtype, rng):
    q, k, v = _qkv(b, h, n, n, d, dtype, "cuda", rng)
    out = attention(q, k, v, causal=True)
    ref = _reference_fp32_per_head(q, k, v, "top-left")
    assert rel_err(out, ref) < RTOL[dtype]
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert rel_err(out, sdpa.float()) < 2 * RTOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
@pytest.mark.parametrize("n_q, n_k", [(1024, 4096), (4096, 1000), (1, 8192), (129, 8192)])
def test_gpu_unequal_lengths(n_q, n_k, alignment, dtype, rng):
    q, k, v = _qkv(2, 4, n_q, n_k, 128, dtype, "cuda", rng)
    out, lse = attention(q, k, v, causal=True, causal_alignment=alignment, return_lse=True)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert rel_err(out, _reference_fp32_per_head(q, k, v, alignment)) < RTOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_future_keys_have_no_influence(dtype, rng):
    q, k, v = _qkv(1, 8, 4096, 4096, 64, dtype, "cuda", rng)
    before = attention(q, k, v, causal=True)
    p = 2500
    k[:, :, p + 1:] = torch.randn(k[:, :, p + 1:].shape, generator=rng).to(dtype=dtype, device="cuda")
    v[:, :, p + 1:] = torch.randn(v[:, :, p + 1:].shape, generator=rng).to(dtype=dtype, device="cuda")
    after = attention(q, k, v, causal=True)
    assert torch.equal(after[:, :, :p + 1], before[:, :, :p + 1])
    assert not torch.equal(after[:, :, p + 1:], before[:, :, p + 1:])


@pytest.mark.gpu
@pytest.mark.parametrize("block_m, block_n", [(128, 64), (64, 128), (128, 128), (64, 32)])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_gpu_every_tile_shape(block_m, block_n, alignment, rng):
    q, k, v = _qkv(2, 4, 1000, 1500, 64, torch.float16, "cuda", rng)
    out, _ = launch(q, k, v, alignment=alignment, block_m=block_m, block_n=block_n)
    assert rel_err(out, _reference_fp32_per_head(q, k, v, alignment)) < RTOL[torch.float16]


@pytest.mark.gpu
def test_gpu_rows_that_see_no_key(rng):
    q, k, v = _qkv(2, 4, 3000, 1000, 64, torch.float16, "cuda", rng)
    out, lse = attention(q, k, v, causal=True, causal_alignment="bottom-right", return_lse=True)
    assert torch.equal(out[:, :, :2000], torch.zeros_like(out[:, :, :2000]))
    assert torch.isneginf(lse[:, :, :2000]).all() and torch.isfinite(lse[:, :, 2000:]).all()
