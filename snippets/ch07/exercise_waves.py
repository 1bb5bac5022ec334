# Exercise solution: why launch the longest causal programs first? Simulate a greedy GPU: each of
# the 132 SMs (H100 SXM5, datasheet) takes the next program in launch order when it is free. One program
# per (Q tile, head); in causal attention Q tile i does i + 1 tiles of work.
import heapq

SMS = 132


def finish_time(costs):
    free = [0] * SMS  # when each SM is next free
    heapq.heapify(free)
    for cost in costs:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


for n, batch_heads in ((1024, 16 * 32), (4096, 4 * 32), (16384, 1 * 32)):  # 16K tokens, 32 heads
    tiles = n // 128
    work = [i + 1 for _ in range(batch_heads) for i in range(tiles)]  # Q tile i sees i + 1 K/V tiles
    in_order = finish_time(work)
    longest_first = finish_time([i + 1 for _ in range(batch_heads) for i in reversed(range(tiles))])
    ideal = sum(work) / SMS
    print(f"N={n:5d}: {len(work):5d} programs; finish at {in_order} tile-steps in order, "
          f"{longest_first} longest first, {ideal:.0f} if perfectly balanced")
