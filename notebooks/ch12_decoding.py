# %% [markdown]
# # Chapter 12 notebook: decoding against a KV cache
#
# The companion of chapter 12: what one decode step reads, chunked prefill with bottom-right alignment, and
# the split-KV kernel on a batch of sequences of different lengths.
#
# [Open in Colab](https://colab.research.google.com/github/flash-attention-book/flash-attention-book/blob/main/docs/notebooks/ch12_decoding.ipynb)

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
# ## One decode step, counted

# %%
run_snippet("ch12/decode_step.py")

# %% [markdown]
# ## Chunked prefill needs bottom-right alignment

# %%
run_snippet("ch12/chunked_prefill.py")

# %% [markdown]
# ## Your turn: split-KV on a batch of different lengths
#
# Three sequences with 8 query heads on 2 KV heads, caches of 50, 3 and 0 tokens, one new query each. Change
# the number of splits: the output stays the same, and the empty sequence gives 0.

# %%
from kernels.flash_decoding import decode  # noqa: E402

dtype = torch.float32 if interpreting() else torch.float16
generator = torch.Generator().manual_seed(0)
q = torch.randn(3, 8, 1, 32, generator=generator).to(device, dtype)
k, v = (torch.randn(3, 2, 50, 32, generator=generator).to(device, dtype) for _ in range(2))
lens = torch.tensor([50, 3, 0], device=device)
one, five = decode(q, k, v, lens, num_splits=1), decode(q, k, v, lens, num_splits=5)
print("1 split and 5 splits agree:", torch.allclose(one.float(), five.float(), atol=1e-3))
print("the empty sequence gives 0:", bool((five[2] == 0).all()))
# The direct computation for the second sequence, whose 8 query heads share 2 KV heads in groups of 4:
keys, values = (t[1].float().repeat_interleave(4, dim=0)[:, :3] for t in (k, v))  # (8 heads, 3 keys, 32)
scores = torch.einsum("hd,hnd->hn", q[1, :, 0].float(), keys) / 32**0.5
expected = torch.einsum("hn,hnd->hd", torch.softmax(scores, dim=-1), values)
print("sequence 1 equals the direct softmax:", torch.allclose(five[1, :, 0].float(), expected, atol=1e-3))
