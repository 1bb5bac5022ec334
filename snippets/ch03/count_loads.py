# How many elements does C = A @ B load, for A (M x K) and B (K x N) in fp16?
# Naive: every one of the M*N outputs reads a row of A and a column of B (K elements each).
# Tiled: every T_M x T_N tile of C reads a T_M x K panel of A and a K x T_N panel of B.
# Minimum: read A and B once each. Every version writes C once.
M = N = K = 4096
BYTES = 2  # fp16
FLOPS = 2 * M * N * K  # one multiply and one add per (i, j, k)

# Datasheet peaks of an H200 SXM (NVIDIA H200 datasheet: the H100's compute, 4.8 TB/s of HBM3e), not measurements.
RIDGE = 989e12 / 4.8e12  # dense fp16 FLOP/s divided by HBM bytes/s


def naive_loads() -> int:
    return 2 * M * N * K


def tiled_loads(t_m: int, t_n: int) -> int:
    tiles = (M // t_m) * (N // t_n)
    return tiles * (t_m * K + K * t_n)


def report(name: str, loads: int) -> None:
    traffic = (loads + M * N) * BYTES  # the loads, plus writing C once
    intensity = FLOPS / traffic
    bound = "memory-bound" if intensity < RIDGE else "compute-bound"
    print(f"{name:<18} {loads:>16,} {traffic / 1e9:>8.1f} GB {intensity:>7.1f}  {bound}")


print(f"C = A @ B with M = N = K = {M}, fp16: {FLOPS:,} FLOPs")
print(f"ridge point (H200 datasheet): {RIDGE:.0f} FLOP/byte")
print("if every load went to HBM:")
print()
print(f"{'':<18} {'elements loaded':>16} {'traffic':>11} {'FLOP/byte':>9}")
report("naive triple loop", naive_loads())
for t_m, t_n in [(16, 16), (32, 32), (64, 64), (128, 128), (128, 256)]:
    report(f"tiles {t_m} x {t_n}", tiled_loads(t_m, t_n))
report("A and B once each", M * K + K * N)
print()
print("tiled / naive loads = (1/T_M + 1/T_N) / 2, which is 1/T for square T x T tiles")
print(f"check, 128 x 128: {tiled_loads(128, 128) / naive_loads():.6f} = 1/{naive_loads() // tiled_loads(128, 128)}")
