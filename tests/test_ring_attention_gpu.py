"""Ring attention on two GPUs over NCCL, at sizes the CPU tests cannot reach: fp16 and bf16, both layouts, causal or
not, grouped heads, lengths that are not multiples of a tile, head dims 64 and 128. Each rank's output and gradients
are compared with float64 attention of the whole sequence, and must be as close to it as the book's one-GPU kernels
are (twice their own error, plus a little). NVLink multicast stays off, as shared machines require."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from book.bench.ring import MULTICAST_OFF
from kernels import flash_attention_backward_fast as one_gpu
from kernels import ring_attention as ring
from tests.test_ring_attention import _reference

pytestmark = pytest.mark.gpu

WORLD = 2
# (dtype, heads, kv_heads, whole sequence, head_dim): the zigzag layout cuts 2 x WORLD pieces of 1,000 or 1,500 tokens
SHAPES = [(torch.bfloat16, 8, 2, 4000, 128), (torch.float16, 4, 4, 6000, 64)]
CASES = [(layout, causal) for layout in ring.LAYOUTS for causal in (False, True)]


def _error(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def _compare(rank, world, init_file, shape):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    try:
        dtype, heads, kv_heads, n, d = shape
        for layout, causal in CASES:
            g = torch.Generator(device="cuda").manual_seed(0)
            q, do = (torch.randn(1, heads, n, d, generator=g, device="cuda", dtype=dtype) for _ in range(2))
            k, v = (torch.randn(1, kv_heads, n, d, generator=g, device="cuda", dtype=dtype) for _ in range(2))
            exact = [t.double().requires_grad_() for t in (q, k, v)]
            expected = _reference(*exact, causal)
            expected.backward(do.double())
            whole = [t.clone().requires_grad_() for t in (q, k, v)]
            one_gpu.attention(*whole, causal=causal).backward(do)
            mine = [ring.shard(t, rank, world, layout).clone().requires_grad_() for t in (q, k, v)]
            out = ring.attention(*mine, causal=causal, layout=layout)
            out.backward(ring.shard(do, rank, world, layout))
            where = f"{dtype}, {heads}/{kv_heads} heads, n {n}, d {d}, {layout}, causal={causal}, rank {rank}"
            pairs = [("out", out, expected, one_gpu.attention(*(t.detach() for t in whole), causal=causal))]
            pairs += [(f"d{name}", got.grad, want.grad, alone.grad)
                      for name, got, want, alone in zip("qkv", mine, exact, whole, strict=True)]
            for name, got, want, alone in pairs:
                want = want.detach()
                bound = 2 * _error(ring.shard(alone, rank, world, layout), ring.shard(want, rank, world, layout))
                error = _error(got, ring.shard(want, rank, world, layout))
                assert error <= bound + 1e-3, f"{name}: error {error:.2e} against one GPU's {bound / 2:.2e}, {where}"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: f"{shape[0]}-{shape[1]}/{shape[2]}-n{shape[3]}-d{shape[4]}")
def test_ring_on_two_gpus_is_as_close_to_float64_as_one_gpu(shape, monkeypatch):
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} GPUs of one host")
    for name, value in MULTICAST_OFF.items():
        monkeypatch.setenv(name, value)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_compare, args=(WORLD, os.path.join(tmp, "init"), shape), nprocs=WORLD, join=True)
