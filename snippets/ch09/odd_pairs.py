# Pairs of causal items when a head has an odd number of query blocks: head dim 64, N = 2048, three
# warpgroups (192 query rows per item), 32 heads x batch 8, 132 programs (one per SM of an H100, datasheet).
import math

N, ROWS, TILE, PROGRAMS = 2048, 192, 128, 132
HEADS = 8 * 32
BLOCKS = math.ceil(N / ROWS)  # 11: odd


def tiles(block):
    """K/V tiles of one item: the warpgroups share the ring, so the one needing the most sets the pace."""
    firsts = [block * ROWS + 64 * w for w in range(3)]
    return max(math.ceil((first + 64) / TILE) for first in firsts if first < N)


def zigzag(r):  # last block, first, second last, second, ...
    return BLOCKS - 1 - r // 2 if r % 2 == 0 else r // 2


# Before: items head by head, zigzag within each head, neighbours paired (pairs can straddle two heads).
before = [zigzag(r) for _ in range(HEADS) for r in range(BLOCKS)]
# After: each head's own pairs first; the middle blocks last, two heads' to a pair.
after = [zigzag(r) for _ in range(HEADS) for r in range(BLOCKS - 1)] + [BLOCKS // 2] * HEADS


def per_program(items):
    """Tiles per program when program p takes pairs p, p + PROGRAMS, p + 2 * PROGRAMS, ..."""
    pairs = [items[i:i + 2] for i in range(0, len(items), 2)]
    return [sum(tiles(b) for pair in pairs[p::PROGRAMS] for b in pair) for p in range(PROGRAMS)]


print(f"{BLOCKS} blocks per head; {PROGRAMS} programs = {PROGRAMS // BLOCKS} x {BLOCKS}")
for name, items in (("before", before), ("after", after)):
    work = per_program(items)
    print(f"{name:6s}: busiest program {max(work)} tiles, idlest {min(work)}, mean {sum(work) / PROGRAMS:.1f}")
