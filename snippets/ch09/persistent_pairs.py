# How a persistent grid splits causal work: 132 programs (one per SM: 132 on the H100 SXM5 and the H200), one
# work item per 128 query rows of one head. Query block i of a head needs i + 1 K/V tiles of 128 keys.
PROGRAMS = 132
HEADS = 16 * 16  # batch 16 x 16 heads: 16K tokens at N = 1024, head dim 128
BLOCKS = 1024 // 128  # query blocks per head


def tiles(block):
    return block + 1


# Items numbered head by head, last query block first (the order of one program per item).
plain = [BLOCKS - 1 - r for _ in range(HEADS) for r in range(BLOCKS)]
# In pairs: last block, first block, second last, second, ... so each pair needs BLOCKS + 1 tiles.
zigzag = [BLOCKS - 1 - r // 2 if r % 2 == 0 else r // 2 for r in range(BLOCKS)]
paired = [block for _ in range(HEADS) for block in zigzag]


def per_program(items, group):
    """Tiles per program when program p takes groups p, p + PROGRAMS, ... of `group` items."""
    groups = [items[i:i + group] for i in range(0, len(items), group)]
    return [sum(tiles(b) for g in groups[p::PROGRAMS] for b in g) for p in range(PROGRAMS)]


total = sum(tiles(b) for b in plain)
print(f"{len(plain)} items, {total} K/V tiles, {total / PROGRAMS:.1f} per program if perfectly balanced")
for name, items, group in (("one item at a time", plain, 1), ("in pairs", paired, 2)):
    work = per_program(items, group)
    print(f"{name:18s}: busiest program {max(work)} tiles, idlest {min(work)}")
