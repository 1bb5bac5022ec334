"""The book's GPU timers: a CUDA-graph replay times the GPU's work alone, a plain call also the CPU's."""

import time

import pytest

from book.bench.timing import gpu_ms, gpu_ms_graphed


@pytest.mark.gpu
def test_graph_replay_leaves_out_the_python_before_the_launch():
    import torch

    x = torch.randn(1 << 20, device="cuda")

    def slow_caller():  # 2 ms of CPU before a kernel of a few microseconds
        time.sleep(2e-3)
        return x * 2.0

    slow_caller()
    assert gpu_ms(slow_caller) > 1.5  # the GPU timer waited for the CPU
    assert gpu_ms_graphed(slow_caller) < 0.5  # the replay runs only the kernel


@pytest.mark.gpu
def test_graph_replay_and_plain_calls_agree_when_the_gpu_is_the_bottleneck():
    import torch

    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))

    def matmul():
        return a @ b

    matmul()
    plain, graphed = gpu_ms(matmul), gpu_ms_graphed(matmul)
    assert graphed == pytest.approx(plain, rel=0.15)
