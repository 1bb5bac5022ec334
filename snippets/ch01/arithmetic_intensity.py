# Arithmetic intensity = FLOPs done / bytes moved to and from GPU memory (HBM).
# Compare it with the ridge point of the roofline: peak FLOP/s / peak bytes/s.

# Datasheet peaks of an H100 SXM5 (NVIDIA H100 Tensor Core GPU datasheet), not measurements.
PEAK_FP16_FLOPS = 989e12  # dense fp16/bf16 tensor-core FLOP/s
PEAK_HBM_BYTES = 3.35e12  # HBM3 bytes/s
ridge = PEAK_FP16_FLOPS / PEAK_HBM_BYTES
print(f"ridge point: {ridge:.0f} FLOP/byte (below it a kernel is memory-bound)")
print()


def report(name: str, flops: float, nbytes: float) -> None:
    intensity = flops / nbytes
    bound = "memory-bound" if intensity < ridge else "compute-bound"
    print(f"{name:<34} {intensity:>8.2f} FLOP/byte  -> {bound}")


n = 2**26
report("vector add, fp32, 2^26 elements", flops=n, nbytes=3 * n * 4)

m = 4096
report("matmul 4096^3, fp16", flops=2 * m**3, nbytes=3 * m * m * 2)

seq, d = 4096, 64
# Softmax over the N x N scores alone: read and write N^2 fp16 values, about 5 operations each.
report("softmax of 4096^2 scores, fp16", flops=5 * seq * seq, nbytes=2 * seq * seq * 2)
