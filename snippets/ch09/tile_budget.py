# Why head dim 64 is harder to make fast than 128: per tile, count the clocks the tensor cores need for the
# two products and the clocks the special-function units need for the exponentials. Both rates are peaks
# from NVIDIA's documents, not measurements: a Hopper SM does 4096 dense fp16 FLOPs per clock on its tensor
# cores (H100 whitepaper: 989 TFLOP/s = 132 SMs x 4096 x 1.83 GHz) and 16 exp2 per clock on its
# special-function units (CUDA C++ Programming Guide, arithmetic instruction throughput, compute capability 9.0).
TENSOR_FLOPS_PER_CLOCK = 4096
EXP2_PER_CLOCK = 16

rows, keys = 64, 128  # one warpgroup's tile in chapter 9's Gluon kernel
for d in (64, 128):
    matmul_flops = 2 * (2 * rows * keys * d)  # S = Q K^T and O += P V
    exps = rows * keys
    mma_clocks = matmul_flops / TENSOR_FLOPS_PER_CLOCK
    exp_clocks = exps / EXP2_PER_CLOCK
    print(f"D={d:3d}: tensor cores {mma_clocks:4.0f} clocks, exponentials {exp_clocks:4.0f} clocks "
          f"({exp_clocks / mma_clocks:.0%} of the products)")

# The register file is shared by every thread of the SM: 65,536 32-bit registers. The kernel runs one program
# per SM with 3 warpgroups of 128 threads; the copying warp's group gets 24 registers per thread.
REGISTERS_PER_SM, THREADS, COPIER, COMPUTE_GROUPS = 65536, 3 * 128, 24, 2
average = REGISTERS_PER_SM // THREADS // 8 * 8  # a register limit is a multiple of 8
per_compute_thread = (average * THREADS - COPIER * 128) // (COMPUTE_GROUPS * 128)
print(f"average {average} registers per thread; each copying thread {COPIER}; each computing thread "
      f"{per_compute_thread}")
fp32_tile = rows * 128 // 128  # a 64 x 128 fp32 tile spread over 128 threads: registers per thread
# At the peak a thread holds O, S and the P the tensor cores still read; the new P is made from S a piece at a time
o, s, p_in_flight = fp32_tile, fp32_tile, fp32_tile // 2  # P is fp16: half as many registers
print(f"head dim 128 at the peak: O {o} + S {s} + the P still read by the tensor cores {p_in_flight} "
      f"= {o + s + p_in_flight} of the {per_compute_thread} registers")
