"""The book's GPU timers: graph replays taken in turns time the GPU's work alone; a plain call also the CPU's."""

import time

import pytest

from book.bench.timing import gpu_ms, gpu_ms_interleaved


@pytest.mark.gpu
def test_graph_replay_leaves_out_the_python_before_the_launch():
    import torch

    x = torch.randn(1 << 20, device="cuda")

    def slow_caller():  # 2 ms of CPU before a kernel of a few microseconds
        time.sleep(2e-3)
        return x * 2.0

    slow_caller()
    assert gpu_ms(slow_caller) > 1.5  # the GPU timer waited for the CPU
    assert gpu_ms_interleaved({"slow": slow_caller})["slow"] < 0.5  # the replay runs only the kernel


def test_an_unknown_way_of_clearing_the_l2_cache_is_refused():
    with pytest.raises(ValueError, match='clear_l2 must be "write" or "read"'):
        gpu_ms_interleaved({}, clear_l2="flush")


@pytest.mark.gpu
def test_clearing_the_l2_cache_by_writing_charges_the_write_back_to_a_reading_kernel():
    """After a clear by writing, the L2 holds written lines; a kernel that reads 32 MiB evicts them, and their trip
    back to memory lands in its time. After a clear by reading, the evicted lines are dropped."""
    import torch

    x = torch.randn(8 * 2**20, device="cuda")
    total = torch.empty((), device="cuda")

    def read():
        return torch.sum(x, dim=0, out=total)

    read()
    by_reading = gpu_ms_interleaved({"read": read}, clear_l2="read")["read"]
    by_writing = gpu_ms_interleaved({"read": read}, clear_l2="write")["read"]
    assert by_writing > by_reading * 1.05


@pytest.mark.gpu
def test_calls_taken_in_turns_keep_each_implementation_apart():
    import torch

    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))

    def one():
        return a @ b

    def two():
        return (a @ b) @ b

    one(), two()
    plain = gpu_ms(one)
    times = gpu_ms_interleaved({"one": one, "two": two})
    assert times["one"] == pytest.approx(plain, rel=0.15)  # the same GPU time as plain calls
    assert times["two"] / times["one"] == pytest.approx(2.0, rel=0.1)  # each keeps its own time
