"""All-to-all attention (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv 2309.14509): one sequence split across the
processes of a torch.distributed group, regrouped by heads for the attention itself.

Each rank holds one contiguous chunk of the tokens of every head, as in the ring's contiguous layout. A first
all-to-all sends rank t every rank's tokens of t's share of the heads, so that each rank holds whole sequences of
heads / world heads. It runs ordinary attention on them, with any kernel (the book's on a GPU, PyTorch on a CPU),
and a second all-to-all gives each rank back its own tokens of every head. The backward does the same around the
attention's own backward: the gradient of an all-to-all is the all-to-all that undoes it.

Grouped-query attention: the query heads and the K/V heads are both cut into world equal shares, so query head h
and its K/V head land on the same rank. Both counts must divide by the world size; with fewer K/V heads than ranks,
use the ring (kernels/ring_attention.py), which splits the sequence instead.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from kernels.ring_attention import backend_problem, block_backward, block_forward, raise_on_every_rank, shape_problem


# --8<-- [start:exchange]
def to_heads(x: torch.Tensor, group=None) -> torch.Tensor:
    """(batch, heads, n / world, d), this rank's tokens of every head -> (batch, heads / world, n, d), every token
    of this rank's heads: share t of the heads goes to rank t, and the chunks that arrive line up in rank order."""
    world = dist.get_world_size(group)
    sent = [part.contiguous() for part in x.chunk(world, dim=1)]
    received = [torch.empty_like(sent[0]) for _ in range(world)]
    dist.all_to_all(received, sent, group=group)
    return torch.cat(received, dim=2)


def to_tokens(x: torch.Tensor, group=None) -> torch.Tensor:
    """The inverse of to_heads: (batch, heads / world, n, d) -> (batch, heads, n / world, d)."""
    world = dist.get_world_size(group)
    sent = [part.contiguous() for part in x.chunk(world, dim=2)]
    received = [torch.empty_like(sent[0]) for _ in range(world)]
    dist.all_to_all(received, sent, group=group)
    return torch.cat(received, dim=1)
# --8<-- [end:exchange]


# --8<-- [start:autograd]
class UlyssesAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, use_kernels, group):
        q, k, v = (to_heads(t, group) for t in (q, k, v))  # whole sequences of this rank's heads
        out, lse = block_forward(q, k, v, causal, scale, use_kernels)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, scale, use_kernels)
        ctx.group = group
        return to_tokens(out, group)

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        do = to_heads(do.contiguous(), ctx.group)
        dq, dk, dv = block_backward(do, q, k, v, out, lse, *ctx.settings)
        return (*(to_tokens(t.contiguous(), ctx.group) for t in (dq, dk, dv)), None, None, None, None)
# --8<-- [end:autograd]


def _local_problem(q, k, v, world: int, backend: str) -> str | None:
    """What is wrong with this rank's own inputs, or None."""
    problem = shape_problem(q, k, v)
    if problem is None and k.shape[1] % world:
        problem = (f"the all-to-all gives each of the {world} ranks an equal share of the heads: the K/V heads "
                   f"({k.shape[1]}) must divide by {world}; with fewer K/V heads than ranks, use the ring "
                   f"(kernels.ring_attention)")
    return problem or backend_problem(q, backend)


def attention(q, k, v, *, causal: bool = False, sm_scale: float | None = None, use_kernels: bool | None = None,
              group=None):
    """softmax(Q Kᵀ · scale) V for this rank's chunk of queries against every rank's keys, differentiable.

    q (batch, heads, n, head_dim) and k, v (batch, kv_heads, n, head_dim) are this rank's contiguous chunks of one
    sequence (ring_attention.shard with the contiguous layout cuts them from the whole); every rank calls this with
    chunks of the same shapes. use_kernels: the book's kernels (the default on a GPU) or PyTorch (on a CPU)."""
    world = dist.get_world_size(group)
    raise_on_every_rank(_local_problem(q, k, v, world, dist.get_backend(group)),
                        f"q {tuple(q.shape)}, k {tuple(k.shape)}", group)
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    use_kernels = q.is_cuda if use_kernels is None else use_kernels
    return UlyssesAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale, use_kernels, group)
