# Exercise 2: the two alignments of the causal mask, and why decoding needs bottom-right.
import numpy as np
from causal_tiles import show_mask, visible

for n in [1, 5, 64]:
    same = np.array_equal(visible(n, n, "top-left"), visible(n, n, "bottom-right"))
    print(f"N_q = N_k = {n}: top-left == bottom-right: {same}")

# Decoding: 7 tokens are in the KV cache and one new token arrives, so N_q = 1 and N_k = 8.
for alignment in ["top-left", "bottom-right"]:
    row = visible(1, 8, alignment)[0]
    print(f"decoding one token, {alignment:>12}: sees keys {np.flatnonzero(row).tolist()}")

# Chunked prefill: 3 new tokens after a cache of 5 (N_q = 3, N_k = 8), bottom-right.
print("3 new queries after 5 cached keys, bottom-right:")
show_mask(visible(3, 8, "bottom-right"))
