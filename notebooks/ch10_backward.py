# %% [markdown]
# # Chapter 10 notebook: the backward pass
#
# The companion of chapter 10: the gradients of attention by hand, what recomputing P costs, gradients
# through the book's kernels, and a few training steps of a tiny transformer.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch10_backward.ipynb)

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
# ## The five formulas, checked against autograd

# %%
run_snippet("ch10/gradients_by_hand.py")

# %% [markdown]
# ## Your turn: D without P
#
# The softmax's backward needs D_i = Σ_j P_ij dP_ij for every row. Check on random data that it equals
# Σ_c dO_ic O_ic, which needs no P at all.

# %%
generator = torch.Generator().manual_seed(0)
q, k, v, do = (torch.randn(5, 8, generator=generator, dtype=torch.float64) for _ in range(4))
p = torch.softmax(q @ k.T / 8**0.5, dim=1)
o = p @ v
dp = do @ v.T
print("from P and dP:", (p * dp).sum(1))
print("from dO and O:", (do * o).sum(1))
print("equal:", torch.allclose((p * dp).sum(1), (do * o).sum(1)))

# %% [markdown]
# ## What recomputing P costs, and what it saves

# %%
run_snippet("ch10/recompute_cost.py")

# %% [markdown]
# ## Gradients through the book's kernels

# %%
run_snippet("ch10/run_backward.py")

# %% [markdown]
# ## Your turn: a causal mask with bottom-right alignment
#
# With more queries than keys, the first queries see no key. Their gradients must be exactly 0, not NaN.

# %%
from kernels.flash_attention import attention  # noqa: E402

q, k, v = (torch.randn(1, 1, n, 16, generator=generator).to(device).requires_grad_() for n in (24, 10, 10))
out = attention(q, k, v, causal=True, causal_alignment="bottom-right")
out.sum().backward()
print("rows that see no key:", 24 - 10)
print("their dq is zero:", bool((q.grad[0, 0, :14] == 0).all()), "| any NaN:", bool(q.grad.isnan().any()))

# %% [markdown]
# ## A few training steps with each attention

# %%
run_snippet("ch10/train_tiny.py")
