# %% [markdown]
# # Chapter 2 notebook: vector add
#
# The companion of chapter 2: the book's first Triton kernel, run on small vectors. Without a GPU the
# kernel runs on the CPU under Triton's interpreter, slowly but with the same results.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch02_vector_add.ipynb)

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
# ## How a launch splits the work
#
# The chapter's numpy picture: a grid of programs, each owning one block of indices, with a mask for the tail.

# %%
run_snippet("ch02/simulate_workers.py")

# %% [markdown]
# ## The kernel itself

# %%
import inspect  # noqa: E402

from kernels.vector_add import add, add_kernel  # noqa: E402

print(inspect.getsource(add_kernel.fn))

# %% [markdown]
# ## Run it, and check it against torch
#
# A length that is not a multiple of the block size, so the last program is masked.

# %%
torch.manual_seed(0)
n = 5_003
x = torch.randn(n, device=device)
y = torch.randn(n, device=device)
for block_size in [128, 512, 1024]:
    out = add(x, y, block_size=block_size)
    programs = -(-n // block_size)
    print(f"BLOCK_SIZE = {block_size:>4}: {programs:>3} programs, equals x + y: {torch.equal(out, x + y)}")

# %% [markdown]
# ## Half precision
#
# The kernel adds in fp32 and rounds once, on the store. On a GPU the result is the correctly rounded
# sum; Triton's CPU interpreter rounds that last step toward zero, so allow one rounding step (one unit in
# the last place: 2⁻¹⁰ of the value for fp16, 2⁻⁷ for bf16).

# %%
for dtype, ulp in [(torch.float16, 2**-10), (torch.bfloat16, 2**-7)]:
    a, b = x[:257].to(dtype), y[:257].to(dtype)
    exact = a.double() + b.double()
    error = ((add(a, b).double() - exact).abs() / exact.abs().clamp_min(1e-3)).max().item()
    print(f"{dtype}: within one rounding step of the exact sum: {error <= ulp}")

# %% [markdown]
# ## Bad inputs get clear errors
#
# The wrapper checks its inputs before it launches anything.

# %%
for bad in [lambda: add(x, y[:-1]), lambda: add(x, y.double()), lambda: add(x.view(-1, 1), y.view(-1, 1))]:
    try:
        bad()
    except (ValueError, TypeError) as error:
        print(f"{type(error).__name__}: {error}")
