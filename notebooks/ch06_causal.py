# %% [markdown]
# # Chapter 6 notebook: causal attention
#
# The companion of chapter 6: which tiles a causal mask skips, and the causal kernel in both alignments.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch06_causal.ipynb)

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
# ## Tiles computed, masked and skipped

# %%
run_snippet("ch06/tile_count.py")

# %% [markdown]
# ## Your turn: count tiles for other shapes
#
# Top-left alignment: query i sees keys j ≤ i. A tile is skipped when all its keys are in the future of
# all its queries, and needs an element-wise mask when it crosses the diagonal.

# %%
def tile_counts(n: int, block_m: int, block_n: int) -> tuple[int, int, int]:
    full = diagonal = skipped = 0
    for i in range(-(-n // block_m)):
        first_row, last_row = i * block_m, min((i + 1) * block_m, n) - 1
        for j in range(-(-n // block_n)):
            first_key, last_key = j * block_n, min((j + 1) * block_n, n) - 1
            if first_key > last_row:
                skipped += 1
            elif last_key <= first_row:
                full += 1
            else:
                diagonal += 1
    return full, diagonal, skipped


for n, bm, bn in [(1024, 128, 64), (1024, 64, 64), (1000, 128, 128)]:
    full, diagonal, skipped = tile_counts(n, bm, bn)
    total = full + diagonal + skipped
    print(f"N = {n}, tiles {bm} x {bn}: {full} full, {diagonal} on the diagonal, {skipped} skipped "
          f"({skipped / total:.0%} of the work never done)")

# %% [markdown]
# ## The causal kernel, checked against PyTorch

# %%
import torch.nn.functional as F  # noqa: E402

from kernels.flash_attention import attention  # noqa: E402

torch.manual_seed(0)
for n_q, n_k in [(40, 40), (24, 56)]:
    q, k, v = (torch.randn(1, 2, n, 32, device=device, dtype=torch.float16) for n in (n_q, n_k, n_k))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    err = ((attention(q, k, v, causal=True).double() - ref).norm() / ref.norm()).item()
    print(f"Nq = {n_q}, Nk = {n_k}: top-left causal matches SDPA is_causal=True: {err < 3e-3}")

# The future has no influence: change keys and values after position 19, rows 0..19 stay the same.
q, k, v = (torch.randn(1, 1, 40, 32, device=device, dtype=torch.float16) for _ in range(3))
before = attention(q, k, v, causal=True)
k[:, :, 20:], v[:, :, 20:] = torch.randn_like(k[:, :, 20:]), torch.randn_like(v[:, :, 20:])
print("rows 0..19 bitwise unchanged:", torch.equal(before[:, :, :20], attention(q, k, v, causal=True)[:, :, :20]))
