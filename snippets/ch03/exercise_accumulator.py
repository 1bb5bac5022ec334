# Exercise: why does the kernel sum in fp32? Add up the 4096 products of two fp16 vectors one at a time,
# in an fp16 running sum and in an fp32 one, and compare with the exact (float64) dot product.
import numpy as np

rng = np.random.default_rng(0)
K, TRIALS = 4096, 20
errors = {np.float16: [], np.float32: []}
sizes = []
for _ in range(TRIALS):
    a = rng.standard_normal(K).astype(np.float16)
    b = rng.standard_normal(K).astype(np.float16)
    exact = np.dot(a.astype(np.float64), b.astype(np.float64))
    sizes.append(abs(exact))
    for acc_dtype, errs in errors.items():
        acc = acc_dtype(0)
        for x, y in zip(a, b, strict=True):
            acc = acc_dtype(acc + acc_dtype(x) * acc_dtype(y))
        errs.append(abs(float(acc) - exact))

print(f"{TRIALS} dot products of length {K}; typical size of the result: {np.mean(sizes):.0f}")
for acc_dtype, errs in errors.items():
    print(f"{np.dtype(acc_dtype).name} running sum: mean |error| {np.mean(errs):.1e}")
print("spacing of fp16 numbers near 64:", float(np.spacing(np.float16(64))))
print("spacing of fp32 numbers near 64:", float(np.spacing(np.float32(64))))
