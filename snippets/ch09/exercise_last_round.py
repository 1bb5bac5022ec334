# Exercise solution: how much time does the last round of pairs cost at head dim 128? Causal, two computing
# warpgroups (128 query rows per item), 16 heads, 16K tokens per batch, 132 programs (one per SM: 132 on the
# H100 SXM5 and the H200).
import functools
import math

from kernels import hopper_schedule as schedules

PROGRAMS = 132
for n in (1024, 2048, 4096, 8192, 16384):
    heads, blocks = 16384 // n * 16, n // 128
    pairs = heads * blocks // 2
    rounds = pairs / PROGRAMS
    print(f"N = {n:5d}: {pairs} pairs, {rounds:5.2f} rounds of work in {math.ceil(rounds)} rounds of time, "
          f"{1 - rounds / math.ceil(rounds):.1%} idle")


@functools.cache
def cost(block):
    return schedules.item_cost(schedules.tiles_per_warpgroup(block, 2048, 2, 128, causal=True))


balanced = schedules.balanced(128, 16, PROGRAMS, cost)
work = [sum(cost(item % 16) for item in items) for items in balanced]
print(f"balanced at N = 2048: busiest program {max(work) / (sum(work) / PROGRAMS) - 1:.1%} above the mean")
