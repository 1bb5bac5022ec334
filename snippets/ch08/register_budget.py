# Registers per thread: one SM has 65,536 32-bit registers (CUDA C++ Programming Guide, compute capability 9.0).
# The threads on an SM share them. A thread may hold at most 255, and a budget is set in steps of 8.
REGISTERS_PER_SM = 65536
MAX_PER_THREAD = 255


def per_thread(threads: int) -> int:
    """The most registers each of `threads` threads can have when they all live on one SM."""
    return min(REGISTERS_PER_SM // threads // 8 * 8, MAX_PER_THREAD)


print("warps on the SM  threads  registers per thread")
for warps in (4, 8, 12, 16, 32, 64):
    print(f"{warps:15d}  {warps * 32:7d}  {per_thread(warps * 32):20d}")

# Warp specialization with setmaxnreg: every warpgroup (128 threads) starts with the same budget; the copying
# warp's warpgroup gives registers back (down to 24, the smallest setmaxnreg allows) and the computing
# warpgroups take them (in steps of 8).
COPIER = 24
print()
for computing in (2, 3):
    groups = computing + 1  # the copying warp occupies a warpgroup of its own
    at_launch = per_thread(groups * 128)
    pool = at_launch * groups * 128 - COPIER * 128
    each = min(pool // (computing * 128) // 8 * 8, 256)
    print(f"{computing} computing warpgroups + 1 copying: {at_launch} each at launch -> copier {COPIER}, "
          f"computing {each} ({COPIER * 128 + each * computing * 128:,} of {REGISTERS_PER_SM:,} registers)")

# What one computing thread must hold: a warpgroup owns 64 query rows; an fp32 tile of 64 rows x n columns
# spread over 128 threads is n/2 registers per thread, an fp16 tile half as many. P is made from S a piece at a
# time, so at the peak a thread holds O, S and the P of the previous tile that the tensor cores still read.
print()
for head_dim in (64, 128):
    accumulator = 64 * head_dim // 128  # O, fp32
    scores = 64 * 128 // 128  # S for 128 keys, fp32
    p_tile = 64 * 128 // 128 // 2  # P for 128 keys, fp16
    every_tile = accumulator + scores + 2 * p_tile
    peak = accumulator + scores + p_tile
    print(f"head dim {head_dim:3d}: O {accumulator} + S {scores} + P {p_tile} + P in flight {p_tile} = "
          f"{every_tile}; at the peak O + S + P in flight = {peak} registers, before indices and row statistics")
