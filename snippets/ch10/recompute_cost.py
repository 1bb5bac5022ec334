# Chapter 10: what recomputing P costs and what it saves, counted for one training step's attention.
# Run: python snippets/ch10/recompute_cost.py
batch, heads, n, d = 1, 32, 16384, 64  # 16K tokens, head dim 64
fp16, fp32 = 2, 4

# Matrix products per (Q block, K/V block) tile, each 2 * rows * cols * inner FLOPs.
forward = ["S = Q Kᵀ", "O += P V"]
backward_counted = ["S = Q Kᵀ (again)", "dV += Pᵀ dO", "dP = dO Vᵀ", "dQ += dS K", "dK += dSᵀ Q"]
two_kernels = {"dK, dV kernel": ["S = Q Kᵀ", "dV += Pᵀ dO", "dP = dO Vᵀ", "dK += dSᵀ Q"],
               "dQ kernel": ["S = Q Kᵀ", "dP = dO Vᵀ", "dQ += dS K"]}
print(f"forward: {len(forward)} products per tile")
print(f"backward, as FLOPs are counted: {len(backward_counted)} products per tile "
      f"({len(backward_counted) / len(forward)} x the forward)")
done = sum(len(products) for products in two_kernels.values())
print(f"backward, as this chapter's two kernels run it: {done} products per tile "
      f"({done / len(forward)} x the forward)")

# Memory: what the forward keeps for the backward.
p_bytes = batch * heads * n * n * fp16
kept_bytes = batch * heads * n * (d * fp16 + fp32)  # O and the fp32 logsumexp L
print(f"storing P: {p_bytes / 2**30:.1f} GiB; storing O and L: {kept_bytes / 2**20:.1f} MiB")
