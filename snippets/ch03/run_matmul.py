# Run the book's Triton matmul on odd shapes and compare it with a float64 reference. On a machine
# without a GPU, `import kernels` switches Triton to its CPU interpreter, so this runs anywhere.
import torch

import kernels  # noqa: F401  (import first: it picks the interpreter when there is no GPU)
from kernels.matmul import matmul

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
# fp16 keeps 11 significant bits, bf16 8: the bounds allow a few units of rounding in the last place.
BOUNDS = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}

for dtype, bound in BOUNDS.items():
    for m, n, k in [(17, 33, 65), (64, 48, 100), (1, 1, 1)]:  # none is a multiple of the tiles
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        c = matmul(a, b)
        ref = a.double() @ b.double()  # the exact product of the rounded inputs
        err = ((c.double() - ref).norm() / ref.norm()).item()
        name = str(dtype).removeprefix("torch.")
        print(f"{name:<8} ({m}, {k}) @ ({k}, {n}) -> {tuple(c.shape)}: relative error < {bound}: {err < bound}")

# Transposed views work too: the kernel follows strides, not shapes.
a = torch.randn(40, 24, device=device, dtype=torch.float16)
b = torch.randn(40, 32, device=device, dtype=torch.float16)
ref = a.double().T @ b.double()
print("a.T @ b, a non-contiguous view:", ((matmul(a.T, b).double() - ref).norm() / ref.norm()).item() < 2e-3)

# Wrong inputs get an error that names the problem.
x = torch.randn(8, 4, device=device, dtype=torch.float16)
for bad in [(x, x), (x, x[0]), (x, x.T.reshape(1, 4, 8)), (x, x.T.bfloat16())]:
    try:
        matmul(*bad)
    except (TypeError, ValueError) as error:
        print(f"{type(error).__name__}: {error}")
