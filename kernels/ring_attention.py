"""Ring attention: one sequence split across the processes of a torch.distributed group (context parallelism).

Each process (a "rank") holds one chunk of the queries, keys and values. The K/V chunks travel around a ring:
at step s, rank r attends its queries to the chunk that started on rank r - s, while it already sends that chunk
on to rank r + 1 and receives the next one from rank r - 1. The partial results merge with chapter 4's rule:
a running output and logsumexp per query row, as in split-KV decoding (chapter 12). After world-size steps every
query has seen every key, and no rank ever held more than two K/V chunks (Liu et al. 2023, arXiv 2310.01889).

The backward runs the same ring again. Each rank keeps its queries, output, logsumexp and dO and accumulates its
own dQ; the dK and dV of a chunk travel with it and collect the share of every rank's queries, and one last send
brings them home.

Causal masks unbalance the ring when rank r holds the r-th contiguous chunk: rank 0's queries see only its own
keys, the last rank's see all of them. The zigzag layout cuts the sequence into 2 x world chunks and gives rank r
chunks r and 2 x world - 1 - r, so every rank holds one early and one late chunk and does the same work. Every
mask here is built from the positions the layout gives each row, so one code path serves both layouts.

This module computes each block in PyTorch (`block_attention`), in the inputs' dtype; it runs on CPUs over the
gloo backend as well as on GPUs over NCCL. Grouped-query attention: k and v may have fewer heads than q.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

LAYOUTS = ("contiguous", "zigzag")


# --8<-- [start:layout]
def positions(n_local: int, rank: int, world: int, layout: str, device=None) -> torch.Tensor:
    """The sequence positions of the n_local rows that `rank` holds under `layout`."""
    if layout == "contiguous":
        return torch.arange(rank * n_local, (rank + 1) * n_local, device=device)
    half = n_local // 2  # zigzag: chunks rank and 2 * world - 1 - rank, each of half the rows
    first = torch.arange(rank * half, (rank + 1) * half, device=device)
    second = torch.arange((2 * world - 1 - rank) * half, (2 * world - rank) * half, device=device)
    return torch.cat([first, second])
# --8<-- [end:layout]


def shard(x: torch.Tensor, rank: int, world: int, layout: str, dim: int = 2) -> torch.Tensor:
    """The rows of a whole sequence (along `dim`) that `rank` holds under `layout`."""
    n = x.shape[dim]
    parts = 2 * world if layout == "zigzag" else world
    if n % parts:
        raise ValueError(f"the {layout} layout cuts the sequence into {parts} equal chunks: its length {n} must be a "
                         f"multiple of {parts}")
    index = positions(n // world, rank, world, layout, x.device)
    return x.index_select(dim, index).contiguous()


def block_attention(q, k, v, q_pos, k_pos, causal: bool, scale: float):
    """(out, lse) of q's rows against one K/V chunk; rows that see no key give 0 and -inf."""
    b, h, n, d = q.shape
    group = h // k.shape[1]
    qg = q.view(b, k.shape[1], group, n, d)
    s = torch.einsum("bhgnd,bhmd->bhgnm", qg, k) * scale
    if causal:
        s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = torch.einsum("bhgnm,bhmd->bhgnd", p, v)
    return out.reshape(b, h, n, d), lse.reshape(b, h, n)


def merge(out, lse, block_out, block_lse):
    """Chapter 4's merge of two partial states of the same rows."""
    new_lse = torch.logaddexp(lse, block_lse)
    safe = torch.where(torch.isinf(new_lse), 0.0, new_lse)
    return (out * torch.exp(lse - safe)[..., None] + block_out * torch.exp(block_lse - safe)[..., None]), new_lse


def _sees_any(q_pos, k_pos, causal: bool) -> bool:
    return not causal or bool(k_pos.min() <= q_pos.max())


# --8<-- [start:pass_on]
def _pass_on(tensors, group, world: int, rank: int):
    """Send these tensors to the next rank and receive the previous rank's, started now; returns (wait, received)."""
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % world, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, (rank - 1) % world, group) for t in received]
    requests = dist.batch_isend_irecv(ops)

    def wait():
        for request in requests:
            request.wait()
        return received
    return wait
# --8<-- [end:pass_on]


# --8<-- [start:forward]
def ring_forward(q, k, v, causal: bool, layout: str, scale: float, group=None):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    q_pos = positions(q.shape[2], rank, world, layout, q.device)
    out = torch.zeros_like(q)
    lse = torch.full(q.shape[:3], float("-inf"), dtype=q.dtype, device=q.device)
    for step in range(world):
        source = (rank - step) % world
        wait = _pass_on((k, v), group, world, rank) if step < world - 1 else None  # overlap: send while computing
        k_pos = positions(k.shape[2], source, world, layout, q.device)
        if _sees_any(q_pos, k_pos, causal):
            out, lse = merge(out, lse, *block_attention(q, k, v, q_pos, k_pos, causal, scale))
        if wait is not None:
            k, v = wait()
    return out, lse
# --8<-- [end:forward]


# --8<-- [start:backward]
def ring_backward(do, q, k, v, out, lse, causal: bool, layout: str, scale: float, group=None):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    b, h, n, d = q.shape
    kv_heads = k.shape[1]
    g = h // kv_heads
    q_pos = positions(n, rank, world, layout, q.device)
    delta = (do * out).sum(-1)  # D, chapter 10
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    qg, dog = q.view(b, kv_heads, g, n, d), do.view(b, kv_heads, g, n, d)
    lse_g, delta_g = lse.view(b, kv_heads, g, n), delta.view(b, kv_heads, g, n)
    for step in range(world):
        source = (rank - step) % world
        k_pos = positions(k.shape[2], source, world, layout, q.device)
        if _sees_any(q_pos, k_pos, causal):
            s = torch.einsum("bhgnd,bhmd->bhgnm", qg, k) * scale
            if causal:
                s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
            p = torch.exp(s - torch.where(torch.isinf(lse_g), 0.0, lse_g)[..., None])
            dv = dv + torch.einsum("bhgnm,bhgnd->bhmd", p, dog)
            dp = torch.einsum("bhgnd,bhmd->bhgnm", dog, v)
            ds = p * (dp - delta_g[..., None])
            dq = dq + (torch.einsum("bhgnm,bhmd->bhgnd", ds, k) * scale).reshape(b, h, n, d)
            dk = dk + torch.einsum("bhgnm,bhgnd->bhmd", ds, qg) * scale
        # K and V go on while another rank still needs them; dK and dV one step more, which brings them home
        if step < world - 1:
            k, v, dk, dv = _pass_on((k, v, dk, dv), group, world, rank)()
        elif world > 1:
            dk, dv = _pass_on((dk, dv), group, world, rank)()
    return dq, dk, dv
# --8<-- [end:backward]


def check_inputs(q, k, v, layout: str, group=None) -> None:
    """Clear errors, raised on every rank alike: the same shapes everywhere, a layout that divides the chunk."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(f"{name} must be (batch, heads, local sequence, head_dim), got {tuple(t.shape)}")
    if k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or k.shape[2] != q.shape[2]:
        raise ValueError(f"k and v must be (batch={q.shape[0]}, kv_heads, {q.shape[2]}, {q.shape[3]}), got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"the query heads ({q.shape[1]}) must be a multiple of the K/V heads ({k.shape[1]})")
    if layout == "zigzag" and q.shape[2] % 2:
        raise ValueError(f"the zigzag layout gives each rank two equal chunks: the local length must be even, got "
                         f"{q.shape[2]} (the whole sequence must divide by 2 x world size)")
    backend = dist.get_backend(group)
    if (backend == "nccl") != q.is_cuda:
        raise ValueError(f"a process group of backend {backend!r} cannot carry tensors on {q.device}: use nccl for "
                         f"CUDA tensors and gloo for CPU tensors")
    mine = torch.tensor([*q.shape, *k.shape], dtype=torch.int64, device=q.device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, mine, group=group)
    if any(not torch.equal(theirs, mine) for theirs in everyone):
        shapes = sorted({tuple(t.tolist()) for t in everyone})
        raise ValueError(f"every rank must hold chunks of the same shapes (q then k); the ranks hold {shapes}")


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, scale, group):
        out, lse = ring_forward(q, k, v, causal, layout, scale, group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, layout, scale, group)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(do.contiguous(), q, k, v, out, lse, *ctx.settings)
        return dq, dk, dv, None, None, None, None


def attention(q, k, v, *, causal: bool = False, layout: str = "contiguous", sm_scale: float | None = None,
              group=None):
    """softmax(Q Kᵀ · scale) V for this rank's chunk of queries against every rank's keys, differentiable.

    q (batch, heads, n, head_dim) and k, v (batch, kv_heads, n, head_dim) are this rank's chunks of one sequence
    under `layout` (`shard` cuts them from the whole); every rank calls this with chunks of the same shapes."""
    check_inputs(q, k, v, layout, group)
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    return RingAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), causal, layout, scale, group)
