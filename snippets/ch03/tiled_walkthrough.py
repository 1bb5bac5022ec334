# A tiled matmul by hand: 4 x 4 matrices, 2 x 2 tiles, every step printed.
# Each C tile is a sum over k-steps: C[i, j] = sum over k of A[i, k] @ B[k, j], where A[i, k] is the
# 2 x 2 tile in tile-row i and tile-column k. Small integers keep every number exact.
import numpy as np

rng = np.random.default_rng(3)
A = rng.integers(-2, 4, size=(4, 4))
B = rng.integers(-2, 4, size=(4, 4))
T = 2  # tile size: T x T tiles of A, B and C
n = A.shape[0]
print("A =\n", A, "\nB =\n", B, sep="")


def show(tile: np.ndarray) -> str:
    return str(tile.tolist())


C = np.zeros((n, n), dtype=A.dtype)
tiled_loads = 0
for i in range(n // T):  # tile-row of C
    for j in range(n // T):  # tile-column of C
        rows, cols = slice(i * T, (i + 1) * T), slice(j * T, (j + 1) * T)
        acc = np.zeros((T, T), dtype=A.dtype)  # the running sum, kept "on chip"
        print(f"\nC tile ({i}, {j}) = C[{i * T}:{(i + 1) * T}, {j * T}:{(j + 1) * T}]")
        for k in range(n // T):  # k-step: slide along the inner dimension
            ks = slice(k * T, (k + 1) * T)
            a, b = A[rows, ks], B[ks, cols]  # load one tile of A and one of B
            tiled_loads += a.size + b.size
            acc += a @ b
            print(f"  k-step {k}: A tile ({i}, {k}) = {show(a)}  B tile ({k}, {j}) = {show(b)}")
            print(f"            partial C tile = {show(acc)}")
        C[rows, cols] = acc  # written once, when the sum is complete

# The naive triple loop, counting the elements it loads.
naive = np.zeros((n, n), dtype=A.dtype)
naive_loads = 0
for r in range(n):
    for c in range(n):
        for k in range(n):
            naive[r, c] += A[r, k] * B[k, c]
            naive_loads += 2

print("\nC =\n", C, sep="")
print("matches A @ B:", np.array_equal(C, A @ B), "| naive loop matches too:", np.array_equal(naive, A @ B))
print(f"elements loaded: naive {naive_loads} (2*n^3 = {2 * n**3}), tiled {tiled_loads} (2*n^3/T = {2 * n**3 // T}),"
      f" minimum {A.size + B.size}")
