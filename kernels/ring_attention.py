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
keys, the last rank's see all of them. The zigzag layout cuts the sequence into 2 x world pieces and gives rank r
pieces r and 2 x world - 1 - r, so every rank holds one early and one late piece and does the same work.

Either way a rank's rows are one or two whole pieces, so every block splits into pairs of pieces that are seen
whole, causal within (a piece against itself) or not at all: ordinary attention calls. On a GPU the book's kernels
run them (chapter 9's forward returns the logsumexp the merge needs; chapter 11's backward takes the final one);
on a CPU, PyTorch does, and the ring runs over the gloo backend, which is how the tests run it. Grouped-query
attention: k and v may have fewer heads than q.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

LAYOUTS = ("contiguous", "zigzag")


# --8<-- [start:layout]
def pieces(rank: int, world: int, layout: str) -> list[int]:
    """The pieces of the sequence that `rank` holds, in order: the sequence is cut into `world` equal pieces
    (contiguous) or 2 x world (zigzag), and a rank holds piece `rank`, or pieces rank and 2 x world - 1 - rank."""
    return [rank] if layout == "contiguous" else [rank, 2 * world - 1 - rank]


def positions(n_local: int, rank: int, world: int, layout: str, device=None) -> torch.Tensor:
    """The sequence positions of the n_local rows that `rank` holds under `layout`."""
    size = n_local // len(pieces(rank, world, layout))
    return torch.cat([torch.arange(p * size, (p + 1) * size, device=device) for p in pieces(rank, world, layout)])


def piece_pairs(rank: int, source: int, world: int, layout: str, causal: bool):
    """Which pieces of this rank's queries meet which pieces of `source`'s keys, and how: (query piece index, key
    piece index, causal). With a causal mask a key piece after the query piece is skipped, the same piece is a
    diagonal block (causal within it), and an earlier one is seen whole."""
    for i, a in enumerate(pieces(rank, world, layout)):
        for j, c in enumerate(pieces(source, world, layout)):
            if not causal or c < a:
                yield i, j, False
            elif c == a:
                yield i, j, True
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


# --8<-- [start:blocks]
def block_forward(q, k, v, causal: bool, scale: float, use_kernels: bool):
    """(out, natural-log lse) of one block: the book's kernels (chapter 9's fast forward for fp16 and bf16 on a
    GPU, chapter 5's otherwise), or PyTorch. Rows that see no key give 0 and -inf."""
    if use_kernels:
        from kernels import flash_attention, flash_attention_fast

        fast = q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
        attention = flash_attention_fast.attention if fast else flash_attention.attention
        return attention(q, k, v, causal=causal, sm_scale=scale, return_lse=True)
    s = _scores(q, k, causal, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    return _grouped(torch.einsum("bhgnm,bhmd->bhgnd", p, v)), _grouped(lse)


def block_backward(do, q, k, v, out, lse, causal: bool, scale: float, use_kernels: bool):
    """(dq, dk, dv) of one block, given the whole ring's output and logsumexp for these query rows: each block
    rebuilds its probabilities P = exp(S - L) from the final L, as chapter 10's backward does."""
    if use_kernels:
        from kernels import flash_attention_backward, flash_attention_backward_fast

        fast = q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
        backward = flash_attention_backward_fast if fast else flash_attention_backward
        return backward.attention_backward(do, q, k, v, out, lse, causal=causal, sm_scale=scale)
    b, h, n, d = q.shape
    kv_heads = k.shape[1]
    qg, dog = (t.view(b, kv_heads, h // kv_heads, n, d) for t in (q, do))
    lse_g = lse.view(b, kv_heads, h // kv_heads, n)
    delta = (dog * out.view(qg.shape)).sum(-1)  # D, chapter 10
    p = torch.exp(_scores(q, k, causal, scale) - torch.where(torch.isinf(lse_g), 0.0, lse_g)[..., None])
    dv = torch.einsum("bhgnm,bhgnd->bhmd", p, dog)
    ds = p * (torch.einsum("bhgnd,bhmd->bhgnm", dog, v) - delta[..., None])
    dq = _grouped(torch.einsum("bhgnm,bhmd->bhgnd", ds, k) * scale)
    return dq, torch.einsum("bhgnm,bhgnd->bhmd", ds, qg) * scale, dv


def _scores(q, k, causal: bool, scale: float):
    """S = Q Kᵀ · scale with the query heads of each K/V head grouped: (batch, kv heads, group, n, m)."""
    b, h, n, d = q.shape
    s = torch.einsum("bhgnd,bhmd->bhgnm", q.view(b, k.shape[1], h // k.shape[1], n, d), k) * scale
    if causal:  # a diagonal block: query i sees keys 0..i of the same piece
        s = s.masked_fill(torch.ones(n, k.shape[2], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s


def _grouped(t):
    """(batch, kv heads, group, ...) back to (batch, query heads, ...)."""
    return t.reshape(t.shape[0], t.shape[1] * t.shape[2], *t.shape[3:])
# --8<-- [end:blocks]


def merge_into(out, lse, block_out, block_lse):
    """Chapter 4's merge of a block's partial state into (out, lse) of the same rows, in place: out and lse in the
    accumulating dtype, the block's in any. In place, a merge reads and writes the large output twice, not five
    times."""
    new_lse = torch.logaddexp(lse, block_lse.to(lse.dtype))
    safe = torch.where(torch.isinf(new_lse), 0.0, new_lse)
    out.mul_(torch.exp(lse - safe)[..., None]).addcmul_(block_out, torch.exp(block_lse - safe)[..., None])
    lse.copy_(new_lse)


# --8<-- [start:pass_on]
def _pass_on(tensors, group, world: int, rank: int, overlap: bool = True):
    """Start sending these tensors to the next rank and receiving the previous rank's; returns a function that waits
    for both and returns what was received. overlap=False waits here already (the benchmark's baseline without
    overlap)."""
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % world, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, (rank - 1) % world, group) for t in received]
    requests = dist.batch_isend_irecv(ops)

    def wait():
        while requests:  # each request waited for once (gloo's receive would wait for another message)
            requests.pop().wait()
        return received
    if not overlap:
        wait()
    return wait
# --8<-- [end:pass_on]


def _split(t, parts: int):
    """A rank's rows as its pieces, each contiguous (as the kernels ask)."""
    return [piece.contiguous() for piece in t.chunk(parts, dim=2)]


# --8<-- [start:forward]
def ring_forward(q, k, v, causal: bool, layout: str, scale: float, use_kernels: bool, group=None,
                 overlap: bool = True):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = len(pieces(rank, world, layout))
    acc = torch.promote_types(q.dtype, torch.float32)  # partial results merge in fp32 (fp64 stays fp64)
    outs, lses = [None] * parts, [None] * parts  # each piece's state after its first block (step 0 has them all)
    for step in range(world):
        source = (rank - step) % world  # whose K and V this rank holds now
        wait = _pass_on((k, v), group, world, rank, overlap) if step < world - 1 else None  # sent while we compute
        q_pieces, k_pieces, v_pieces = (_split(t, parts) for t in (q, k, v))
        for i, j, diagonal in piece_pairs(rank, source, world, layout, causal):
            block_out, block_lse = block_forward(q_pieces[i], k_pieces[j], v_pieces[j], diagonal, scale, use_kernels)
            if outs[i] is None:
                outs[i], lses[i] = block_out.to(acc), block_lse.to(acc)
            else:
                merge_into(outs[i], lses[i], block_out, block_lse)
        if wait is not None:
            k, v = wait()
    return torch.cat([out.to(q.dtype) for out in outs], dim=2), torch.cat(lses, dim=2)
# --8<-- [end:forward]


# --8<-- [start:backward]
def ring_backward(do, q, k, v, out, lse, causal: bool, layout: str, scale: float, use_kernels: bool, group=None,
                  overlap: bool = True):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = len(pieces(rank, world, layout))
    acc = torch.promote_types(q.dtype, torch.float32)  # gradients add up in fp32 (fp64 stays fp64)
    q_pieces, do_pieces, out_pieces, lse_pieces = (_split(t, parts) for t in (q, do, out, lse))
    dq = [torch.zeros(piece.shape, dtype=acc, device=q.device) for piece in q_pieces]
    travelling = None  # the visiting chunk's dK and dV so far, on their way from the previous rank
    for step in range(world):
        source = (rank - step) % world
        # K and V go on while this step computes, as long as another rank still needs them
        kv_sent = _pass_on((k, v), group, world, rank, overlap) if step < world - 1 else None
        k_pieces, v_pieces = _split(k, parts), _split(v, parts)
        dk, dv = (torch.zeros(t.shape, dtype=acc, device=q.device) for t in (k, v))  # this rank's share
        dk_pieces, dv_pieces = dk.chunk(parts, dim=2), dv.chunk(parts, dim=2)  # views: adds go into dk and dv
        for i, j, diagonal in piece_pairs(rank, source, world, layout, causal):
            grads = block_backward(do_pieces[i], q_pieces[i], k_pieces[j], v_pieces[j], out_pieces[i],
                                   lse_pieces[i], diagonal, scale, use_kernels)
            dq[i].add_(grads[0])  # into fp32 without a converted copy
            dk_pieces[j].add_(grads[1])
            dv_pieces[j].add_(grads[2])
        # The chunk's dK and dV from the ranks before arrived while this step computed: add them, and send the
        # sum on, to arrive while the next rank computes. After the last step the send brings them home.
        if travelling is not None:
            arrived_dk, arrived_dv = travelling()
            dk += arrived_dk
            dv += arrived_dv
        if world > 1:
            travelling = _pass_on((dk, dv), group, world, rank, overlap)
        if kv_sent is not None:
            k, v = kv_sent()
    if travelling is not None:
        dk, dv = travelling()  # this rank's own chunk, every rank's share added
    return torch.cat(dq, dim=2).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
# --8<-- [end:backward]


def shape_problem(q, k, v) -> str | None:
    """What is wrong with the shapes of one rank's q, k and v chunks (as the ring and the all-to-all take them), or
    None."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            return f"{name} must be (batch, heads, local sequence, head_dim), got {tuple(t.shape)}"
    if k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or k.shape[2] != q.shape[2]:
        return (f"k and v must be (batch={q.shape[0]}, kv_heads, {q.shape[2]}, {q.shape[3]}), got {tuple(k.shape)} "
                f"and {tuple(v.shape)}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        return f"the query heads ({q.shape[1]}) must be a multiple of the K/V heads ({k.shape[1]})"
    return None


def backend_problem(q, backend: str) -> str | None:
    """Whether a process group of this backend can carry q's device's tensors, or None."""
    if (backend == "nccl") != q.is_cuda:
        return (f"a process group of backend {backend!r} cannot carry tensors on {q.device}: use nccl for CUDA "
                f"tensors and gloo for CPU tensors")
    return None


def _local_problem(q, k, v, layout: str, backend: str) -> str | None:
    """What is wrong with this rank's own inputs, or None."""
    if layout not in LAYOUTS:
        return f"layout must be one of {LAYOUTS}, got {layout!r}"
    problem = shape_problem(q, k, v)
    if problem is None and layout == "zigzag" and q.shape[2] % 2:
        problem = (f"the zigzag layout gives each rank two equal pieces: the local length must be even, got "
                   f"{q.shape[2]} (the whole sequence must divide by 2 x world size)")
    return problem or backend_problem(q, backend)


def check_inputs(q, k, v, layout: str, group=None) -> None:
    """Clear errors, raised on every rank alike (see raise_on_every_rank)."""
    raise_on_every_rank(_local_problem(q, k, v, layout, dist.get_backend(group)),
                        f"q {tuple(q.shape)}, k {tuple(k.shape)}, {layout}", group)


def raise_on_every_rank(problem: str | None, held: str, group=None) -> None:
    """Raise the same ValueError on every rank if any rank found a problem with its own inputs, or if the ranks hold
    different shapes (`held` describes them). Every rank first shares what it found (one small gather), so that a
    problem on one rank stops all of them instead of leaving the others waiting for its messages."""
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, (problem, held), group=group)
    problems = [f"rank {rank}: {theirs}" for rank, (theirs, _) in enumerate(everyone) if theirs]
    if problems:
        raise ValueError("; ".join(problems))
    if len({theirs for _, theirs in everyone}) > 1:
        held_by_all = "; ".join(f"rank {rank}: {theirs}" for rank, (_, theirs) in enumerate(everyone))
        raise ValueError(f"every rank must hold chunks of the same shapes, in the same layout; {held_by_all}")


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, scale, use_kernels, group, overlap):
        out, lse = ring_forward(q, k, v, causal, layout, scale, use_kernels, group, overlap)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, layout, scale, use_kernels, group, overlap)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(do.contiguous(), q, k, v, out, lse, *ctx.settings)
        return dq, dk, dv, None, None, None, None, None, None


def attention(q, k, v, *, causal: bool = False, layout: str = "contiguous", sm_scale: float | None = None,
              use_kernels: bool | None = None, group=None, overlap: bool = True):
    """softmax(Q Kᵀ · scale) V for this rank's chunk of queries against every rank's keys, differentiable.

    q (batch, heads, n, head_dim) and k, v (batch, kv_heads, n, head_dim) are this rank's chunks of one sequence
    under `layout` (`shard` cuts them from the whole); every rank calls this with chunks of the same shapes.
    use_kernels: compute each block with the book's kernels (the default on a GPU) or in PyTorch (the default on
    a CPU, where the kernels run in Triton's slow interpreter). overlap=False waits for each send before computing:
    the same results, slower; the benchmark's baseline for how much of the sending the computing hides."""
    check_inputs(q, k, v, layout, group)
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    use_kernels = q.is_cuda if use_kernels is None else use_kernels
    return RingAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), causal, layout, scale, use_kernels,
                               group, overlap)
