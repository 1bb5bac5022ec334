# Exercise: 5 x 5 matrices with 2 x 2 tiles. 5 is not a multiple of 2, so the last tiles hang over the edge.
# Along K the overhanging elements must add nothing: load them as 0.0 (the kernel's mask, other=0.0).
# Along M and N the kernel instead wraps indices back inside (row % M); the store drops those rows.
import numpy as np

rng = np.random.default_rng(5)
A = rng.integers(-2, 4, size=(5, 5))
B = rng.integers(-2, 4, size=(5, 5))
M, K = A.shape
N = B.shape[1]
T = 2


def load(X: np.ndarray, rows: np.ndarray, cols: np.ndarray, wrap_rows: bool, wrap_cols: bool) -> np.ndarray:
    """Load X[rows][:, cols]; indices past the edge wrap around or read 0, like the kernel's loads."""
    r = rows % X.shape[0] if wrap_rows else rows
    c = cols % X.shape[1] if wrap_cols else cols
    inside = (r[:, None] < X.shape[0]) & (c[None, :] < X.shape[1])
    return np.where(inside, X[np.minimum(r, X.shape[0] - 1)][:, np.minimum(c, X.shape[1] - 1)], 0)


C = np.zeros((M, N), dtype=A.dtype)
programs = 0
for i in range(-(-M // T)):  # cdiv: 3 tile-rows, the last one half outside
    for j in range(-(-N // T)):
        programs += 1
        rows, cols = i * T + np.arange(T), j * T + np.arange(T)
        acc = np.zeros((T, T), dtype=A.dtype)
        for k0 in range(0, K, T):
            ks = k0 + np.arange(T)
            acc += load(A, rows, ks, wrap_rows=True, wrap_cols=False) @ load(B, ks, cols, wrap_rows=False,
                                                                             wrap_cols=True)
        keep = (rows[:, None] < M) & (cols[None, :] < N)  # the store's mask
        for r, c in zip(*np.nonzero(keep), strict=True):
            C[rows[r], cols[c]] = acc[r, c]

print(f"{programs} programs for a {M} x {N} result with {T} x {T} tiles")
print("matches A @ B:", np.array_equal(C, A @ B))

# What goes wrong if k past K wraps too instead of reading 0: some products are counted twice.
bad = np.zeros((M, N), dtype=A.dtype)
for k0 in range(0, K, T):
    ks = (k0 + np.arange(T)) % K
    bad += A[:, ks] @ B[ks, :]
print("wrapping along K instead of masking matches A @ B:", np.array_equal(bad, A @ B))
