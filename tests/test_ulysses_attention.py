"""All-to-all (Ulysses) attention over several CPU processes (the gloo backend) against float64 attention in one
process: forward and backward, world sizes 2 and 3, causal or not, grouped heads, odd chunk lengths; the two
exchanges undo each other; bad inputs get the same clear error on every rank."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels import ring_attention as ring
from kernels import ulysses_attention as ulysses
from tests.test_ring_attention import _join, _reference

HEADS = {2: (4, 2), 3: (6, 3)}  # world size: (query heads, K/V heads), two query heads per K/V head


def _compare(rank, world, init_file):
    _join(rank, world, init_file)
    try:
        heads, kv_heads = HEADS[world]
        for causal in (False, True):
            g = torch.Generator().manual_seed(0)
            n = world * 5  # odd chunks of 5 rows
            q, do = (torch.randn(2, heads, n, 8, generator=g, dtype=torch.float64) for _ in range(2))
            k, v = (torch.randn(2, kv_heads, n, 8, generator=g, dtype=torch.float64) for _ in range(2))
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            expected = _reference(*leaves, causal)
            expected.backward(do)
            mine = [ring.shard(t, rank, world, "contiguous").requires_grad_() for t in (q, k, v)]
            out = ulysses.attention(*mine, causal=causal)
            out.backward(ring.shard(do, rank, world, "contiguous"))
            where = f"world {world}, causal={causal}"
            torch.testing.assert_close(out, ring.shard(expected.detach(), rank, world, "contiguous"), msg=where)
            for got, leaf in zip(mine, leaves, strict=True):
                torch.testing.assert_close(got.grad, ring.shard(leaf.grad, rank, world, "contiguous"), msg=where)
        x = torch.randn(1, 2 * world, 3, 4)
        whole_heads = ulysses.to_heads(x)
        assert whole_heads.shape == (1, 2, 3 * world, 4)
        assert torch.equal(ulysses.to_tokens(whole_heads), x)
    finally:
        dist.destroy_process_group()


def _bad_inputs(rank, world, init_file):
    _join(rank, world, init_file)
    try:
        q, kv = torch.randn(1, 4, 3, 8), torch.randn(1, 1, 3, 8)  # one K/V head cannot be shared by two ranks
        with pytest.raises(ValueError, match=r"rank 0: .*K/V heads \(1\) must divide by 2.*rank 1: "):
            ulysses.attention(q, kv, kv)
        q = torch.randn(1, 2, 4 + rank, 8)  # each rank a different length
        with pytest.raises(ValueError, match="every rank must hold chunks of the same shapes"):
            ulysses.attention(q, q, q)
    finally:
        dist.destroy_process_group()


def _spawn(fn, world):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(fn, args=(world, os.path.join(tmp, "init")), nprocs=world, join=True)


@pytest.mark.parametrize("world", [2, 3])
def test_ulysses_attention_matches_one_process_forward_and_backward(world):
    _spawn(_compare, world)


def test_bad_inputs_get_the_same_clear_error_on_every_rank():
    _spawn(_bad_inputs, 2)
