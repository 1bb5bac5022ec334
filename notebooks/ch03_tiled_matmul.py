# %% [markdown]
# # Chapter 3 notebook: tiled matmul
#
# The companion of chapter 3: a tiled matmul by hand, then the book's Triton matmul on small matrices.
# Without a GPU the kernel runs under Triton's interpreter, so the sizes stay small.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch03_tiled_matmul.ipynb)

# %%
# Setup: find the book's code (a lone copy of this notebook, as on Colab, fetches it) and import it.
import subprocess
import sys
from pathlib import Path

here = Path.cwd().resolve()
ROOT = next((p for p in [here, *here.parents] if (p / "kernels" / "__init__.py").is_file()), None)
if ROOT is None:
    url = "https://github.com/flash-attention-book/flash-attention-book.git"
    subprocess.run(["git", "clone", "--depth=1", url], check=True)
    ROOT = here / "flash-attention-book"
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import kernels  # noqa: E402, F401  (before triton: it picks Triton's interpreter when there is no GPU)
from book.companion import device, interpreting, run_snippet  # noqa: E402

print("device:", device, "| Triton interpreter:", interpreting())


# %% [markdown]
# ## Tiles by hand
#
# 4 × 4 matrices in 2 × 2 tiles: each tile of C is a sum of tile products over k.

# %%
run_snippet("ch03/tiled_walkthrough.py")

# %% [markdown]
# ## How many loads tiling saves

# %%
run_snippet("ch03/count_loads.py")

# %% [markdown]
# ## The Triton kernel against a float64 reference
#
# Shapes that are not multiples of the tile sizes, in fp16 and bf16.

# %%
from kernels.matmul import matmul  # noqa: E402

torch.manual_seed(0)
for dtype, bound in [(torch.float16, 2e-3), (torch.bfloat16, 1.5e-2)]:
    for m, n, k in [(33, 17, 40), (64, 64, 64)]:
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        ref = a.double() @ b.double()
        err = ((matmul(a, b).double() - ref).norm() / ref.norm()).item()
        print(f"{str(dtype)[6:]:<8} ({m}, {k}) @ ({k}, {n}): relative error below {bound}: {err < bound}")

# %% [markdown]
# ## Your turn
#
# Change the shapes above, or try a transposed view (`matmul(a.T, b)` with `a` of shape (k, m)): the kernel
# follows strides, so views need no copy.

# %%
a = torch.randn(24, 16, device=device, dtype=torch.float16)
b = torch.randn(24, 8, device=device, dtype=torch.float16)
ref = a.double().T @ b.double()
print("a.T @ b matches:", ((matmul(a.T, b).double() - ref).norm() / ref.norm()).item() < 2e-3)
