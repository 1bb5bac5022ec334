# %% [markdown]
# # Chapter 7 notebook: timing fairly, a worklog in Triton
#
# The companion of chapter 7. The fast Triton kernel needs a Hopper GPU (H100): on any other machine this
# notebook says so and runs chapter 5's readable kernel instead, so every cell still runs.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch07_timing_and_triton_worklog.ipynb)

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
# ## What a time means: FLOPs of one forward pass

# %%
run_snippet("ch07/flop_count.py")

# %% [markdown]
# ## The exponential in base 2, with the scale folded in

# %%
run_snippet("ch07/exp2_fma.py")

# %% [markdown]
# ## Run the Triton fast kernel, or the readable one
#
# `fallback_reason` says why the fast path cannot run here (no GPU, the interpreter, a GPU older than
# Hopper, or unsupported shapes). We check first and pick the kernel ourselves. `gluon=False` asks for
# the Triton kernel of this chapter's steps, not chapter 9's Gluon kernel.

# %%
import functools  # noqa: E402
import math  # noqa: E402

from kernels import flash_attention as readable  # noqa: E402
from kernels import flash_attention_fast as fast  # noqa: E402

torch.manual_seed(0)
n = 2048 if device == "cuda" else 128
q, k, v = (torch.randn(1, 2, n, 64, device=device, dtype=torch.float16) for _ in range(3))
reason = fast.fallback_reason(q, k, v)
if reason is None:
    print("Hopper GPU found: running chapter 7's fast Triton kernel.")
    attention = functools.partial(fast.attention, gluon=False)
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
