# %% [markdown]
# # Chapter 1 notebook: GPU basics
#
# The companion of chapter 1. Change the numbers and run the cells again. Everything here is arithmetic
# on datasheet values; no cell measures anything.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch01_gpu_basics.ipynb)

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

print("GPU:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none, Triton runs interpreted")

# %% [markdown]
# ## The chapter's snippet
#
# Arithmetic intensity (FLOPs per byte moved to and from HBM) against the ridge point of an H100's roofline.

# %%
run_snippet("ch01/arithmetic_intensity.py")

# %% [markdown]
# ## Your turn: where does a matmul cross the ridge?
#
# A square fp16 matmul of size n does 2n³ FLOPs and, at best, moves 3n² elements of 2 bytes. Its
# intensity grows with n. Find the smallest power of two that is compute-bound.

# %%
PEAK_FP16_FLOPS = 989e12  # datasheet, H100 SXM5, dense fp16 tensor cores
PEAK_HBM_BYTES = 3.35e12  # datasheet, H100 SXM5, HBM3
ridge = PEAK_FP16_FLOPS / PEAK_HBM_BYTES

for n in [64, 128, 256, 512, 1024, 2048]:
    intensity = 2 * n**3 / (3 * n * n * 2)
    print(f"n = {n:>5}: {intensity:>7.1f} FLOP/byte -> {'compute' if intensity >= ridge else 'memory'}-bound")

# %% [markdown]
# ## The roofline, drawn
#
# Attainable FLOP/s = min(peak FLOP/s, intensity × bandwidth). The points are the chapter's examples.

# %%
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

intensity = np.logspace(-2, 4, 200)
fig, ax = plt.subplots(figsize=(6, 3.5), dpi=80)
ax.loglog(intensity, np.minimum(PEAK_FP16_FLOPS, intensity * PEAK_HBM_BYTES) / 1e12, label="roofline (datasheet)")
examples = {"vector add": 1 / 12, "softmax 4096²": 5 / 4, "matmul 4096³": 2 * 4096 / 6}
for name, x in examples.items():
    ax.plot(x, min(PEAK_FP16_FLOPS, x * PEAK_HBM_BYTES) / 1e12, "o")
    ax.annotate(name, (x, min(PEAK_FP16_FLOPS, x * PEAK_HBM_BYTES) / 1e12), textcoords="offset points",
                xytext=(5, -12))
ax.axvline(ridge, linestyle=":", color="gray")
ax.set_xlabel("arithmetic intensity (FLOP/byte)")
ax.set_ylabel("attainable TFLOP/s")
ax.legend(loc="lower right")
plt.show()

# %% [markdown]
# ## The N × N problem
#
# One attention score matrix, for one head of one sequence, at a few lengths (the chapter's second snippet).

# %%
run_snippet("ch01/attention_matrix_memory.py")

# %%
# Your turn: a batch of 8 sequences, 32 heads, N = 8192, fp16. How many GiB would the scores take?
batch, heads, n = 8, 32, 8192
print(f"{batch * heads * n * n * 2 / 2**30:,.0f} GiB of scores, before the softmax even starts")
