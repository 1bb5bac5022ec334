# Exercise 1, solution: complete an online softmax that reads a 1-D row block_size values at a time.
import math

import numpy as np
from safe_softmax import reference_softmax


def online_softmax_blocks(x, block_size):
    m, l = -math.inf, 0.0
    for start in range(0, len(x), block_size):
        block = x[start:start + block_size]
        m_new = max(m, block.max())
        if m_new == -math.inf:
            continue  # the blocks so far hold only -inf: l stays 0
        # The missing line of the exercise: rescale the old sum to the new max, add this block.
        l = l * math.exp(m - m_new) + np.exp(block - m_new).sum()
        m = m_new
    if l == 0.0:
        return np.full(len(x), np.nan)  # all -inf: no softmax, NaN (the chapter's convention)
    return np.exp(x - m) / l


rng = np.random.default_rng(1)
rows = {
    "normal": rng.standard_normal(50),
    "large logits (x 1e4)": rng.standard_normal(50) * 1e4,
    "very negative (-1e5 + ...)": rng.standard_normal(50) - 1e5,
    "-inf in the first block": np.concatenate([np.full(8, -np.inf), rng.standard_normal(42)]),
    "one element": np.array([2.5]),
}
for name, row in rows.items():
    results = [np.allclose(online_softmax_blocks(row, b), reference_softmax(row), rtol=0, atol=1e-9)
               for b in (1, 3, 8, 64)]
    print(f"{name:<28} matches reference for block sizes 1, 3, 8, 64: {all(results)}")
print("all -inf:", online_softmax_blocks(np.full(4, -np.inf), 3))
