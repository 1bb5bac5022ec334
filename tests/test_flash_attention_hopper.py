"""Chapter 9's Gluon kernel compiles for Hopper with this machine's Triton, GPU or not.

Its results are tested on a GPU (tests/test_flash_attention_fast.py). Gluon's API changes between Triton
releases and the interpreter cannot run Gluon, so here we compile the kernel for an H100 (compute
capability 9.0) without running it, and look at what came out. The compiler runs in a fresh process with
the interpreter off: under the interpreter, Triton wraps every kernel for the CPU, and it cannot compile.
"""

import json
import os
import subprocess
import sys

import pytest

from book import ROOT

SHARED_MEMORY_PER_BLOCK = 227 * 1024  # H100 datasheet: up to 227 KB of shared memory per thread block


def compile_for_hopper(head_dim: int, causal: bool, exp2_on_fma: int = 0, warpgroups: int = 2,
                      whole: bool = True) -> dict:
    """Compile the kernel for compute capability 9.0; runs in the subprocess."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from kernels import flash_attention_hopper as hopper

    def descriptor_type(rows):
        layout = gl.NVMMASharedLayout.get_default_for([rows, head_dim], gl.float16)
        return f"tensordesc<fp16[{rows}, {head_dim}],{layout!r}>"

    q_block, kv_block = descriptor_type(hopper.ROWS_PER_WARPGROUP.value), descriptor_type(hopper.BLOCK_N)
    signature = {"q_desc": q_block, "k_desc": kv_block, "v_desc": kv_block, "o_desc": q_block, "o_ptr": "*fp16",
                 "lse_ptr": "*fp32",
                 "qk_scale": "fp32", "seq_q": "i32", "seq_k": "i32", "offset": "i32", "heads": "i32", "group": "i32",
                 "schedule": "*i32",
                 "CAUSAL": "constexpr", "WHOLE": "constexpr",
                 "STORE_LSE": "constexpr", "STAGES": "constexpr", "PINGPONG": "constexpr",
                 "EXP2_ON_FMA": "constexpr", "WARPGROUPS": "constexpr", "WORKER_REGS": "constexpr"}
    constants = {"CAUSAL": causal, "WHOLE": whole, "STORE_LSE": True, "STAGES": hopper.STAGES, "PINGPONG": False,
                 "EXP2_ON_FMA": exp2_on_fma, "WARPGROUPS": warpgroups,
                 "WORKER_REGS": hopper.REGISTERS[warpgroups][1]}
    source = GluonASTSource(fn=hopper._hopper_fwd_kernel, signature=signature, constexprs=constants)
    options = {"num_warps": 4, "maxnreg": hopper.REGISTERS[warpgroups][0]}
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return {"ptx": compiled.asm["ptx"], "shared": compiled.metadata.shared}


def compiled_in_fresh_process(module: str, call: str, function: str = "compile_for_hopper"):
    """Run `call` (of `module.function`) in a fresh process with the interpreter off; return what it returns."""
    code = f"import json, sys; from {module} import {function}; json.dump({call}, sys.stdout)"
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("head_dim", "warpgroups"), [(64, 2), (64, 3), (128, 2)])
def test_compiles_for_hopper(head_dim, warpgroups, causal):
    compiled = compiled_in_fresh_process("tests.test_flash_attention_hopper",
                                         f"compile_for_hopper({head_dim}, {causal}, warpgroups={warpgroups})")
    ptx = compiled["ptx"]
    assert "wgmma.mma_async" in ptx and "wgmma.wait_group.sync.aligned 1" in ptx  # async products, overlapped
    assert "setmaxnreg" in ptx  # registers moved between the roles
    assert compiled["shared"] <= SHARED_MEMORY_PER_BLOCK


@pytest.mark.parametrize("head_dim", [64, 128])
def test_any_length_compiles_for_hopper_and_whole_tiles_drop_the_bounds(head_dim):
    """Lengths that are not multiples of the tiles compile the bounds masks and the partial stores (WHOLE=False);
    the whole-tile kernel (the book's grid) has none of them, so it stays as short as before they existed."""
    partial = compiled_in_fresh_process("tests.test_flash_attention_hopper",
                                        f"compile_for_hopper({head_dim}, True, whole=False)")
    whole = compiled_in_fresh_process("tests.test_flash_attention_hopper", f"compile_for_hopper({head_dim}, True)")
    assert partial["shared"] <= SHARED_MEMORY_PER_BLOCK
    stores = [ptx.count("st.global") for ptx in (whole["ptx"], partial["ptx"])]
    assert stores[1] > stores[0]  # the masked stores of a partial block of rows


def test_exp2_on_the_fma_units_is_accurate():
    """The EXP2_ON_FMA switch (chapter 9, tried and dropped): 2^x = 2^i * 2^f, i = floor(x), a cubic for 2^f and
    i added to the float's exponent bits. Read the constants back from the PTX and redo its arithmetic in numpy."""
    import re
    import struct

    import numpy as np

    from kernels import flash_attention_hopper as hopper

    ptx = hopper._exp2_asm(1)  # 4 scores: 3 on the special-function units, 1 on the FMA units
    assert ptx.count("ex2.approx.ftz.f32") == 3
    clamp, c3, c2, c1, c0 = (struct.unpack("<f", bytes.fromhex(h)[::-1])[0]
                             for h in re.findall(r"0f([0-9A-F]{8})", ptx))
    x = np.concatenate([np.float32([-np.inf, -300.0]), -np.linspace(0, 40, 200_001, dtype=np.float32)])
    xc = np.maximum(x, np.float32(clamp))  # -inf (a masked score) becomes -126
    i = np.floor(xc)
    f = xc - i
    p = ((np.float32(c3) * f + np.float32(c2)) * f + np.float32(c1)) * f + np.float32(c0)
    two_x = (p.view(np.int32) + (i.astype(np.int32) << 23)).view(np.float32)
    assert clamp == -126.0 and np.all(two_x[:2] < 2e-38)  # nothing next to a row sum, which is at least 1
    exact = np.exp2(x[2:].astype(np.float64))
    assert np.max(np.abs(two_x[2:] - exact) / exact) < 1e-4
