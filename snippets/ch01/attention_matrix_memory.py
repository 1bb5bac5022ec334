# How much memory does one N x N attention score matrix take, for one head of one sequence?
BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2}
GiB = 2**30

print(f"{'N':>8} {'elements':>16} {'fp32 GiB':>10} {'fp16 GiB':>10}")
for n in [1024, 4096, 16384, 32768, 131072]:
    elements = n * n
    fp32 = elements * BYTES_PER_ELEMENT["fp32"] / GiB
    fp16 = elements * BYTES_PER_ELEMENT["fp16"] / GiB
    print(f"{n:>8} {elements:>16,} {fp32:>10.3f} {fp16:>10.3f}")

n = 131072
print()
print(f"N = {n} (128K): {n}^2 x 4 bytes = {n * n * 4:,} bytes")
print(f"  = {n * n * 4 / 1e9:.1f} GB (10^9 bytes) = {n * n * 4 / GiB:.0f} GiB (2^30 bytes)")
print("An 80 GB GPU holds one such matrix, for one head, and little else.")

HEADS = 32  # attention heads per layer in LLaMA 7B (Touvron et al., 2023)
fp16_head = n * n * BYTES_PER_ELEMENT["fp16"] / GiB
print()
print(f"fp16 halves it: {fp16_head:.0f} GiB for one head, which fits.")
layer = HEADS * fp16_head
print(f"One layer, {HEADS} heads at once: {HEADS} x {fp16_head:.0f} GiB = {layer:,.0f} GiB, which does not.")
