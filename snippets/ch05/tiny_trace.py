# FlashAttention by hand: 2 queries, 4 keys, head dim 2, tiles of 2 x 2, every number printed.
import numpy as np
from simulator import flash_attention, reference  # snippets/ch05/simulator.py, beside this file

Q = np.array([[1.0, 0.0], [0.0, 2.0]])
K = np.array([[1.0, 1.0], [2.0, 0.0], [0.0, 3.0], [1.0, 2.0]])
V = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [3.0, 1.0]])
scale = 1.0  # no 1/sqrt(d), so the scores are plain dot products
print("scores Q K^T:\n", Q @ K.T)

O, stats = flash_attention(Q, K, V, block_m=2, block_n=2, trace=True, sm_scale=scale)
for step in stats["trace"]:
    print(f"\ntile (Q block {step['q_block']}, K block {step['k_block']}), {step['kind']}")
    for row, (m, l, acc) in enumerate(zip(step["m"], step["l"], step["acc"], strict=True)):
        print(f"  row {row}: m = {m:.3f}  l = {l:.4f}  acc = [{acc[0]:.4f}, {acc[1]:.4f}]")
print("\nO = acc / l:\n", O.round(4))
print("matches direct softmax(Q K^T) V:", np.allclose(O, reference(Q, K, V, sm_scale=scale)))
print("logsumexp per row:", stats["lse"].round(4))
