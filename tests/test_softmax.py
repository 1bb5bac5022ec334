"""The chapter 4 Triton softmax against a float64 reference, on both paths, every dtype and the edge cases."""

import pytest
import torch

import kernels
from kernels.softmax import MAX_SINGLE_BLOCK, launch_config, softmax

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Relative error bounds ||out - ref|| / ||ref||: rounding the output to the dtype is the main error.
# (The CPU interpreter truncates fp32 -> bf16 on the store, 1 ulp toward zero: still well inside 1e-2.)
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _logits(shape, dtype, device, rng, scale=5.0):
    return (torch.randn(shape, generator=rng, dtype=torch.float64) * scale).to(dtype=dtype, device=device)


def _rel_err(out, x):
    ref = torch.softmax(x.double().cpu(), dim=-1)  # the reference sees the same (rounded) inputs
    return ((out.double().cpu() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("n_cols", [1, 7, 64, 100, 257])
@pytest.mark.parametrize("dtype", DTYPES)
def test_single_block_path(n_cols, dtype, device, rng):
    x = _logits((5, n_cols), dtype, device, rng)
    assert launch_config(n_cols)["path"] == "single block"
    out = softmax(x)
    assert out.dtype == dtype and out.shape == x.shape
    assert _rel_err(out, x) < RTOL[dtype]


@pytest.mark.parametrize("n_cols, max_block", [(17, 16), (100, 32), (257, 64), (1000, 128)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_online_path(n_cols, max_block, dtype, device, rng):
    """Rows longer than max_block take the two-pass online kernel; a small max_block reaches it cheaply."""
    assert launch_config(n_cols, max_block)["path"] == "online"
    x = _logits((3, n_cols), dtype, device, rng)
    assert _rel_err(softmax(x, max_block=max_block), x) < RTOL[dtype]


@pytest.mark.parametrize("max_block", [16, MAX_SINGLE_BLOCK])
@pytest.mark.parametrize("scale, shift", [(1e3, 0.0), (1.0, 1e4), (1.0, -1e4), (30.0, -300.0)])
def test_very_large_and_very_negative_logits(scale, shift, max_block, device, rng):
    x = _logits((4, 50), torch.float32, device, rng, scale=scale) + shift
    out = softmax(x, max_block=max_block)
    assert torch.isfinite(out).all()
    assert _rel_err(out, x) < RTOL[torch.float32]


@pytest.mark.parametrize("max_block", [16, MAX_SINGLE_BLOCK])
def test_minus_inf_entries(max_block, device, rng):
    x = _logits((6, 40), torch.float32, device, rng)
    x[0, :20] = float("-inf")  # the first blocks of the online path are all -inf: the guard's case
    x[1, 25:] = float("-inf")  # -inf at the end
    x[2, ::3] = float("-inf")  # scattered, like a mask
    x[3, :39] = float("-inf")  # one finite entry: probability 1
    out = softmax(x, max_block=max_block)
    ref = torch.softmax(x.double().cpu(), dim=-1)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double().cpu(), ref, rtol=1e-5, atol=1e-7)
    assert (out[x == float("-inf")] == 0).all()
    assert out[3, 39].item() == 1.0


@pytest.mark.parametrize("max_block", [16, MAX_SINGLE_BLOCK])
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_minus_inf_row_gives_nan_like_torch(max_block, dtype, device, rng):
    """The chapter's convention: a row with no finite entry has no softmax (0 / 0); it comes out NaN."""
    x = _logits((3, 33), dtype, device, rng)
    x[1] = float("-inf")
    out = softmax(x, max_block=max_block)
    assert torch.isnan(out[1]).all()
    assert torch.isnan(torch.softmax(x.float().cpu(), dim=-1)[1]).all()  # torch does the same
    assert not torch.isnan(out[0]).any() and not torch.isnan(out[2]).any()  # other rows are untouched
    assert _rel_err(out[::2].contiguous(), x[::2]) < RTOL[dtype]


def test_one_element_rows_are_one(device, rng):
    x = _logits((9, 1), torch.float32, device, rng, scale=1e4)
    assert torch.equal(softmax(x).cpu(), torch.ones(9, 1))


def test_any_leading_shape(device, rng):
    x = _logits((2, 3, 4, 37), torch.float16, device, rng)
    out = softmax(x)
    assert out.shape == x.shape
    assert _rel_err(out, x) < RTOL[torch.float16]


def test_empty_input_gives_empty_output(device):
    for shape in [(0, 8), (4, 0)]:
        x = torch.empty(shape, device=device)
        assert softmax(x).shape == shape


def test_rows_sum_to_one_and_every_row_written(device, rng):
    x = _logits((37, 300), torch.float32, device, rng)
    # 64: the online kernel, 4 programs looping over 37 rows; MAX_SINGLE_BLOCK: 2 rows per program, 37 is odd
    for max_block in (64, MAX_SINGLE_BLOCK):
        out = softmax(x, max_block=max_block)
        torch.testing.assert_close(out.sum(dim=-1).cpu(), torch.ones(37), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "make_input, kwargs, error, message",
    [
        (lambda d: torch.randint(0, 9, (4, 8), device=d), {}, TypeError, "dtype int64"),
        (lambda d: torch.randn(4, 8, device=d, dtype=torch.float64), {}, TypeError, "dtype float64"),
        (lambda d: torch.randn(8, 4, device=d).t(), {}, ValueError, "not contiguous"),
        (lambda d: torch.tensor(1.0, device=d), {}, ValueError, "at least 1 dimension"),
        (lambda d: torch.randn(4, 8, device=d), {"max_block": 100}, ValueError, "power of two"),
        (lambda d: torch.randn(4, 8, device=d), {"max_block": 8}, ValueError, "power of two >= 16"),
    ],
    ids=["int", "float64", "non-contiguous", "0-d", "max-block-not-pow2", "max-block-small"],
)
def test_bad_input_names_the_problem(make_input, kwargs, error, message, device):
    with pytest.raises(error, match=message):
        softmax(make_input(device), **kwargs)


def test_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="on the CPU; Triton kernels need a CUDA tensor"):
        softmax(torch.randn(4, 8))


def test_paths_and_warps():
    assert launch_config(MAX_SINGLE_BLOCK)["path"] == "single block"
    assert launch_config(MAX_SINGLE_BLOCK + 1)["path"] == "online"
    assert launch_config(1000)["block_size"] == 1024
    # Short rows are packed: every single-block program holds at least 1,024 values.
    assert [launch_config(n)["rows_per_program"] for n in (16, 256, 300, 1024, 5000)] == [64, 4, 2, 1, 1]
    for n in (1, 256, 4096, MAX_SINGLE_BLOCK, 10**6):
        assert 2 <= launch_config(n)["num_warps"] <= 32


# ---- on the GPU: realistic sizes, every dtype, both paths (run by `pytest -m gpu` on a GPU machine) ----

@pytest.mark.gpu
@pytest.mark.parametrize("n_rows, n_cols", [(4096, 256), (3000, 1000), (1024, 4096), (257, 16384), (129, 16385),
                                            (64, 32768), (16, 100_003), (4, 1 << 20)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_large_on_gpu(n_rows, n_cols, dtype, rng):
    x = _logits((n_rows, n_cols), dtype, "cuda", rng)
    out = softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < RTOL[dtype], f"relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("n_cols", [1000, 50_000])
def test_minus_inf_rows_on_gpu(n_cols, rng):
    x = _logits((8, n_cols), torch.float32, "cuda", rng)
    x[1] = float("-inf")
    x[2, : n_cols // 2] = float("-inf")
    out = softmax(x)
    assert torch.isnan(out[1]).all()
    keep = [0, 2, 3, 4, 5, 6, 7]
    torch.testing.assert_close(out[keep].double(), torch.softmax(x[keep].double(), dim=-1), rtol=1e-5, atol=1e-8)


@pytest.mark.gpu
def test_huge_tensor_offsets_do_not_overflow():
    """More than 2^31 elements: row * n_cols needs int64 offsets."""
    n_rows, n_cols = 2**17 + 1, 2**14
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
    out = softmax(x)
    last = torch.softmax(x[-2:].float(), dim=-1)
    torch.testing.assert_close(out[-2:].float(), last, rtol=2e-3, atol=1e-6)


@pytest.mark.gpu
def test_cpu_tensor_on_a_gpu_machine_is_refused():
    assert not kernels.interpreting()
    with pytest.raises(ValueError, match="x is on the CPU"):
        softmax(torch.randn(4, 8))
