"""A small decoder-only transformer whose attention is a function you pass in, and a training loop for it.

Chapter 10 trains it twice from the same seed on the book's own pages, once with the book's kernels and once
with PyTorch's scaled_dot_product_attention, and compares the losses. Import it; train_tiny.py runs it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Config:
    layers: int = 4
    heads: int = 8
    head_dim: int = 64
    context: int = 1024
    batch: int = 16
    vocab: int = 256  # bytes: no tokenizer to download

    @property
    def width(self) -> int:
        return self.heads * self.head_dim


# --8<-- [start:model]
class Block(nn.Module):
    def __init__(self, config: Config, attention):
        super().__init__()
        self.config, self.attention = config, attention
        self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width, bias=False)
        self.proj = nn.Linear(config.width, config.width, bias=False)
        self.mlp = nn.Sequential(nn.Linear(config.width, 4 * config.width), nn.GELU(),
                                 nn.Linear(4 * config.width, config.width))

    def forward(self, x):
        batch, length, _ = x.shape
        # (B, N, 3 * H * D) -> three tensors of (B, H, N, D): the layout attention(q, k, v) takes.
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, self.config.heads, self.config.head_dim).unbind(2)
        o = self.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # causal attention
        x = x + self.proj(o.transpose(1, 2).reshape(batch, length, -1))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, config: Config, attention):
        super().__init__()
        self.embed = nn.Embedding(config.vocab, config.width)
        self.position = nn.Parameter(torch.zeros(config.context, config.width))
        self.blocks = nn.ModuleList(Block(config, attention) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
# --8<-- [end:model]


def book_text() -> torch.Tensor:
    """The book's own chapters as bytes: the training text ships with the repository."""
    pages = sorted((ROOT / "docs" / "chapters").glob("*.md"))
    return torch.tensor(list(b"\n".join(page.read_bytes() for page in pages)), dtype=torch.long)


def batches(text: torch.Tensor, config: Config, steps: int, seed: int):
    """The same random windows of the text, step by step, for every run with the same seed."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(text) - config.context - 1, (config.batch,), generator=generator)
        window = torch.stack([text[s: s + config.context + 1] for s in starts.tolist()])
        yield window[:, :-1], window[:, 1:]


# --8<-- [start:train]
def train(attention, config: Config, steps: int, device: str, seed: int = 0, lr: float = 1e-3) -> dict:
    """Train from a fixed seed; return the loss of every step, tokens per second and peak memory."""
    torch.manual_seed(seed)  # the same initial weights for every attention function
    model = TinyGPT(config, attention).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    half = torch.bfloat16 if device == "cuda" else None  # bf16 matrix products on a GPU, fp32 on a CPU
    losses, started, timed_from = [], None, min(10, steps - 1)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step, (inputs, targets) in enumerate(batches(book_text(), config, steps, seed)):
        if step == timed_from:  # the first steps compile and autotune: leave them out of the speed
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        inputs, targets = inputs.to(device), targets.to(device)
        with torch.autocast(device_type=device, dtype=half, enabled=half is not None):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().view(-1, config.vocab), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {"losses": losses, "tokens_per_s": (steps - timed_from) * config.batch * config.context / seconds,
            "peak_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None}
# --8<-- [end:train]


def book_attention(q, k, v):
    from kernels.flash_attention import attention

    return attention(q, k, v, causal=True)


def sdpa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
