# One SM has 65,536 32-bit registers, shared by all its threads; a thread may have at most 255, and budgets go
# in steps of 8 (CUDA C++ Programming Guide, compute capability 9.0).
REGISTERS_PER_SM, MAX_PER_THREAD = 65536, 255


def per_thread(threads):
    return min(REGISTERS_PER_SM // threads // 8 * 8, MAX_PER_THREAD)


print("warps on the SM  threads  registers per thread")
for warps in (4, 8, 12, 16, 32, 64):
    print(f"{warps:15d}  {warps * 32:7d}  {per_thread(warps * 32):20d}")

# setmaxnreg: every warpgroup (128 threads) starts with the same budget; the copying warp's warpgroup drops to
# 24 (the least setmaxnreg allows) and the computing warpgroups share what it gave back.
COPIER = 24
print()
for computing in (2, 3):
    at_launch = per_thread((computing + 1) * 128)
    pool = at_launch * (computing + 1) * 128 - COPIER * 128
    each = pool // (computing * 128) // 8 * 8
    print(f"{computing} computing warpgroups + 1 copying: {at_launch} each at launch -> copier {COPIER}, "
          f"computing {each} ({COPIER * 128 + each * computing * 128:,} of {REGISTERS_PER_SM:,} registers)")

# A computing thread's data: its warpgroup's 64 query rows, spread over 128 threads, make an fp32 tile of n
# columns n/2 registers per thread (fp16: n/4). S becomes P a piece at a time, so at the peak a thread holds
# O, S and the P of the previous tile, which the tensor cores may still be reading.
print()
for head_dim in (64, 128):
    o, s, p = head_dim // 2, 128 // 2, 128 // 4  # O (fp32), S for 128 keys (fp32), P for 128 keys (fp16)
    peak = o + s + p
    print(f"head dim {head_dim:3d}: at the peak O {o} + S {s} + P in flight {p} = {peak} registers of data; "
          f"left for indices and row statistics: {240 - peak} of 240, {160 - peak} of 160")
