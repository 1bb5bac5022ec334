"""Chapter 8 snippets: each prints what its page shows."""

import re
import runpy

import pytest

from book import ROOT, snippets


def test_waves():
    stored, fresh = snippets.check("snippets/ch08/waves.py")
    assert fresh == stored
    assert "4 warps x 128 registers,  64 KiB shared: 3 per SM, 396 programs per wave" in fresh
    assert "12 warps x 168 registers, 192 KiB shared: 1 per SM, 132 programs per wave" in fresh
    assert "     300      3                         36                         96       75.8%" in fresh
    assert "132 programs, 4096 items: 31 to 32 items each" in fresh


def test_register_budget():
    stored, fresh = snippets.check("snippets/ch08/register_budget.py")
    assert fresh == stored
    # the budgets chapter 9's kernel asks for (kernels/flash_attention_hopper.py, REGISTERS)
    from kernels.flash_attention_hopper import REGISTERS

    for computing, (at_launch, each) in REGISTERS.items():
        assert f"{computing} computing warpgroups + 1 copying: {at_launch} each at launch -> copier 24, " \
               f"computing {each}" in fresh
    assert "              4      128                   255" in fresh  # capped at 255 per thread
    assert "head dim 128: at the peak O 64 + S 64 + P in flight 32 = 160 registers of data; left for indices and " \
           "row statistics: 80 of 240, 0 of 160" in fresh  # three computing warpgroups leave nothing at 128
    assert "head dim  64: at the peak O 32 + S 64 + P in flight 32 = 128" in fresh


def test_mbarrier_ring():
    stored, fresh = snippets.check("snippets/ch08/mbarrier_ring.py")
    assert fresh == stored
    assert "computer waits ready 0 0 1 1 0" in fresh and "copier waits free    1 1 0 0 1" in fresh
    # every tile is computed once, in order, and the copier never runs more than two tiles ahead
    computed = [int(tile) for tile in re.findall(r"computes tile (\d+)", fresh)]
    assert computed == [0, 1, 2, 3, 4]
    assert "copies tile 1 into slot 1, waits on free[0] for parity 0" in fresh
    assert "phases completed: ready[0] 3, ready[1] 2, free[0] 3, free[1] 2" in fresh


def test_exp_vs_matmul():
    stored, fresh = snippets.check("snippets/ch08/exp_vs_matmul.py")
    assert fresh == stored
    assert "8192 exponentials, 512 clocks on the SFUs" in fresh
    assert "      64     2,097,152                 512                        1.00" in fresh
    assert "break-even head dim: 64" in fresh



def test_wgmma_layout_matches_gluons_own():
    """The snippet's formula is the layout Gluon gives a wgmma result, and P's operand layout holds each element in
    the same thread and register (Triton's own rendering of the layouts, where this Triton has it)."""
    stored, fresh = snippets.check("snippets/ch08/wgmma_layout.py")
    assert fresh == stored
    assert "row 9's max is computed by threads [4, 5, 6, 7]" in fresh
    gl = pytest.importorskip("triton.experimental.gluon.language")
    namespace = runpy.run_path(str(ROOT / "snippets/ch08/wgmma_layout.py"))
    for cols in (16, 64, 128):
        accumulator = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, cols, 16])
        operand = gl.DotOperandLayout(operand_index=0, parent=accumulator, k_width=2)
        if not hasattr(accumulator, "format_tensor_view"):
            pytest.skip("this Triton cannot render a layout")
        ours = [[namespace["owner"](row, col) for col in range(cols)] for row in range(64)]
        for layout in (accumulator, operand):
            view = layout.format_tensor_view([64, cols]).strip().splitlines()
            assert [[(int(t), int(r)) for t, r in re.findall(r"T(\d+):(\d+)", line)] for line in view] == ours
