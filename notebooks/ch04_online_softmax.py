# %% [markdown]
# # Chapter 4 notebook: online softmax
#
# The companion of chapter 4: why softmax subtracts the max, the online softmax that reads a row once,
# and the book's Triton softmax kernel.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch04_online_softmax.ipynb)

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
# ## The naive softmax overflows

# %%
run_snippet("ch04/overflow.py")

# %% [markdown]
# ## The chapter's worked example: 6 logits in 2 tiles of 3

# %%
run_snippet("ch04/worked_example.py")

# %% [markdown]
# ## Your turn: online softmax in a few lines of numpy
#
# Try other tile sizes: the result never changes, only the running values do.

# %%
import numpy as np  # noqa: E402

x = np.array([2.0, 4.0, 3.0, 7.0, 5.0, 1.0])
for tile in [1, 2, 3, 6]:
    m, l = -np.inf, 0.0  # noqa: E741  (l, as in the chapter)
    for start in range(0, len(x), tile):
        m_new = max(m, x[start:start + tile].max())
        l = l * np.exp(m - m_new) + np.exp(x[start:start + tile] - m_new).sum()  # noqa: E741
        m = m_new
    p = np.exp(x - m) / l
    print(f"tile {tile}: m = {m:.1f}, l = {l:.4f}, softmax = {np.round(p, 4).tolist()}")

# %% [markdown]
# ## The Triton kernel
#
# A row that fits in one block takes the single-block path; a longer one the online path, which reads the
# row block by block. `max_block` lowers the limit, so that small rows show both paths.

# %%
from kernels.softmax import launch_config, softmax  # noqa: E402

torch.manual_seed(0)
MAX_BLOCK = 1024
for n_rows, n_cols in [(4, 300), (2, 3000)]:
    x = (torch.randn(n_rows, n_cols) * 10).to(device)
    ref = torch.softmax(x.double(), dim=-1)
    err = ((softmax(x, max_block=MAX_BLOCK).double() - ref).norm() / ref.norm()).item()
    config = launch_config(n_cols, max_block=MAX_BLOCK)
    print(f"{n_rows} x {n_cols}: path {config['path']!r}, block {config['block_size']}, "
          f"relative error below 1e-5: {err < 1e-5}")
