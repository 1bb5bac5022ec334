# The online softmax: one pass over the row finds the max m and the denominator l together.
import math

import numpy as np
from safe_softmax import reference_softmax


def online_normalizer(x, trace=None):
    """One read of x: the max m of the row and l = sum_j exp(x_j - m)."""
    m, l = -math.inf, 0.0
    for xj in x:
        m_new = max(m, xj)
        if m_new == -math.inf:
            continue  # only -inf seen so far: nothing to add yet (and -inf - (-inf) would be NaN)
        # The old l is a sum of exp(x_k - m). Multiplying by exp(m - m_new) makes it a sum of exp(x_k - m_new).
        l = l * math.exp(m - m_new) + math.exp(xj - m_new)
        m = m_new
        if trace is not None:
            trace.append((xj, m, l))
    return m, l


def online_softmax(x):
    """Softmax of a 1-D row: one pass for m and l, one pass to write exp(x_i - m) / l."""
    m, l = online_normalizer(x)
    if l == 0.0:
        return np.full(len(x), np.nan)  # every entry is -inf: 0 / 0, NaN, as torch.softmax gives
    return np.array([math.exp(xi - m) / l for xi in x])


if __name__ == "__main__":
    x = [2.0, 4.0, 3.0, 7.0, 5.0, 1.0]
    steps = []
    m, l = online_normalizer(x, trace=steps)
    print(" j   x_j      m         l")
    for j, (xj, mj, lj) in enumerate(steps):
        print(f"{j:2}  {xj:4.1f}  {mj:5.1f}  {lj:8.4f}")
    direct = sum(math.exp(xj - max(x)) for xj in x)
    print(f"after the last element: m = {m}, l = {l:.6f}; direct sum of exp(x_j - max) = {direct:.6f}")
    print("online_softmax =", online_softmax(x).round(4))
    print()

    rng = np.random.default_rng(0)
    for scale in (1.0, 100.0, 1e4):
        row = rng.standard_normal(1000) * scale
        err = np.abs(online_softmax(row) - reference_softmax(row)).max()
        print(f"logits ~ N(0, {scale:g}^2): matches reference: {bool(err < 1e-9)}")
    print("reads of the row: safe softmax 3, online softmax 2")
