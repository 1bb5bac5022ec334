# 2^x on the FMA units, as the kernel's EXP2_ON_FMA switch computes it, checked in numpy.
# 2^x = 2^i * 2^f with i = floor(x), f = x - i in [0, 1): a cubic gives 2^f, and adding i to the
# exponent bits of the float multiplies by 2^i.
import re
import struct

import numpy as np

from kernels import flash_attention_hopper as hopper

ptx = hopper._exp2_asm(1)  # PTX for 4 scores: 3 on the special-function units, 1 on the FMA units
print(ptx)

# The constants in the PTX, as float32: the clamp, then the cubic's coefficients (highest first).
clamp, c3, c2, c1, c0 = (struct.unpack("<f", bytes.fromhex(h)[::-1])[0] for h in re.findall(r"0f([0-9A-F]{8})", ptx))
print(f"clamp {clamp}, 2^f ~ {c0:.7f} + {c1:.7f} f + {c2:.7f} f^2 + {c3:.7f} f^3")

x = np.concatenate([np.float32([-np.inf, -300.0, 0.0]), -np.linspace(0, 40, 200_001, dtype=np.float32)])
xc = np.maximum(x, np.float32(clamp))  # -inf (a masked score) becomes -126
i = np.floor(xc)
f = xc - i
p = ((np.float32(c3) * f + np.float32(c2)) * f + np.float32(c1)) * f + np.float32(c0)
two_x = (p.view(np.int32) + (i.astype(np.int32) << 23)).view(np.float32)
exact = np.exp2(x.astype(np.float64))
print("2^-inf, 2^-300, 2^0:", two_x[:3])  # 2^-126 is nothing next to a row sum, which is at least 1
print(f"largest relative error on [-40, 0]: {np.max(np.abs(two_x[3:] - exact[3:]) / exact[3:]):.1e}")
