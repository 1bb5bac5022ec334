# %% [markdown]
# # Chapter 13 notebook: where a small decode step's time goes
#
# The companion of chapter 13: the fixed-cost model of a step's share, and, on a GPU, a step's time split
# into launches, the step's own work and its reading.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch13_small_steps.ipynb)

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
# ## The fixed-cost model

# %%
run_snippet("ch13/fixed_cost.py")

# %% [markdown]
# ## Your turn: the share for your own fixed cost
#
# Change `fixed_us` and `rate` (bytes per second) and see how large a cache must be for a share of 60%.

# %%
fixed_us, rate = 6.0, 4.8e12  # made-up fixed cost; the H200's datasheet bandwidth
for mib in (4, 16, 32, 64, 128):
    read_us = mib * 2**20 / rate * 1e6
    print(f"{mib:4d} MiB: reading {read_us:5.1f} us, share {read_us / (fixed_us + read_us):.0%}")

# %% [markdown]
# ## On a GPU: split one step's time
#
# Batch 1, 32 query heads on 8 KV heads, head dim 128, fp16, 8,192 keys: an empty kernel, two, the book's
# step on an empty cache (every length 0) and on the full cache, each from a CUDA graph in turns (chapter 7's
# timer). Without a GPU this cell only says so: the interpreter's times say nothing about a GPU.

# %%
if device == "cuda":
    import triton

    from book.bench.timing import gpu_ms_interleaved
    from kernels.flash_decoding import decode

    @triton.jit
    def empty():
        pass

    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(1, 8, 8192, 128, device="cuda", dtype=torch.float16) for _ in range(2))
    full = torch.full((1,), 8192, device="cuda", dtype=torch.int32)
    none = torch.zeros_like(full)
    steps = {"one empty kernel": lambda: empty[(1,)](),
             "two empty kernels": lambda: (empty[(1,)](), empty[(1,)]()),
             "step, empty cache": lambda: decode(q, k, v, none, check_lengths=False),
             "step, full cache": lambda: decode(q, k, v, full, check_lengths=False)}
    for step in steps.values():
        step()  # compile before the timer captures it
    for name, ms in gpu_ms_interleaved(steps, budget_ms=1000, clear_l2="read").items():
        print(f"{name:18s} {ms * 1e3:6.1f} us")
else:
    print("no GPU: run this cell on one to split a step's time")
