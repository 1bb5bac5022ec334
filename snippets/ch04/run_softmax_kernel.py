# Run the book's Triton softmax on both paths and compare it with a float64 reference and torch.softmax.
# Without a GPU, `import kernels` switches Triton to its CPU interpreter, so this runs anywhere.
import torch

import kernels  # noqa: F401  (import first: it picks the interpreter when there is no GPU)
from kernels.softmax import launch_config, softmax

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

for n_rows, n_cols in [(6, 1000), (3, 40000)]:  # one row fits in a block; the other needs the online path
    config = launch_config(n_cols)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = (torch.randn(n_rows, n_cols) * 10).to(dtype=dtype, device=device)
        out = softmax(x)
        ref = torch.softmax(x.double(), dim=-1)
        rel = ((out.double() - ref).norm() / ref.norm()).item()
        bound = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
        print(f"{n_rows} x {n_cols:5} {str(dtype)[6:]:8} path: {config['path']:12} block {config['block_size']:5}  "
              f"relative error < {bound:g}: {rel < bound}")

x = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf")] * 3], device=device)
print("with -inf entries:", softmax(x).cpu().double().numpy().round(4).tolist())
print("torch.softmax:    ", torch.softmax(x, dim=-1).cpu().double().numpy().round(4).tolist())
try:
    softmax(torch.randint(0, 5, (2, 3), device=device))
except TypeError as error:
    print("bad input:", error)
