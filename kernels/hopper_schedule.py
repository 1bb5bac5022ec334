"""Which work items each program of chapter 9's Gluon kernel takes, decided on the host in plain Python.

An item is one block of query rows of one (batch, head): as many rows as the program has computing warpgroups,
64 rows each. Items are numbered head by head, `item = head * blocks + block`. A schedule lists, for every
program, the items it takes in order; the kernel reads its list from a small table (`as_table`) in GPU memory.

Three schedules, one per worklog step:

- `one_per_item`: one program per item, head by head, each head's last (longest causal) block first.
- `in_pairs`: a persistent grid, one program per SM. Each head's blocks pair up in zigzag order (the last
  with the first, the second last with the second, ...), so that every causal pair holds about the same
  work. A head with an odd number of blocks has a middle block left over; those come after all the other
  pairs, two heads' middle blocks to a pair. Program p takes pairs p, p + programs, p + 2 * programs, ...
- `balanced`: the same pairs, except for the last rounds. When the pairs do not divide evenly among the
  programs, some programs take one pair more than the others and the rest wait for them. Here the pairs of
  the last full round and of the short round after it are split into single items again and dealt out
  longest first, each to the program with the least work so far, so that every program ends at about the
  same time. Only that tail is reordered: until then, the programs that run at the same time work on
  neighbouring blocks of the same heads and share their K/V tiles in the L2 cache.
"""

from __future__ import annotations

import functools
import heapq

import torch

ROWS_PER_WARPGROUP = 64


# --8<-- [start:pairs]
def one_per_item(heads: int, blocks: int) -> list[list[int]]:
    """One program per item: head by head, each head's last (longest causal) block first."""
    return [[head * blocks + blocks - 1 - r] for head in range(heads) for r in range(blocks)]


def _pairs(heads: int, blocks: int) -> list[tuple[int, ...]]:
    """Zigzag pairs within each head, then the middle blocks of odd heads, two heads' to a pair."""
    pairs = [(head * blocks + blocks - 1 - i, head * blocks + i) for head in range(heads) for i in range(blocks // 2)]
    if blocks % 2:
        middles = [head * blocks + blocks // 2 for head in range(heads)]
        pairs += [tuple(middles[i:i + 2]) for i in range(0, len(middles), 2)]
    return pairs


def in_pairs(heads: int, blocks: int, programs: int) -> list[list[int]]:
    """Program p takes pairs p, p + programs, p + 2 * programs, ...: neighbouring programs, neighbouring blocks."""
    pairs = _pairs(heads, blocks)
    return [[item for pair in pairs[p::programs] for item in pair] for p in range(programs)]
# --8<-- [end:pairs]


# --8<-- [start:balanced]
def tiles_per_warpgroup(block: int, seq: int, warpgroups: int, block_n: int, causal: bool, keys: int | None = None,
                        offset: int = 0) -> list[int]:
    """The K/V tiles each warpgroup of one item uses: causal rows stop at the diagonal; rows past the end, none.
    seq queries against `keys` keys (seq if None); with causal, query i sees keys up to i + offset."""
    keys = seq if keys is None else keys
    firsts = [block * warpgroups * ROWS_PER_WARPGROUP + w * ROWS_PER_WARPGROUP for w in range(warpgroups)]
    tiles = -(-keys // block_n)  # the last one partial when block_n does not divide the keys
    if not causal:
        return [tiles if first < seq else 0 for first in firsts]
    return [min(-(-max(first + ROWS_PER_WARPGROUP + offset, 0) // block_n), tiles) if first < seq else 0
            for first in firsts]


def item_cost(tiles: list[int]) -> float:
    """A model of one item's time, in tiles, that the balanced schedule balances.

    The warpgroups of a program share the tensor cores, so their tiles add up; but a warpgroup that works
    alone (the last block of a head can have rows past the end) does not get all warpgroups' speed. The
    model takes the mean of the two views (the warpgroups' tiles shared out, and the busiest warpgroup's
    tiles), plus one tile for the item's own start and end.
    """
    return (sum(tiles) / len(tiles) + max(tiles)) / 2 + 1


def balanced(heads: int, blocks: int, programs: int, cost) -> list[list[int]]:
    """`in_pairs` for every full round but the last; the last full round and the partial one go out as single
    items, longest first, each to the least loaded program.

    `cost(block)` models the time of one item of that block (see `item_cost`).
    """
    pairs = _pairs(heads, blocks)
    dealt = max(0, len(pairs) // programs - 1) * programs  # pairs dealt round by round
    mine = [[item for pair in pairs[p:dealt:programs] for item in pair] for p in range(programs)]
    load = [sum(cost(item % blocks) for item in items) for items in mine]
    tail = sorted((item for pair in pairs[dealt:] for item in pair), key=lambda item: (-cost(item % blocks), item))
    least_loaded = [(load[p], p) for p in range(programs)]
    heapq.heapify(least_loaded)
    for item in tail:
        work, p = heapq.heappop(least_loaded)
        mine[p].append(item)
        heapq.heappush(least_loaded, (work + cost(item % blocks), p))
    return mine
# --8<-- [end:balanced]


# --8<-- [start:table]
def as_table(schedule: list[list[int]]) -> list[int]:
    """One flat list for the kernel: where each program's items start (programs + 1 offsets), then the items."""
    starts = [len(schedule) + 1]
    for items in schedule:
        starts.append(starts[-1] + len(items))
    return starts + [item for items in schedule for item in items]


@functools.cache
def table_on(device: torch.device, name: str, heads: int, seq: int, warpgroups: int, block_n: int, causal: bool,
             sm_count: int, keys: int | None = None, offset: int = 0) -> tuple[torch.Tensor, int]:
    """The schedule `name` as an int32 table on `device`, and its number of programs; built once per shape,
    because the wrapper runs before every launch."""
    blocks = -(-seq // (warpgroups * ROWS_PER_WARPGROUP))
    if name == "one_per_item":
        schedule = one_per_item(heads, blocks)
    elif name == "in_pairs":
        schedule = in_pairs(heads, blocks, min(sm_count, -(-heads * blocks // 2)))
    else:
        @functools.cache
        def cost(block):
            return item_cost(tiles_per_warpgroup(block, seq, warpgroups, block_n, causal, keys, offset))
        schedule = balanced(heads, blocks, min(sm_count, heads * blocks), cost)
    return torch.tensor(as_table(schedule), dtype=torch.int32, device=device), len(schedule)
# --8<-- [end:table]
