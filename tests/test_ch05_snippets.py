"""Chapter 5 snippets (each prints what its page shows) and the numpy simulator's contract.

The simulator's trace is what the interactive stepper and chapter 6's tile counts are built on, so
its format and its counts are tested here, not only its printed demo.
"""

import importlib.util
import json
import math
import sys

import numpy as np
import pytest

from book import ROOT, snippets

SNIPPET_DIR = ROOT / "snippets" / "ch05"


def _load_simulator():
    spec = importlib.util.spec_from_file_location("ch05_simulator", SNIPPET_DIR / "simulator.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sim = _load_simulator()


def test_simulator_demo():
    stored, fresh = snippets.check("snippets/ch05/simulator.py")
    assert fresh == stored
    assert fresh.count("matches reference: True") == 3 and "False" not in fresh
    assert "skipped 6" in fresh


def test_io_count():
    stored, fresh = snippets.check("snippets/ch05/io_count.py")
    assert fresh == stored
    assert "(4 N d + 4 N^2) x 2 bytes: True" in fresh
    assert "130.00 MiB" in fresh


def test_tiny_trace():
    stored, fresh = snippets.check("snippets/ch05/tiny_trace.py")
    assert fresh == stored
    assert "matches direct softmax(Q K^T) V: True" in fresh
    assert "row 1: m = 6.000" in fresh  # the second tile raises row 1's max: the rescale case


def test_run_flash_attention():
    stored, fresh = snippets.check("snippets/ch05/run_flash_attention.py")
    assert fresh == stored
    assert fresh.count(": True") == 6 and "False, logsumexp" not in fresh


def test_exercise_fa1_order():
    stored, fresh = snippets.check("snippets/ch05/exercise_fa1_order.py")
    assert fresh == stored
    assert fresh.count("matches reference: True") == 2
    assert "FA1 order moves 1.59x the bytes" in fresh


def test_exercise_lse():
    stored, fresh = snippets.check("snippets/ch05/exercise_lse.py")
    assert fresh == stored
    assert "matches softmax: True" in fresh and "gives the output row back: True" in fresh


# ---- the simulator's contract ----

def _inputs(n, d, seed=0, n_k=None):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)), rng.standard_normal((n_k or n, d)), rng.standard_normal((n_k or n, d)))


@pytest.mark.parametrize("n, d, block_m, block_n", [(1, 4, 4, 4), (17, 8, 4, 8), (100, 16, 32, 16), (64, 8, 16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_matches_reference_and_counts_bytes(n, d, block_m, block_n, causal):
    Q, K, V = _inputs(n, d)
    o, stats = sim.flash_attention(Q, K, V, block_m, block_n, causal=causal)
    np.testing.assert_allclose(o, sim.reference(Q, K, V, causal), atol=1e-10)
    e = Q.itemsize
    q_blocks, k_blocks = math.ceil(n / block_m), math.ceil(n / block_n)
    assert stats["tiles_computed"] + stats["tiles_skipped"] == q_blocks * k_blocks
    if not causal:
        # Q read once, K and V once per Q block, O written once, plus a 4-byte logsumexp per row.
        assert stats["hbm_read_bytes"] == e * (n * d + 2 * n * d * q_blocks)
        assert stats["tiles_skipped"] == stats["tiles_masked"] == 0
    assert stats["hbm_write_bytes"] == e * n * d + 4 * n
    assert stats["hbm_bytes"] == stats["hbm_read_bytes"] + stats["hbm_write_bytes"]


def test_standard_counts_bytes():
    n, d = 50, 8
    Q, K, V = _inputs(n, d)
    o, stats = sim.standard_attention(Q, K, V)
    np.testing.assert_allclose(o, sim.reference(Q, K, V), atol=1e-12)
    assert stats["hbm_bytes"] == Q.itemsize * (4 * n * d + 4 * n * n)
    assert stats["hbm_peak_bytes"] >= 2 * n * n * Q.itemsize  # S and P both alive during the softmax


def test_causal_tile_counts():
    Q, K, V = _inputs(256, 8)
    _, stats = sim.flash_attention(Q, K, V, 64, 64, causal=True, trace=True)
    assert (stats["tiles_computed"], stats["tiles_masked"], stats["tiles_skipped"]) == (10, 4, 6)
    assert stats["skipped"] == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    # Unequal tiles: 32-row Q blocks against 64-key blocks put two Q blocks on each diagonal K block.
    _, stats = sim.flash_attention(Q, K, V, 32, 64, causal=True)
    assert (stats["tiles_computed"], stats["tiles_masked"], stats["tiles_skipped"]) == (20, 8, 12)


def test_trace_format_and_replay():
    n, d, bm, bn = 20, 4, 8, 8
    Q, K, V = _inputs(n, d, seed=3)
    o, stats = sim.flash_attention(Q, K, V, bm, bn, causal=True, trace=True)
    trace = stats["trace"]
    json.dumps(trace)  # plain lists and numbers: a browser widget can load it
    visited = [(t["q_block"], t["k_block"]) for t in trace]
    assert len(visited) == stats["tiles_computed"] and not set(visited) & set(stats["skipped"])
    assert visited == sorted(visited)  # FA2 order: outer Q blocks, inner K blocks
    for step in trace:
        assert set(step) == {"q_block", "k_block", "kind", "m", "l", "acc"}
        assert step["kind"] in ("full", "diagonal")
        rows = min(bm, n - step["q_block"] * bm)
        assert len(step["m"]) == len(step["l"]) == len(step["acc"]) == rows and len(step["acc"][0]) == d
    # The last step of each Q block holds everything needed for its output: O = acc / l.
    last = {t["q_block"]: t for t in trace}
    for i, step in last.items():
        np.testing.assert_allclose(np.array(step["acc"]) / np.array(step["l"])[:, None], o[i * bm:(i + 1) * bm])
        np.testing.assert_allclose(np.array(step["m"]) + np.log(step["l"]), stats["lse"][i * bm:(i + 1) * bm],
                                   rtol=1e-6)


def test_sram_capacity_is_enforced():
    Q, K, V = _inputs(64, 16)
    need = sim.working_set_bytes(32, 32, 16, Q.itemsize)
    sim.flash_attention(Q, K, V, 32, 32, sram_bytes=need)
    with pytest.raises(MemoryError, match="SRAM overflow"):
        sim.flash_attention(Q, K, V, 32, 32, sram_bytes=need - 1)
    assert sim.block_for_sram(need, 16, Q.itemsize) == 32


def test_flash_traffic_falls_with_sram():
    # Theorem 2's shape: more SRAM -> bigger Q blocks -> fewer passes over K and V.
    Q, K, V = (a.astype(np.float32) for a in _inputs(512, 32))
    totals = []
    for sram in (16 * 1024, 64 * 1024, 256 * 1024):
        b = sim.block_for_sram(sram, 32)
        totals.append(sim.flash_attention(Q, K, V, b, b, sram_bytes=sram)[1]["hbm_bytes"])
    assert totals[0] > totals[1] > totals[2]


def test_paper_blocks_fit_and_grow_with_sram():
    # The inner (key) block is capped at d; the outer (query) block takes the rest of the SRAM and more
    # than doubles when the SRAM doubles, because the K/V tiles and acc take a fixed share.
    d = 64
    shapes = [sim.paper_blocks_for_sram(kib * 1024, d) for kib in (64, 128, 256, 512)]
    assert all(block_n == d for _, block_n in shapes)
    for kib, (block_m, block_n) in zip((64, 128, 256, 512), shapes, strict=True):
        assert sim.working_set_bytes(block_m, block_n, d) <= kib * 1024 < sim.working_set_bytes(block_m + 1, block_n, d)
    assert all(later >= 2 * earlier for (earlier, _), (later, _) in zip(shapes, shapes[1:], strict=False))
    assert sim.paper_blocks_for_sram(4 * 1024, d)[1] == 4  # ceil(M / 4d) = 4 keys when M < 4d^2


def test_blocking():
    stored, fresh = snippets.check("snippets/ch05/blocking.py")
    assert fresh == stored
    lines = fresh.splitlines()
    doubling = [line.split() for line in lines[3:6]]  # 128, 256 and 512 KiB, each against the size before
    square, paper = [float(cols[3]) for cols in doubling], [float(cols[-1]) for cols in doubling]
    assert all(0.55 < r < 0.71 for r in square)  # square blocks grow like sqrt(M): less than halved
    assert all(r < square_r for r, square_r in zip(paper, square, strict=True))  # the paper's blocks gain more
    gap = [float(line.split()[-1]) for line in lines[-5:]]
    limit = float(lines[7].split("= ")[-1].rstrip(")"))
    assert gap == sorted(gap) and gap[-1] < limit  # standard / flash levels off below 2 B_r / d
