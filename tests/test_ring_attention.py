"""Ring attention over several CPU processes (the gloo backend) against float64 attention in one process: forward and
backward, world sizes 2 and 3, both layouts, causal or not, grouped heads, odd chunk lengths; and bad inputs that get
the same clear error on every rank."""

import math
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels import ring_attention as ring

CASES = [(layout, causal) for layout in ring.LAYOUTS for causal in (False, True)]


def _reference(q, k, v, causal):
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def _join(rank, world, init_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)


def _compare(rank, world, init_file):
    _join(rank, world, init_file)
    try:
        for layout, causal in CASES:
            g = torch.Generator().manual_seed(0)
            n = world * (5 if layout == "contiguous" else 6)  # odd chunks: 5 rows, or two halves of 3
            q, do = (torch.randn(2, 4, n, 8, generator=g, dtype=torch.float64) for _ in range(2))
            k, v = (torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64) for _ in range(2))  # 2 query heads each
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            expected = _reference(*leaves, causal)
            expected.backward(do)
            mine = [ring.shard(t, rank, world, layout).requires_grad_() for t in (q, k, v)]
            out = ring.attention(*mine, causal=causal, layout=layout)
            out.backward(ring.shard(do, rank, world, layout))
            where = f"world {world}, {layout}, causal={causal}"
            torch.testing.assert_close(out, ring.shard(expected.detach(), rank, world, layout), msg=where)
            for got, leaf in zip(mine, leaves, strict=True):
                torch.testing.assert_close(got.grad, ring.shard(leaf.grad, rank, world, layout), msg=where)
    finally:
        dist.destroy_process_group()


def _bad_inputs(rank, world, init_file):
    _join(rank, world, init_file)
    try:
        q = torch.randn(1, 2, 4 + rank, 8)  # each rank a different length
        with pytest.raises(ValueError, match="every rank must hold chunks of the same shapes"):
            ring.attention(q, q, q)
        q = torch.randn(1, 2, 3, 8)
        with pytest.raises(ValueError, match="local length must be even"):
            ring.attention(q, q, q, layout="zigzag")
        with pytest.raises(ValueError, match="multiple of the K/V heads"):
            ring.attention(torch.randn(1, 3, 4, 8), q[:, :2, :1].expand(1, 2, 4, 8), q[:, :2, :1].expand(1, 2, 4, 8))
    finally:
        dist.destroy_process_group()


def _spawn(fn, world, *args):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(fn, args=(world, os.path.join(tmp, "init"), *args), nprocs=world, join=True)


@pytest.mark.parametrize("world", [2, 3])
def test_ring_attention_matches_one_process_forward_and_backward(world):
    _spawn(_compare, world)


def test_bad_inputs_get_the_same_clear_error_on_every_rank():
    _spawn(_bad_inputs, 2)


def test_zigzag_gives_every_rank_one_early_and_one_late_chunk():
    assert ring.positions(4, 0, 2, "zigzag").tolist() == [0, 1, 6, 7]
    assert ring.positions(4, 1, 2, "zigzag").tolist() == [2, 3, 4, 5]
    assert ring.positions(3, 2, 3, "contiguous").tolist() == [6, 7, 8]
    with pytest.raises(ValueError, match="must be a multiple of 6"):
        ring.shard(torch.zeros(1, 1, 9, 2), 0, 3, "zigzag")
