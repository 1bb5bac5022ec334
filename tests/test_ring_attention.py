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
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
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
            overlap = causal  # without overlap (each send waited for first) the results are the same
            out = ring.attention(*mine, causal=causal, layout=layout, overlap=overlap)
            out.backward(ring.shard(do, rank, world, layout))
            where = f"world {world}, {layout}, causal={causal}"
            torch.testing.assert_close(out, ring.shard(expected.detach(), rank, world, layout), msg=where)
            for got, leaf in zip(mine, leaves, strict=True):
                torch.testing.assert_close(got.grad, ring.shard(leaf.grad, rank, world, layout), msg=where)
    finally:
        dist.destroy_process_group()


def _compare_kernels(rank, world, init_file):
    """The same ring with every block computed by the book's kernels (Triton's interpreter on a CPU), fp32."""
    _join(rank, world, init_file)
    try:
        for layout in ring.LAYOUTS:
            g = torch.Generator().manual_seed(1)
            n = world * 6
            q, k, v, do = (torch.randn(1, 2, n, 16, generator=g) for _ in range(4))
            leaves = [t.clone().double().requires_grad_() for t in (q, k, v)]
            expected = _reference(*leaves, True)
            expected.backward(do.double())
            mine = [ring.shard(t, rank, world, layout).requires_grad_() for t in (q, k, v)]
            out = ring.attention(*mine, causal=True, layout=layout, use_kernels=True)
            out.backward(ring.shard(do, rank, world, layout))
            for got, want in zip([out, *(m.grad for m in mine)], [expected, *(leaf.grad for leaf in leaves)],
                                 strict=True):
                torch.testing.assert_close(got.double(), ring.shard(want.detach(), rank, world, layout), rtol=1e-4,
                                           atol=1e-4, msg=f"kernels, {layout}")
    finally:
        dist.destroy_process_group()


def _bad_inputs(rank, world, init_file):
    _join(rank, world, init_file)
    try:
        q = torch.randn(1, 2, 4 + rank, 8)  # each rank a different length
        with pytest.raises(ValueError, match="every rank must hold chunks of the same shapes"):
            ring.attention(q, q, q)
        q = torch.randn(1, 2, 3 + rank, 8)  # rank 0 alone has an odd length: both ranks raise, neither waits
        with pytest.raises(ValueError, match="rank 0: the zigzag layout .* local length must be even, got 3 "):
            ring.attention(q, q, q, layout="zigzag")
        q = torch.randn(1, 2, 4, 8)
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


def test_the_book_kernels_inside_the_ring_match_one_process():
    _spawn(_compare_kernels, 2)


def test_bad_inputs_get_the_same_clear_error_on_every_rank():
    _spawn(_bad_inputs, 2)


def test_a_block_splits_into_pairs_of_pieces_seen_whole_causal_within_or_skipped():
    assert list(ring.piece_pairs(1, 0, 2, "contiguous", causal=True)) == [(0, 0, False)]
    assert list(ring.piece_pairs(0, 1, 2, "contiguous", causal=True)) == []  # keys after every query: skipped
    # zigzag, 2 ranks: rank 0 holds pieces 0 and 3, rank 1 pieces 1 and 2
    assert list(ring.piece_pairs(0, 0, 2, "zigzag", causal=True)) == [(0, 0, True), (1, 0, False), (1, 1, True)]
    assert list(ring.piece_pairs(0, 1, 2, "zigzag", causal=True)) == [(1, 0, False), (1, 1, False)]
    assert len(list(ring.piece_pairs(0, 1, 2, "zigzag", causal=False))) == 4


def test_zigzag_gives_every_rank_one_early_and_one_late_chunk():
    assert ring.positions(4, 0, 2, "zigzag").tolist() == [0, 1, 6, 7]
    assert ring.positions(4, 1, 2, "zigzag").tolist() == [2, 3, 4, 5]
    assert ring.positions(3, 2, 3, "contiguous").tolist() == [6, 7, 8]
    with pytest.raises(ValueError, match="must be a multiple of 6"):
        ring.shard(torch.zeros(1, 1, 9, 2), 0, 3, "zigzag")
