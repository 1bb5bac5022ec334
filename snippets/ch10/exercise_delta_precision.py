# Chapter 10, exercise: D = rowsum(dO ∘ O) summed in fp16 instead of fp32, for one row of head dim 128.
# Run: python snippets/ch10/exercise_delta_precision.py
import numpy as np

rng = np.random.default_rng(0)
o = rng.standard_normal(128).astype(np.float16)
do = (rng.standard_normal(128) * 30).astype(np.float16)  # a large gradient, as early in training

exact = float(np.dot(o.astype(np.float64), do.astype(np.float64)))
in_fp32 = float(np.sum(o.astype(np.float32) * do.astype(np.float32), dtype=np.float32))
running = np.float16(0)
for a, b in zip(o, do, strict=True):  # an fp16 accumulator, one product at a time
    running = np.float16(running + a * b)
print(f"exact            {exact:.4f}")
print(f"fp32 accumulator {in_fp32:.4f}  (error {abs(in_fp32 - exact):.1e})")
print(f"fp16 accumulator {float(running):.4f}  (error {abs(float(running) - exact):.1e})")
