# Run the book's vector-add kernel and compare it with torch. On a machine without a GPU,
# `import kernels` switches Triton to its CPU interpreter, so this runs anywhere.
import torch

import kernels  # noqa: F401  (import first: it picks the interpreter when there is no GPU)
from kernels.vector_add import add

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
n = 100_003  # not a multiple of the block size: the last program is masked
x = torch.randn(n, device=device)
y = torch.randn(n, device=device)

out = add(x, y, block_size=1024)
print(f"n = {n}, programs launched = {-(-n // 1024)}")
print("max |add(x, y) - (x + y)| =", (out - (x + y)).abs().max().item())

try:
    add(x, y[:-1])
except ValueError as error:
    print("bad input:", error)
