# Chapter 14: chapter 10's small model trained with every sequence split over two ranks (ring attention, zigzag
# layout), against the same training in one process from the same seed. On a CPU the ranks are two processes over
# gloo and the model is tiny; with --gpu, two GPUs over NCCL, the book's kernels and bf16 (kept out of the page's
# output). Run: python snippets/ch14/train_two_ranks.py [--gpu] [--losses FILE]
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "snippets" / "ch10")]  # the book's root for `kernels`; tiny_gpt
from tiny_gpt import Config, TinyGPT, batches, book_text  # noqa: E402

from kernels import ring_attention as ring  # noqa: E402

WORLD, LAYOUT = 2, "zigzag"
GPU = "--gpu" in sys.argv
CONFIG = Config() if GPU else Config(layers=2, heads=4, head_dim=16, context=64, batch=4)
STEPS, LR = (200, 1e-3) if GPU else (8, 1e-2)
# Summed in a different order, the same losses differ in the last bits; bf16 on a GPU rounds far more.
TOLERANCE = 2e-2 if GPU else 1e-4


# --8<-- [start:sharded]
class ShardedGPT(TinyGPT):
    """Chapter 10's model on one rank's share of each sequence: the one change is that a token's position is no
    longer its index in the tensor, so the position embedding is looked up by position."""

    def forward(self, tokens, positions):
        x = self.embed(tokens) + self.position[positions]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def train_share(rank: int, device: str) -> list[float]:
    torch.manual_seed(0)  # the same initial weights on every rank, and as in one process
    model = ShardedGPT(CONFIG, lambda q, k, v: ring.attention(q, k, v, causal=True, layout=LAYOUT)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    positions = ring.positions(CONFIG.context // WORLD, rank, WORLD, LAYOUT, device)
    losses = []
    for inputs, targets in batches(book_text(), CONFIG, STEPS, seed=0):  # the same batches on every rank
        inputs, targets = inputs[:, positions.cpu()].to(device), targets[:, positions.cpu()].to(device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=GPU):
            logits = model(inputs, positions)
        # This rank's share of the mean over every token of the batch; the shares add up to the whole loss.
        loss = F.cross_entropy(logits.float().view(-1, CONFIG.vocab), targets.reshape(-1), reduction="sum")
        loss = loss / (CONFIG.batch * CONFIG.context)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for p in model.parameters():  # the gradients of the shares add up too: every rank takes the same step
            dist.all_reduce(p.grad)
        optimizer.step()
        dist.all_reduce(loss.detach())
        losses.append(loss.item())
    return losses
# --8<-- [end:sharded]


def whole_attention(q, k, v):
    """One process attends over whole sequences: the book's kernels on a GPU, PyTorch's attention on a CPU."""
    if GPU:
        from kernels.flash_attention_backward_fast import attention

        return attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)  # the fast kernels' layout
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def train_whole(device: str) -> list[float]:
    torch.manual_seed(0)
    model = TinyGPT(CONFIG, whole_attention).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    losses = []
    for inputs, targets in batches(book_text(), CONFIG, STEPS, seed=0):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=GPU):
            logits = model(inputs.to(device))
        loss = F.cross_entropy(logits.float().view(-1, CONFIG.vocab), targets.to(device).reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def rank_main(rank: int, init_file: str, result_file: str) -> None:
    torch.set_num_threads(1)
    device = f"cuda:{rank}" if GPU else "cpu"
    if GPU:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if GPU else "gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        losses = train_share(rank, device)
        if rank == 0:
            torch.save(losses, result_file)
        dist.barrier()  # both ranks done with the group before either tears it down (gloo could abort otherwise)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(os.path.join(tmp, "init"), os.path.join(tmp, "losses")), nprocs=WORLD, join=True)
        split = torch.load(os.path.join(tmp, "losses"))
    whole = train_whole("cuda:0" if GPU else "cpu")
    gap = max(abs(a - b) for a, b in zip(split, whole, strict=True))
    print(f"{len(split)} steps, each sequence of {CONFIG.context} tokens split over {WORLD} ranks ({LAYOUT})")
    print(f"same losses as one process to {TOLERANCE:g}:", gap < TOLERANCE)
    print("the loss went down:", split[-1] < split[0])
    if GPU:
        print(f"largest difference {gap:.2e}; first and last loss {split[0]:.4f} -> {split[-1]:.4f}")
    if "--losses" in sys.argv:  # both runs' losses, for the benchmark that records this run (book/bench)
        record = {"split": split, "whole": whole, "tolerance": TOLERANCE, "world": WORLD, "layout": LAYOUT,
                  "lr": LR, "config": dataclasses.asdict(CONFIG)}
        Path(sys.argv[sys.argv.index("--losses") + 1]).write_text(json.dumps(record))
