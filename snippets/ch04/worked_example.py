# The chapter's worked example: one row of 6 logits in two tiles of 3, then one attention row with V (6 x 2).
import numpy as np
from safe_softmax import reference_softmax

x = np.array([2.0, 4.0, 3.0, 7.0, 5.0, 1.0])  # one query's scores against 6 keys
V = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [1.0, 2.0], [0.0, 3.0]])  # one value row per key
TILE = 3


def fmt(v, digits=4):
    return "[" + ", ".join(f"{a:.{digits}f}" for a in v) + "]"


m, l = -np.inf, 0.0
acc = np.zeros(2)  # un-normalized output: sum over the keys seen so far of exp(x_j - m) * V[j]
o = np.zeros(2)  # the other form: the output normalized again after every tile
rows = []
for start in range(0, len(x), TILE):
    xt, vt = x[start:start + TILE], V[start:start + TILE]
    m_new = max(m, xt.max())
    rescale = np.exp(m - m_new)  # exp(m_old - m_new); 0 on the first tile, where m_old = -inf
    p = np.exp(xt - m_new)  # this tile's weights, relative to the new max
    l_new = l * rescale + p.sum()
    acc = acc * rescale + p @ vt
    o = (o * l * rescale + p @ vt) / l_new  # undo the last division, rescale, add, divide again
    m, l = m_new, l_new
    rows.append((xt, m, rescale, p, l, p @ vt, acc.copy(), o.copy()))

print("Softmax statistics after each tile")
print("tile  logits           m    exp(m_old - m)  p = exp(logits - m)       l")
for t, (xt, m_t, rescale, p, l_t, *_) in enumerate(rows, 1):
    print(f"{t:>4}  {fmt(xt, 1):<15}  {m_t:3.1f}  {rescale:14.4f}  {fmt(p):<24}  {l_t:.4f}")
print()
print("Output after each tile (V has 2 columns)")
print("tile  p @ V_tile        acc = rescale * acc + p @ V_tile  acc / l           o (normalized every tile)")
for t, (*_, pv, acc_t, o_t) in enumerate(rows, 1):
    l_t = rows[t - 1][4]
    print(f"{t:>4}  {fmt(pv):<16}  {fmt(acc_t):<32}  {fmt(acc_t / l_t):<16}  {fmt(o_t)}")
print()
print("end, one division: acc / l =", fmt(acc / l))
print("direct: softmax(x) @ V     =", fmt(reference_softmax(x) @ V))
print("softmax(x)                 =", fmt(reference_softmax(x)))
print("acc / l matches direct:", bool(np.allclose(acc / l, reference_softmax(x) @ V, rtol=0, atol=1e-12)))
print("normalizing every tile gives the same:", bool(np.allclose(o, acc / l, rtol=0, atol=1e-12)))
