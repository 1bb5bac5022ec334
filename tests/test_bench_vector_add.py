"""The chapter 2 benchmark's views, fed small fake results (no GPU): the crossover is read from the rows."""

from book.bench import by_name
from book.bench import vector_add as bench


def _row(n, cpu_ms, triton_ms, copy_ms):
    return {"n": n, "cpu_ms": cpu_ms, "torch_ms": triton_ms, "triton_ms": triton_ms, "copy_ms": copy_ms,
            "cpu_GBps": None if cpu_ms is None else 12 * n / cpu_ms / 1e6, "torch_GBps": 12 * n / triton_ms / 1e6,
            "triton_GBps": 12 * n / triton_ms / 1e6, "copy_GBps": 8 * n / copy_ms / 1e6}


def _result(rows):
    return {"schema": 1, "benchmark": "vector_add", "provenance": {"gpu": "Fake GPU"}, "rows": rows}


# Launch-bound up to 10^5 (about 4 µs), then about 3 TB/s; the CPU is faster up to 10^4, and once more at 10^5.
ROWS = [_row(10**3, 0.003, 0.004, 0.004), _row(10**4, 0.003, 0.0045, 0.0045), _row(10**5, 0.010, 0.005, 0.005),
        _row(10**6, 0.025, 0.009, 0.010), _row(10**7, 4.0, 0.045, 0.030), _row(10**8, 48.0, 0.40, 0.27),
        _row(2**28, None, 1.06, 0.71)]


def test_registered_with_the_crossover_view():
    assert "crossover" in by_name("vector_add").views


def test_crossover_is_read_from_the_rows():
    text = bench.crossover(_result(ROWS))
    assert "faster than the host CPU from 100,000 elements on: 2.00× at 100,000" in text
    assert "up to 120× (at 100,000,000)" in text
    assert "as fast or faster at 1,000 and 10,000 elements, where the GPU time is 4.0 to 4.5 µs" in text
    assert "Up to 1,000,000 elements for the Triton kernel, and up to 1,000,000 for the copy" in text


def test_the_gpu_counts_as_faster_only_from_where_it_stays_faster():
    rows = [_row(10**3, 0.003, 0.004, 0.004), _row(10**4, 0.005, 0.0045, 0.0045), _row(10**5, 0.004, 0.005, 0.005),
            _row(10**6, 0.025, 0.009, 0.010)]
    text = bench.crossover(_result(rows))
    assert "from 1,000,000 elements on" in text and "at 1,000 and 100,000 elements" in text


def test_a_cpu_that_is_never_slower():
    rows = [_row(10**3, 0.001, 0.004, 0.004), _row(10**4, 0.002, 0.0045, 0.0045)]
    assert "as fast as the Triton kernel or faster at every size up to 10,000" in bench.crossover(_result(rows))


def test_small_sizes_read_as_a_fixed_cost_only_when_their_times_are_flat():
    assert "4.0 to 4.5 µs: about the same at each, the fixed cost of a launch" in bench.crossover(_result(ROWS))
    climbing = [_row(10**3, 0.002, 0.0049, 0.004), _row(10**4, 0.005, 0.008, 0.0045),
                _row(10**5, 0.011, 0.0156, 0.005), _row(10**6, 0.030, 0.0129, 0.010)]
    assert "4.9 to 15.6 µs: far from flat, so more than a launch's fixed cost" in bench.crossover(_result(climbing))


def test_idle_rows_stay_out_of_the_size_views_and_have_their_own():
    idle = [{"kind": "idle", "n": 10**5, "turn": t, "state": s, "triton_ms": ms}
            for t in range(2) for s, ms in (("idle", 0.0150 + t * 1e-3), ("warm", 0.0050))]
    result = _result([{**row, "kind": "size"} for row in ROWS] + idle)
    assert bench.table(result).count("\n| ") == len(ROWS)  # one line per size under the header
    assert bench.crossover(result) == bench.crossover(_result(ROWS))
    text = bench.idle(result)
    assert "- 100,000 elements: 15.0 to 16.0 µs right after 1 s of idling, 5.0 to 5.0 µs right after 200 ms" in text
    assert bench.idle(_result(ROWS)).startswith("This run did not time the kernel after idling")
