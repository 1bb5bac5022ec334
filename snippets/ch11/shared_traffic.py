# Chapter 11: the bytes one block of queries moves through shared memory in the Gluon backward (steps 8-10),
# against the time the tensor cores need for the same block. Our model: it assumes that wgmma's reads of its
# shared-memory operands share the 128 bytes per clock that threads get, which NVIDIA does not document.
# Run: python snippets/ch11/shared_traffic.py
KEYS, KEYS_PER_WARPGROUP, BLOCK_M = 128, 64, 64  # a program's keys, each warpgroup's, the queries per block
FP16, FP32 = 2, 4
SHARED_BYTES_PER_CLOCK = 128  # 32 banks of 4 bytes (published: CUDA C++ Programming Guide; chapter 8)
TENSOR_FLOPS_PER_CLOCK = 4096  # dense fp16 per SM (published: H100 datasheet over 132 SMs at 1.83 GHz; chapter 8)


def tile(rows, cols, size=FP16):
    return rows * cols * size


def block_bytes(d, kv_in_registers, dq_by_turns):
    """Shared-memory bytes for one block of BLOCK_M queries, both computing warpgroups together."""
    moved = 0
    for _warpgroup in range(2):
        moved += 4 * tile(BLOCK_M, d)  # Q (Sᵀ and dK) and dO (dPᵀ and dV) as second operands
        if not kv_in_registers:
            moved += 2 * tile(KEYS_PER_WARPGROUP, d)  # K and V as first operands of Sᵀ and dPᵀ
    if dq_by_turns:  # dQ's share by one warpgroup: dSᵀ for all keys, K with every column
        moved += tile(KEYS, BLOCK_M) + tile(KEYS, d)
    else:  # by both: each reads dSᵀ for all keys and K with half the columns
        moved += 2 * (tile(KEYS, BLOCK_M) + tile(KEYS, d // 2))
    moved += tile(KEYS, BLOCK_M)  # dSᵀ written by the threads
    moved += 2 * tile(BLOCK_M, d, FP32)  # dQ's share written by the threads, read by the copy engine
    moved += 2 * tile(BLOCK_M, d)  # Q and dO written by the copy engine
    return moved


steps = {8: (False, False), 9: (True, False), 10: (True, True)}
for d in (64, 128):
    tensor = 5 * 2 * KEYS * BLOCK_M * d // TENSOR_FLOPS_PER_CLOCK  # five products of 128 x 64 x d
    for step, (kv_in_registers, dq_by_turns) in steps.items():
        if d == 128 and step > 8:
            print(f"head dim {d}, step {step}: no room (registers, shared memory); the kernel is step 8's")
            continue
        moved = block_bytes(d, kv_in_registers, dq_by_turns)
        shared = moved // SHARED_BYTES_PER_CLOCK
        print(f"head dim {d}, step {step}: {moved // 1024} KiB, {shared:,} clocks of shared memory "
              f"against {tensor:,} of tensor cores ({shared / tensor:.2f}x)")
