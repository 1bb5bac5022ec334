# Chapter 14: ring attention on four simulated GPUs in numpy. Each GPU keeps its chunk of the queries; the K/V
# chunks travel around the ring, and each GPU merges what it sees with chapter 4's rule. The result equals
# attention on one GPU, and the causal work per GPU depends on how the sequence is cut.
# Run: python snippets/ch14/ring_steps.py
import numpy as np

GPUS, N, HEAD_DIM = 4, 32, 8
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((N, HEAD_DIM)) for _ in range(3))


def block(qc, kc, vc, q_pos, k_pos, causal):
    """One GPU's queries against one K/V chunk: (output, logsumexp); rows that see no key give 0 and -inf."""
    s = qc @ kc.T / np.sqrt(HEAD_DIM)
    if causal:
        s = np.where(k_pos[None, :] <= q_pos[:, None], s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    p = np.exp(s - m)
    total = p.sum(axis=1, keepdims=True)
    out = p @ vc / np.where(total > 0, total, 1.0)
    with np.errstate(divide="ignore"):
        lse = np.log(total[:, 0]) + m[:, 0]
    return out, lse, int(np.isfinite(s).sum())


def merge(out, lse, out2, lse2):
    """Chapter 4's merge of two partial results for the same query rows."""
    new = np.logaddexp(lse, lse2)
    safe = np.where(np.isinf(new), 0.0, new)
    return out * np.exp(lse - safe)[:, None] + out2 * np.exp(lse2 - safe)[:, None], new


def positions(gpu, layout):
    n = N // GPUS
    if layout == "contiguous":
        return np.arange(gpu * n, (gpu + 1) * n)
    half = n // 2  # zigzag: chunk gpu and chunk 2 * GPUS - 1 - gpu of 2 * GPUS chunks
    return np.concatenate([np.arange(gpu * half, (gpu + 1) * half),
                           np.arange((2 * GPUS - 1 - gpu) * half, (2 * GPUS - gpu) * half)])


def ring(layout, causal):
    outs, work = [None] * GPUS, [0] * GPUS
    for gpu in range(GPUS):
        q_pos = positions(gpu, layout)
        out, lse = np.zeros((len(q_pos), HEAD_DIM)), np.full(len(q_pos), -np.inf)
        for step in range(GPUS):  # at step s this GPU holds the K/V chunk that started on GPU (gpu - s) mod GPUS
            k_pos = positions((gpu - step) % GPUS, layout)
            o2, l2, scores = block(q[q_pos], k[k_pos], v[k_pos], q_pos, k_pos, causal)
            out, lse = merge(out, lse, o2, l2)
            work[gpu] += scores
        outs[gpu] = (q_pos, out)
    return outs, work


def one_gpu(causal):
    out, _, _ = block(q, k, v, np.arange(N), np.arange(N), causal)
    return out


print("whose K and V each GPU holds at each step:")
for step in range(GPUS):
    print(f"  step {step}: " + ", ".join(f"GPU {g} has GPU {(g - step) % GPUS}'s" for g in range(GPUS)))
for causal in (False, True):
    for layout in ("contiguous", "zigzag"):
        outs, work = ring(layout, causal)
        whole = np.zeros((N, HEAD_DIM))
        for q_pos, out in outs:
            whole[q_pos] = out
        error = np.abs(whole - one_gpu(causal)).max()
        print(f"causal={causal!s:5} {layout:10}: equal to one GPU within 1e-12: {error < 1e-12}; "
              f"scores per GPU {work}, busiest / average {max(work) / np.mean(work):.2f}")
