# Chapter 11, A fast backward for Hopper: a worklog: the chapter's first small example. Replace it with your own.
# A snippet is a standalone program: run it from the repository root with `python snippets/ch11/first_example.py`.
# It prints the same thing on every machine: seeded inputs, rounded values, and checks that print True.
import numpy as np

scores = np.array([1.0, 2.0, 3.0, 4.0])
weights = np.exp(scores - scores.max())
weights /= weights.sum()
print("scores: ", " ".join(f"{s:.1f}" for s in scores))
print("softmax:", " ".join(f"{w:.4f}" for w in weights))
print("sums to one:", bool(np.isclose(weights.sum(), 1.0)))
