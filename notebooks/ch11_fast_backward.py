# %% [markdown]
# # Chapter 11 notebook: a fast backward for Hopper
#
# The companion of chapter 11: what one tile of the backward costs, every Triton step of the worklog checked
# against float64, the shared-memory bytes that steps 9 and 10 count, and the fast backward at a real model's
# shape. The Gluon kernel of steps 8 to 13 needs a Hopper GPU; everything here also runs on a laptop, where
# Triton's interpreter stands in for the GPU.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch11_fast_backward.ipynb)

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
# ## What one tile costs: a second pass for dQ, or atomic adds

# %%
run_snippet("ch11/tile_costs.py")

# %% [markdown]
# ## Every Triton step computes the same gradients

# %%
run_snippet("ch11/every_step.py")

# %% [markdown]
# ## Steps 9 and 10: the bytes through shared memory per block of queries

# %%
run_snippet("ch11/shared_traffic.py")

# %% [markdown]
# ## Your turn: a real model's shape
#
# Llama-3.1-8B's attention has 32 query heads on 8 K/V heads. Here a small version of it: 4 query heads on 1
# K/V head, a length that is not a multiple of 128, causal. The fast backward sums dK and dV over the query
# heads of each group without repeating K or V. Compare it with float64 autograd, and try other groups and
# lengths.

# %%
from kernels import flash_attention_backward_fast as fast  # noqa: E402
from kernels.flash_attention import attention  # noqa: E402

generator = torch.Generator().manual_seed(0)
q, do = (torch.randn(1, 4, 200, 64, generator=generator).to(device, torch.float16) for _ in range(2))
k, v = (torch.randn(1, 1, 200, 64, generator=generator).to(device, torch.float16) for _ in range(2))
out, lse = attention(q, k, v, causal=True, return_lse=True)  # what the forward saves (chapter 5's kernel)
# On a laptop, one tile shape each instead of the autotuner, which would time every candidate in the interpreter.
tiles = {} if torch.cuda.is_available() else {"dkdv_config": fast.config(64, 128, 4, 2),
                                              "dq_config": fast.config(128, 64, 4, 2)}
grads = fast.attention_backward(do, q, k, v, out, lse, causal=True, **tiles)

exact = [t.double().requires_grad_() for t in (q, k, v)]
scores = exact[0] @ exact[1].transpose(-1, -2) / 64**0.5  # the one K/V head broadcasts over the 4 query heads
scores = scores.masked_fill(torch.ones(200, 200, dtype=torch.bool, device=device).triu(1), float("-inf"))
(torch.softmax(scores, dim=-1) @ exact[2]).backward(do.double())
for name, got, want in zip(("dq", "dk", "dv"), grads, exact, strict=True):
    error = ((got.double() - want.grad).norm() / want.grad.norm()).item()
    print(f"{name}: shape {tuple(got.shape)}, relative error below 1e-3: {error < 1e-3}")
