# How many bytes does standard attention move to and from HBM, for one layer of a real model?
# Concrete sizes: batch 1, 32 heads, sequence N = 4096, head dim d = 64, fp16 (2 bytes per element).
B, H, N, d, e = 1, 32, 4096, 64, 2
MiB = 2**20

qkv = N * d * e  # one of Q, K, V or O, for one head
nn = N * N * e  # one N x N matrix (S or P), for one head
passes = [
    ("S = Q K^T", 2 * qkv, nn),  # read Q and K, write S
    ("P = softmax(S)", nn, nn),  # read S, write P
    ("O = P V", nn + qkv, qkv),  # read P and V, write O
]
print(f"one head, N = {N}, d = {d}, fp16: Q, K, V, O are {qkv / MiB:.2f} MiB each, S and P {nn / MiB:.0f} MiB each")
print(f"{'pass':<16}{'read MiB':>10}{'write MiB':>11}")
for name, read, write in passes:
    print(f"{name:<16}{read / MiB:>10.2f}{write / MiB:>11.2f}")
total = sum(r + w for _, r, w in passes)
print(f"{'total':<16}{total / MiB:>21.2f} MiB = (4 N d + 4 N^2) x {e} bytes: "
      f"{(4 * N * d + 4 * N * N) * e == total}")
print(f"share of the traffic that is S and P: {4 * nn / total:.0%}")
print()
print(f"all {B * H} heads: {B * H * total / 2**30:.2f} GiB moved, and S alone needs {B * H * nn / 2**30:.2f} GiB")
print(f"FLOPs, the same for any exact algorithm: 4 N^2 d x heads = {4 * N * N * d * B * H / 1e9:.1f} GFLOP")
print()
# FlashAttention-2 order with B_r query rows per block: Q read once, K and V read once per Q block,
# O written once, plus the logsumexp (4 bytes a row).
for block_m in (64, 128):
    flash = qkv + 2 * qkv * (N // block_m) + qkv + 4 * N
    print(f"flash, B_r = {block_m:>3}: {flash / MiB:6.2f} MiB per head, {total / flash:4.1f}x fewer bytes")
