# Chapter 14: kernels/ring_attention.py on two CPU processes (the gloo backend), against attention in one process.
# Each rank holds its zigzag share of a 12-token sequence; rank 0 prints what both found.
# Run: python snippets/ch14/ring_two_ranks.py
import math
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the book's root, for `kernels`
from kernels import ring_attention as ring  # noqa: E402

WORLD, N = 2, 12


def one_process(q, k, v):
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(torch.ones(N, N).triu(1).bool(), -math.inf)
    return torch.softmax(s, -1) @ v


def rank_main(rank, init_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, N, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    one_process(q, k, v).sum().backward()  # every rank computes the reference, to compare its share
    mine = [ring.shard(t.detach(), rank, WORLD, "zigzag").requires_grad_() for t in (q, k, v)]
    out = ring.attention(*mine, causal=True, layout="zigzag")
    out.sum().backward()
    with torch.no_grad():
        expected = ring.shard(one_process(q, k, v), rank, WORLD, "zigzag")
        errors = [(out - expected).abs().max()] + [(m.grad - ring.shard(t.grad, rank, WORLD, "zigzag")).abs().max()
                                                   for m, t in zip(mine, (q, k, v), strict=True)]
    report = torch.tensor([rank, *ring.positions(N // WORLD, rank, WORLD, "zigzag").tolist(), *errors],
                          dtype=torch.float64)
    everyone = [torch.empty_like(report) for _ in range(WORLD)]
    dist.all_gather(everyone, report)
    if rank == 0:
        for r in everyone:
            positions = [int(p) for p in r[1:1 + N // WORLD]]
            names = ("output", "dQ", "dK", "dV")
            same = ", ".join(f"{name} {bool(error < 1e-12)}" for name, error in zip(names, r[-4:], strict=True))
            print(f"rank {int(r[0])} holds positions {positions}; equal to one process within 1e-12: {same}")
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(os.path.join(tmp, "init"),), nprocs=WORLD, join=True)
