# Why softmax(x)_i = exp(x_i) / sum_j exp(x_j), typed as written, breaks: exp overflows early.
import numpy as np

for dtype in (np.float16, np.float32, np.float64):
    largest = float(np.finfo(dtype).max)
    print(f"{dtype.__name__:>7}: largest finite value {largest:.4g}, so exp(x) = inf for x > {np.log(largest):.2f}")
print()

with np.errstate(over="ignore", invalid="ignore"):
    print("exp(1000) in float32 =", np.exp(np.float32(1000)))
    print("exp(1000) in float16 =", np.exp(np.float16(1000)))
    print("exp(12)   in float16 =", np.exp(np.float16(12)), "(a logit of 12 is already too large)")
    print()

    x = np.array([1000.0, 1001.0, 1002.0], dtype=np.float32)
    naive = np.exp(x) / np.exp(x).sum()  # inf / inf
    print("x               =", x)
    print("naive softmax   =", naive)

    tiny = -x  # the other end: every exp underflows to 0, and 0 / 0 is NaN too
    print("naive on -x     =", np.exp(tiny) / np.exp(tiny).sum())


def shifted_softmax(x):
    """Subtract the max first: the largest exponent is exp(0) = 1, and nothing overflows."""
    e = np.exp(x - x.max())
    return e / e.sum()


print("shifted softmax =", shifted_softmax(x).round(4))
print("softmax([0, 1, 2]) =", shifted_softmax(np.array([0.0, 1.0, 2.0], dtype=np.float32)).round(4),
      "(the same: softmax ignores a shift)")
