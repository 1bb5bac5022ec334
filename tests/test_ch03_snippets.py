"""Chapter 3 snippets: each prints what its page shows."""

from book import snippets


def _check(name: str) -> str:
    stored, fresh = snippets.check(f"snippets/ch03/{name}.py")
    assert fresh == stored
    return fresh


def test_count_loads():
    out = _check("count_loads")
    assert "naive triple loop   137,438,953,472" in out
    assert "tiles 128 x 128       1,073,741,824" in out  # 1/128 of the naive loads
    assert "A and B once each" in out and "1365.3  compute-bound" in out
    assert "= 1/128" in out


def test_tiled_walkthrough():
    out = _check("tiled_walkthrough")
    assert out.count("k-step") == 8  # 4 C tiles x 2 steps along K
    assert "matches A @ B: True | naive loop matches too: True" in out
    assert "naive 128 (2*n^3 = 128), tiled 64 (2*n^3/T = 64), minimum 32" in out


def test_grouped_order():
    out = _check("grouped_order")
    assert "every tile exactly once: True" in out
    assert "row-major: 2 A panels + 6 B panels = 8" in out and "grouped:   3 A panels + 3 B panels = 6" in out
    assert "= 67 panels" in out and "= 25 panels" in out


def test_run_matmul():
    out = _check("run_matmul")
    assert out.count(": True") == 7 and "False" not in out
    assert "inner dimensions differ" in out and "must be 2-D, got 1-D" in out and "got 3-D" in out
    assert "inputs must have one dtype" in out


def test_exercise_smem():
    out = _check("exercise_smem")
    assert "256x256x64, 4 stages, 8 warps       256 KiB  fits: False" in out
    assert out.count("fits: True") == out.count("\n") - 2  # every GPU config fits, the extra one does not


def test_exercise_padding():
    out = _check("exercise_padding")
    assert "9 programs" in out and "matches A @ B: True" in out
    assert "wrapping along K instead of masking matches A @ B: False" in out


def test_exercise_group_size():
    out = _check("exercise_group_size")
    assert "GROUP_M =  1:  3 A panels + 64 B panels = 67 panels" in out
    assert "GROUP_M =  8:  8 A panels + 17 B panels = 25 panels" in out


def test_exercise_accumulator():
    out = _check("exercise_accumulator")
    errors = {line.split()[0]: float(line.split()[-1]) for line in out.splitlines() if "running sum" in line}
    assert errors["float16"] > 1000 * errors["float32"]


def test_figures_draw_what_the_snippets_print():
    import matplotlib.figure

    from book import ROOT
    from book.figures import ch03

    a, b = ch03.walkthrough_matrices()
    walkthrough = (ROOT / "snippets/ch03/tiled_walkthrough.out").read_text()
    assert f"A =\n{a}\nB =\n{b}\n" in walkthrough  # the tiling figure shows the walkthrough's matrices
    order = (ROOT / "snippets/ch03/grouped_order.out").read_text()
    grid = [[0] * 6 for _ in range(6)]
    for pid in range(36):
        i, j = ch03.grouped(pid, 6, 6, 3)
        grid[i][j] = pid
    assert " ".join(f"{p:2d}" for p in grid[3]) in order  # the same grouped numbering as the snippet
    for draw in (ch03.tiling, ch03.grouped_order):
        assert isinstance(draw(), matplotlib.figure.Figure)


def test_stage_buffers_one_per_stage_with_wgmma_one_fewer_with_mma_sync():
    out = _check("stage_buffers")
    assert "128 x 256 x 64, 3 stages: 144 KiB = 3 x 48 KiB; wgmma" in out
    assert "128 x 256 x 64, 4 stages: 192 KiB = 4 x 48 KiB; wgmma" in out
    assert "16 x 64 x 64, 3 stages:  20 KiB = 2 x 10 KiB; mma.sync" in out
    assert "16 x 64 x 64, 4 stages:  30 KiB = 3 x 10 KiB; mma.sync" in out
