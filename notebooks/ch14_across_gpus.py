# %% [markdown]
# # Chapter 14 notebook: attention across GPUs
#
# The companion of chapter 14: ring attention on simulated GPUs, the causal layouts, the all-to-all
# alternative, and the book's ring over two CPU processes.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch14_across_gpus.ipynb)

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
from book.companion import run_snippet  # noqa: E402
from kernels import ring_attention as ring  # noqa: E402

# %% [markdown]
# ## Four simulated GPUs in a ring
#
# Each GPU keeps its queries; the K/V chunks move one GPU on per step. The last lines count the causal work
# per GPU with the contiguous cut and with the zigzag cut.

# %%
run_snippet("ch14/ring_steps.py")

# %% [markdown]
# ## The all-to-all alternative, and the bytes of both schemes

# %%
run_snippet("ch14/ulysses_steps.py")

# %% [markdown]
# ## The book's ring on two CPU processes
#
# `kernels/ring_attention.py` over `torch.distributed` with the gloo backend: forward and backward, each rank
# compared with attention in one process. It runs as its own program, because each rank is a process.

# %%
done = subprocess.run([sys.executable, str(ROOT / "snippets" / "ch14" / "ring_two_ranks.py")],
                      capture_output=True, text=True, check=True)
print(done.stdout)

# %% [markdown]
# ## Your turn: which positions does each GPU hold?
#
# Change the number of GPUs and the layout. With the zigzag cut every GPU holds one early and one late chunk;
# the sum of the positions each GPU holds is a quick check that the causal work is the same everywhere.

# %%
gpus, tokens = 4, 32
for layout in ring.LAYOUTS:
    held = [ring.positions(tokens // gpus, g, gpus, layout) for g in range(gpus)]
    print(layout, [h.tolist() for h in held])
    print("  sum of positions per GPU:", [int(h.sum()) for h in held])
print("shard cuts a tensor the same way:", ring.shard(torch.arange(tokens).view(1, 1, tokens, 1), 1, gpus,
                                                      "zigzag").flatten().tolist())
