# A numpy picture of how a Triton launch splits work: a grid of programs, each owning one block of
# indices, with a mask that switches off the indices past the end. Runs anywhere, no GPU needed.
import numpy as np

n_elements = 10
BLOCK_SIZE = 4
x = np.arange(n_elements, dtype=np.float32)
y = 10 * np.ones(n_elements, dtype=np.float32)
out = np.full(n_elements, np.nan, dtype=np.float32)  # NaN marks "not written yet"

num_programs = -(-n_elements // BLOCK_SIZE)  # ceiling division, like triton.cdiv
print(f"{n_elements} elements, BLOCK_SIZE={BLOCK_SIZE} -> grid of {num_programs} programs")

# On a GPU these programs run at the same time, in any order; here we run them one by one.
for pid in range(num_programs):
    offsets = pid * BLOCK_SIZE + np.arange(BLOCK_SIZE)
    mask = offsets < n_elements
    safe = offsets[mask]  # a masked load or store never touches the other offsets
    out[safe] = x[safe] + y[safe]
    print(f"program {pid}: offsets {offsets.tolist()} mask {mask.astype(int).tolist()}")

print("out =", out.tolist())
print("every element written:", not np.isnan(out).any())
print("equals x + y:", np.array_equal(out, x + y))
