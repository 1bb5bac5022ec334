# One warpgroup's tile: 64 query rows against 128 keys at head dim d, on one SM, at published peak rates:
# tensor cores 4096 dense fp16 FLOPs per clock (the H100 datasheet's 989 TFLOP/s = 132 SMs x 4096 x 1.83 GHz,
# our arithmetic);
# SFUs 16 exp2 per clock and FMA units 128 fp32 FMAs per clock (CUDA C++ Programming Guide, compute
# capability 9.0, arithmetic instruction throughput).
TENSOR_FLOPS_PER_CLOCK, EXP2_PER_CLOCK, FMA_PER_CLOCK = 4096, 16, 128
ROWS, KEYS = 64, 128

exps = ROWS * KEYS  # one exponential per score
print(f"a {ROWS} x {KEYS} tile: {exps} exponentials, {exps / EXP2_PER_CLOCK:.0f} clocks on the SFUs "
      f"(one FMA per score: {exps / FMA_PER_CLOCK:.0f} clocks)")
print("head dim  matmul FLOPs  tensor-core clocks  exp clocks / matmul clocks")
for d in (32, 64, 128, 256):
    flops = 2 * (2 * ROWS * KEYS * d)  # S = Q K^T and O += P V, 2 FLOPs per multiply-add
    mma_clocks = flops / TENSOR_FLOPS_PER_CLOCK
    print(f"{d:8d}  {flops:12,d}  {mma_clocks:18.0f}  {exps / EXP2_PER_CLOCK / mma_clocks:26.2f}")

# Per score the products do 4d FLOPs, and the tensor cores do 4096 / 16 = 256 FLOPs per exponential's time.
print(f"break-even head dim: {TENSOR_FLOPS_PER_CLOCK // EXP2_PER_CLOCK // 4}")
