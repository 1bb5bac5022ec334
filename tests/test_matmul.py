import warnings

import pytest
import torch
import triton
import triton.language as tl

import kernels
from kernels.matmul import (
    CONFIGS,
    GPU_CONFIGS,
    TMA_CONFIGS,
    TMA_GPU_CONFIGS,
    TMAFallbackWarning,
    _check_int32_offsets,
    describe,
    grouped_tile,
    matmul,
    matmul_kernel,
    matmul_tma,
    matmul_tma_kernel,
    tma_fallback_reason,
)

# Relative error ||c - ref|| / ||ref|| against the float64 product of the same (rounded) inputs. The products
# are exact in fp32 and the fp32 sums are far more precise than the output, so the output rounding dominates:
# fp16 keeps 11 significant bits (2^-11 ~ 4.9e-4 per element), bf16 8 (2^-8 ~ 3.9e-3; Triton's CPU
# interpreter truncates fp32 to bf16, which can double that).
BOUNDS = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def _randn(shape, dtype, device, rng):
    return torch.randn(shape, generator=rng, dtype=torch.float32).to(dtype=dtype, device=device)


def _rel_error(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    ref = a.double() @ b.double()
    return ((c.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("mnk", [(17, 33, 65), (1, 1, 1), (16, 16, 16), (31, 7, 129), (48, 64, 3), (5, 40, 32)],
                         ids=lambda s: "x".join(map(str, s)))
def test_matmul_matches_float64(mnk, dtype, device, rng):
    m, n, k = mnk
    a, b = _randn((m, k), dtype, device, rng), _randn((k, n), dtype, device, rng)
    c = matmul(a, b)
    assert c.shape == (m, n) and c.dtype == dtype and c.device == a.device
    assert _rel_error(c, a, b) < BOUNDS[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_every_element_is_close(dtype, device, rng):
    # A norm can hide one wrong element; check each one (bf16: a few units in the last place, plus slack for
    # the interpreter's truncation; entries near zero get an absolute allowance relative to the row's scale).
    a, b = _randn((37, 50), dtype, device, rng), _randn((50, 19), dtype, device, rng)
    ref = (a.double() @ b.double()).cpu()
    ulp = 2**-10 if dtype == torch.float16 else 2**-7
    torch.testing.assert_close(matmul(a, b).double().cpu(), ref, rtol=2 * ulp, atol=2 * ulp * 50**0.5)


def test_transposed_and_strided_views(device, rng):
    # The kernel follows strides, so views need no copy: a transposed A, a column slice of B.
    a = _randn((40, 24), torch.float16, device, rng)
    b = _randn((40, 70), torch.float16, device, rng)[:, ::2]
    c = matmul(a.T, b)
    assert _rel_error(c, a.T, b) < BOUNDS[torch.float16]


def test_empty_dimensions(device):
    a = torch.ones(3, 0, dtype=torch.float16, device=device)
    b = torch.ones(0, 5, dtype=torch.float16, device=device)
    assert torch.equal(matmul(a, b).cpu(), torch.zeros(3, 5, dtype=torch.float16))  # K = 0: a sum of nothing
    assert matmul(b.T, torch.ones(0, 4, dtype=torch.float16, device=device)).shape == (5, 4)
    assert matmul(torch.ones(0, 6, dtype=torch.float16, device=device),
                  torch.ones(6, 2, dtype=torch.float16, device=device)).shape == (0, 2)


def test_pinned_config_gives_the_same_answer(device, rng):
    a, b = _randn((33, 40), torch.float16, device, rng), _randn((40, 18), torch.float16, device, rng)
    assert torch.equal(matmul(a, b, config=CONFIGS[0]), matmul(a, b, config=CONFIGS[-1]))
    assert _rel_error(matmul(a, b, config=CONFIGS[0]), a, b) < BOUNDS[torch.float16]


@triton.jit
def _tile_of_each_program(out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)


@pytest.mark.parametrize("m, n, group_m", [(64, 64, 2), (80, 48, 2), (112, 32, 3), (16, 96, 8), (96, 16, 4)])
def test_grouped_order_covers_every_tile_once(m, n, group_m, device):
    block = 16
    tiles_m, tiles_n = triton.cdiv(m, block), triton.cdiv(n, block)
    out = torch.full((tiles_m * tiles_n, 2), -1, dtype=torch.int32, device=device)
    _tile_of_each_program[(tiles_m * tiles_n,)](out, m, n, BLOCK_M=block, BLOCK_N=block, GROUP_M=group_m)
    tiles = [tuple(t) for t in out.cpu().tolist()]
    assert sorted(tiles) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]
    # Within a full group, consecutive programs walk down a column of GROUP_M tiles before moving right.
    if tiles_m >= group_m:
        assert tiles[:group_m] == [(i, 0) for i in range(group_m)]


def test_gpu_configs_fit_in_shared_memory():
    # Each stage holds an A tile and a B tile of 2-byte elements; an H100 gives a block up to 227 KiB.
    for config in GPU_CONFIGS:
        kw = config.kwargs
        per_stage = (kw["BLOCK_M"] * kw["BLOCK_K"] + kw["BLOCK_K"] * kw["BLOCK_N"]) * 2
        assert per_stage * config.num_stages <= 227 * 1024, describe(config)
        assert all(kw[key] & (kw[key] - 1) == 0 for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K")), describe(config)


def test_describe():
    assert describe(GPU_CONFIGS[0]) == "128x256x64, 3 stages, 8 warps"


@pytest.mark.parametrize(
    "make_inputs, error, message",
    [
        (lambda d: (torch.randn(4, 5, device=d).half(), torch.randn(6, 3, device=d).half()), ValueError,
         r"inner dimensions differ: a is 4 x 5 and b is 6 x 3"),
        (lambda d: (torch.randn(5, device=d).half(), torch.randn(5, 3, device=d).half()), ValueError,
         r"a must be 2-D, got 1-D with shape \(5,\); for a vector use a\[None, :\]"),
        (lambda d: (torch.randn(4, 5, device=d).half(), torch.randn(2, 5, 3, device=d).half()), ValueError,
         r"b must be 2-D, got 3-D .*torch.bmm"),
        (lambda d: (torch.randn(4, 5, device=d).half(), torch.randn(5, 3, device=d).bfloat16()), TypeError,
         "inputs must have one dtype, got a is float16, b is bfloat16"),
        (lambda d: (torch.randn(4, 5, device=d), torch.randn(5, 3, device=d)), TypeError,
         "a has dtype float32; supported: float16, bfloat16"),
        (lambda d: (torch.randn(4, 5, device=d).half(), torch.ones(5, 3, device=d, dtype=torch.int8)), TypeError,
         "b has dtype int8"),
        (lambda d: (torch.randn(4, 5, device=d).half(), [[1.0]]), TypeError, "b must be a torch.Tensor, got list"),
    ],
    ids=["inner-dims", "1d", "3d", "mixed-dtype", "fp32", "int8", "not-a-tensor"],
)
def test_bad_input_names_the_problem(make_inputs, error, message, device):
    a, b = make_inputs(device)
    with pytest.raises(error, match=message):
        matmul(a, b)


def test_int32_offset_limit_is_checked():
    # The kernel computes offsets in 32 bits; the wrapper refuses matrices that reach past 2^31 elements.
    # A meta tensor has a shape and strides but no memory, which is all the check reads.
    _check_int32_offsets("a", torch.empty(2**15, 2**16, device="meta"))  # offsets up to 2^31 - 1: fine
    with pytest.raises(ValueError, match=r"b spans 2,147,483,649 elements, more than this kernel's 32-bit"):
        _check_int32_offsets("b", torch.empty(2**15 + 1, 2**16, device="meta")[:, :1])


def test_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="a is on the CPU; Triton kernels need a CUDA tensor"):
        matmul(torch.randn(4, 4).half(), torch.randn(4, 4).half())


def test_interpreter_gets_one_small_config():
    if kernels.interpreting():
        assert len(CONFIGS) == 1 and matmul_kernel.configs == CONFIGS
    else:
        assert CONFIGS is GPU_CONFIGS


@pytest.mark.gpu
def test_cpu_tensor_beside_gpu_tensor_is_refused():
    with pytest.raises(ValueError, match="b is on the CPU; Triton kernels need a CUDA tensor"):
        matmul(torch.randn(4, 4, device="cuda").half(), torch.randn(4, 4).half())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("mnk", [(4096, 4096, 4096), (8192, 8192, 8192), (1000, 3000, 777), (4097, 129, 8191),
                                 (2048, 4096, 1024)], ids=lambda s: "x".join(map(str, s)))
def test_large_on_gpu(mnk, dtype, rng):
    m, n, k = mnk
    a, b = _randn((m, k), dtype, "cuda", rng), _randn((k, n), dtype, "cuda", rng)
    c = matmul(a, b)
    # Check a slice of rows against float64 (the full float64 product of 8192^3 is slow even on a GPU).
    ref = a[:256].double() @ b.double()
    err = ((c[:256].double() - ref).norm() / ref.norm()).item()
    assert err < BOUNDS[dtype]
    # And the whole result against cuBLAS, which rounds the same way up to the order of the sums.
    torch_c = a @ b
    assert ((c.float() - torch_c.float()).norm() / torch_c.float().norm()).item() < 2 * BOUNDS[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(GPU_CONFIGS)))
def test_every_gpu_config_is_correct(index, rng):
    # The autotuner may pick any of them, for some shape: each must compile and be right, odd shapes included.
    a, b = _randn((1031, 517), torch.bfloat16, "cuda", rng), _randn((517, 779), torch.bfloat16, "cuda", rng)
    assert _rel_error(matmul(a, b, config=GPU_CONFIGS[index]), a, b) < BOUNDS[torch.bfloat16]


# --- matmul_tma: the same product, tiles moved through tensor descriptors (Hopper's TMA) ---


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("mnk", [(32, 48, 64), (17, 40, 72), (1, 8, 8), (33, 64, 24), (50, 16, 200)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tma_matches_float64(mnk, dtype, device, rng):
    # Row lengths K and N are multiples of 8 (16 bytes): the TMA path, with ragged edges in M and K.
    m, n, k = mnk
    a, b = _randn((m, k), dtype, device, rng), _randn((k, n), dtype, device, rng)
    assert tma_fallback_reason(a, b) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", TMAFallbackWarning)
        c = matmul_tma(a, b)
    assert c.shape == (m, n) and c.dtype == dtype and c.device == a.device
    assert _rel_error(c, a, b) < BOUNDS[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_tma_every_element_is_close(dtype, device, rng):
    a, b = _randn((37, 48), dtype, device, rng), _randn((48, 24), dtype, device, rng)
    ref = (a.double() @ b.double()).cpu()
    ulp = 2**-10 if dtype == torch.float16 else 2**-7
    torch.testing.assert_close(matmul_tma(a, b).double().cpu(), ref, rtol=2 * ulp, atol=2 * ulp * 48**0.5)


@pytest.mark.parametrize(
    "make_inputs, reason",
    [
        # 17 x 65 @ 65 x 33: a's rows are 65 fp16 (130 bytes), b's and C's 33 (66 bytes); none is 16-byte aligned.
        (lambda d, g: (_randn((17, 65), torch.float16, d, g), _randn((65, 33), torch.float16, d, g)),
         r"a has row stride 65 elements \(130 bytes\), not a multiple of 16 bytes \(8 elements\)"),
        (lambda d, g: (_randn((17, 64), torch.float16, d, g), _randn((64, 33), torch.float16, d, g)),
         r"b has row stride 33 elements \(66 bytes\)"),
        (lambda d, g: (_randn((17, 64), torch.bfloat16, d, g), _randn((64, 80), torch.bfloat16, d, g)[:, :33]),
         r"the output's rows of 33 elements \(66 bytes\) are not a multiple of 16 bytes"),
        (lambda d, g: (_randn((64, 32), torch.float16, d, g).T, _randn((64, 16), torch.float16, d, g)),
         r"a has column stride 32; its rows must be contiguous"),
        (lambda d, g: (_randn((17 * 64 + 1,), torch.float16, d, g)[1:].view(17, 64),
                       _randn((64, 16), torch.float16, d, g)),
         r"a starts at an address that is not a multiple of 16 bytes"),
    ],
    ids=["17x33x65", "b-rows", "output-rows", "transposed", "unaligned-base"],
)
def test_tma_falls_back_with_the_reason(make_inputs, reason, device, rng):
    a, b = make_inputs(device, rng)
    with pytest.warns(TMAFallbackWarning, match="matmul_tma: falling back to matmul \\(pointer loads\\): " + reason):
        c = matmul_tma(a, b)
    assert _rel_error(c, a, b) < BOUNDS[a.dtype]
    assert torch.equal(c, matmul(a, b))  # the fallback is the pointer kernel itself


def test_tma_pinned_config_and_empty_dimensions(device, rng):
    a, b = _randn((33, 40), torch.float16, device, rng), _randn((40, 24), torch.float16, device, rng)
    assert torch.equal(matmul_tma(a, b, config=TMA_CONFIGS[0]), matmul_tma(a, b))
    assert torch.equal(matmul_tma(torch.ones(3, 0, dtype=torch.float16, device=device),
                                  torch.ones(0, 8, dtype=torch.float16, device=device)).cpu(),
                       torch.zeros(3, 8, dtype=torch.float16))
    assert matmul_tma(torch.ones(0, 8, dtype=torch.float16, device=device),
                      torch.ones(8, 16, dtype=torch.float16, device=device)).shape == (0, 16)


@pytest.mark.parametrize(
    "make_inputs, error, message",
    [
        (lambda d: (torch.randn(4, 8, device=d).half(), torch.randn(16, 8, device=d).half()), ValueError,
         r"inner dimensions differ: a is 4 x 8 and b is 16 x 8"),
        (lambda d: (torch.randn(8, device=d).half(), torch.randn(8, 8, device=d).half()), ValueError,
         r"a must be 2-D, got 1-D"),
        (lambda d: (torch.randn(4, 8, device=d).half(), torch.randn(8, 8, device=d).bfloat16()), TypeError,
         "inputs must have one dtype"),
        (lambda d: (torch.randn(4, 8, device=d), torch.randn(8, 8, device=d)), TypeError,
         "a has dtype float32; supported: float16, bfloat16"),
        (lambda d: (torch.randn(4, 8, device=d).half(), "b"), TypeError, "b must be a torch.Tensor, got str"),
    ],
    ids=["inner-dims", "1d", "mixed-dtype", "fp32", "not-a-tensor"],
)
def test_tma_bad_input_names_the_problem(make_inputs, error, message, device):
    a, b = make_inputs(device)
    with pytest.raises(error, match=message):
        matmul_tma(a, b)


def test_tma_configs():
    if kernels.interpreting():
        assert len(TMA_CONFIGS) == 1 and matmul_tma_kernel.configs == TMA_CONFIGS
    for config in TMA_GPU_CONFIGS:  # each fits in an H100 block's 227 KiB of shared memory
        kw = config.kwargs
        assert (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * 2 * config.num_stages <= 227 * 1024
        assert config.pre_hook is not None  # it sets the descriptors' block shapes


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("mnk", [(4096, 4096, 4096), (8192, 8192, 8192), (1000, 3000, 776), (4097, 136, 8192),
                                 (2048, 4096, 1024)], ids=lambda s: "x".join(map(str, s)))
def test_tma_large_on_gpu(mnk, dtype, rng):
    m, n, k = mnk
    a, b = _randn((m, k), dtype, "cuda", rng), _randn((k, n), dtype, "cuda", rng)
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("tensor descriptors need a Hopper GPU (compute capability 9.0)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TMAFallbackWarning)
        c = matmul_tma(a, b)
    ref = a[:256].double() @ b.double()
    assert ((c[:256].double() - ref).norm() / ref.norm()).item() < BOUNDS[dtype]
    torch_c = a @ b
    assert ((c.float() - torch_c.float()).norm() / torch_c.float().norm()).item() < 2 * BOUNDS[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(TMA_GPU_CONFIGS)))
def test_every_tma_gpu_config_is_correct(index, rng):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("tensor descriptors need a Hopper GPU (compute capability 9.0)")
    a, b = _randn((1031, 520), torch.bfloat16, "cuda", rng), _randn((520, 784), torch.bfloat16, "cuda", rng)
    assert tma_fallback_reason(a, b) is None
    assert _rel_error(matmul_tma(a, b, config=TMA_GPU_CONFIGS[index]), a, b) < BOUNDS[torch.bfloat16]


@pytest.mark.gpu
def test_tma_falls_back_on_an_older_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    a = torch.randn(64, 64, device="cuda").half()
    with pytest.warns(TMAFallbackWarning, match="a GPU older than Hopper"):
        matmul_tma(a, a)
