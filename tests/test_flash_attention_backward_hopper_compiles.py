"""Chapter 11's Gluon backward (steps 8-13) compiles for Hopper with this machine's Triton, GPU or not.

The pattern of tests/test_flash_attention_hopper.py: compile for compute capability 9.0 in a fresh process with
the interpreter off, and look at what came out. This catches a Gluon API that moved (the TMA reduce-add has a
Python name only after Triton 3.6) and a kernel that outgrows shared memory.
"""

import re

import pytest

from tests.test_flash_attention_hopper import SHARED_MEMORY_PER_BLOCK, compiled_in_fresh_process


def compile_for_hopper(head_dim: int, causal: bool, whole: bool = True) -> dict:
    """Compile the kernel as the wrapper launches it (steps 9 and 10 where there is room, step 11's launch order when
    causal, step 12 at head dim 128, step 13) for compute capability 9.0; runs in the subprocess."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from kernels import flash_attention_backward_hopper as hopper

    def descriptor_type(rows, cols, dtype="fp16"):
        gl_dtype = gl.float16 if dtype == "fp16" else gl.float32
        layout = gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)
        return f"tensordesc<{dtype}[{rows}, {cols}],{layout!r}>"

    keys = hopper.KEYS_PER_WARPGROUP.value
    room = hopper.ROOM_FOR_STEPS_9_AND_10[head_dim]
    dq_cols = head_dim if room else head_dim // 2  # step 10: one warpgroup computes every column, in turns
    q_block, kv_block = descriptor_type(hopper.BLOCK_M, head_dim), descriptor_type(keys, head_dim)
    rows_block = f"tensordesc<fp32[{hopper.BLOCK_M}],{hopper.ROWS_LAYOUT.value!r}>"  # step 13: L₂ and D, a block's row
    signature = {"q_desc": q_block, "k_desc": kv_block, "v_desc": kv_block, "do_desc": q_block,
                 "k_dq_desc": descriptor_type(2 * keys, dq_cols),
                 "dq_desc": descriptor_type(hopper.BLOCK_M, dq_cols, "fp32"), "dk_desc": kv_block,
                 "dv_desc": kv_block, "dk_ptr": "*fp16", "dv_ptr": "*fp16", "lse2_src": rows_block,
                 "delta_src": rows_block, "qk_scale": "fp32",
                 "sm_scale": "fp32", "seq_q": "i32", "seq_k": "i32", "offset": "i32", "heads": "i32", "group": "i32",
                 "row_pitch": "i32",
                 "CAUSAL": "constexpr", "WHOLE": "constexpr",
                 "STAGES": "constexpr",
                 "WORKER_REGS": "constexpr", "KV_IN_REGISTERS": "constexpr", "HEADS_PER_GROUP": "constexpr",
                 "ROWS_IN_ACCUMULATORS": "constexpr", "ROWS_IN_SHARED": "constexpr"}
    constants = {"CAUSAL": causal, "WHOLE": whole, "STAGES": hopper.STAGES[head_dim],
                 "WORKER_REGS": hopper.REGISTERS[1],
                 "KV_IN_REGISTERS": room, "HEADS_PER_GROUP": hopper.HEADS_AT_A_TIME if causal else 0,
                 "ROWS_IN_ACCUMULATORS": hopper.ROWS_IN_ACCUMULATORS_AT[head_dim], "ROWS_IN_SHARED": True}
    source = GluonASTSource(fn=hopper._hopper_bwd_kernel, signature=signature, constexprs=constants)
    options = {"num_warps": 4, "maxnreg": hopper.REGISTERS[0]}
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return {"ptx": compiled.asm["ptx"], "shared": compiled.metadata.shared}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_compiles_for_hopper(head_dim, causal):
    from kernels import flash_attention_backward_hopper as hopper

    compiled = compiled_in_fresh_process("tests.test_flash_attention_backward_hopper_compiles",
                                         f"compile_for_hopper({head_dim}, {causal})")
    ptx = compiled["ptx"]
    assert "wgmma.mma_async" in ptx and "setmaxnreg" in ptx  # async products; registers moved between the roles
    assert "cp.reduce.async.bulk.tensor" in ptx  # dQ's shares added by the copy engine
    assert "cp.async.bulk.tensor.1d" in ptx  # step 13: each block's logsumexp and D fetched by the copy engine
    assert compiled["shared"] <= SHARED_MEMORY_PER_BLOCK
    products = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    from_registers = [line for line in products if re.search(r"\} *, *\{", line)]  # first operand in registers
    keys = 2 * hopper.KEYS_PER_WARPGROUP.value
    if head_dim == 64:  # step 9: every product but dQ's (dS K, 16 keys per instruction) reads its first operand
        assert len(from_registers) == len(products) - 2 * (keys // 16)  # from registers, in both warpgroups
        assert "m64n32k16" not in ptx  # step 10: dQ's product covers all 64 columns, not two halves of 32
    else:  # step 8: only dV's and dK's products (Pᵀ and dSᵀ from registers, 16 queries per instruction)
        assert len(from_registers) == 2 * 2 * (hopper.BLOCK_M // 16)


def test_any_length_compiles_for_hopper():
    """Lengths that are not multiples of 128 compile the bounds masks and the masked dK and dV stores (WHOLE=False);
    the whole-block kernel stores dK and dV by TMA alone."""
    partial = compiled_in_fresh_process("tests.test_flash_attention_backward_hopper_compiles",
                                        "compile_for_hopper(128, True, whole=False)")
    whole = compiled_in_fresh_process("tests.test_flash_attention_backward_hopper_compiles",
                                      "compile_for_hopper(128, True)")
    assert partial["shared"] <= SHARED_MEMORY_PER_BLOCK
    assert "st.global" not in whole["ptx"] and "st.global" in partial["ptx"]


def tile_error(width: int) -> dict:
    """Compile a Gluon kernel holding a 64 x width tile of wgmma results for compute capability 9.0; return the
    compiler's messages, or None if it compiled. Runs in the subprocess."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    @gluon.jit
    def wide_tile(out_ptr, WIDTH: gl.constexpr):
        layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, WIDTH, 16])
        tile = gl.zeros([64, WIDTH], gl.float32, layout)
        gl.store(out_ptr + gl.arange(0, 64, gl.SliceLayout(1, layout)), gl.sum(tile, 1))

    source = GluonASTSource(fn=wide_tile, signature={"out_ptr": "*fp32", "WIDTH": "constexpr"},
                            constexprs={"WIDTH": width})
    try:
        triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    except Exception as error:  # noqa: BLE001 - the compiler's message is what the test reads
        messages = []
        while error is not None:
            messages.append(str(error))
            error = error.__cause__
        return {"error": "\n".join(messages)}
    return {"error": None}


def test_gluon_refuses_blocks_of_80_queries():
    """Chapter 11: FlashAttention-3's 80-query blocks at head dim 128 would make 64 x 80 tiles of Sᵀ and dPᵀ;
    a Gluon tensor's every dimension must be a power of two, so the kernel cannot take them."""
    sixty_four, eighty = compiled_in_fresh_process("tests.test_flash_attention_backward_hopper_compiles",
                                                   "[tile_error(64), tile_error(80)]", function="tile_error")
    assert sixty_four["error"] is None
    assert "must be a power of 2" in eighty["error"]
