# %% [markdown]
# # Chapter 9 notebook: writing the schedule yourself in Gluon
#
# The companion of chapter 9. The Gluon kernel runs only on Hopper GPUs (H100): on any other machine this
# notebook says so and runs chapter 5's readable kernel instead, so every cell still runs.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch09_gluon_schedule.ipynb)

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
# ## Clocks per tile on each unit of an SM

# %%
run_snippet("ch09/tile_budget.py")

# %% [markdown]
# ## Balancing the last round of the persistent grid

# %%
run_snippet("ch09/last_round.py")

# %% [markdown]
# ## Which inputs take the fast path?

# %%
run_snippet("ch09/fast_path_rules.py")

# %% [markdown]
# ## Run the fast kernel, or the readable one
#
# `fallback_reason` says why the fast path cannot run here (no GPU, the interpreter, a GPU older than
# Hopper, or unsupported shapes). We check first and pick the kernel ourselves.

# %%
import math  # noqa: E402

from kernels import flash_attention as readable  # noqa: E402
from kernels import flash_attention_fast as fast  # noqa: E402

torch.manual_seed(0)
n = 2048 if device == "cuda" else 128
q, k, v = (torch.randn(1, 2, n, 64, device=device, dtype=torch.float16) for _ in range(3))
reason = fast.fallback_reason(q, k, v)
if reason is None:
    print("Hopper GPU found: running chapter 9's Gluon kernel.")
    attention = fast.attention
else:
    print(f"Note: the fast kernel cannot run here, because of {reason}.")
    print("Running chapter 5's readable kernel instead: the same algorithm, the same results, slower.")
    attention = readable.attention

for causal in [False, True]:
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(64)
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=device).triu(1), float("-inf"))
    ref = torch.softmax(s, dim=-1) @ v.double()
    err = ((attention(q, k, v, causal=causal).double() - ref).norm() / ref.norm()).item()
    print(f"causal={causal}: relative error below 2e-3: {err < 2e-3}")
