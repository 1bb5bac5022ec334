"""The host-side schedules of chapter 9's Gluon kernel: plain Python, so they are tested on the CPU."""

import functools
import random

import pytest

from kernels import hopper_schedule as schedules

H100_SMS = 132  # the benchmark's GPU


def busiest_over_mean(schedule, cost, blocks):
    work = [sum(cost(item % blocks) for item in items) for items in schedule]
    return max(work) / (sum(work) / len(work))


def model(seq, warpgroups, causal):
    @functools.cache
    def cost(block):
        return schedules.item_cost(schedules.tiles_per_warpgroup(block, seq, warpgroups, 128, causal))
    return cost


def test_tiles_per_warpgroup_stop_at_the_diagonal_and_the_end():
    # 192-row blocks at N = 4096: block 1 holds rows 192-383; block 21 holds rows 4032-4223, only 64 of them real.
    assert schedules.tiles_per_warpgroup(1, 4096, 3, 128, causal=True) == [2, 3, 3]
    assert schedules.tiles_per_warpgroup(21, 4096, 3, 128, causal=True) == [32, 0, 0]
    assert schedules.tiles_per_warpgroup(21, 4096, 3, 128, causal=False) == [32, 0, 0]
    assert schedules.tiles_per_warpgroup(0, 4096, 2, 128, causal=False) == [32, 32]


def test_table_holds_offsets_then_items():
    assert schedules.as_table([[5], [], [1, 2]]) == [4, 5, 5, 7, 5, 1, 2]


def test_pairs_go_zigzag_within_a_head_and_middle_blocks_last():
    assert schedules.in_pairs(heads=2, blocks=4, programs=1) == [[3, 0, 2, 1, 7, 4, 6, 5]]
    assert schedules.in_pairs(heads=2, blocks=3, programs=2) == [[2, 0, 1, 4], [5, 3]]


@pytest.mark.parametrize("name", ["one_per_item", "in_pairs", "balanced"])
def test_every_item_exactly_once(name):
    pick = random.Random(7)
    for _ in range(200):
        heads, blocks, programs = pick.randint(1, 300), pick.randint(1, 40), pick.randint(1, 140)
        if name == "one_per_item":
            schedule = schedules.one_per_item(heads, blocks)
        elif name == "in_pairs":
            schedule = schedules.in_pairs(heads, blocks, programs)
        else:
            schedule = schedules.balanced(heads, blocks, programs, lambda block: block + 1)
        assert sorted(item for items in schedule for item in items) == list(range(heads * blocks))


@pytest.mark.parametrize(("seq", "warpgroups"), [(1024, 2), (2048, 2), (4096, 2), (4096, 3), (8192, 3), (16384, 3)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_balanced_ends_all_programs_together_and_keeps_the_pairs_until_the_tail(seq, warpgroups, causal):
    heads = 16384 // seq * 32  # the benchmark's head dim 64 rows: 16K tokens, 32 heads
    blocks = -(-seq // (64 * warpgroups))
    cost = model(seq, warpgroups, causal)
    pairs = schedules.in_pairs(heads, blocks, H100_SMS)
    balanced = schedules.balanced(heads, blocks, H100_SMS, cost)
    assert busiest_over_mean(balanced, cost, blocks) <= busiest_over_mean(pairs, cost, blocks)
    if causal:  # items of many sizes: the small ones fill the gaps at the end
        assert busiest_over_mean(balanced, cost, blocks) < 1.02
    if causal and warpgroups == 2:  # pairs of equal work that do not divide evenly among the programs
        assert busiest_over_mean(pairs, cost, blocks) > 1.03
    n_pairs = -(-heads * blocks // 2)
    dealt = (n_pairs // H100_SMS - 1) * 2  # items each program takes from its pairs before the tail
    assert all(b[:dealt] == p[:dealt] for b, p in zip(balanced, pairs, strict=True))


def test_table_on_is_built_once_per_shape():
    first = schedules.table_on("cpu", "balanced", 64, 2048, 2, 128, True, H100_SMS)
    assert schedules.table_on("cpu", "balanced", 64, 2048, 2, 128, True, H100_SMS) is first
    table, programs = first
    assert programs == H100_SMS and table.dtype.is_floating_point is False
    assert table[:programs + 1].tolist() == schedules.as_table(
        schedules.balanced(64, 16, H100_SMS, model(2048, 2, True)))[:programs + 1]
