# Chapter 11: what one tile of the backward costs, with dQ from a second pass or from atomic adds.
# Run: python snippets/ch11/tile_costs.py
batch, heads, n, d = 4, 16, 4096, 128  # 16K tokens, head dim 128: a column of the worklog
block_m = block_n = 64  # a 64 x 64 tile of (queries, keys)
fp16, fp32 = 2, 4

product = 2 * block_m * block_n * d  # FLOPs of one (64 x 64) by (64 x 128) matrix product
tiles = batch * heads * (n // block_m) * (n // block_n)
second_pass, atomic = 7, 5  # products per tile: dK/dV kernel 4 + dQ kernel 3, or one kernel with all 5
print(f"one tile: {product:,} FLOPs per matrix product; {tiles:,} tiles in the whole backward")
print(f"second pass: {second_pass} products per tile, {second_pass * product * tiles / 1e12:.2f} TFLOP")
print(f"atomic adds: {atomic} products per tile, {atomic * product * tiles / 1e12:.2f} TFLOP "
      f"({second_pass / atomic:.1f}x less work)")

added = block_m * d * fp32  # each tile adds its 64 x 128 share of dQ, in fp32
inputs = 5 * batch * heads * n * d * fp16  # Q, K, V, O and dO, each read once
print(f"atomic adds: {added // 1024} KiB added into dQ per tile, {added * tiles / 2**30:.1f} GiB per backward")
print(f"that is {added * tiles / inputs:.0f}x the bytes of Q, K, V, O and dO together ({inputs / 2**20:.0f} MiB)")
