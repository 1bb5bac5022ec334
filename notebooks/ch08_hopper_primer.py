# %% [markdown]
# # Chapter 8 notebook: a Hopper primer
#
# The companion of chapter 8: the arithmetic of waves, register budgets, shared memory, mbarrier phases and
# exponentials against matrix products. It is all plain Python; no GPU is needed, and none is used. Every
# hardware figure is a datasheet or published value for the H100 SXM5, as in the chapter.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch08_hopper_primer.ipynb)

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

import kernels  # noqa: E402, F401  (before triton: it picks Triton's interpreter when there is no GPU)
from book.companion import run_snippet  # noqa: E402

# %% [markdown]
# ## SMs and waves
#
# Programs per SM, then waves of programs on 132 SMs. Change the grid sizes and watch the last wave.

# %%
run_snippet("ch08/waves.py")

# %%
import math  # noqa: E402

SMS = 132
for programs in (131, 132, 133, 396, 397, 1000):
    waves = math.ceil(programs / SMS)
    print(f"{programs:5d} programs: {waves} waves, SMs busy {programs / (waves * SMS):.1%} of the time")

# %% [markdown]
# ## Register budgets and setmaxnreg

# %%
run_snippet("ch08/register_budget.py")

# %% [markdown]
# ## Shared memory: what fits in 227 KiB
#
# Per program of chapter 9's kernel, in fp16: a 64-row Q tile and a 64-row output tile per computing warpgroup,
# and a ring of slots that each hold a K and a V tile of 128 keys. Try other head dims and slot counts.

# %%
for head_dim, warpgroups in ((64, 2), (64, 3), (128, 2)):
    for slots in (2, 3):
        q_and_o = 2 * warpgroups * 64 * head_dim * 2 / 1024
        ring = slots * 2 * 128 * head_dim * 2 / 1024
        total = q_and_o + ring
        print(f"head dim {head_dim:3d}, {warpgroups} warpgroups, {slots} slots: {q_and_o:3.0f} + {ring:3.0f} = "
              f"{total:3.0f} KiB: {'fits' if total <= 227 else 'too big'}")

# %% [markdown]
# ## A ring of two slots, with mbarrier phases
#
# The copier may run up to two tiles ahead of the computing warpgroup; the phase bit tells a slot's uses apart.

# %%
run_snippet("ch08/mbarrier_ring.py")

# %% [markdown]
# With `S` slots, tile `t` goes to slot `t % S`, and its `ready` wait asks for parity `(t // S) % 2`.
# Here are the first ten tiles of a three-slot ring:

# %%
slots = 3
for t in range(10):
    print(f"tile {t}: slot {t % slots}, ready parity {(t // slots) & 1}, free parity {((t // slots) & 1) ^ 1}")

# %% [markdown]
# ## Exponentials against matrix products

# %%
run_snippet("ch08/exp_vs_matmul.py")
