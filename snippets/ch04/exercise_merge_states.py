# Exercise 2, solution: two programs each process half a row; merge their (m, l) states into one.
import math

import numpy as np


def state(x):
    """(m, l) of a part of a row: its max and sum(exp(x - m))."""
    m = float(x.max())
    return m, float(np.exp(x - m).sum())


def merge(a, b):
    """The state of the concatenation of two parts, from the states of the parts."""
    (m_a, l_a), (m_b, l_b) = a, b
    m = max(m_a, m_b)
    return m, l_a * math.exp(m_a - m) + l_b * math.exp(m_b - m)


rng = np.random.default_rng(2)
x = rng.standard_normal(1000) * 50
left, right = state(x[:400]), state(x[400:])
m, l = merge(left, right)
m_all, l_all = state(x)
print(f"merged: m = {m:.4f}, l = {l:.6f}")
print(f"whole : m = {m_all:.4f}, l = {l_all:.6f}")
print("same state:", m == m_all and math.isclose(l, l_all, rel_tol=1e-12))
print("merge order does not matter:", merge(left, right) == merge(right, left))
# The log of the denominator, logsumexp(x) = m + log(l), is what FlashAttention-2 saves for the backward pass.
print("logsumexp = m + log(l) matches np.logaddexp.reduce:",
      math.isclose(m + math.log(l), float(np.logaddexp.reduce(x)), rel_tol=1e-12))
