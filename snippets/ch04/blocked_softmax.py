# Blocked online softmax over the rows of a matrix, and its extension to softmax(x) @ V: the bridge to attention.
import numpy as np
from safe_softmax import reference_softmax


def blocked_online_softmax(x, block_size):
    """Softmax over the last axis of a 2-D array x, reading its columns block_size at a time.

    Pass 1 keeps, per row, the running max m and the running sum l. Pass 2 writes exp(x - m) / l.
    """
    n_rows, n_cols = x.shape
    m = np.full(n_rows, -np.inf)
    l = np.zeros(n_rows)
    for start in range(0, n_cols, block_size):
        block = x[:, start:start + block_size]
        m_new = np.maximum(m, block.max(axis=1))
        m_ref = np.where(m_new == -np.inf, 0.0, m_new)  # rows with only -inf so far: subtract 0, not -inf
        l = l * np.exp(m - m_ref) + np.exp(block - m_ref[:, None]).sum(axis=1)
        m = m_new
    m_ref = np.where(m == -np.inf, 0.0, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.exp(x - m_ref[:, None]) / l[:, None]  # a row of all -inf: 0 / 0 = NaN, like torch.softmax


def blocked_softmax_times_v(x, v, block_size):
    """softmax(x) @ v, reading x's columns and v's rows block_size at a time, in one pass.

    Never builds the n_rows x n_cols matrix of probabilities: it keeps m and l per row and acc, an
    un-normalized n_rows x d output, rescaled whenever m grows. One division at the end.
    """
    n_rows, n_cols = x.shape
    m = np.full(n_rows, -np.inf)
    l = np.zeros(n_rows)
    acc = np.zeros((n_rows, v.shape[1]))
    for start in range(0, n_cols, block_size):
        block, v_block = x[:, start:start + block_size], v[start:start + block_size]
        m_new = np.maximum(m, block.max(axis=1))
        m_ref = np.where(m_new == -np.inf, 0.0, m_new)
        rescale = np.exp(m - m_ref)
        p = np.exp(block - m_ref[:, None])  # block_size weights per row, never stored past this step
        l = l * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + p @ v_block
        m = m_new
    with np.errstate(divide="ignore", invalid="ignore"):
        return acc / l[:, None]


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1000)) * 30  # logits near 100: exp(x) alone overflows float32
    v = rng.standard_normal((1000, 8))
    direct_p = reference_softmax(x)
    direct_o = direct_p @ v
    print(f"x: {x.shape}, v: {v.shape}, largest logit {x.max():.1f}")
    for block_size in (1, 7, 64, 1000):
        err_p = np.abs(blocked_online_softmax(x, block_size) - direct_p).max()
        err_o = np.abs(blocked_softmax_times_v(x, v, block_size) - direct_o).max()
        print(f"block_size {block_size:4}: softmax matches: {bool(err_p < 1e-9)}, "
              f"softmax @ v matches: {bool(err_o < 1e-9)}")
    print("values kept between blocks by blocked_softmax_times_v:", 4 + 4 + 4 * 8, "(m, l, acc)")
    print("values in the probability matrix it never builds:     ", x.size)
