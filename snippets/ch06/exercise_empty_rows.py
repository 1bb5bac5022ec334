# Exercise 3: a row whose first tile hides every key. The online softmax starts with m = -inf; a tile
# of scores that are all -inf leaves it there, and exp(-inf - (-inf)) is NaN. A guard fixes it.
import numpy as np

rng = np.random.default_rng(0)
n_q, n_k, block_n, d = 4, 8, 4, 2
q, k, v = rng.standard_normal((n_q, d)), rng.standard_normal((n_k, d)), rng.standard_normal((n_k, d))
scores = q @ k.T
hidden = np.arange(n_k)[None, :] > np.arange(n_q)[:, None]  # causal, top-left: rows 0..3 see keys 0..i
scores[hidden] = -np.inf

p_ref = np.exp(scores - scores.max(axis=1, keepdims=True))
expected = p_ref / p_ref.sum(axis=1, keepdims=True) @ v


def online(tile_order, guard):
    m, l, acc = np.full(n_q, -np.inf), np.zeros(n_q), np.zeros((n_q, d))
    for j in tile_order:
        s = scores[:, j * block_n:(j + 1) * block_n]
        m_new = np.maximum(m, s.max(axis=1))
        shift = np.where(np.isneginf(m_new), 0.0, m_new) if guard else m_new  # the guard
        with np.errstate(invalid="ignore"):
            alpha = np.exp(m - shift)
            p = np.exp(s - shift[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ v[j * block_n:(j + 1) * block_n]
        m = m_new
    return acc / l[:, None]


for order in [[0, 1], [1, 0]]:
    for guard in [False, True]:
        out = online(order, guard)
        nan_rows = np.flatnonzero(np.isnan(out).any(axis=1)).tolist()
        print(f"tiles in order {order}, guard {str(guard):>5}: NaN rows {nan_rows}, "
              f"matches reference: {np.allclose(out, expected)}")
