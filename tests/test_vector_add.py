import pytest
import torch

import kernels
from kernels.vector_add import add


def _randn(n, dtype, device, rng):
    return torch.randn(n, generator=rng, dtype=torch.float32).to(dtype=dtype, device=device)


@pytest.mark.parametrize("n", [1, 17, 1000, 4097])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_add_matches_float64(n, dtype, device, rng):
    x, y = _randn(n, dtype, device, rng), _randn(n, dtype, device, rng)
    out = add(x, y, block_size=256)
    expected = (x.double() + y.double()).to(dtype)  # the correctly rounded sum
    assert out.dtype == dtype and out.shape == x.shape
    # On a GPU the sum is correctly rounded. Triton's CPU interpreter converts fp32 to bf16 by truncating,
    # so there a bf16 result may be one unit in the last place (2^-7 relative) toward zero.
    rtol = 2**-7 if dtype == torch.bfloat16 and kernels.interpreting() else 0.0
    torch.testing.assert_close(out.cpu(), expected.cpu(), rtol=rtol, atol=0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2**20 + 3, 2**26])
def test_add_large_on_gpu(n, rng):
    x, y = _randn(n, torch.float32, "cuda", rng), _randn(n, torch.float32, "cuda", rng)
    assert torch.equal(add(x, y), x + y)


def test_every_element_written(device, rng):
    x, y = _randn(3000, torch.float32, device, rng), _randn(3000, torch.float32, device, rng)
    out = add(x, y, block_size=128)
    assert not torch.isnan(out).any()


@pytest.mark.parametrize(
    "make_inputs, error, message",
    [
        (lambda d: (torch.randn(8, device=d), torch.randn(9, device=d)), ValueError, "same length"),
        (lambda d: (torch.randn(8, device=d), torch.randn(8, device=d).half()), TypeError, "one dtype"),
        (lambda d: (torch.randint(0, 9, (8,), device=d), torch.randint(0, 9, (8,), device=d)),
         TypeError, "dtype int64"),
        (lambda d: (torch.randn(4, 4, device=d), torch.randn(4, 4, device=d)), ValueError, "must be 1-D"),
        (lambda d: (torch.randn(16, device=d)[::2], torch.randn(8, device=d)), ValueError, "not contiguous"),
    ],
    ids=["length", "mixed-dtype", "int-dtype", "2d", "non-contiguous"],
)
def test_bad_input_names_the_problem(make_inputs, error, message, device):
    x, y = make_inputs(device)
    with pytest.raises(error, match=message):
        add(x, y)


def test_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="on the CPU; Triton kernels need a CUDA tensor"):
        add(torch.randn(4), torch.randn(4))


@pytest.mark.gpu
def test_cpu_tensor_beside_a_gpu_tensor_is_refused():
    with pytest.raises(ValueError, match="y is on the CPU"):
        add(torch.randn(4, device="cuda"), torch.randn(4))
