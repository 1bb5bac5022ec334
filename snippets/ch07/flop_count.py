# The benchmark's arithmetic: FLOPs of one attention forward, and what a time in milliseconds means
# in TFLOP/s. The peak below is a datasheet value (NVIDIA H100 SXM5, dense fp16/bf16), not a measurement.
H100_DATASHEET_TFLOPS = 989


def attention_flops(batch, heads, n, d, causal):
    # Two matmuls per head, S = Q K^T and O = P V, each 2 * N * N * d FLOPs; causal skips about half.
    # Softmax work (max, exp, sum, rescale) is left out of the count, as the FlashAttention papers do.
    full = 4 * batch * heads * n * n * d
    return full // 2 if causal else full


def tflops(flops, ms):
    return flops / (ms * 1e-3) / 1e12


tokens = 16384
for d, heads in ((64, 32), (128, 16)):
    for n in (1024, 4096, 16384):
        flops = attention_flops(tokens // n, heads, n, d, causal=False)
        best_ms = flops / (H100_DATASHEET_TFLOPS * 1e12) * 1e3
        print(f"D={d:3d} H={heads} N={n:5d} B={tokens // n:2d}: {flops / 1e12:6.3f} TFLOP, "
              f"at the datasheet peak {best_ms:.3f} ms")

print(f"1 ms for 0.5 TFLOP is {tflops(0.5e12, 1.0):.0f} TFLOP/s")
