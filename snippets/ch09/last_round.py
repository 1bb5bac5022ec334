# The last round of the persistent grid. Head dim 64, causal, N = 2048, two computing warpgroups (128 query
# rows per item), 32 heads x batch 8, 132 programs (one per SM: 132 on the H100 SXM5 and the H200). The schedules
# are the kernel's own (kernels/hopper_schedule.py); the work per program comes from their cost model.
import functools

from kernels import hopper_schedule as schedules

N, WARPGROUPS, HEADS, PROGRAMS = 2048, 2, 8 * 32, 132
BLOCKS = N // (64 * WARPGROUPS)  # 16 query blocks per head


@functools.cache
def cost(block):
    return schedules.item_cost(schedules.tiles_per_warpgroup(block, N, WARPGROUPS, 128, causal=True))


pairs = HEADS * BLOCKS // 2
print(f"{HEADS * BLOCKS} items in {pairs} pairs of equal work: {pairs / PROGRAMS:.2f} rounds of {PROGRAMS} programs")
for name, schedule in (("in pairs", schedules.in_pairs(HEADS, BLOCKS, PROGRAMS)),
                       ("balanced", schedules.balanced(HEADS, BLOCKS, PROGRAMS, cost))):
    work = [sum(cost(item % BLOCKS) for item in items) for items in schedule]
    mean = sum(work) / PROGRAMS
    print(f"{name}: busiest program {max(work):.1f}, mean {mean:.1f}, busiest / mean {max(work) / mean:.3f}")
