# Edge cases: -inf entries (masked scores), a row of one element, very negative logits, and a row of all -inf.
import numpy as np
import torch
from blocked_softmax import blocked_online_softmax
from safe_softmax import reference_softmax

inf = np.inf


def unguarded_blocked_softmax(x, block_size):
    """The same as blocked_online_softmax, without the -inf guard: subtracts m_new even when it is -inf."""
    m = np.full(x.shape[0], -inf)
    l = np.zeros(x.shape[0])
    with np.errstate(invalid="ignore"):
        for start in range(0, x.shape[1], block_size):
            block = x[:, start:start + block_size]
            m_new = np.maximum(m, block.max(axis=1))
            l = l * np.exp(m - m_new) + np.exp(block - m_new[:, None]).sum(axis=1)
            m = m_new
        return np.exp(x - m[:, None]) / l[:, None]


cases = {
    "first tile all -inf": [[-inf, -inf, -inf, 0.5, 2.0, -1.0]],
    "one element": [[3.0]],
    "very negative": [[-1e4, -1e4 - 1, -1e4 - 2, -1e4 - 3, -1e4 - 4, -1e4 - 5]],
    "all -inf": [[-inf, -inf, -inf, -inf, -inf, -inf]],
}
for name, row in cases.items():
    x = np.array(row)
    ours = blocked_online_softmax(x, block_size=3)[0]
    no_guard = unguarded_blocked_softmax(x, block_size=3)[0]
    torch_out = torch.softmax(torch.tensor(x), dim=-1).numpy()[0]
    print(f"{name}:")
    print("  blocked online softmax:", ours.round(4))
    print("  without the -inf guard:", no_guard.round(4))
    print("  torch.softmax:         ", torch_out.round(4))
    same = np.allclose(ours, torch_out, rtol=0, atol=1e-12, equal_nan=True)
    print("  ours matches torch (NaN where torch has NaN):", bool(same))
    if not np.isnan(ours).any():
        print("  ours matches reference:", bool(np.allclose(ours, reference_softmax(x)[0], rtol=0, atol=1e-12)))
