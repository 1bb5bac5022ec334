# %% [markdown]
# # Chapter 5 notebook: FlashAttention forward
#
# The companion of chapter 5: the numpy simulator that counts HBM traffic, a tiny trace by hand, and the
# book's readable Triton kernel.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch05_flash_attention.ipynb)

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
# ## Every number of a tiny problem

# %%
run_snippet("ch05/tiny_trace.py")

# %% [markdown]
# ## The simulator: bytes moved, standard against flash
#
# `flash_attention(Q, K, V, block_m, block_n, causal, sram_bytes, trace)` in `snippets/ch05/simulator.py`.

# %%
sys.path.insert(0, str(ROOT / "snippets/ch05"))
import numpy as np  # noqa: E402
from simulator import flash_attention, reference, standard_attention  # noqa: E402

rng = np.random.default_rng(0)
d = 16
for n in [64, 128, 256]:
    Q, K, V = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
    _, std = standard_attention(Q, K, V)
    out, fa = flash_attention(Q, K, V, block_m=32, block_n=32)
    print(f"N = {n:>3}: standard {std['hbm_bytes']:>9,} B, flash {fa['hbm_bytes']:>9,} B, "
          f"matches reference: {np.allclose(out, reference(Q, K, V), atol=1e-5)}")

# %% [markdown]
# ## Your turn: follow one row through the tiles
#
# The same trace the page's stepper shows: m, l and the un-normalized acc of query 5 after each key block.

# %%
rng = np.random.default_rng(1)
Q, K, V = (np.round(rng.uniform(-2, 2, (8, 2)), 1) for _ in range(3))
_, stats = flash_attention(Q, K, V, block_m=4, block_n=2, trace=True)
row = 5
for step in stats["trace"]:
    if step["q_block"] == row // 4:
        r = row % 4
        print(f"after key block {step['k_block']}: m = {step['m'][r]:.4f}, l = {step['l'][r]:.4f}, "
              f"acc = {np.round(step['acc'][r], 4).tolist()}")
print("acc / l =", np.round(np.array(stats["trace"][-1]["acc"][row % 4]) / stats["trace"][-1]["l"][row % 4], 4),
      "| exact =", np.round(reference(Q, K, V)[row], 4))

# %% [markdown]
# ## The Triton kernel
#
# Small shapes, so that the interpreter stays quick.

# %%
import math  # noqa: E402

from kernels.flash_attention import attention  # noqa: E402

torch.manual_seed(0)
for n_q, n_k, d, dtype, bound in [(48, 48, 32, torch.float16, 2e-3), (33, 70, 16, torch.float32, 1e-5)]:
    q = torch.randn(1, 2, n_q, d, device=device).to(dtype)
    k = torch.randn(1, 2, n_k, d, device=device).to(dtype)
    v = torch.randn(1, 2, n_k, d, device=device).to(dtype)
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d)
    ref = torch.softmax(s, dim=-1) @ v.double()
    err = ((attention(q, k, v).double() - ref).norm() / ref.norm()).item()
    print(f"Nq={n_q} Nk={n_k} D={d} {str(dtype)[6:]}: relative error below {bound}: {err < bound}")
