# Chapter 10: a few training steps of a tiny transformer, once with the book's attention and once with
# PyTorch's, from the same seed. It runs on the CPU, the book's kernels in Triton's interpreter, so the model
# is tiny here; book/bench/training.py trains the full-size one on a GPU. Run: python snippets/ch10/train_tiny.py
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # the CPU, with or without a GPU: the same output everywhere
from tiny_gpt import Config, book_attention, sdpa_attention, train  # noqa: E402

config = Config(layers=1, heads=2, head_dim=16, context=32, batch=2)
# A learning rate ten times the default, so that four steps on a random stretch of text surely lower the loss.
runs = {name: train(attention, config, steps=4, device="cpu", lr=1e-2)
        for name, attention in (("book", book_attention), ("sdpa", sdpa_attention))}
# The losses themselves change whenever a chapter (the training text) changes; their agreement does not.
print("steps with each attention:", len(runs["book"]["losses"]), len(runs["sdpa"]["losses"]))
gap = max(abs(a - b) for a, b in zip(runs["book"]["losses"], runs["sdpa"]["losses"], strict=True))
print("same losses to 1e-4:", gap < 1e-4)
print("the loss went down:", runs["book"]["losses"][-1] < runs["book"]["losses"][0])
